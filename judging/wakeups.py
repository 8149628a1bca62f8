"""Wake-up hints for waiting claims: "the pool may have work now".

Hints only — the job table is the truth. A hint is published after the transaction that
made work claimable commits; a lost hint is covered by the waiters' rate-limited fallback
poll. With REDIS_URL set, hints travel over Redis pub/sub between processes (through the
Sentinels' current primary with REDIS_SENTINELS); without it an in-process notifier serves
the embedded default.

The request that made the work does not wait for Redis: its hint is handed to a thread of
the process that publishes (`Publisher`), so a submission or a result is answered as soon
as it commits, however slow Redis is, and a burst's hints for one pool that arrive while one
is being published go as one. A node's change (`node_changed_after_commit`: its session,
credential or state) is published by the request itself, as before, and always tried,
whatever the process holds Redis for: the one who revoked a credential is answered once
every process has been told, or the telling has failed and been logged.
"""

import atexit
import logging
import os
import threading

from django.conf import settings
from django.db import transaction

logger = logging.getLogger("kece.wakeups")

CHANNEL_PREFIX = "kece:"
WAKE = "wake:"  # wake:<pool> — the pool may have claimable work
NODE = "node:"  # node:<id> — a node's session, credential or state changed
# How long a process that is stopping waits for its hints still unpublished.
EXIT_FLUSH_S = 2.0


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

_redis_clients: dict = {}  # guarded or not -> the process's client
_redis_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _redis_lock
    _redis_lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def redis_client(*, guarded: bool = True):
    """The process's client for hints (`guarded`: held back while Redis is held for down,
    `kece.redis_clients.outage`), or for what must be asked every time (a node's change)."""
    found = _redis_clients.get(guarded)
    if found is None:
        import kece.redis_clients as redis_clients

        with _redis_lock:
            found = _redis_clients.get(guarded)
            if found is None:
                found = _redis_clients[guarded] = redis_clients.client(
                    guarded=guarded, socket_connect_timeout=0.5, socket_timeout=0.5)
    return found


def reset_redis_client() -> None:
    """Forget the cached clients (tests that point REDIS_URL elsewhere)."""
    _redis_clients.clear()


def _send(topics: list[str], *, guarded: bool = True) -> None:
    """Publish `topics` to Redis, in one round trip; a failure loses hints, never work."""
    import kece.redis_clients as redis_clients

    try:
        pipe = redis_client(guarded=guarded).pipeline(transaction=False)
        for topic in topics:
            pipe.publish(CHANNEL_PREFIX + topic, b"1")
        if guarded:
            pipe.execute()  # heeds the process's view of Redis and tells it
        else:
            redis_clients.asked(pipe.execute)  # only tells it
    except Exception as exc:  # best effort: waiters fall back to polling
        if not redis_clients.already_reported(exc):
            logger.warning("hint publish failed", extra={"topics": topics, "error": str(exc)})


class Publisher:
    """The process's thread that publishes wake-up hints to Redis, in the order they came,
    each pool once however many times it was named while the thread was busy. A process
    that ends without running its exit handlers (a Celery pool's child, recycled) may lose
    the last: the waiters' fallback checks cover them."""

    def __init__(self):
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # the thread does not follow a fork

    def _reset(self) -> None:
        self._changed = threading.Condition()
        self._pending: dict[str, None] = {}  # topics in their order, each once
        self._sending = False
        self._thread = None

    def put(self, topic: str) -> None:
        with self._changed:
            self._pending[topic] = None
            if self._thread is None or not self._thread.is_alive():
                self._sending = False
                self._thread = threading.Thread(target=self._run, name="kece-wakeups", daemon=True)
                try:
                    self._thread.start()
                except RuntimeError as exc:  # no thread to be had: the hint is lost, the work is not
                    self._thread = None
                    self._pending.clear()
                    logger.warning("hint not published: no thread to publish it", extra={"error": str(exc)})
                    return
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._pending:
                    self._changed.wait()
                topics = list(self._pending)
                self._pending.clear()
                self._sending = True
            try:
                _send(topics)
            finally:
                with self._changed:
                    self._sending = False
                    self._changed.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every hint put so far has been published (or has failed); whether
        that happened within `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._sending, timeout)


publisher = Publisher()


# A process that stops (a management command that requeued work, a server shutting down)
# publishes the hints it still holds rather than leave their waiters to poll.
atexit.register(publisher.flush, EXIT_FLUSH_S)


def _publish(topic: str, *, wait: bool = False) -> None:
    local_notifier.publish(topic)
    if settings.REDIS_URL:
        if wait:
            _send([topic], guarded=False)
        else:
            publisher.put(topic)


def publish_now(pool: str) -> None:
    """Publish a wake-up hint now: in-process waiters at once, other processes through the
    publishing thread when Redis is configured."""
    _publish(WAKE + pool)


def publish_after_commit(pool: str) -> None:
    transaction.on_commit(lambda: publish_now(pool))


def node_changed_after_commit(node_id: int) -> None:
    """Tell every server process that a node's session, credential or state changed, so
    its waiting claim re-checks who it is (and stale cached answers are dropped)."""
    transaction.on_commit(lambda: _publish(f"{NODE}{node_id}", wait=True))
