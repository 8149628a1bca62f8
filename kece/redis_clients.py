"""Redis clients for the cache, wake-ups and health checks: one address (REDIS_URL), or the
current primary as the Sentinels name it (REDIS_SENTINELS).

Through Sentinel a client asks the Sentinels for the primary whenever it opens a
connection; a connection to a server that has gone, or that answers as a read-only replica
after a failover ("You can't write against a read only replica"), is dropped with a
ConnectionError, and redis-py's retry opens the next one to whichever server the Sentinels
name now. So a failover costs a failed attempt or two, never a restart.

A Redis that does not answer (its host stalled or cut off) costs each command its whole
timeout, and the cache and the wake-up hints are asked on nearly every request: a page
waited a second for each cache read, a submission a second and a half (its rate, its hint).
What they keep there are hints (`judging.rates`, `kece.caches`, `judging.wakeups`), which
their callers do without. So the clients made for them (`guarded=True`) share one view of
Redis per process (`outage`): once a command finds Redis not answering, the others fail at
once (`Unreachable`) instead of asking it, and a thread of the process asks it again every
KECE_REDIS_RETRY_S until it answers. The readiness check asks it every time, and its answer
counts too. A stalled Redis then costs a timeout a process, not one a request.
"""

import functools
import logging
import os
import threading
import time

import redis
import redis.sentinel
from django.conf import settings

logger = logging.getLogger("kece.redis")


class Unreachable(redis.exceptions.ConnectionError):
    """Not asked: this process holds Redis for down (`Outage`)."""


class Outage:
    """Whether this process holds Redis for down, since when, and the thread that asks it
    again. Each process finds out for itself: a child forked during an outage starts
    without one."""

    def __init__(self):
        self._forget_all()
        os.register_at_fork(after_in_child=self._forget_all)

    def _forget_all(self) -> None:
        self._lock = threading.Lock()
        self._since = None  # monotonic time the outage began; None while Redis answers
        self._error = ""
        self._generation = 0  # which outage a probing thread is for

    @property
    def down(self) -> bool:
        return self._since is not None

    def check(self) -> None:
        """Raise `Unreachable` while Redis is held for down."""
        since = self._since
        if since is not None:
            raise Unreachable(f"Redis did not answer {time.monotonic() - since:.0f} s ago ({self._error});"
                              f" asked again every {settings.KECE_REDIS_RETRY_S} s")

    def failed(self, error: Exception) -> None:
        """A command found Redis not answering (refused, timed out, the link lost)."""
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
            self._error = f"{type(error).__name__}: {error}"
            generation = self._generation
        threading.Thread(target=self._ask_again, args=(generation,), name="kece-redis-retry", daemon=True).start()
        logger.warning("Redis does not answer: this process goes on without it (submission rates unchecked,"
                       " shared figures computed or shown as unavailable, claims woken by their fallback checks)"
                       " and asks it again every few seconds",
                       extra={"error": self._error, "retryInSeconds": settings.KECE_REDIS_RETRY_S})

    def answered(self) -> None:
        """Redis answered: an outage, if there was one, is over."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            lasted = time.monotonic() - self._since
            self._since = None
            self._generation += 1
        logger.info("Redis answers again", extra={"downSeconds": round(lasted, 1)})

    def forget(self) -> None:
        """Hold Redis for up again without asking it (REDIS_URL now names another server)."""
        with self._lock:
            self._since = None
            self._generation += 1

    def _ask_again(self, generation: int) -> None:
        wait = threading.Event()  # never set: a wait that a stopped process does not outlive
        asking = client(socket_connect_timeout=1, socket_timeout=1)
        try:
            while True:
                wait.wait(settings.KECE_REDIS_RETRY_S)
                if self._generation != generation:
                    return  # over already (the readiness check found it answering), or forgotten
                try:
                    asking.ping()
                except Exception:  # noqa: BLE001 - still down: ask again later
                    continue
                self.answered()
                return
        finally:
            asking.close()


outage = Outage()


def already_reported(error: Exception) -> bool:
    """Whether `error` is the outage this process has already logged: a caller that goes on
    without Redis need not log each request it served meanwhile."""
    return isinstance(error, Unreachable)


def _guarded(call, *args, **kwargs):
    outage.check()
    try:
        answer = call(*args, **kwargs)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
        outage.failed(error)
        raise
    outage.answered()
    return answer


class GuardedRedis(redis.Redis):
    """A `redis.Redis` whose commands heed this process's `outage`."""

    def execute_command(self, *args, **options):
        return _guarded(super().execute_command, *args, **options)

    def pipeline(self, transaction=True, shard_hint=None):
        outage.check()
        pipe = super().pipeline(transaction, shard_hint)
        pipe.execute = functools.partial(_guarded, pipe.execute)
        return pipe


def _sentinel(module, timeouts: dict):
    return module.Sentinel(settings.REDIS_SENTINELS, sentinel_kwargs=settings.REDIS_SENTINEL_KWARGS,
                           **settings.REDIS_DATA_PARAMS, **timeouts)


def client(*, guarded: bool = False, **timeouts):
    """A `redis.Redis` for the configured Redis; `timeouts` are redis-py's socket options
    (a dead link is noticed within seconds: settings.REDIS_LINK_OPTIONS). `guarded`: for
    hints, heeding and telling the process's `outage`."""
    redis_class = GuardedRedis if guarded else redis.Redis
    timeouts = {**settings.REDIS_LINK_OPTIONS, **timeouts}
    if settings.REDIS_SENTINELS:
        return _sentinel(redis.sentinel, timeouts).master_for(settings.REDIS_SENTINEL_MASTER, redis_class=redis_class)
    return redis_class.from_url(settings.REDIS_URL, **timeouts)


def async_client(**timeouts):
    """The same for asyncio (`redis.asyncio.Redis`)."""
    import redis.asyncio as aioredis

    timeouts = {**settings.REDIS_LINK_OPTIONS, **timeouts}

    if settings.REDIS_SENTINELS:
        import redis.asyncio.sentinel

        return _sentinel(redis.asyncio.sentinel, timeouts).master_for(settings.REDIS_SENTINEL_MASTER)
    return aioredis.Redis.from_url(settings.REDIS_URL, **timeouts)
