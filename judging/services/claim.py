"""claim: lease a batch of queued jobs of the node's pool, within node and host-group slots."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import connection, transaction

from judging.clock import require_agreeing_clock
from judging.identity import NodeIdentity, check_node_identity
from judging.locking import claim_queued_jobs, host_group_row, lock_together, node_row, update_locked_jobs
from judging.models import JobKind, JobState, JudgeJob
from judging.selectors import sources_with_commit
from judging.services import job_meta
from judging.timing import claim_wait, lease_ttl, offline_after
import kece.metrics as metrics
from kece.errors import Unauthenticated
from nodes.models import DesiredState, JudgeNode, may_take_judge_jobs

logger = logging.getLogger("kece.claim")


@dataclass
class ClaimResult:
    jobs: list = field(default_factory=list)
    desired_state: str = ""
    # Why nothing was leased, for logs and tests: "", "no_free_slots", "stale_heartbeat",
    # "node_full", "group_full", "not_enabled", "not_ready", "empty", "not_after_this_result".
    reason: str = ""
    # With sources asked for: what gives the jobs' sources once committed (by job id).
    sources: Callable[[], dict] | None = None

    def sources_read(self) -> dict | None:
        return self.sources() if self.sources is not None else None


def _claimable(node, *, now, judge_jobs_allowed: bool) -> tuple[str, list]:
    """The node's due jobs (the `judge_job_claim` index: pool, state, claim_key, id): its
    pool and runtime spec, unbound or bound to it; only its diagnostic jobs when it may not
    judge. `claim_key <= now` is implied by `available_at <= now`
    (`judging.priority`); stated, it makes the index scan a range that stops at now."""
    at = connection.ops.adapt_datetimefield_value(now)
    where = "pool = %s AND state = %s AND claim_key <= %s AND available_at <= %s AND runtime_spec = %s"
    params = [node.pool, JobState.QUEUED, at, at, node.runtime_spec]
    if judge_jobs_allowed:
        # A job this node just failed with an INFRA_ERROR is left to the pool's other nodes
        # for one claim wait after it is due; then this node may try it again.
        where += (" AND (bound_node_id IS NULL OR bound_node_id = %s)"
                  " AND (avoid_node_id IS NULL OR avoid_node_id <> %s OR available_at <= %s)")
        params += [node.pk, node.pk, connection.ops.adapt_datetimefield_value(now - claim_wait())]
    else:
        # Only its diagnostic jobs: a hidden judge job bound to it (`nodes.canaries_hidden`)
        # waits until it may judge again, as every other judge job does.
        where += " AND bound_node_id = %s AND kind = %s"
        params += [node.pk, JobKind.DIAGNOSTIC]
    return where, params


_RUNNING_COUNTS = (
    "SELECT (SELECT COUNT(*) FROM judge_job WHERE node_id = %s AND state = %s),"
    " (SELECT COUNT(*) FROM judge_job WHERE host_group_id = %s AND state = %s)"
)


def running_counts_read(node_id: int, group_id: int) -> tuple[str, list]:
    """The statement of RUNNING jobs of the node and of its host group, in one row. Each
    count reads only its own index range, (node_id, state) and (host_group_id, state): one
    count over `node_id = … OR host_group_id = …` is planned as a walk over every RUNNING job
    of every pool, or over the whole table once many jobs run. Expired-but-unreaped leases
    are still RUNNING here and so still take their slot: the node may yet be judging them."""
    return _RUNNING_COUNTS, [node_id, JobState.RUNNING, group_id, JobState.RUNNING]


def running_counts(rows) -> tuple[int, int]:
    """(node, group) from the rows of `running_counts_read`."""
    [(node_running, group_running)] = rows
    return node_running or 0, group_running or 0


def _running_counts(node, group) -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(*running_counts_read(node.pk, group.pk))
        return running_counts(cursor.fetchall())


def node_host_group_id(node_id: int) -> int | None:
    """A node's host group, read without locks (the claim re-checks it under them)."""
    return JudgeNode.objects.filter(pk=node_id).values_list("host_group_id", flat=True).first()


def job_claim(*, identity: NodeIdentity, free_slots: int, now, with_sources: bool = False) -> ClaimResult:
    """Lease up to `free_slots` jobs to the node.

    1. Find the node's host group (the identity's hint, else a read without locks), then
       lock host group → node and re-check
       that the node is still in that group (it may have moved in between).
    2. Re-check credential and session on the locked row; refuse a stale heartbeat.
    3. n = min(free slots asked, node headroom, group headroom), counting committed RUNNING
       jobs (the locks serialise every claim of this node and group, so counts are exact).
    4. SKIP LOCKED select of the pool's due jobs by (claim_key, id) — class first, with
       aging (`judging.priority`) — then one UPDATE that
       writes owner, session, lease epoch + 1, deadline and attempts + 1.
    5. `with_sources`: the jobs' sources are read with the COMMIT (`sources_with_commit`).
    Nodes that may not judge (not ENABLED, unhealthy, not verified for what they run now)
    get only the diagnostic jobs bound to them.
    """
    require_agreeing_clock()
    group_id = identity.host_group_id
    for _ in range(3):
        if group_id is None:
            group_id = node_host_group_id(identity.node_id)
        if group_id is None:
            raise Unauthenticated("The node credential is unknown or revoked.")
        with transaction.atomic(durable=True):
            group, node = lock_together(host_group_row(group_id), node_row(identity.node_id))
            if group is None or node is None or node.host_group_id != group_id:
                group_id = None  # moved in between: look again
                continue
            check_node_identity(node, identity)
            result = claim_locked(node, group, free_slots=free_slots, now=now)
            if with_sources and result.jobs:
                result.sources = sources_with_commit(result.jobs)
        record_claim(node.pool, result, now=now)
        return result
    raise Unauthenticated("The node is being reconfigured; retry.")


def claim_locked(node, group, *, free_slots: int, now, carried_by: int | None = None,
                 running: tuple[int, int] | None = None) -> ClaimResult:
    """The claim itself, with host group and node locked by the caller: exclusively, so the
    counts are exact; or, for a result post's one-for-one replacement (a slot of this node
    and group just freed, one job asked in its place), both shared. Shared holders only ever
    lower the counts or keep them, and what could raise them waits for the shared holders;
    so what one of them counts is never below what will be committed, and the headroom it
    finds is never more than there is. `carried_by`: the job whose result post carries this
    claim (see `carried_jobs`). `running`: the node's and the group's RUNNING jobs, when the
    caller read them under these locks and counted its own writes since; else they are read
    now."""
    result = ClaimResult(desired_state=node.desired_state)
    if free_slots <= 0:
        result.reason = "no_free_slots"
        return result
    if node.last_heartbeat_at is None or node.last_heartbeat_at < now - offline_after():
        result.reason = "stale_heartbeat"
        return result
    # A draining node takes no judge job, only a diagnostic job bound to it, as a node that
    # may not judge: an operator checks it before enabling it again.
    judge_jobs_allowed = may_take_judge_jobs(node, group)
    node_running, group_running = running if running is not None else _running_counts(node, group)
    node_headroom = node.max_slots - node_running
    group_headroom = group.total_slots - group_running
    n = min(free_slots, node_headroom, group_headroom)
    if n <= 0:
        result.reason = "node_full" if node_headroom <= 0 else "group_full"
        return result

    where, params = _claimable(node, now=now, judge_jobs_allowed=judge_jobs_allowed)
    jobs = claim_queued_jobs(where, params, limit=n)
    if not jobs:
        result.reason = "empty" if judge_jobs_allowed else \
            "not_enabled" if node.desired_state == DesiredState.DRAINING else "not_ready"
        return result
    lease = dict(
        state=JobState.RUNNING, node_id=node.pk, last_node_id=node.pk, host_group_id=group.pk,
        session_epoch=node.session_epoch, lease_until=now + lease_ttl(), started_at=now,
        progress_phase="", progress_testcase=None, wait_reason="", error="", carried_by_job_id=carried_by,
    )
    update_locked_jobs([job.pk for job in jobs], increment=("lease_epoch", "attempts"), **lease)
    # The rows are locked, so what was read plus what was written is what is committed.
    for job in jobs:
        for name, value in lease.items():
            setattr(job, name, value)
        job.lease_epoch += 1
        job.attempts += 1
    result.jobs = jobs
    job_meta.remember(jobs)
    for job in result.jobs:
        logger.info("job leased", extra={"job": job.pk, "leaseEpoch": job.lease_epoch, "node": node.pk,
                                          "pool": node.pool, "attempt": job.attempts})
    return result


def record_claim(pool: str, result: ClaimResult, *, now) -> None:
    """A committed claim transaction: it leased jobs, or none (for whatever reason)."""
    metrics.claimed(pool, result.jobs, now=now)


def carried_jobs(node, *, session_epoch: int, carried_by: int, now) -> list:
    """The node's live leases that the claim carried on `carried_by`'s result post leased
    and the node has not renewed since: when that post comes again, its first answer was
    lost, and these are what the answer held. With the node locked exclusively by the
    caller nothing of this node's can change them; a lease that ran out is not sent."""
    return list(JudgeJob.objects.filter(
        node_id=node.pk, state=JobState.RUNNING, carried_by_job_id=carried_by, session_epoch=session_epoch,
        lease_until__gt=now).order_by("id"))
