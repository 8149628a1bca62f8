"""Leases after the claim: batch renew, the reaper, and release when a session ends."""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from judging.identity import NodeIdentity, check_node_identity
from judging.locking import lock_jobs, lock_node, lock_submission, update_jobs_guarded
from judging.models import JobKind, JobPhase, JobState, JudgeJob
from judging.services import outcomes
from judging.timing import lease_ttl, ms_between, retry_backoff

logger = logging.getLogger("kece.leases")


@dataclass(frozen=True)
class RenewItem:
    job_id: int
    lease_epoch: int
    phase: str = ""
    testcase: int | None = None


def lease_renew(*, identity: NodeIdentity, items: list[RenewItem], now) -> list[dict]:
    """Extend the node's live leases and record progress; one answer per item.

    Under the node lock (which drain, revoke and session change share), each item is one
    guarded UPDATE: job id + node + session + lease epoch + still RUNNING + unexpired. A
    stale epoch matches nothing, so its progress is refused with the renewal.
    """
    answers: dict[int, dict] = {}
    with transaction.atomic(durable=True):
        node = lock_node(identity.node_id, shared=True)
        check_node_identity(node, identity)
        until = now + lease_ttl()
        lost = []
        for item in sorted({i.job_id: i for i in items}.values(), key=lambda i: i.job_id):
            values = {"lease_until": until}
            if item.phase in JobPhase.values:
                values["progress_phase"] = item.phase
                values["progress_testcase"] = item.testcase
            updated = update_jobs_guarded(
                JudgeJob.objects.filter(
                    node_id=node.pk, session_epoch=identity.session_epoch, lease_epoch=item.lease_epoch,
                    state=JobState.RUNNING, lease_until__gt=now,
                ),
                [item.job_id], **values,
            )
            if updated:
                answers[item.job_id] = {"jobId": item.job_id, "ok": True, "leaseRemainingMs": ms_between(until, now)}
            else:
                lost.append(item)
        if lost:
            states = dict(JudgeJob.objects.filter(pk__in=[i.job_id for i in lost]).values_list("id", "state"))
            for item in lost:
                # "cancelled" tells the node to stop at once; for every other refusal the
                # lease is simply no longer its own.
                error = "cancelled" if states.get(item.job_id) == JobState.CANCELLED else "lease_lost"
                answers[item.job_id] = {"jobId": item.job_id, "ok": False, "error": error}
    return [answers[i.job_id] for i in items]


def release_node_leases(node, *, now, reason: str) -> int:
    """Give back every RUNNING job of `node` (locked by the caller) at once.

    Used when a session ends (new session, revoke): the old session can never settle, so
    nothing should wait for its leases to run out. The lost attempt counts, as for an
    expired lease; the job is claimable immediately, or FAILED at the attempt limit.
    Locks submissions then jobs, after the node the caller holds.
    """
    running = list(
        JudgeJob.objects.filter(node_id=node.pk, state=JobState.RUNNING)
        .values_list("id", "kind", "submission_type", "submission_id")
    )
    if not running:
        return 0
    submissions = {}
    judge_refs = sorted(
        {(t, s) for _, kind, t, s in running if kind == JobKind.JUDGE}, key=lambda ref: (ref[0] != "ALGO", ref[1])
    )
    for ref in judge_refs:
        submissions[ref] = lock_submission(*ref)
    jobs = lock_jobs([job_id for job_id, *_ in running])
    released = 0
    for job in jobs.values():
        if job.state != JobState.RUNNING or job.node_id != node.pk:
            continue
        submission = submissions.get((job.submission_type, job.submission_id))
        if outcomes.attempts_exhausted(job):
            outcomes.fail(job, submission, now=now, error=reason)
        else:
            outcomes.requeue(job, now=now, error=reason, delay=timedelta(0))
        released += 1
    return released


@dataclass
class ReapReport:
    requeued: list = field(default_factory=list)
    failed: list = field(default_factory=list)


def jobs_reap_expired(*, now, batch: int = 100) -> ReapReport:
    """Return expired leases to the queue (with backoff), or fail them at the attempt limit.

    Candidates are read without locks from the (state, lease_until, id) index. A requeue is
    one guarded UPDATE that re-checks state, epoch and deadline, so a result that settled in
    between wins and the reaper changes nothing. A final failure must write the submission,
    so it runs in its own transaction that locks submission then job and re-checks.
    """
    report = ReapReport()
    candidates = list(
        JudgeJob.objects.filter(state=JobState.RUNNING, lease_until__lte=now)
        .order_by("lease_until", "id")
        .values("id", "lease_epoch", "attempts", "kind", "submission_type", "submission_id", "bound_node_id")[:batch]
    )
    for c in candidates:
        if c["attempts"] < settings.KECE_MAX_ATTEMPTS:
            with transaction.atomic(durable=True):
                updated = update_jobs_guarded(
                    JudgeJob.objects.filter(state=JobState.RUNNING, lease_epoch=c["lease_epoch"],
                                            lease_until__lte=now),
                    [c["id"]],
                    state=JobState.QUEUED, available_at=now + retry_backoff(c["attempts"]),
                    node_id=None, host_group_id=None, session_epoch=None, lease_until=None,
                    progress_phase="", progress_testcase=None, error="lease_expired", error_message="",
                )
            if updated:
                report.requeued.append(c["id"])
                logger.info("expired lease requeued", extra={"job": c["id"], "lease": c["lease_epoch"],
                                                             "attempt": c["attempts"]})
        elif _fail_expired(c, now=now):
            report.failed.append(c["id"])
    return report


def _fail_expired(candidate: dict, *, now) -> bool:
    with transaction.atomic(durable=True):
        submission = None
        if candidate["kind"] == JobKind.DIAGNOSTIC:
            # A failed self-check is written to its node's row: lock the node first.
            lock_node(candidate["bound_node_id"])
        elif candidate["kind"] == JobKind.JUDGE:
            submission = lock_submission(candidate["submission_type"], candidate["submission_id"])
        job = lock_jobs([candidate["id"]]).get(candidate["id"])
        if (
            job is None or job.state != JobState.RUNNING or job.lease_epoch != candidate["lease_epoch"]
            or job.lease_until is None or job.lease_until > now
        ):
            return False
        outcomes.fail(job, submission, now=now, error="lease_expired",
                      message="The lease expired on the last allowed attempt.")
        return True
