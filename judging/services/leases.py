"""Leases after the claim: batch renew, the reaper, and release when a session ends."""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from judging.clock import require_agreeing_clock
from judging.identity import NodeIdentity, check_node_identity
from judging.locking import job_rows, lock_job, lock_jobs, lock_node, lock_submission, lock_together, node_row, \
    update_locked_jobs
from judging.models import JobKind, JobPhase, JobState, JudgeJob
from judging.services import conduct, outcomes
from judging.timing import lease_ttl, ms_between, now_under_locks
import kece.metrics as metrics

logger = logging.getLogger("kece.leases")


@dataclass(frozen=True)
class RenewItem:
    job_id: int
    lease_epoch: int
    phase: str = ""
    testcase: int | None = None


def _holds_live_lease(job, identity: NodeIdentity, lease_epoch: int, now) -> bool:
    return (
        job is not None and job.state == JobState.RUNNING and job.node_id == identity.node_id
        and job.session_epoch == identity.session_epoch and job.lease_epoch == lease_epoch
        and job.lease_until is not None and job.lease_until > now
    )


def lease_renew(*, identity: NodeIdentity, items: list[RenewItem], now) -> list[dict]:
    """Extend the node's live leases and record progress; one answer per item.

    Under the node lock (shared: drain, revoke and session change take it exclusively), the
    jobs are locked by id and each is renewed only if it is still this node's, this
    session's and this epoch's RUNNING job with an unexpired lease; a stale epoch renews
    nothing, so its progress is refused with it.
    """
    require_agreeing_clock()
    answers = []
    # The answers that say something of the node's conduct: a lease its own result settled
    # while this renew was on its way says nothing (the agent renews a job until its result
    # post is answered, and the two cross on the wire).
    telling = []
    with transaction.atomic(durable=True):
        node, jobs = lock_together(node_row(identity.node_id, shared=True),
                                   job_rows(sorted({i.job_id for i in items})))
        check_node_identity(node, identity)
        until = now + lease_ttl()
        checked_at = now_under_locks(now)
        # Each item is answered on its own, even when a job id repeats with another epoch:
        # only the item that names the live lease renews it.
        for item in items:
            job = jobs.get(item.job_id)
            if not _holds_live_lease(job, identity, item.lease_epoch, checked_at):
                refused = {"jobId": item.job_id, "ok": False, "error": _refusal(job, identity, item)}
                answers.append(refused)
                if not _settled_by(job, identity.node_id, item.lease_epoch):
                    telling.append(refused)
                continue
            # Renewed: the node has the job, so a repeated result post need not send it again.
            values = {"lease_until": until, "carried_by_job_id": None}
            if item.phase in JobPhase.values:
                values.update(progress_phase=item.phase, progress_testcase=item.testcase)
            update_locked_jobs([item.job_id], **values)
            renewed = {"jobId": item.job_id, "ok": True, "leaseRemainingMs": ms_between(until, now)}
            answers.append(renewed)
            telling.append(renewed)
    all_lost = bool(telling) and all(a.get("error") == "lease_lost" for a in telling)
    if telling and (all_lost or node.renew_lost_batches):
        conduct.renew_batch_recorded(node, all_lost=all_lost, now=now)
    return answers


def _settled_by(job, node_id: int, lease_epoch: int) -> bool:
    """Whether the node's own result settled the job under this lease."""
    return job is not None and job.settled_node_id == node_id and job.settled_lease_epoch == lease_epoch


def was_leased_to(job, node_id: int, lease_epoch: int) -> bool:
    """Whether the job's latest lease is the one named, and was this node's. Only its
    holder learns that a job was cancelled or replaced; to anyone else the lease is simply
    not theirs."""
    return job is not None and job.last_node_id == node_id and job.lease_epoch == lease_epoch


def _refusal(job, identity: NodeIdentity, item: RenewItem) -> str:
    """Why a renew item is refused: `cancelled` tells the node to stop at once."""
    cancelled = job is not None and job.state == JobState.CANCELLED and was_leased_to(
        job, identity.node_id, item.lease_epoch)
    return "cancelled" if cancelled else "lease_lost"


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
    if released:
        transaction.on_commit(lambda: metrics.leases_released(node.pool, reason, released))
    return released


@dataclass
class ReapReport:
    requeued: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    # Expired leases looked at (some may have settled in between): a full batch means more
    # may be waiting.
    examined: int = 0
    # After a pass (`kece.periodic.reap_step`): the earliest deadline still running, so a
    # scheduler can reap it when it passes rather than up to a tick later.
    next_deadline: object = None


def jobs_reap_expired(*, now, batch: int = 100) -> ReapReport:
    """Return up to `batch` expired leases to the queue, claimable at once, or fail them at
    the attempt limit.

    Candidates are read without locks from the (state, lease_until, id) index. Each is then
    locked by id and re-checked (state, epoch, deadline) in its own short transaction, so a
    result that settled in between wins and the reaper changes nothing. A final failure must
    write the submission, so it locks submission then job.

    No backoff: a lease that ran out means its node went silent (a node that fails a job
    says so, and that path backs off), so the job goes to the pool's other nodes at once and
    a silent node's work moves on within the lease plus one reaper tick. The attempt still
    counts, so a job that takes every node down with it ends FAILED at the attempt limit.
    """
    report = ReapReport()
    candidates = list(
        JudgeJob.objects.filter(state=JobState.RUNNING, lease_until__lte=now)
        .order_by("lease_until", "id")
        .values("id", "lease_epoch", "attempts", "kind", "submission_type", "submission_id", "bound_node_id")[:batch]
    )
    report.examined = len(candidates)
    report.requeued = _requeue_expired([c for c in candidates if c["attempts"] < settings.KECE_MAX_ATTEMPTS],
                                       now=now)
    for c in candidates:
        if c["attempts"] >= settings.KECE_MAX_ATTEMPTS:
            ended = _end_last_attempt(c, now=now)
            if ended is not None:
                (report.failed if ended == JobState.FAILED else report.requeued).append(c["id"])
    return report


def next_lease_deadline():
    """The earliest deadline of a running lease, or None (the reaper's index, one row)."""
    return (JudgeJob.objects.filter(state=JobState.RUNNING, lease_until__isnull=False).order_by("lease_until", "id")
            .values_list("lease_until", flat=True).first())


def _still_expired(job, candidate: dict, now) -> bool:
    return (
        job is not None and job.state == JobState.RUNNING and job.lease_epoch == candidate["lease_epoch"]
        and job.lease_until is not None and job.lease_until <= now
    )


def _requeue_expired(candidates: list, *, now) -> list:
    """Requeue the candidates that are still expired, in one transaction: a mass expiry (a
    host group lost) is back in the queue in one commit per batch, not one per job. Only
    job rows are locked (by ascending id), and only jobs that expired, so a late result
    for one of them waits a moment and is then refused `lease_lost`."""
    if not candidates:
        return []
    requeued = []
    with transaction.atomic(durable=True):
        jobs = lock_jobs([c["id"] for c in candidates])
        for candidate in candidates:
            job = jobs.get(candidate["id"])
            if not _still_expired(job, candidate, now):
                continue  # a result settled it, or it was cancelled, in between
            outcomes.requeue(job, now=now, error="lease_expired", delay=timedelta(0))
            requeued.append(job)
    for job in requeued:
        metrics.lease_expired(job.pool)
    return [job.pk for job in requeued]


def _end_last_attempt(candidate: dict, *, now) -> str | None:
    """Fail a job whose last allowed attempt expired; the state it ended in, None if a
    result or a cancel came first. The attempts are read again under the lock: a node's run
    of errors may have given one back since the candidates were read (`conduct`), and then
    the job goes round again."""
    with transaction.atomic(durable=True):
        submission = None
        if candidate["kind"] == JobKind.DIAGNOSTIC:
            # A failed self-check is written to its node's row: lock the node first.
            lock_node(candidate["bound_node_id"])
        elif candidate["kind"] == JobKind.JUDGE:
            submission = lock_submission(candidate["submission_type"], candidate["submission_id"])
        job = lock_job(candidate["id"])
        if not _still_expired(job, candidate, now):
            return None
        if job.attempts < settings.KECE_MAX_ATTEMPTS:
            outcomes.requeue(job, now=now, error="lease_expired", delay=timedelta(0))
        else:
            outcomes.fail(job, submission, now=now, error="lease_expired",
                          message="The lease expired on the last allowed attempt.")
    metrics.lease_expired(job.pool)
    return job.state
