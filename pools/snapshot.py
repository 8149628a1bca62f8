"""The public status snapshot: computed by one process, cached, shared by every visitor.

Per runtime: NORMAL (a ready node, nothing waiting beyond what ready capacity absorbs),
QUEUEING (a ready node, but claimable work is waiting), UNAVAILABLE (no enabled,
healthy node). Draining nodes give no capacity.
"""

import logging
from datetime import timedelta

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
    pending = dict(
        JudgeJob.objects.filter(state=JobState.QUEUED, kind="JUDGE").values_list("pool").annotate(n=Count("id"))
    )
    claimable = dict(
        JudgeJob.objects.filter(state=JobState.QUEUED, kind="JUDGE", available_at__lte=now)
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


def refresh_step(now=None) -> dict:
    snapshot = compute(now=now or timezone.now())
    ttl = max(60, settings.KECE_SNAPSHOT_INTERVAL_MS * 10 // 1000)
    cache.set(CACHE_KEY, snapshot, ttl)
    cache.set(LAST_GOOD_KEY, snapshot, None)
    return snapshot


def read(*, now) -> dict:
    """The cached snapshot with its freshness; never computes on a visitor's request, and
    reads the cache once (both keys in one round trip)."""
    try:
        found = cache.get_many([CACHE_KEY, LAST_GOOD_KEY])
        snapshot = found.get(CACHE_KEY) or found.get(LAST_GOOD_KEY)
    except Exception as exc:  # the cache is down: say so instead of failing the page
        logger.warning("status snapshot unreadable", extra={"error": str(exc)})
        snapshot = None
    if snapshot is None:
        return {"asOf": None, "freshness": "unavailable", "readyPools": 0, "totalPools": len(POOLS),
                "pools": [{"pool": n, "label": p.label, "status": "UNAVAILABLE", "pending": 0}
                          for n, p in POOLS.items()]}
    as_of = timezone.datetime.fromisoformat(snapshot["asOf"].replace("Z", "+00:00"))
    fresh_for = timedelta(milliseconds=settings.KECE_SNAPSHOT_INTERVAL_MS * 3)
    return {**snapshot, "freshness": "fresh" if now - as_of <= fresh_for else "stale"}
