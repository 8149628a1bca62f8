"""Quarantine: a node is taken out of judging for what it does, not for what it says.

A quarantined node is `unhealthy`: it gets no judge jobs (`nodes.models.may_take_judge_jobs`,
`judging.selectors.ready_nodes`), only the diagnostic jobs of its own checks. It returns to
service when an admin runs its checks and they pass (`nodes.checks`). Three rules:

- **Infrastructure errors**: its last `KECE_QUARANTINE_INFRA_ERRORS` results were INFRA_ERROR
  on different judge jobs. Counted in the settle that posts them (`judging.services.settle`),
  which also refunds the attempts the node burned (see there).
- **Stall**: it holds a session, its heartbeat is fresh and it has free slots, but it leased
  nothing for `KECE_QUARANTINE_STALL_MS` while judge jobs it could take were due all that time
  and it could have claimed them all that time: the minute starts again when it comes back
  from silence or ill health, passes a check, or its host group changes
  (`nodes_quarantine_stalled`, a periodic step like the reaper).
- **Lost renewals**: `KECE_QUARANTINE_RENEW_LOST` renew batches in a row in which every lease
  came back `lease_lost` (`judging.services.leases`).
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Q

from judging.locking import lock_host_group, lock_node
from judging.models import JobKind, JobState, JudgeJob
from judging.timing import offline_after
from judging.wakeups import node_changed_after_commit
import kece.metrics as metrics
from kece.api import iso
from nodes.models import DesiredState, JudgeNode, may_take_judge_jobs
from nodes.services import SYSTEM_ACTOR, audit

logger = logging.getLogger("kece.quarantine")

INFRA_ERRORS, STALLED, RENEW_LOST = "infra_errors", "stalled", "renew_lost"
CONDUCT_CLEARED = {"quarantined_at": None, "quarantine_reason": "", "infra_error_jobs": [], "renew_lost_batches": 0}


def node_quarantine_locked(node, *, reason: str, now) -> bool:
    """Quarantine `node`, which the caller holds locked exclusively; audited as the system.
    False if it already was. `reason` starts with the rule's name."""
    if node.quarantined_at is not None:
        return False
    node.quarantined_at = now
    node.quarantine_reason = reason[:300]
    node.infra_error_jobs = []
    node.renew_lost_batches = 0
    JudgeNode.objects.filter(pk=node.pk).update(quarantined_at=now, quarantine_reason=node.quarantine_reason,
                                                infra_error_jobs=[], renew_lost_batches=0, updated_at=now)
    audit(node=node, actor=SYSTEM_ACTOR, action="quarantine", before={},
          after={"reason": node.quarantine_reason, "since": iso(now)}, revision=node.revision)
    node_changed_after_commit(node.pk)
    # The rule's name, without the details after it: a bounded label.
    rule = node.quarantine_reason.split(":", 1)[0].strip()
    transaction.on_commit(lambda: metrics.quarantined(node.pool, rule))
    logger.warning("node quarantined", extra={"node": node.pk, "pool": node.pool, "reason": node.quarantine_reason})
    return True


def quarantine_clear_locked(node, *, now, check_id: int) -> None:
    """A passed self-check ends the quarantine; the caller holds the node locked exclusively."""
    if node.quarantined_at is None:
        return
    before = {"reason": node.quarantine_reason, "since": iso(node.quarantined_at)}
    JudgeNode.objects.filter(pk=node.pk).update(**CONDUCT_CLEARED, updated_at=now)
    audit(node=node, actor=SYSTEM_ACTOR, action="quarantine_cleared", before=before, after={"checkId": check_id},
          revision=node.revision)
    node_changed_after_commit(node.pk)
    logger.info("node quarantine cleared", extra={"node": node.pk, "check": check_id})


# --- stall ---------------------------------------------------------------------------------------

_NODE_ACTIVITY = (
    # Anything the node leased or finished lately: a node that started a job, or was busy
    # until a moment ago, has not stalled. `last_node_id` is indexed for the console.
    "SELECT 1 FROM judge_job WHERE last_node_id = %s AND (started_at >= %s OR finished_at >= %s) LIMIT 1"
)


def _stall_candidates(*, now, since):
    """Nodes that should be claiming: enabled, open session, fresh heartbeat, free slots by
    their own report, not quarantined, and unchanged since `since` (session, state, check;
    back from silence or ill health, `nodes.services.node_heartbeat`), in a host group
    unchanged since then too (enabled again a moment ago, its nodes could not claim before)."""
    return (JudgeNode.objects.filter(
        desired_state=DesiredState.ENABLED, session_open=True, revoked_at__isnull=True,
        quarantined_at__isnull=True, health_ok=True, last_heartbeat_at__gte=now - offline_after(),
        updated_at__lt=since, host_group__updated_at__lt=since, running_reported__lt=F("local_slots"),
    ).select_related("host_group"))


def _due_for(node, *, since) -> bool:
    """A judge job this node could have claimed all along: its pool and spec, unbound, not
    passed by for it, due since before `since`."""
    return (JudgeJob.objects.filter(pool=node.pool, state=JobState.QUEUED, kind=JobKind.JUDGE,
                                    runtime_spec=node.runtime_spec, available_at__lt=since,
                                    bound_node_id__isnull=True)
            .exclude(avoid_node_id=node.pk).exists())


def _room(node) -> bool:
    running = dict(JudgeJob.objects.filter(state=JobState.RUNNING).filter(
        Q(node_id=node.pk) | Q(host_group_id=node.host_group_id)).aggregate(
        node=Count("id", filter=Q(node_id=node.pk)), group=Count("id", filter=Q(host_group_id=node.host_group_id))))
    return running["node"] < node.max_slots and running["group"] < node.host_group.total_slots


def _active_since(node, *, since) -> bool:
    value = connection.ops.adapt_datetimefield_value(since)
    with connection.cursor() as cursor:
        cursor.execute(_NODE_ACTIVITY, [node.pk, value, value])
        return cursor.fetchone() is not None


def nodes_quarantine_stalled(*, now) -> list[int]:
    """Quarantine the nodes that stalled (see the module's docstring). Read without locks;
    each one found is then re-checked under host group → node locks, the claim's own, so a
    claim that leases in between wins."""
    since = now - timedelta(milliseconds=settings.KECE_QUARANTINE_STALL_MS)
    quarantined = []
    for candidate in _stall_candidates(now=now, since=since):
        if not (may_take_judge_jobs(candidate, candidate.host_group) and _due_for(candidate, since=since)
                and _room(candidate) and not _active_since(candidate, since=since)):
            continue
        with transaction.atomic(durable=True):
            group = lock_host_group(candidate.host_group_id)
            node = lock_node(candidate.pk)
            if node is None or node.host_group_id != group.pk or node.updated_at >= since or \
                    group.updated_at >= since or _active_since(node, since=since):
                continue
            seconds = settings.KECE_QUARANTINE_STALL_MS / 1000
            if node_quarantine_locked(node, now=now, reason=f"{STALLED}: free slots and due work, but no claim "
                                                            f"for {seconds:g} s"):
                quarantined.append(node.pk)
    return quarantined
