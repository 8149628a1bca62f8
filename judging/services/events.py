"""The settlement outbox: handlers and the dispatcher that applies each event once.

Events are written in a job's terminal transaction. The dispatcher applies a chunk of
events per transaction: lock them (SKIP LOCKED, so dispatchers share the work), run their
handlers, mark them DONE — the handlers' writes and the DONE marks commit together, so an
event is applied exactly once however often dispatch runs. A failing handler rolls its
chunk back, which is then applied one event to a transaction; the failing event is retried
with backoff and marked DEAD after `KECE_EVENT_MAX_ATTEMPTS`.

Handlers recompute derived rows from the committed submissions instead of adding deltas,
under a lock on the derived row: the answer does not depend on the order in which
results arrive, and a replay changes nothing.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from judging.locking import lock_derived, lock_derived_rows, lock_due_event, lock_due_events, lock_event
from judging.models import (
    SUBMISSION_MODELS, EventState, Exam, ExamMode, ExamProblem, ExamScore, FirstAccepted, PracticeBest,
    ProblemResult, SettlementEvent, Verdict,
)
from judging.services.outcomes import EXAM_SCORE, PRACTICE_BEST, PROBLEM_STATS
from kece.rows import flush, insert_values, matching, shape, update_by_pk, update_rows

logger = logging.getLogger("kece.events")


def _live_submissions(payload: dict, **extra):
    model = SUBMISSION_MODELS[payload["submissionType"]]
    return model.objects.filter(user_id=payload["userId"], problem_id=payload["problemId"],
                                deleted_at__isnull=True, **extra)


def _best(submissions):
    """Highest score; among equals the earliest submission."""
    return (submissions.filter(score__isnull=False).order_by("-score", "id")
            .values("id", "score", "verdict").first())


def _standing(rows: list) -> tuple[dict | None, int, dict | None]:
    """(the best as `_best` finds it, how many, the first accepted by judging time then id)
    of one user's live submissions of one problem (`rows`: their few small columns): a
    user's submissions of one problem are a handful, and three statements cost more than
    reading them once."""
    scored = [row for row in rows if row["score"] is not None]
    best = min(scored, key=lambda row: (-row["score"], row["id"])) if scored else None
    accepted = [row for row in rows if row["verdict"] == Verdict.AC]
    # MariaDB orders a NULL judging time first, as `order_by("judged_at", "id")` did.
    first = min(accepted, key=lambda row: (row["judged_at"] is not None, row["judged_at"] or 0, row["id"])) \
        if accepted else None
    return best, len(rows), first


# What the standing of a user on a problem reads of each of their live submissions.
_STANDING_READS = ("id", "user_id", "problem_id", "score", "verdict", "judged_at")
_FIRST_ACCEPTED_READS = ("id", "user_id", "problem_id", "submission_type", "submission_id")
_PAIR = ("user_id", "problem_id")


def _rows_of_pairs(model, names: tuple, keys, condition: str = "") -> list[dict]:
    """`names` of the rows of `model` whose (user, problem) is one of `keys`, as dicts."""
    if not keys:
        return []
    found = shape(model, names)
    where, params = matching(model, _PAIR, keys)
    rows = found.load(f"SELECT {found.columns} FROM {found.table} WHERE ({where}){condition}", params)
    return [{name: getattr(row, name) for name in names} for row in rows]


def _live_rows(kinds: dict) -> dict:
    """{(user, problem): [their live submissions' rows]} for `kinds`, {(user, problem):
    submission type}: one read per submission table."""
    found = defaultdict(list)
    by_type = defaultdict(list)
    for key, submission_type in kinds.items():
        by_type[submission_type].append(key)
    for submission_type, keys in by_type.items():
        for row in _rows_of_pairs(SUBMISSION_MODELS[submission_type], _STANDING_READS, keys,
                                  " AND deleted_at IS NULL"):
            found[(row["user_id"], row["problem_id"])].append(row)
    return found


def apply_problem_stats(payloads: list) -> None:
    """Best result per user and problem, and the first-accepted record, for every user and
    problem of `payloads`: their rows locked together, their submissions read together."""
    kinds = {(payload["userId"], payload["problemId"]): payload["submissionType"] for payload in payloads}
    results = lock_derived_rows(ProblemResult, ("user_id", "problem_id"), kinds)
    submissions = _live_rows(kinds)
    # FirstAccepted rows of a user and problem change only under the lock on their
    # ProblemResult row, taken above.
    held = {(row["user_id"], row["problem_id"]): row
            for row in _rows_of_pairs(FirstAccepted, _FIRST_ACCEPTED_READS, kinds)}
    now = timezone.now()
    written, gone, new = [], [], []
    for key, submission_type in sorted(kinds.items()):
        best, attempts, accepted = _standing(submissions[key])
        written.append((ProblemResult, results[key].pk, {
            "best_score": best["score"] if best else 0, "best_verdict": (best["verdict"] or "") if best else "",
            "best_submission_type": submission_type if best else "", "best_submission_id": best["id"] if best else None,
            "attempts": attempts, "updated_at": now}))
        current = held.get(key)
        if accepted is None:
            if current is not None:
                gone.append(current["id"])
            continue
        record = {"submission_type": submission_type, "submission_id": accepted["id"]}
        if current is None:
            new.append({"user_id": key[0], "problem_id": key[1], "accepted_at": accepted["judged_at"], **record})
        elif (current["submission_type"], current["submission_id"]) != (submission_type, accepted["id"]):
            # Another submission is the first accepted now: the record moves to it.
            written.append((FirstAccepted, current["id"], {**record, "accepted_at": accepted["judged_at"]}))
    update_rows(written)
    if gone:
        FirstAccepted.objects.filter(pk__in=gone).delete()
    insert_values(FirstAccepted, new)


def apply_practice_best(payload: dict) -> None:
    """A student's best score on a problem within one lesson practice."""
    practice_id = payload.get("practiceId")
    if not practice_id:
        return
    user_id, problem_id = payload["userId"], payload["problemId"]
    row = lock_derived(PracticeBest, (practice_id, user_id, problem_id),
                       practice_id=practice_id, user_id=user_id, problem_id=problem_id)
    best = _best(_live_submissions(payload, lesson_practice_id=practice_id))
    row.best_score = best["score"] if best else 0
    row.best_submission_type = payload["submissionType"] if best else ""
    row.best_submission_id = best["id"] if best else None
    row.save()


def apply_exam_score(payload: dict) -> None:
    """A participant's score on one exam problem: in OI the last (the handed-in) submission,
    in ACM the best one; weighted by the problem's points, with the attempt count."""
    exam_id = payload.get("examId")
    if not exam_id:
        return
    user_id, problem_id = payload["userId"], payload["problemId"]
    row = lock_derived(ExamScore, (exam_id, user_id, problem_id), exam_id=exam_id, user_id=user_id,
                       problem_id=problem_id)
    exam = Exam.objects.get(pk=exam_id)
    points = ExamProblem.objects.filter(exam_id=exam_id, problem_id=problem_id).values_list("points", flat=True)
    submissions = _live_submissions(payload, exam_id=exam_id)
    if exam.mode == ExamMode.OI:
        counted = submissions.order_by("-id").values("id", "score").first()
    else:
        counted = _best(submissions)
    row.score = (counted["score"] or 0) if counted else 0
    row.points = round(row.score * (points.first() or 0) / 100)
    row.attempts = submissions.count()
    row.submission_type = payload["submissionType"] if counted else ""
    row.submission_id = counted["id"] if counted else None
    row.save()


def _each(handler):
    def apply_each(payloads: list) -> None:
        for payload in payloads:
            handler(payload)
    return apply_each


# Each handler applies a list of events of its kind; those of a chunk are applied together.
HANDLERS = {PROBLEM_STATS: apply_problem_stats, PRACTICE_BEST: _each(apply_practice_best),
            EXAM_SCORE: _each(apply_exam_score)}


def handler_for(event_type: str):
    return HANDLERS[event_type.split(".", 1)[0]]


@dataclass
class DispatchReport:
    applied: list = field(default_factory=list)
    retried: list = field(default_factory=list)
    dead: list = field(default_factory=list)


def _backoff(attempts: int) -> timedelta:
    return timedelta(seconds=min(2 ** attempts, 600))


def _recompute_key(event_type: str, payload: dict) -> tuple:
    """What a handler recomputes: the rows it derives depend on these fields only."""
    return (event_type.split(".", 1)[0], payload.get("userId"), payload.get("problemId"),
            payload.get("submissionType"), payload.get("practiceId"), payload.get("examId"))


# Events applied in one transaction: their handlers' writes and their DONE marks commit
# together, and a burst pays one transaction, one event lock and one DONE mark per chunk
# rather than per event. Each handler locks one derived row; a chunk holds at most this many.
CHUNK = 20


def _derived_lock_key(event_type: str, payload: dict) -> tuple:
    """The derived row the event's handler locks, as `lock_derived` ranks it (handlers that
    lock nothing first): a chunk runs its handlers in this order, so their locks ascend."""
    kind = event_type.split(".", 1)[0]
    user_id, problem_id = payload.get("userId"), payload.get("problemId")
    if kind == PROBLEM_STATS:
        return (ProblemResult._meta.db_table, user_id, problem_id)
    if kind == PRACTICE_BEST and payload.get("practiceId"):
        return (PracticeBest._meta.db_table, payload["practiceId"], user_id, problem_id)
    if kind == EXAM_SCORE and payload.get("examId"):
        return (ExamScore._meta.db_table, payload["examId"], user_id, problem_id)
    return ("",)


def events_dispatch(*, now, batch: int = 100) -> DispatchReport:
    """Apply due events, oldest first. Handlers recompute from committed rows, so of the due
    events that recompute the same thing (a student resubmitting during a burst) only the
    first runs its handler: it ran after all of them were committed. The others are
    marked done together, in one transaction after the pass, once that first one applied.

    The handlers run CHUNK events to a transaction (`_apply_chunk`); a chunk in which one
    fails is rolled back whole and applied again without it, so the failing event is
    retried later and the others apply now."""
    report = DispatchReport()
    rows = list(
        SettlementEvent.objects.filter(state=EventState.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "id").values_list("id", "event_type", "payload", "job_id")[:batch]
    )
    due = [row[:3] for row in rows]
    jobs = {row[0]: row[3] for row in rows}  # for the log: a job's lines are found by its id
    first, covered = {}, []
    for event_id, event_type, payload in due:
        key = _recompute_key(event_type, payload or {})
        if key in first:
            covered.append((key, event_id))
        else:
            first[key] = (event_id, event_type, payload or {})
    runs = list(first.values())
    recomputed = set()
    for start in range(0, len(runs), CHUNK):
        applied = _apply_chunks(runs[start:start + CHUNK], now=now, report=report, jobs=jobs)
        report.applied.extend(applied)
        recomputed.update(applied)
    covered = [event_id for key, event_id in covered if first[key][0] in recomputed]
    if covered:
        with transaction.atomic(durable=True):
            done = [event.pk for event in lock_due_events(covered)]
            _mark_done(done, now=now)
        for event_id in done:
            logger.info("settlement event applied", extra={"event": event_id, "job": jobs[event_id],
                                                           "coveredBy": "an earlier event's recompute"})
        report.applied.extend(done)
    return report


class _HandlerFailed(Exception):
    def __init__(self, event_id: int, error: Exception):
        super().__init__(event_id, error)
        self.event_id, self.error = event_id, error


def _apply_chunks(chunk: list, *, now, report: DispatchReport, jobs: dict) -> list:
    """`_apply_chunk`, again without an event whose handler failed (that one is retried
    later, its failure recorded as when it is applied alone); the ids applied."""
    while chunk:
        try:
            applied = _apply_chunk(chunk, now=now)
        except _HandlerFailed as failed:
            _record_failure(failed.event_id, failed.error, now=now, report=report)
            chunk = [entry for entry in chunk if entry[0] != failed.event_id]
            continue
        except Exception:  # a handler of several events, or the events' own statements, failed:
            # one event to a transaction, to find which
            return [event_id for event_id, _, _ in chunk if _apply_one(event_id, now=now, report=report)]
        types = {event_id: event_type for event_id, event_type, _ in chunk}
        for event_id in applied:
            logger.info("settlement event applied", extra={"event": event_id, "job": jobs[event_id],
                                                           "type": types[event_id]})
        return applied
    return []


def _apply_chunk(chunk: list, *, now) -> list:
    """Apply the events of `chunk` (id, type, payload) that no other dispatcher holds and
    that are still PENDING, in one transaction: their events locked together (never
    waiting), then each kind's handler with its events, in the order of the derived rows
    they lock. The payload is
    the one read with the due list: an event's payload is never changed after it is written."""
    with transaction.atomic(durable=True):
        locked = {event.pk for event in lock_due_events([event_id for event_id, _, _ in chunk])}
        mine = [entry for entry in chunk if entry[0] in locked]
        groups = defaultdict(list)  # the events of each kind, by the derived row each locks
        for entry in sorted(mine, key=lambda e: _derived_lock_key(e[1], e[2])):
            groups[entry[1].split(".", 1)[0]].append(entry)
        # The rows of one kind are those of one table: kind after kind, by the last row each
        # locks, the locks still ascend.
        for kind, entries in sorted(groups.items(), key=lambda group: _derived_lock_key(*group[1][-1][1:])):
            try:
                HANDLERS[kind]([payload for _, _, payload in entries])
                # A handler's last writes are otherwise sent with the next kind's first
                # statement, and their failure blamed on that kind's events.
                flush()
            except Exception as exc:  # rolls the chunk back
                if len(entries) == 1:
                    raise _HandlerFailed(entries[0][0], exc) from exc
                raise
        _mark_done([event_id for event_id, _, _ in mine], now=now)
    return [event_id for event_id, _, _ in mine]


def _apply_one(event_id: int, *, now, report: DispatchReport) -> bool:
    try:
        with transaction.atomic(durable=True):
            event = lock_due_event(event_id)
            if event is None or event.state != EventState.PENDING:
                return False  # another dispatcher has it, or already applied it
            handler_for(event.event_type)([event.payload])
            _mark_done([event.pk], now=now)
        logger.info("settlement event applied", extra={"event": event_id, "job": event.job_id,
                                                       "type": event.event_type})
        return True
    except Exception as exc:  # a handler bug or a database hiccup: retry later
        _record_failure(event_id, exc, now=now, report=report)
        return False


def _mark_done(event_ids: list, *, now) -> None:
    if event_ids:
        update_by_pk(SettlementEvent, event_ids, {"state": EventState.DONE, "applied_at": now, "last_error": ""},
                     increment=("attempts",))


def _record_failure(event_id: int, exc: Exception, *, now, report: DispatchReport) -> None:
    with transaction.atomic(durable=True):
        event = lock_event(event_id)
        if event is None or event.state != EventState.PENDING:
            return
        event.attempts += 1
        dead = event.attempts >= settings.KECE_EVENT_MAX_ATTEMPTS
        event.last_error = f"{type(exc).__name__}: {exc}"[:2000]
        event.state = EventState.DEAD if dead else EventState.PENDING
        event.next_attempt_at = now + _backoff(event.attempts)
        event.save(update_fields=["attempts", "last_error", "state", "next_attempt_at"])
    (report.dead if dead else report.retried).append(event_id)
    log = logger.error if dead else logger.warning
    log("settlement event failed", extra={"event": event_id, "job": event.job_id, "type": event.event_type,
                                          "attempt": event.attempts, "dead": dead, "error": str(exc)})


def events_retry(*, event_ids: list, now, states=(EventState.DEAD,)) -> int:
    """Make events due again with their attempts reset: dead ones an admin sends round again
    (`judging.services.failed_work`), or delivered ones whose derived rows are missing
    (`judging.services.reconcile`). One guarded UPDATE: an event no longer in `states` is
    left as it is. Handlers recompute from committed truth, so applying one again is safe."""
    retried = SettlementEvent.objects.filter(pk__in=event_ids, state__in=states).update(
        state=EventState.PENDING, attempts=0, next_attempt_at=now)
    logger.info("events made due again", extra={"events": retried})
    return retried
