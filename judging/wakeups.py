"""Wake-up hints for waiting claims: "the pool may have work now".

Hints only — the job table is the truth. A hint is published after the transaction that
made work claimable commits; a lost hint is covered by the waiters' rate-limited fallback
poll. With REDIS_URL set, hints travel over Redis pub/sub between processes; without it an
in-process notifier serves the embedded default.
"""

import asyncio
import logging
import threading
from collections import defaultdict

from django.conf import settings
from django.db import transaction

logger = logging.getLogger("kece.wakeups")

CHANNEL_PREFIX = "kece:wake:"


def channel_for(pool: str) -> str:
    return CHANNEL_PREFIX + pool


class LocalNotifier:
    """Per-pool generation counters with asyncio events, safe to poke from any thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._generation: dict[str, int] = defaultdict(int)
        self._waiters: dict[str, set] = defaultdict(set)

    def generation(self, pool: str) -> int:
        with self._lock:
            return self._generation[pool]

    def publish(self, pool: str) -> None:
        with self._lock:
            self._generation[pool] += 1
            waiters = list(self._waiters[pool])
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the waiter's loop has closed
                pass

    def register(self, pool: str, loop, event: asyncio.Event):
        with self._lock:
            self._waiters[pool].add((loop, event))

    def unregister(self, pool: str, loop, event: asyncio.Event):
        with self._lock:
            self._waiters[pool].discard((loop, event))


local_notifier = LocalNotifier()

_redis_client = None
_redis_lock = threading.Lock()


def redis_client():
    global _redis_client
    if _redis_client is None:
        import redis

        with _redis_lock:
            if _redis_client is None:
                _redis_client = redis.Redis.from_url(
                    settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5
                )
    return _redis_client


def publish_now(pool: str) -> None:
    """Publish a hint immediately: in-process waiters always, Redis when configured."""
    local_notifier.publish(pool)
    if settings.REDIS_URL:
        try:
            redis_client().publish(channel_for(pool), b"1")
        except Exception as exc:  # best effort: waiters fall back to polling
            logger.warning("wake-up publish failed", extra={"pool": pool, "error": str(exc)})


def publish_after_commit(pool: str) -> None:
    transaction.on_commit(lambda: publish_now(pool))
