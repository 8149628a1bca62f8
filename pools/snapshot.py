"""The public status snapshot: computed by one process, cached, shared by every visitor.

Per runtime: NORMAL (a ready node, nothing waiting beyond what ready capacity absorbs),
QUEUEING (a ready node, but claimable work is waiting), UNAVAILABLE (no enabled,
healthy node). Draining nodes give no capacity.
"""

import logging
from datetime import timedelta
from time import monotonic

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Min, Q
from django.utils import timezone

from judging.models import JobState, JudgeJob
from judging.selectors import ready_nodes
import kece.metrics as metrics
from kece.api import iso
from kece.redis_clients import already_reported
from pools.registry import POOLS

logger = logging.getLogger("kece.snapshot")

CACHE_KEY = "kece:status-snapshot:v1"
LAST_GOOD_KEY = "kece:status-snapshot:last-good:v1"
# The operators' figures (`compute_figures`): kept until replaced, so a refresher that
# stops shows as a growing age, not as no figures.
FIGURES_KEY = "kece:status-snapshot:figures:v1"


def _queued(now) -> list[dict]:
    """Per pool and class: waiting judge jobs, those due now, and the oldest due one's
    time: one statement over the queued rows (the `judge_job_claim` index's (pool, state)
    ranges). Hidden judge jobs (bound to a node: canaries, cross-checks) are nobody's
    waiting work."""
    return list(
        JudgeJob.objects.filter(state=JobState.QUEUED, kind="JUDGE", bound_node__isnull=True)
        .values("pool", "priority_class")
        .annotate(n=Count("id"), claimable=Count("id", filter=Q(available_at__lte=now)),
                  oldest=Min("available_at", filter=Q(available_at__lte=now)))
    )


def compute(*, now, queued=None) -> dict:
    queued = _queued(now) if queued is None else queued
    pending, claimable = {}, {}
    for row in queued:
        pending[row["pool"]] = pending.get(row["pool"], 0) + row["n"]
        claimable[row["pool"]] = claimable.get(row["pool"], 0) + row["claimable"]
    ready = set(ready_nodes(now=now).values_list("pool", flat=True).distinct())
    pools = []
    for name, pool in POOLS.items():
        if name not in ready:
            status = "UNAVAILABLE"
        elif claimable.get(name, 0) > 0:
            status = "QUEUEING"
        else:
            status = "NORMAL"
        pools.append({"pool": name, "label": pool.label, "status": status, "pending": pending.get(name, 0)})
    return {
        "asOf": iso(now),
        "readyPools": sum(1 for p in pools if p["status"] != "UNAVAILABLE"),
        "totalPools": len(pools),
        "pools": pools,
    }


def compute_figures(*, now, queued=None) -> dict:
    """The operators' figures (`kece.metrics_endpoint` serves them as Prometheus gauges),
    each as of `now`: queue and running jobs per pool, the fleet's nodes, slots and
    heartbeats, the outbox. A handful of statements, each an index range over the active
    rows only (queued, running, pending; the nodes table is the fleet), however long the
    history. Kept apart from the public snapshot, which every page reads."""
    from judging.models import EventState, SettlementEvent
    from nodes.models import DesiredState, JudgeNode, ObservedState
    from nodes.selectors import observed_state

    queued = _queued(now) if queued is None else queued

    def age(then) -> float:
        return max(0.0, (now - then).total_seconds()) if then is not None else 0.0

    running = {pool: (n, age(oldest)) for pool, n, oldest in
               JudgeJob.objects.filter(state=JobState.RUNNING).values_list("pool")
               .annotate(n=Count("id"), oldest=Min("started_at")).values_list("pool", "n", "oldest")}
    by_node = dict(JudgeJob.objects.filter(state=JobState.RUNNING, node__isnull=False)
                   .values_list("node_id").annotate(n=Count("id")))
    ready = set(ready_nodes(now=now).values_list("id", flat=True))
    nodes, slots, busy, heartbeats = {}, {}, {}, []
    for node in JudgeNode.objects.filter(revoked_at__isnull=True).select_related("host_group").only(
            "pool", "name", "desired_state", "max_slots", "last_heartbeat_at", "session_open", "health_ok",
            "quarantined_at", "revoked_at", "self_check_status", "self_check_revision", "config_revision",
            "self_check_runtime_spec", "runtime_spec", "self_check_agent_version", "agent_version",
            "host_group__status"):
        node.running = by_node.get(node.pk, 0)
        key = (node.pool, observed_state(node, now=now))
        nodes[key] = nodes.get(key, 0) + 1
        if node.pk in ready:
            slots[node.pool] = slots.get(node.pool, 0) + node.max_slots
            busy[node.pool] = busy.get(node.pool, 0) + min(node.running, node.max_slots)
        # A node disabled on purpose is not silent (itself, revoked, or its machine's host
        # group: the machine taken away for maintenance), nor one drained of its work
        # (`drain_node` says it may then be stopped): its age would keep KeceNodeSilent firing.
        stopped_on_purpose = key[1] == ObservedState.DISABLED or (
            node.desired_state == DesiredState.DRAINING and not node.running)
        if node.last_heartbeat_at is not None and not stopped_on_purpose:
            heartbeats.append([node.pool, node.name, age(node.last_heartbeat_at)])
    outbox = SettlementEvent.objects.filter(state=EventState.PENDING).aggregate(n=Count("id"), oldest=Min("created_at"))
    # Events that failed every try wait for an operator (the console's failed work), not for time.
    dead = SettlementEvent.objects.filter(state=EventState.DEAD).count()
    return {
        "asOf": iso(now),
        "queued": [[r["pool"], r["priority_class"], r["n"], age(r["oldest"])] for r in queued],
        "running": [[pool, n, oldest] for pool, (n, oldest) in running.items()],
        "nodes": [[pool, state, n] for (pool, state), n in nodes.items()],
        "slots": slots,
        "slotsBusy": busy,
        "heartbeats": heartbeats,
        "outboxPending": outbox["n"] or 0,
        "outboxOldest": age(outbox["oldest"]),
        "outboxDead": dead,
    }


# (monotonic time of the read, the snapshot or None) of this process's last cache read.
# Every visitor's page asks for the status, and a cache round trip from a request thread
# costs several times the rest of a summary answer; within KECE_STATUS_REUSE_MS the last
# read answers instead. What is shown stays honest: its freshness is its own age.
_last_read: tuple[float, dict | None] = (float("-inf"), None)


def database_round_trip() -> float:
    """Seconds for the database to answer `SELECT 1`: how long it takes to answer at all,
    whatever a statement then costs (the operators' figure `databaseRoundTrip`)."""
    with connection.cursor() as cursor:  # connected first: a new connection's login is not the answer's time
        started = monotonic()
        cursor.execute("SELECT 1")
        cursor.fetchone()
        return monotonic() - started


def refresh_step(now=None) -> dict:
    global _last_read
    now = now or timezone.now()
    round_trip = database_round_trip()
    queued = _queued(now)
    snapshot = compute(now=now, queued=queued)
    figures = {**compute_figures(now=now, queued=queued), "databaseRoundTrip": round_trip}
    ttl = max(60, settings.KECE_SNAPSHOT_INTERVAL_MS * 10 // 1000)
    cache.set(CACHE_KEY, snapshot, ttl)
    cache.set_many({LAST_GOOD_KEY: snapshot, FIGURES_KEY: figures}, None)
    metrics.step_succeeded("snapshot")
    _last_read = (monotonic(), snapshot)  # this process knows it already
    return snapshot


def _cached() -> dict | None:
    """The snapshot in the cache (the current one, else the last good one), or None if
    there is none or the cache cannot be read; at most one round trip."""
    global _last_read
    read_at, snapshot = _last_read
    if monotonic() - read_at < settings.KECE_STATUS_REUSE_MS / 1000:
        return snapshot
    try:
        found = cache.get_many([CACHE_KEY, LAST_GOOD_KEY])
    except Exception as exc:  # the cache is down: say so instead of failing the page
        if not already_reported(exc):
            logger.warning("status snapshot unreadable", extra={"error": str(exc)})
        return None
    snapshot = found.get(CACHE_KEY) or found.get(LAST_GOOD_KEY)
    _last_read = (monotonic(), snapshot)
    return snapshot


def read(*, now) -> dict:
    """The cached snapshot with its freshness; never computes on a visitor's request."""
    snapshot = _cached()
    if snapshot is None:
        return {"asOf": None, "freshness": "unavailable", "readyPools": 0, "totalPools": len(POOLS),
                "pools": [{"pool": n, "label": p.label, "status": "UNAVAILABLE", "pending": 0}
                          for n, p in POOLS.items()]}
    as_of = timezone.datetime.fromisoformat(snapshot["asOf"].replace("Z", "+00:00"))
    fresh_for = timedelta(milliseconds=settings.KECE_SNAPSHOT_INTERVAL_MS * 3)
    return {**snapshot, "freshness": "fresh" if now - as_of <= fresh_for else "stale"}
