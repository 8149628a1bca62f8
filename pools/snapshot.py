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
from django.db.models import Count
from django.utils import timezone

from judging.models import JobState, JudgeJob
from judging.selectors import ready_nodes
from kece.api import iso
from pools.registry import POOLS

logger = logging.getLogger("kece.snapshot")

CACHE_KEY = "kece:status-snapshot:v1"
LAST_GOOD_KEY = "kece:status-snapshot:last-good:v1"


def compute(*, now) -> dict:
    # Hidden judge jobs (bound to a node: canaries, cross-checks) are nobody's waiting work.
    pending = dict(
        JudgeJob.objects.filter(state=JobState.QUEUED, kind="JUDGE", bound_node__isnull=True)
        .values_list("pool").annotate(n=Count("id"))
    )
    claimable = dict(
        JudgeJob.objects.filter(state=JobState.QUEUED, kind="JUDGE", bound_node__isnull=True, available_at__lte=now)
        .values_list("pool").annotate(n=Count("id"))
    )
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


# (monotonic time of the read, the snapshot or None) of this process's last cache read.
# Every visitor's page asks for the status, and a cache round trip from a request thread
# costs several times the rest of a summary answer; within KECE_STATUS_REUSE_MS the last
# read answers instead. What is shown stays honest: its freshness is its own age.
_last_read: tuple[float, dict | None] = (float("-inf"), None)


def refresh_step(now=None) -> dict:
    global _last_read
    snapshot = compute(now=now or timezone.now())
    ttl = max(60, settings.KECE_SNAPSHOT_INTERVAL_MS * 10 // 1000)
    cache.set(CACHE_KEY, snapshot, ttl)
    cache.set(LAST_GOOD_KEY, snapshot, None)
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
