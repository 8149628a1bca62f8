"""Wake-up hints for waiting claims: "the pool may have work now".

Hints only — the job table is the truth. A hint is published after the transaction that
made work claimable commits; a lost hint is covered by the waiters' rate-limited fallback
poll. With REDIS_URL set, hints travel over Redis pub/sub between processes (through the
Sentinels' current primary with REDIS_SENTINELS); without it an in-process notifier serves
the embedded default.
"""

import logging
import threading

from django.conf import settings
from django.db import transaction

logger = logging.getLogger("kece.wakeups")

CHANNEL_PREFIX = "kece:"
WAKE = "wake:"  # wake:<pool> — the pool may have claimable work
NODE = "node:"  # node:<id> — a node's session, credential or state changed


class LocalNotifier:
    """In-process hints: each event loop that has waiting claims listens here. Safe to
    publish from any thread (on-commit callbacks run in request threads)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._listeners: dict[int, tuple] = {}

    def add_listener(self, loop, callback) -> None:
        with self._lock:
            self._listeners[id(loop)] = (loop, callback)

    def publish(self, topic: str) -> None:
        with self._lock:
            listeners = list(self._listeners.items())
        for key, (loop, callback) in listeners:
            if loop.is_closed():
                with self._lock:
                    self._listeners.pop(key, None)
                continue
            try:
                loop.call_soon_threadsafe(callback, topic)
            except RuntimeError:  # closed between the check and the call
                pass


local_notifier = LocalNotifier()

_redis_client = None
_redis_lock = threading.Lock()


def redis_client():
    global _redis_client
    if _redis_client is None:
        import kece.redis_clients as redis_clients

        with _redis_lock:
            if _redis_client is None:
                _redis_client = redis_clients.client(socket_connect_timeout=0.5, socket_timeout=0.5)
    return _redis_client


def reset_redis_client() -> None:
    """Forget the cached client (tests that point REDIS_URL elsewhere)."""
    global _redis_client
    _redis_client = None


def _publish(topic: str) -> None:
    local_notifier.publish(topic)
    if settings.REDIS_URL:
        try:
            redis_client().publish(CHANNEL_PREFIX + topic, b"1")
        except Exception as exc:  # best effort: waiters fall back to polling
            logger.warning("hint publish failed", extra={"topic": topic, "error": str(exc)})


def publish_now(pool: str) -> None:
    """Publish a wake-up hint now: in-process waiters always, Redis when configured."""
    _publish(WAKE + pool)


def publish_after_commit(pool: str) -> None:
    transaction.on_commit(lambda: publish_now(pool))


def node_changed_after_commit(node_id: int) -> None:
    """Tell every server process that a node's session, credential or state changed, so
    its waiting claim re-checks who it is (and stale cached answers are dropped)."""
    transaction.on_commit(lambda: _publish(f"{NODE}{node_id}"))
