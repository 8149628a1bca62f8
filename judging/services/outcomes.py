"""State changes shared by settle, reap, session loss, rejudge and delete.

Every function here receives rows its caller has already locked in the global order and
writes them; none opens a transaction or takes a lock.
"""

import logging

from django.conf import settings
from django.db import transaction

from judging import hooks
from judging.locking import save_locked
from judging.models import AttemptOutcome, JobAttempt, JobKind, JobState, PriorityClass, SettlementEvent
from judging.priority import FAIR_SHARE, class_lead
from judging.timing import retry_backoff
import kece.metrics as metrics
from kece.rows import insert_many, insert_values

logger = logging.getLogger("kece.jobs")

# Outbox event types. Handlers recompute from committed truth, so the suffix only keeps
# (job, event_type) unique when a judged job's submission is later deleted.
PROBLEM_STATS = "problem_stats"
PRACTICE_BEST = "practice_best"
EXAM_SCORE = "exam_score"
DELETED_SUFFIX = ".deleted"


def _clear_lease(job) -> None:
    job.node_id = None
    job.host_group_id = None
    job.session_epoch = None
    job.lease_until = None
    job.progress_phase = ""
    job.progress_testcase = None


def record_settlement(job, *, node_id: int, lease_epoch: int, digest: str, status: str) -> None:
    job.settled_lease_epoch = lease_epoch
    job.settled_node_id = node_id
    job.settled_digest = digest
    job.settled_status = status


def settlement_events(job, submission, *, now, suffix: str = "") -> list[dict]:
    """The outbox rows (SettlementEvent's fields) a settled job writes."""
    if job.kind != JobKind.JUDGE or submission is None or job.hidden:
        return []
    payload = {
        "userId": submission.user_id,
        "problemId": submission.problem_id,
        "submissionType": job.submission_type,
        "submissionId": job.submission_id,
        "practiceId": submission.lesson_practice_id,
        "examId": submission.exam_id,
    }
    types = [PROBLEM_STATS]
    types += [event_type for event_type, link in ((PRACTICE_BEST, submission.lesson_practice_id),
                                                  (EXAM_SCORE, submission.exam_id)) if link]
    return [{"job_id": job.pk, "event_type": event_type + suffix, "payload": payload, "next_attempt_at": now,
             "created_at": now} for event_type in types]


def write_events(job, submission, *, now, suffix: str = "") -> None:
    insert_values(SettlementEvent, settlement_events(job, submission, now=now, suffix=suffix))


def _attempt_ended(job, *, now, outcome: str, error: str, message: str = "") -> None:
    """Put on record the lease that is ending without settling the job, before the job row's
    lease fields are cleared or moved on: its only record afterwards. Nothing for a job that
    holds no lease (a queued job cancelled)."""
    if job.state != JobState.RUNNING or not job.lease_epoch:
        return
    insert_many([JobAttempt(job_id=job.pk, lease_epoch=job.lease_epoch, node_id=job.node_id,
                            session_epoch=job.session_epoch, claimed_at=job.started_at, ended_at=now,
                            outcome=outcome, error=error[:64], message=message[:2000])])


def requeue(job, *, now, error: str, message: str = "", refund: bool = False, delay=None) -> None:
    """Back to QUEUED, keeping the job id; the next claim raises the lease epoch."""
    _attempt_ended(job, now=now, outcome=AttemptOutcome.REQUEUED, error=error, message=message)
    # The job keeps its place: the lead it was queued with (practice beyond its user's
    # share, an exam participant's later turn) moves with its new due time.
    lead = job.available_at - job.claim_key
    job.state = JobState.QUEUED
    job.available_at = now + (delay if delay is not None else retry_backoff(job.attempts))
    job.claim_key = job.available_at - lead
    if job.priority_class == PriorityClass.PRACTICE and lead < class_lead(PriorityClass.PRACTICE):
        job.wait_reason = FAIR_SHARE  # the claim cleared it; the backlog figures leave it out again
    if refund:
        job.attempts = max(job.attempts - 1, 0)
    job.error = error
    job.error_message = message[:2000]
    _clear_lease(job)
    save_locked(job, [
        "state", "available_at", "claim_key", "wait_reason", "attempts", "error", "error_message", "node_id", "host_group_id", "avoid_node_id",
        "session_epoch", "lease_until", "progress_phase", "progress_testcase",
        "settled_lease_epoch", "settled_node_id", "settled_digest", "settled_status", "updated_at",
    ])
    if job.available_at <= now:
        from judging.wakeups import publish_after_commit

        publish_after_commit(job.pool)
    logger.info("job requeued", extra={"job": job.pk, "leaseEpoch": job.lease_epoch, "reason": error,
                                        "attempt": job.attempts, "availableAt": job.available_at.isoformat(),
                                        **_job_fields(job)})


def attempts_exhausted(job) -> bool:
    return job.attempts >= settings.KECE_MAX_ATTEMPTS


def fail(job, submission, *, now, error: str, message: str = "") -> None:
    """Terminal FAILED: the user sees SYSTEM_ERROR. `submission` must be locked (or None
    for a diagnostic job)."""
    _attempt_ended(job, now=now, outcome=AttemptOutcome.FAILED, error=error, message=message)
    job.state = JobState.FAILED
    job.finished_at = now
    job.error = error
    job.error_message = message[:2000]
    job.lease_until = None
    save_locked(job, [
        "state", "finished_at", "error", "error_message", "lease_until",
        "settled_lease_epoch", "settled_node_id", "settled_digest", "settled_status", "updated_at",
    ])
    if submission is not None and submission.current_judge_job_id == job.pk:
        # The effective result of this generation is SYSTEM_ERROR: no verdict, no score.
        submission.verdict = None
        submission.score = None
        submission.time_ms = None
        submission.memory_kb = None
        submission.cases = []
        submission.compile_output = ""
        submission.judged_generation = job.generation
        submission.judged_at = now
        save_locked(submission, ["verdict", "score", "time_ms", "memory_kb", "cases", "compile_output",
                                       "judged_generation", "judged_at"])
        write_events(job, submission, now=now)
    if job.kind == JobKind.DIAGNOSTIC:
        hooks.call(hooks.DIAGNOSTIC_FAILED, job, now=now, error=error, message=message)
    else:
        transaction.on_commit(lambda: metrics.settled(job, metrics.OUTCOME_SYSTEM_ERROR, now=now))
    logger.warning("job failed", extra={"job": job.pk, "leaseEpoch": job.lease_epoch, "reason": error,
                                         "attempt": job.attempts, "detail": message[:500], **_job_fields(job)})


def _job_fields(job) -> dict:
    """What a job's line is found by: its pool, the node that last held it (the one that
    lost it, on a requeue), and its submission."""
    fields = {"pool": job.pool, "node": job.last_node_id}
    if job.submission_id is not None:
        fields["submission"] = f"{job.submission_type}:{job.submission_id}"
    return fields


def infra_error_is_final(job) -> bool:
    """A diagnostic job judges the node it is bound to: its INFRA_ERROR is a finding about
    that node, which a retry would hide, so the self-check fails with it."""
    return job.kind == JobKind.DIAGNOSTIC or attempts_exhausted(job)


def infra_failure(job, submission, *, now, error: str, message: str = "") -> str:
    """An attempt ended without a judgement: retry with backoff, or fail at the limit."""
    if infra_error_is_final(job):
        fail(job, submission, now=now, error=error, message=message)
        return "failed"
    requeue(job, now=now, error=error, message=message)
    return "requeued"


def cancel(job, *, now, reason: str) -> None:
    """Superseded by a rejudge or deleted: its lease is dead, late results are refused."""
    _attempt_ended(job, now=now, outcome=AttemptOutcome.CANCELLED, error=reason)
    job.state = JobState.CANCELLED
    job.finished_at = now
    job.error = reason
    job.lease_until = None
    save_locked(job, ["state", "finished_at", "error", "lease_until", "updated_at"])
    logger.info("job cancelled", extra={"job": job.pk, "leaseEpoch": job.lease_epoch, "reason": reason})
