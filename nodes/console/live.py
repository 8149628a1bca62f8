"""Live updates of the console: which pools changed, told to the open pages.

A periodic step (`publish_step`, every `KECE_CONSOLE_PUBLISH_MS`, while a console page is
open) reads the same figures as the strip and the table, reduces them to one small digest per pool and publishes the pools
whose digest changed since the last step. Nothing on the node hot path publishes: a claim,
a renew or a result changes the figures, and the next step notices. A heartbeat that
changes nothing (only its time) changes no digest, so it publishes nothing. The console's
own writes add a hint right after their service committed (`hint`).

Messages are hints like the wake-ups: the page re-fetches its parts from the database, and
a lost message only delays that until the next one or the page's fallback refresh.

While nothing changes the step still says it is alive, every `KEEPALIVE_INTERVALS`. A page
that hears nothing for `SILENT_INTERVALS` takes its socket for deaf, whichever link broke
(the step's worker away from the broker, a web process's channel layer, the socket itself):
it says it is reconnecting, refreshes on its own, and opens a new socket.
"""

import asyncio
import hashlib
import json
import logging
import math

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from kece.redis_clients import already_reported

logger = logging.getLogger("kece.console")

GROUP = "judgers-console"
# The last step's digests and when it last told the pages anything.
DIGEST_KEY = "console:pool-state"
# Set by every open console socket once a publish interval (`mark_watched`): while it lasts,
# the step computes the digests; without it, nobody would hear what it publishes.
WATCHED_KEY = "console:watched"
# How many publish intervals a mark lasts: a socket that stops marking (its process gone)
# costs the step at most this many more runs.
WATCHED_INTERVALS = 3
# While no pool changes, the step says it is alive this often; a page that hears nothing for
# SILENT_INTERVALS (three keepalives lost) stops calling itself live.
KEEPALIVE_INTERVALS = 3
SILENT_INTERVALS = 10
# A pool's figures that a page shows as they change (not the oldest wait, which grows every
# second: the page's slow refresh shows it).
FIGURE_FIELDS = ("pending", "claimable", "backoff", "readyNodes", "running")

# The in-memory layer's queues belong to the event loop of the web process's consumers;
# a publish from another thread (the in-process scheduler) must be handed to that loop.
_consumer_loop: asyncio.AbstractEventLoop | None = None


def remember_consumer_loop(loop) -> None:
    global _consumer_loop
    _consumer_loop = loop


def pool_digests(*, now) -> dict[str, str]:
    """One digest per pool over what the console shows live: the pool's figures, each of its
    nodes' observed state, running count, configuration and self-check, and its checks in
    progress (their items as they arrive)."""
    from nodes.models import NodeCheck
    from nodes.selectors import nodes_with_running, observed_state, pool_figures
    from pools.registry import POOLS

    parts = {row["pool"]: [[row[f] for f in FIGURE_FIELDS]] for row in pool_figures(now=now)}
    for node in nodes_with_running().select_related("host_group").order_by("id"):
        parts[node.pool].append([
            node.pk, observed_state(node, now=now), node.running, node.revision, node.desired_state,
            node.session_epoch, node.self_check_status, node.self_check_revision, node.agent_version,
            node.runtime_spec])
    for pool, node_id, items in NodeCheck.objects.filter(status=NodeCheck.Status.RUNNING).values_list(
            "node__pool", "node_id", "items"):
        parts[pool].append(["check", node_id, len(items or [])])
    return {pool: hashlib.sha256(json.dumps(parts.get(pool, []), default=str).encode()).hexdigest()[:16]
            for pool in POOLS}


def changed_pools(before: dict, after: dict) -> list[str]:
    return sorted(pool for pool, digest in after.items() if before.get(pool) != digest)


def mark_watched() -> None:
    """A console page is listening (its socket, each publish interval). Best effort: a mark
    lost (the cache unreachable) is set again at the next interval."""
    # Whole seconds: the cache rounds a timeout down, and 0 would delete the mark.
    timeout = max(1, math.ceil(WATCHED_INTERVALS * settings.KECE_CONSOLE_PUBLISH_MS / 1000))
    try:
        cache.set(WATCHED_KEY, True, timeout=timeout)
    except Exception as exc:
        if not already_reported(exc):
            logger.warning("console watch mark failed", extra={"error": str(exc)})


def watched() -> bool:
    """Whether a console page has marked itself open within the last few intervals. True
    when the cache cannot tell: the step then runs and meets the same cache itself."""
    try:
        return bool(cache.get(WATCHED_KEY))
    except Exception as exc:
        if not already_reported(exc):
            logger.warning("console watch mark unreadable", extra={"error": str(exc)})
        return True


def publish_step(now=None) -> list[str]:
    """Compare the digests with the last step's (shared through the cache, so the step may
    run in any one process) and publish the pools that changed. Nothing is read while no
    console page is open (`mark_watched`): the first step after one opens compares with
    the digests of the last one watched, and at worst tells the new page to refresh what
    it has just loaded. With none remembered (a new or emptied cache) every pool counts as
    changed: the open pages loaded before this step, and what changed since is unknown."""
    if not cache.get(WATCHED_KEY):
        return []
    now = now or timezone.now()
    digests = pool_digests(now=now)
    last = cache.get(DIGEST_KEY) or {}
    changed = changed_pools(last.get("digests") or {}, digests)
    told = last.get("told", 0.0)
    # Half an interval of slack: the steps' own timing jitters.
    keepalive_s = (KEEPALIVE_INTERVALS - 0.5) * settings.KECE_CONSOLE_PUBLISH_MS / 1000
    if changed:
        publish(changed)
        told = now.timestamp()
    elif not 0 <= now.timestamp() - told < keepalive_s:  # due, or told by a clock ahead of this one
        _group_send({"type": "fleet.alive"}, "alive")
        told = now.timestamp()
    cache.set(DIGEST_KEY, {"digests": digests, "told": told}, timeout=None)
    return changed


def silent_after_ms() -> int:
    """How long a page waits for a message before it takes its socket for deaf."""
    return SILENT_INTERVALS * settings.KECE_CONSOLE_PUBLISH_MS


def publish(pools: list[str]) -> None:
    """Best effort: a page that misses a message catches up on its next refresh."""
    _group_send({"type": "fleet.changed", "pools": list(pools)}, ",".join(pools))


def _group_send(message: dict, what: str) -> None:
    from channels.layers import InMemoryChannelLayer, get_channel_layer

    try:
        layer = get_channel_layer()
        if isinstance(layer, InMemoryChannelLayer):
            loop = _consumer_loop
            if loop is None or loop.is_closed():
                return  # no page has connected to this process
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                loop.create_task(layer.group_send(GROUP, message))
            else:
                asyncio.run_coroutine_threadsafe(layer.group_send(GROUP, message), loop)
            return
        async_to_sync(layer.group_send)(GROUP, message)
    except Exception as exc:
        logger.warning("console publish failed", extra={"pools": what, "error": str(exc)})


def hint(pool: str) -> None:
    """After a console write has committed: tell the pages now rather than at the next step."""
    publish([pool])
