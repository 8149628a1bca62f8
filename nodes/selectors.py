"""Reads of nodes for the admin API and console."""

from django.db.models import Count, Min, Q

from judging.models import JobState
from judging.timing import offline_after
from nodes.models import (
    VERIFIED, DesiredState, HostGroupStatus, JudgeNode, ObservedState, self_check_passed_for_current_config,
)


def nodes_with_running():
    """Nodes annotated with `running`: their RUNNING jobs as the job table says."""
    from judging.models import JudgeJob
    from django.db.models import OuterRef, Subquery, IntegerField
    from django.db.models.functions import Coalesce

    running = (JudgeJob.objects.filter(node_id=OuterRef("pk"), state=JobState.RUNNING)
               .values("node_id").annotate(n=Count("id")).values("n"))
    return JudgeNode.objects.annotate(running=Coalesce(Subquery(running, output_field=IntegerField()), 0))


def observed_state(node, *, now) -> str:
    if node.revoked_at is not None or node.desired_state == DesiredState.DISABLED:
        return ObservedState.DISABLED
    if node.host_group.status != HostGroupStatus.ACTIVE:
        # Claims give such a node no judge jobs; calling it "ready" would mislead.
        return ObservedState.DISABLED
    if node.desired_state == DesiredState.DRAINING:
        return ObservedState.DRAINING
    if node.desired_state == DesiredState.PENDING_VERIFICATION:
        return ObservedState.UNVERIFIED
    if (not node.session_open or node.last_heartbeat_at is None
            or node.last_heartbeat_at < now - offline_after()):
        return ObservedState.OFFLINE
    if not node.health_ok or node.quarantined_at is not None or not self_check_passed_for_current_config(node):
        return ObservedState.UNHEALTHY
    if getattr(node, "running", 0) >= node.max_slots:
        return ObservedState.BUSY
    return ObservedState.READY


def filter_nodes(queryset, *, pool=None, state=None, observed=None, host_group_id=None, name=None, now):
    if pool:
        queryset = queryset.filter(pool=pool)
    if state:
        queryset = queryset.filter(desired_state=state)
    if host_group_id:
        queryset = queryset.filter(host_group_id=host_group_id)
    if name:
        queryset = queryset.filter(name__icontains=name)
    nodes = list(queryset.select_related("host_group").order_by("pool", "name", "id"))
    if observed:
        nodes = [n for n in nodes if observed_state(n, now=now) == observed]
    return nodes


def pool_figures(*, now) -> list[dict]:
    """Per pool: pending, claimable, backoff, oldest wait (each also by priority class),
    ready nodes, running, and whether practice submits are refused now (`judging.pressure`:
    read only for a pool with exam or practice work queued)."""
    from judging.models import JudgeJob, PriorityClass
    from judging.pressure import pool_throttling
    from judging.selectors import ready_nodes
    from pools.registry import POOLS

    jobs = JudgeJob.objects.filter(kind="JUDGE")
    queued: dict[str, dict[str, dict]] = {}
    # Hidden judge jobs (canaries, cross-checks: bound to a node) are no one's waiting work;
    # while one runs it does take a slot, so `running` counts it.
    for row in jobs.filter(state=JobState.QUEUED, bound_node__isnull=True).values("pool", "priority_class").annotate(
            pending=Count("id"), claimable=Count("id", filter=Q(available_at__lte=now)),
            backoff=Count("id", filter=Q(available_at__gt=now)), created_at=Min("created_at")):
        queued.setdefault(row["pool"], {})[row["priority_class"]] = row
    running = dict(jobs.filter(state=JobState.RUNNING).values_list("pool").annotate(n=Count("id")))
    ready = dict(ready_nodes(now=now).values_list("pool").annotate(n=Count("id")))

    def wait(created_at) -> int:
        return int((now - created_at).total_seconds()) if created_at is not None else 0

    figures = []
    for name in POOLS:
        by_class = queued.get(name, {})
        rows = list(by_class.values())
        ahead_of_practice = any(by_class.get(c, {}).get("pending") for c in (PriorityClass.EXAM, PriorityClass.PRACTICE))
        figures.append({
            "pool": name,
            "pending": sum(r["pending"] for r in rows),
            "claimable": sum(r["claimable"] for r in rows),
            "backoff": sum(r["backoff"] for r in rows),
            "oldestWaitSeconds": wait(min((r["created_at"] for r in rows), default=None)),
            "readyNodes": ready.get(name, 0),
            "running": running.get(name, 0),
            "pendingByClass": {c: by_class.get(c, {}).get("pending", 0) for c in PriorityClass.values},
            "oldestWaitByClass": {c: wait(by_class.get(c, {}).get("created_at")) for c in PriorityClass.values},
            "throttling": ahead_of_practice and pool_throttling(name, now=now),
        })
    return figures


def _offline(now) -> Q:
    return Q(session_open=False) | Q(last_heartbeat_at__isnull=True) | Q(last_heartbeat_at__lt=now - offline_after())


def pool_node_counts(*, now) -> dict[str, dict]:
    """Per pool: nodes (not revoked), the slots of its ready nodes, and how many of its
    enabled nodes are offline or unhealthy (`observed_state`'s rule as one query): the
    console's strip and its navigation badge."""
    from judging.selectors import ready_slots

    unwell = Q(desired_state=DesiredState.ENABLED, host_group__status=HostGroupStatus.ACTIVE) & (
        _offline(now) | Q(health_ok=False) | Q(quarantined_at__isnull=False) | ~VERIFIED)
    counts = {row["pool"]: {"nodes": row["nodes"], "unwell": row["unwell"], "capacity": 0}
              for row in JudgeNode.objects.filter(revoked_at__isnull=True).values("pool").annotate(
                  nodes=Count("id"), unwell=Count("id", filter=unwell))}
    for pool, capacity in ready_slots(now=now).items():
        counts.setdefault(pool, {"nodes": 0, "unwell": 0, "capacity": 0})["capacity"] = capacity
    return counts


def node_checks(node, limit: int = 10):
    from nodes.models import NodeCheck

    return NodeCheck.objects.filter(node=node)[:limit]


def node_errors(node, limit: int = 20):
    """The node's recent infrastructure errors (not the ordinary ends of a job's life)."""
    from judging.models import JudgeJob

    return (JudgeJob.objects.filter(last_node_id=node.pk).exclude(error="")
            .exclude(error__in=["superseded", "deleted", "released"]).order_by("-updated_at", "-id")[:limit])


def node_audit(node, limit: int = 50):
    from nodes.models import NodeAudit

    return NodeAudit.objects.filter(node=node)[:limit]
