"""Redis clients for the cache, wake-ups and health checks: one address (REDIS_URL), or the
current primary as the Sentinels name it (REDIS_SENTINELS).

Through Sentinel a client asks the Sentinels for the primary whenever it opens a
connection; a connection to a server that has gone, or that answers as a read-only replica
after a failover ("You can't write against a read only replica"), is dropped with a
ConnectionError, and the next command's connection goes to whichever server the Sentinels
name now. So a failover costs a failed command or two, never a restart.

A Redis that does not answer (its host stalled or cut off) costs each command its whole
timeout, and the cache and the wake-up hints are asked on nearly every request: a page
waited a second for each cache read, a submission a second and a half (its rate, its hint).
What they keep there are hints (`judging.rates`, `kece.caches`, `judging.wakeups`), which
their callers do without. So the clients made for them (`guarded=True`) share one view of
Redis per process (`outage`): once a command has waited for Redis in vain, the others fail
at once (`Unreachable`) instead of asking it, and a thread of the process asks it again
KECE_REDIS_RETRY_S after each try that failed, until it answers. The readiness check
and /metrics ask it every time, and their answers count too, as do a node's changes, always
published (each waits out its own timeout meanwhile). A stalled Redis then costs a process
the commands in flight when it stalled and one timeout, not one a request.
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
    without one.

    Only a failure that cost a wait starts an outage (a timeout, or a link that took this
    long to fail): one that fails at once (a refused connection, a failover's demoted
    primary, a wrong password) costs the requests nothing, and they go on asking."""

    def __init__(self):
        self._forget_all()
        os.register_at_fork(after_in_child=self._forget_all)

    def _forget_all(self) -> None:
        self._lock = threading.Lock()
        self._since = None  # monotonic time the outage began; None while Redis answers
        self._error = ""
        # Counts the outages begun and ended (odd while one lasts): which one an answer ends.
        self._generation = 0
        self._ended = threading.Event()  # the current outage's end, for its asking thread

    @property
    def down(self) -> bool:
        return self._since is not None

    @property
    def generation(self) -> int:
        """Read before asking Redis and passed to `answered`: only an answer to a question
        asked during an outage ends it."""
        return self._generation

    def check(self) -> None:
        """Raise `Unreachable` while Redis is held for down."""
        since = self._since
        if since is not None:
            raise Unreachable(f"Redis did not answer {time.monotonic() - since:.0f} s ago ({self._error});"
                              f" asked again every {settings.KECE_REDIS_RETRY_S} s")

    def failed(self, error: Exception, waited: float, generation: int) -> None:
        """A question to Redis, asked at `generation`, failed with `error` after `waited`
        seconds. One asked before the latest change (an outage begun or ended since) says
        nothing of now."""
        if waited < COSTLY_FAILURE_S and not isinstance(error, redis.exceptions.TimeoutError):
            return
        with self._lock:
            if self._since is not None or self._generation != generation:
                return
            self._since = time.monotonic()
            self._error = f"{type(error).__name__}: {error}"
            self._generation += 1
            self._ended = threading.Event()
            generation, ended = self._generation, self._ended
        logger.warning("Redis does not answer: this process goes on without it (submission rates unchecked,"
                       " shared figures computed or shown as unavailable, claims woken by their fallback checks)"
                       " and asks it again every few seconds",
                       extra={"error": self._error, "retryInSeconds": settings.KECE_REDIS_RETRY_S})
        try:
            threading.Thread(target=self._ask_again, args=(generation, ended), name="kece-redis-retry",
                             daemon=True).start()
        except RuntimeError:  # no thread to ask it again (the process is stopping): go on asking it
            self.answered(generation)

    def answered(self, generation: int) -> None:
        """Redis answered a question asked at `generation`: if that was during the current
        outage, it is over."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None or self._generation != generation:
                return  # asked before this outage began: says nothing of now
            lasted = time.monotonic() - self._since
            self._end()
        logger.info("Redis answers again", extra={"downSeconds": round(lasted, 1)})

    def forget(self) -> None:
        """Hold Redis for up again without asking it (REDIS_URL now names another server)."""
        with self._lock:
            if self._since is not None:
                self._end()

    def _end(self) -> None:
        self._since = None
        self._generation += 1
        self._ended.set()

    def _ask_again(self, generation: int, ended: threading.Event) -> None:
        """At once, then every KECE_REDIS_RETRY_S, until Redis answers or the outage ends
        otherwise (the readiness check found it answering, or it was forgotten)."""
        asking = None
        try:
            asking = client(socket_connect_timeout=1, socket_timeout=1)
            while not ended.is_set():
                try:
                    asking.ping()
                except Exception:  # noqa: BLE001 - still down: ask again later
                    ended.wait(settings.KECE_REDIS_RETRY_S)
                    continue
                self.answered(generation)
                return
        except Exception:  # noqa: BLE001 - no client to ask with: the requests ask again instead
            logger.exception("Redis not asked again: the requests will")
            self.answered(generation)
        finally:
            if asking is not None:
                asking.close()


# A failure that took this long cost its request a wait (the clients' timeouts are 0.5–1 s):
# one that fails sooner (refused, a demoted primary, a wrong password) is not an outage to
# stand back from.
COSTLY_FAILURE_S = 0.25

outage = Outage()


def already_reported(error: Exception) -> bool:
    """Whether `error` is the outage this process has already logged: a caller that goes on
    without Redis need not log each request it served meanwhile."""
    return isinstance(error, Unreachable)


def asked(call, *args, **kwargs):
    """`call(...)`, a question to Redis, told to the process's `outage`: its failure may
    begin one, and its answer ends the one it was asked during. Not held back by one."""
    return _told(outage.generation, call, args, kwargs)


def _told(generation: int, call, args, kwargs):
    started = time.monotonic()
    try:
        answer = call(*args, **kwargs)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
        outage.failed(error, time.monotonic() - started, generation)
        raise
    outage.answered(generation)
    return answer


def _guarded(call, *args, **kwargs):
    """`asked`, unless Redis is held for down: then `Unreachable` without asking (the
    generation read once, so that a command let through is one asked while Redis was up)."""
    generation = outage.generation
    if generation % 2:
        outage.check()  # raises, unless the outage has ended just now
    return _told(generation, call, args, kwargs)


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
