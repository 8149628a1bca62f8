"""Reads of nodes for the admin API and console."""

from django.db.models import Count, Min, Q

from judging.models import JobState
from judging.timing import offline_after
from nodes.models import (
    DesiredState, HostGroupStatus, JudgeNode, ObservedState, self_check_passed_for_current_config,
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


def filter_nodes(queryset, *, pool=None, state=None, observed=None, now):
    if pool:
        queryset = queryset.filter(pool=pool)
    if state:
        queryset = queryset.filter(desired_state=state)
    nodes = list(queryset.select_related("host_group").order_by("pool", "name", "id"))
    if observed:
        nodes = [n for n in nodes if observed_state(n, now=now) == observed]
    return nodes


def pool_figures(*, now) -> list[dict]:
    """Per pool: pending, claimable, backoff, oldest wait, ready nodes, running."""
    from judging.models import JudgeJob
    from judging.selectors import ready_nodes
    from pools.registry import POOLS

    jobs = JudgeJob.objects.filter(kind="JUDGE")
    queued = {row["pool"]: row for row in jobs.filter(state=JobState.QUEUED).values("pool").annotate(
        pending=Count("id"), claimable=Count("id", filter=Q(available_at__lte=now)),
        backoff=Count("id", filter=Q(available_at__gt=now)))}
    oldest = {row["pool"]: row["created_at"] for row in jobs.filter(state=JobState.QUEUED)
              .values("pool").annotate(created_at=Min("created_at"))}
    running = dict(jobs.filter(state=JobState.RUNNING).values_list("pool").annotate(n=Count("id")))
    ready = dict(ready_nodes(now=now).values_list("pool").annotate(n=Count("id")))
    figures = []
    for name in POOLS:
        row = queued.get(name, {})
        figures.append({
            "pool": name,
            "pending": row.get("pending", 0),
            "claimable": row.get("claimable", 0),
            "backoff": row.get("backoff", 0),
            "oldestWaitSeconds": int((now - oldest[name]).total_seconds()) if name in oldest else 0,
            "readyNodes": ready.get(name, 0),
            "running": running.get(name, 0),
        })
    return figures
