"""The settlement outbox: handlers and the dispatcher that applies each event once.

Events are written in a job's terminal transaction. The dispatcher applies one event per
transaction: lock the event (SKIP LOCKED, so dispatchers share the work), run its
handler, mark it DONE — the handler's writes and the DONE mark commit together, so an
event is applied exactly once however often dispatch runs. A failing handler is retried
with backoff and marked DEAD after `KECE_EVENT_MAX_ATTEMPTS`.

Handlers recompute derived rows from the committed submissions instead of adding deltas,
under a lock on the derived row: the answer does not depend on the order in which
results arrive, and a replay changes nothing.
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F

from judging.locking import lock_derived, lock_due_event, lock_due_events, lock_event
from judging.models import (
    SUBMISSION_MODELS, EventState, Exam, ExamMode, ExamProblem, ExamScore, FirstAccepted, PracticeBest,
    ProblemResult, SettlementEvent, Verdict,
)
from judging.services.outcomes import EXAM_SCORE, PRACTICE_BEST, PROBLEM_STATS

logger = logging.getLogger("kece.events")


def _live_submissions(payload: dict, **extra):
    model = SUBMISSION_MODELS[payload["submissionType"]]
    return model.objects.filter(user_id=payload["userId"], problem_id=payload["problemId"],
                                deleted_at__isnull=True, **extra)


def _best(submissions):
    """Highest score; among equals the earliest submission."""
    return (submissions.filter(score__isnull=False).order_by("-score", "id")
            .values("id", "score", "verdict").first())


def apply_problem_stats(payload: dict) -> None:
    """Best result per user and problem, and the first-accepted record."""
    user_id, problem_id = payload["userId"], payload["problemId"]
    result = lock_derived(ProblemResult, (user_id, problem_id), user_id=user_id, problem_id=problem_id)
    submissions = _live_submissions(payload)
    best = _best(submissions)
    result.best_score = best["score"] if best else 0
    result.best_verdict = (best["verdict"] or "") if best else ""
    result.best_submission_type = payload["submissionType"] if best else ""
    result.best_submission_id = best["id"] if best else None
    result.attempts = submissions.count()
    result.save()

    # FirstAccepted rows of this user and problem change only under the lock on their
    # ProblemResult row, taken above.
    accepted = (submissions.filter(verdict=Verdict.AC).order_by("judged_at", "id")
                .values("id", "judged_at").first())
    current = FirstAccepted.objects.filter(user_id=user_id, problem_id=problem_id)
    if accepted is None:
        current.delete()
    elif not current.filter(submission_type=payload["submissionType"], submission_id=accepted["id"]).exists():
        current.delete()
        FirstAccepted.objects.create(user_id=user_id, problem_id=problem_id,
                                     submission_type=payload["submissionType"], submission_id=accepted["id"],
                                     accepted_at=accepted["judged_at"])


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


HANDLERS = {PROBLEM_STATS: apply_problem_stats, PRACTICE_BEST: apply_practice_best, EXAM_SCORE: apply_exam_score}


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


def events_dispatch(*, now, batch: int = 100) -> DispatchReport:
    """Apply due events, oldest first. Handlers recompute from committed rows, so of the due
    events that recompute the same thing (a student resubmitting during a burst) only the
    first runs its handler: it ran after all of them were committed. The others are
    marked done together, in one transaction after the pass."""
    report = DispatchReport()
    due = list(
        SettlementEvent.objects.filter(state=EventState.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "id").values_list("id", "event_type", "payload")[:batch]
    )
    recomputed, covered = set(), []
    for event_id, event_type, payload in due:
        key = _recompute_key(event_type, payload or {})
        if key in recomputed:
            covered.append(event_id)
            continue
        try:
            with transaction.atomic(durable=True):
                event = lock_due_event(event_id)
                if event is None or event.state != EventState.PENDING:
                    continue  # another dispatcher has it, or already applied it
                handler_for(event.event_type)(event.payload)
                _mark_done([event.pk], now=now)
            logger.info("settlement event applied", extra={"event": event_id, "job": event.job_id,
                                                           "type": event.event_type})
            recomputed.add(key)
            report.applied.append(event_id)
        except Exception as exc:  # a handler bug or a database hiccup: retry later
            _record_failure(event_id, exc, now=now, report=report)
    if covered:
        with transaction.atomic(durable=True):
            done = [event.pk for event in lock_due_events(covered)]
            _mark_done(done, now=now)
        report.applied.extend(done)
    return report


def _mark_done(event_ids: list, *, now) -> None:
    SettlementEvent.objects.filter(pk__in=event_ids).update(
        state=EventState.DONE, attempts=F("attempts") + 1, applied_at=now, last_error="")


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
