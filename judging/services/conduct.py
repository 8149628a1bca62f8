"""What a node does with its leases, counted for the quarantine rules (`nodes.quarantine`).

The refund rule. A node is at fault for an INFRA_ERROR it posts while quarantined, or whose
post quarantines it (its `KECE_QUARANTINE_INFRA_ERRORS`-th on different jobs in a row):

- that post's attempt is refunded, and the job is requeued, never FAILED on it;
- the attempt the node burned on each other job of that run is refunded too, if the job is
  still queued or running (elsewhere): the fault was the node's, not the submission's;
- a job that already reached FAILED keeps its SYSTEM_ERROR: its outcome was published (to the
  user, to the statistics), and with the rule below a lone bad node cannot get a job there
  while another node serves the pool;
- a job an INFRA_ERROR sent back, while another ready node serves its pool, passes the node
  that failed it by for one claim wait after it is due (`avoid_node_id`, in the claim's own
  query), so the other node takes it; alone in its pool the node may retry it when due.

A judgement from the node ends its run. RELEASED and lost leases leave it as it is.
"""

from django.conf import settings
from django.db import transaction

from judging import hooks
from judging.locking import lock_node, update_locked_node, update_locked_jobs
from judging.models import JobState
from nodes.models import JudgeNode

INFRA_ERRORS = "infra_errors"
RENEW_LOST = "renew_lost"


def infra_run(node, job_id: int) -> list[int]:
    """The node's run of INFRA_ERROR jobs once `job_id`'s is added (distinct, oldest first)."""
    return [j for j in node.infra_error_jobs or [] if j != job_id] + [job_id]


def at_fault(node, job_id: int) -> bool:
    """Whether the node's INFRA_ERROR on `job_id` is the node's fault (the rule above)."""
    return node.quarantined_at is not None or len(infra_run(node, job_id)) >= settings.KECE_QUARANTINE_INFRA_ERRORS


def refund_candidates(node, job_id: int) -> list[int]:
    """The other jobs whose attempts an INFRA_ERROR on `job_id` would refund: they must be
    locked with it (one acquisition, ascending ids)."""
    if node.quarantined_at is not None or not at_fault(node, job_id):
        return []
    return [j for j in infra_run(node, job_id) if j != job_id]


def infra_error_recorded(node, job, others: dict, *, now) -> None:
    """Count the node's INFRA_ERROR on `job` (settle's transaction; node locked exclusively,
    `others` the locked jobs of `refund_candidates`); quarantine it at the threshold."""
    if node.quarantined_at is not None:
        return
    run = infra_run(node, job.pk)
    if len(run) < settings.KECE_QUARANTINE_INFRA_ERRORS:
        update_locked_node(node.pk, infra_error_jobs=run)
        return
    for other in others.values():
        if other.state in (JobState.QUEUED, JobState.RUNNING) and other.attempts > 0:
            update_locked_jobs([other.pk], attempts=other.attempts - 1)
    hooks.call(hooks.NODE_QUARANTINE, node, now=now, reason=(
        f"{INFRA_ERRORS}: INFRA_ERROR on {len(run)} different jobs in a row "
        f"(last: {job.error or 'infra_error'} on job {job.pk})"))


def judgement_recorded(node_id: int) -> None:
    """A judgement ends the node's run of errors. After settle's transaction, which may hold
    the node shared; a concurrent error of the same node may be forgotten, which only
    delays a quarantine."""
    JudgeNode.objects.filter(pk=node_id).update(infra_error_jobs=[])


def renew_batch_recorded(node, *, all_lost: bool, now) -> None:
    """After a renew (which holds the node shared and so may not write it): count a batch in
    which every lease came back lost, or end the count. The node's own transaction."""
    if not all_lost:
        if node.renew_lost_batches:
            JudgeNode.objects.filter(pk=node.pk).update(renew_lost_batches=0)
        return
    with transaction.atomic(durable=True):
        node = lock_node(node.pk)
        if node is None or node.quarantined_at is not None:
            return
        lost = node.renew_lost_batches + 1
        if lost < settings.KECE_QUARANTINE_RENEW_LOST:
            update_locked_node(node.pk, renew_lost_batches=lost)
            return
        hooks.call(hooks.NODE_QUARANTINE, node, now=now, reason=(
            f"{RENEW_LOST}: every lease came back lost in {lost} renew batches in a row"))
