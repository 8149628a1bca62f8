"""Reconciliation: the design's gates checked against the tables, and what is safe repaired.

Each check is one read on committed rows, without locks, reporting up to `SAMPLE` ids of what
it found and how many in all:

- `submission_without_job`: a live submission with no current judge job, or one whose
  pointer names a job that is not its own (an OI exam submission waits for its hand-in
  without a job: not a finding);
- `running_without_lease`: a RUNNING job whose lease ran out longer than a reaper tick and a
  margin ago (the reaper should have taken it), or that names no node;
- `settled_without_events`: a judged or failed job that is its live submission's current
  result and has no outbox event (among the jobs finished since delivered events are kept:
  `judging.services.retention`);
- `event_without_derived_rows`: an event the dispatcher marked done whose derived row is
  missing (the best result and, for an accepted submission, the first-accepted record; the
  lesson best; the exam score);
- `two_results_for_a_generation`: a submission whose stored result names a generation other
  than its current, judged job's.

`--repair` repairs through the services that own the rows, each in its own transaction and
each re-checking what it changes: an overdue lease goes through the reaper; missing events
are written under the submission and job locks (unique per job and type, so never twice);
an event whose rows are missing is made due again, and the dispatcher recomputes them from
the committed results. The first and last findings need a person, and are only reported.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, Exists, OuterRef, Q
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from judging.clock import require_agreeing_clock
from judging.locking import lock_jobs, lock_submission
from judging.models import (
    SUBMISSION_MODELS, EventState, ExamMode, ExamScore, FirstAccepted, JobKind, JobState, JudgeJob, PracticeBest,
    ProblemResult, ReconcileReport, SettlementEvent, Verdict,
)
from judging.services import outcomes
from judging.services.events import events_retry
from judging.services.leases import jobs_reap_expired
from judging.services.retention import events_kept_since
import kece.metrics as metrics
from kece.mysql import unbounded

logger = logging.getLogger("kece.reconcile")

SAMPLE = 20
CHECKS = ("submission_without_job", "running_without_lease", "settled_without_events", "event_without_derived_rows",
          "two_results_for_a_generation")
# Only what is safe to repair without a person: the others are reported.
REPAIRABLE = ("running_without_lease", "settled_without_events", "event_without_derived_rows")


def _found(rows) -> dict:
    ids = list(rows)
    return {"count": len(ids), "sample": ids[:SAMPLE], "ids": ids}


def _submissions_without_job() -> list:
    found = []
    for submission_type, model in SUBMISSION_MODELS.items():
        own_job = Exists(JudgeJob.objects.filter(pk=OuterRef("current_judge_job_id"), submission_type=submission_type,
                                                 submission_id=OuterRef("pk")))
        live = model.objects.filter(deleted_at__isnull=True).exclude(exam__mode=ExamMode.OI)
        found += [f"{submission_type}:{pk}" for pk in live.filter(~own_job).values_list("id", flat=True)]
    return found


def _running_without_lease(now) -> list:
    overdue = now - timedelta(milliseconds=2 * settings.KECE_REAP_INTERVAL_MS) - timedelta(seconds=5)
    return list(JudgeJob.objects.filter(state=JobState.RUNNING).filter(
        Q(lease_until__lt=overdue) | Q(lease_until__isnull=True) | Q(node_id__isnull=True))
        .order_by("id").values_list("id", flat=True))


def _current_and_live(submission_type: str):
    model = SUBMISSION_MODELS[submission_type]
    return Exists(model.objects.filter(pk=OuterRef("submission_id"), current_judge_job_id=OuterRef("pk"),
                                       deleted_at__isnull=True))


def _settled_without_events(now) -> list:
    found = []
    # Delivered events go after their retention age: a job finished before it may have had
    # them (and every daily run since its end has checked it).
    kept_since = events_kept_since(now)
    for submission_type in SUBMISSION_MODELS:
        jobs = JudgeJob.objects.filter(kind=JobKind.JUDGE, bound_node__isnull=True, submission_type=submission_type,
                                       state__in=(JobState.COMPLETED, JobState.FAILED))
        if kept_since is not None:
            jobs = jobs.filter(finished_at__gte=kept_since)
        found += list(jobs.filter(_current_and_live(submission_type))
                      .filter(~Exists(SettlementEvent.objects.filter(job_id=OuterRef("pk"))))
                      .order_by("id").values_list("id", flat=True))
    return found


def _events_without_rows() -> list:
    def key(name):
        return Cast(KT(f"payload__{name}"), BigIntegerField())

    done = SettlementEvent.objects.filter(state=EventState.DONE).annotate(
        user=key("userId"), problem=key("problemId"), submission=key("submissionId"), practice=key("practiceId"),
        exam=key("examId"))
    user, problem = OuterRef("user"), OuterRef("problem")
    stats = done.filter(event_type=outcomes.PROBLEM_STATS).filter(
        ~Exists(ProblemResult.objects.filter(user_id=user, problem_id=problem)))
    found = set(stats.values_list("id", flat=True))
    for submission_type, model in SUBMISSION_MODELS.items():
        accepted = Exists(model.objects.filter(pk=OuterRef("submission"), verdict=Verdict.AC, deleted_at__isnull=True))
        found.update(done.filter(event_type=outcomes.PROBLEM_STATS, payload__submissionType=submission_type)
                     .filter(accepted).filter(~Exists(FirstAccepted.objects.filter(user_id=user, problem_id=problem)))
                     .values_list("id", flat=True))
    found.update(done.filter(event_type=outcomes.PRACTICE_BEST).filter(~Exists(PracticeBest.objects.filter(
        practice_id=OuterRef("practice"), user_id=user, problem_id=problem))).values_list("id", flat=True))
    found.update(done.filter(event_type=outcomes.EXAM_SCORE).filter(~Exists(ExamScore.objects.filter(
        exam_id=OuterRef("exam"), user_id=user, problem_id=problem))).values_list("id", flat=True))
    return sorted(found)


def _two_results() -> list:
    found = []
    for submission_type, model in SUBMISSION_MODELS.items():
        current = JudgeJob.objects.filter(pk=OuterRef("current_judge_job_id"), state=JobState.COMPLETED)
        found += [f"{submission_type}:{pk}" for pk in model.objects.filter(
            deleted_at__isnull=True, judged_generation__isnull=False).filter(
            Exists(current.exclude(generation=OuterRef("judged_generation")))).values_list("id", flat=True)]
    return found


def reconcile_check(*, now) -> dict:
    """Every check's findings: {check: {count, sample, ids}}."""
    return {
        "submission_without_job": _found(_submissions_without_job()),
        "running_without_lease": _found(_running_without_lease(now)),
        "settled_without_events": _found(_settled_without_events(now)),
        "event_without_derived_rows": _found(_events_without_rows()),
        "two_results_for_a_generation": _found(_two_results()),
    }


def _write_missing_events(job_ids: list, *, now) -> int:
    written = 0
    for meta in JudgeJob.objects.filter(pk__in=job_ids).values("id", "submission_type", "submission_id"):
        try:
            with transaction.atomic(durable=True):
                submission = lock_submission(meta["submission_type"], meta["submission_id"])
                job = lock_jobs([meta["id"]]).get(meta["id"])
                if submission is None or job is None or submission.current_judge_job_id != job.pk \
                        or SettlementEvent.objects.filter(job_id=job.pk).exists():
                    continue  # changed since the check: nothing to mend
                outcomes.write_events(job, submission, now=now)
        except IntegrityError:
            continue  # written meanwhile (unique per job and type); refused at the latest by the COMMIT
        written += 1
    return written


def reconcile_repair(findings: dict, *, now) -> dict:
    """Repair what is safe, through the services; returns how many of each."""
    repaired = {}
    if findings["running_without_lease"]["count"]:
        report = jobs_reap_expired(now=now, batch=len(findings["running_without_lease"]["ids"]))
        repaired["running_without_lease"] = len(report.requeued) + len(report.failed)
    if findings["settled_without_events"]["count"]:
        repaired["settled_without_events"] = _write_missing_events(findings["settled_without_events"]["ids"],
                                                                   now=now)
    if findings["event_without_derived_rows"]["count"]:
        repaired["event_without_derived_rows"] = events_retry(
            event_ids=findings["event_without_derived_rows"]["ids"], now=now, states=(EventState.DONE,))
    return repaired


def reconcile_run(*, now, repair: bool) -> ReconcileReport:
    """Check, repair if asked, and keep the report (the console shows the last one). Refused
    (503) on a host whose clock disagrees with the database's: its `now` would call live
    leases overdue and reap them (`judging.clock`)."""
    require_agreeing_clock()
    with unbounded():  # its checks scan whole tables, longer than a request's statement may take
        findings = reconcile_check(now=now)
    repaired = reconcile_repair(findings, now=now) if repair else {}
    summary = {name: {"count": found["count"], "sample": found["sample"]} for name, found in findings.items()}
    report = ReconcileReport.objects.create(created_at=now, findings=summary, repaired=repaired, repair=repair)
    metrics.reconcile_left({name: max(0, found["count"] - (repaired.get(name) or 0))
                            for name, found in findings.items()})
    total = sum(found["count"] for found in findings.values())
    (logger.warning if total else logger.info)("reconciliation", extra={
        "findings": {name: found["count"] for name, found in findings.items()}, "repaired": repaired})
    return report
