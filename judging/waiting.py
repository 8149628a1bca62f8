"""Waiting claims: cheap long-polls that hold no database connection and no thread.

One `PoolWaiters` registry per event loop (one per server process) keeps the waiting
claims of each pool. A waiter registers *before* anyone looks at the table for it, so a
job committed in between is never missed: its wake-up hint, or the next fallback check,
finds the waiter already registered.

Table checks are per pool, not per waiter: on a hint and every `KECE_CLAIM_FALLBACK_MS`
while anyone waits — so idle waiting costs the same however many nodes wait. A waiter
arriving while the pool may have work (a hint came, or the last check found jobs) claims at
once; otherwise the next hint or check wakes it. A hint that finds every waiter awake
(claiming) makes no check: each of them looks once more after its claim. The fallback
covers lost hints, a Redis outage and backoffs that run out. A check counts the
pool's claimable jobs and wakes that many waiters of each job's runtime spec (and the node
a bound diagnostic job is for), passing by the node a job just failed on while the claim
does: in a rollout, a job only the new runtime may take does not wake the old runtime's
nodes to claim for nothing, nor does a retry wake the node it is avoiding and leave the
others asleep until the next tick. Only woken waiters run a claim
transaction. At most one check per pool is in
flight; hints arriving meanwhile fold into one more check after it.

The Redis subscription also carries node changes, which drop cached identities
(`judging.auth`). It is kept while anyone waits and for as long after as a cached identity
lives (`keep_listening`), so nodes that come back in lockstep after their waits end, or
after a pause, find their identities still cached instead of read again one by one.

Database work runs on the node lane (`kece.lanes.NODE`), a small bounded thread pool whose
threads keep their connections, so two hundred waiting claims need no more than
`KECE_DB_THREADS` connections; under uvicorn the node API's other calls run on the same
lane (`kece.asgi`).
"""

import asyncio
import logging
import time
from collections import OrderedDict
from typing import NamedTuple

from django.conf import settings
from django.utils import timezone

from judging import wakeups
from judging.timing import claim_wait
import kece.metrics as metrics
from kece.lanes import NODE as NODE_LANE

logger = logging.getLogger("kece.waiting")


# A subscription that held this long before it was lost starts its retries from the shortest wait.
HEALTHY_SUBSCRIPTION_S = 30.0


async def run_db(function, *args, **kwargs):
    return await NODE_LANE.run(function, *args, **kwargs)


class Claimable(NamedTuple):
    """A claimable job as a pool check sees it: who may take it."""
    bound_node_id: int | None  # a diagnostic job's node; None: any node of the spec
    runtime_spec: str
    avoid_node_id: int | None = None  # the node it just failed on, while the pool's others go first


def claimable_in_pool(pool: str, limit: int) -> list[Claimable]:
    """Up to `limit` claimable jobs of `pool`, in claim order."""
    from judging.models import JobState, JudgeJob

    now = timezone.now()
    avoided_until = now - claim_wait()  # as the claim's `_claimable` judges it
    rows = (JudgeJob.objects.filter(pool=pool, state=JobState.QUEUED, available_at__lte=now)
            .order_by("claim_key", "id").values_list("bound_node_id", "runtime_spec", "avoid_node_id",
                                                      "available_at")[:limit])
    return [Claimable(bound, spec, avoid if avoid is not None and available > avoided_until else None)
            for bound, spec, avoid, available in rows]


class Waiter:
    __slots__ = ("node_id", "runtime_spec", "event", "superseded", "rewake", "recheck")

    def __init__(self, node_id: int, runtime_spec: str | None = None):
        self.node_id = node_id
        # A claim takes only jobs of its node's runtime spec: a job of another spec (a
        # rollout) must not wake it for nothing. None: any.
        self.runtime_spec = runtime_spec
        self.event = asyncio.Event()
        self.superseded = False
        # The node changed (new session, revoke, state): re-read who it is before answering.
        self.recheck = False
        # Woken again while its claim was already running: that claim may have started
        # before the new job committed, so it must look once more.
        self.rewake = False

    def wake(self) -> bool:
        if self.event.is_set():
            self.rewake = True
            return False
        self.event.set()
        return True


class _Pool:
    def __init__(self):
        self.waiters: "OrderedDict[int, Waiter]" = OrderedDict()  # node id → its waiter, FIFO
        self.check_running = False
        self.check_again = False
        self.last_check = 0.0
        # Claimable work may exist: set by hints and by checks that found jobs, cleared by a
        # check that found none. A waiter arriving while it is set claims at once.
        self.maybe_work = True
        self.fallback_task: asyncio.Task | None = None


class PoolWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.pools: dict[str, _Pool] = {}
        self.redis_task: asyncio.Task | None = None
        # The subscription stays until then even with no one waiting (see keep_listening).
        self.listen_until = 0.0
        self.checks = 0  # table checks made, for tests and benchmarks
        wakeups.local_notifier.add_listener(loop, self.on_topic)

    def on_topic(self, topic: str) -> None:
        if topic.startswith(wakeups.WAKE):
            self.hint(topic[len(wakeups.WAKE):])
        elif topic.startswith(wakeups.NODE):
            try:
                node_id = int(topic[len(wakeups.NODE):])
            except ValueError:
                return
            self.node_changed(node_id)

    def node_changed(self, node_id: int) -> None:
        from judging.auth import auth_cache

        auth_cache.drop_where(lambda auth: auth.node_id == node_id)
        for state in self.pools.values():
            waiter = state.waiters.get(node_id)
            if waiter is not None:
                waiter.recheck = True
                waiter.wake()

    # --- waiters --------------------------------------------------------------------------

    def register(self, pool: str, node_id: int, runtime_spec: str | None = None) -> Waiter:
        """Register a waiter; an earlier waiter of the same node is ended (superseded)."""
        state = self.pools.setdefault(pool, _Pool())
        earlier = state.waiters.pop(node_id, None)
        if earlier is not None:
            earlier.superseded = True
            earlier.event.set()
        waiter = Waiter(node_id, runtime_spec)
        state.waiters[node_id] = waiter
        self._ensure_background(pool, state)
        if state.maybe_work:
            waiter.wake()
        return waiter

    def requeue(self, pool: str, waiter: Waiter) -> None:
        """Back to the end of the line after a claim that found nothing."""
        state = self.pools.get(pool)
        if state is not None and state.waiters.get(waiter.node_id) is waiter:
            state.waiters.move_to_end(waiter.node_id)
        if waiter.rewake:
            waiter.rewake = False
        else:
            waiter.event.clear()

    def unregister(self, pool: str, waiter: Waiter) -> None:
        state = self.pools.get(pool)
        if state is not None and state.waiters.get(waiter.node_id) is waiter:
            del state.waiters[waiter.node_id]
        self.keep_listening()

    def keep_listening(self) -> None:
        """Stay subscribed to node changes for as long as an identity cached now may be
        used. Ending the subscription earlier would force the next subscription to forget
        every cached identity (changes published in between are lost), and every node to
        be read again."""
        from judging.auth import AUTH_CACHE_SECONDS

        self.listen_until = time.monotonic() + AUTH_CACHE_SECONDS
        if settings.REDIS_URL and (self.redis_task is None or self.redis_task.done()):
            self.redis_task = self.loop.create_task(self._listen_redis())

    def _wants_subscription(self) -> bool:
        return time.monotonic() < self.listen_until or any(p.waiters for p in self.pools.values())

    def waiting(self, pool: str | None = None) -> int:
        if pool is not None:
            return len(self.pools.get(pool, _Pool()).waiters)
        return sum(len(p.waiters) for p in self.pools.values())

    # --- checks -----------------------------------------------------------------------------

    def hint(self, pool: str) -> None:
        """A hint that `pool` may have work: check the table once more (coalesced). With no
        one waiting, the next waiter to arrive claims at once instead."""
        state = self.pools.get(pool)
        if state is None:
            return
        state.maybe_work = True
        if state.waiters and all(waiter.event.is_set() for waiter in state.waiters.values()):
            # Every waiter is claiming already (a burst of submissions keeps them so): none
            # is left for a check to wake. Each looks once more after its claim instead, in
            # case that claim started before this hint's job committed.
            for waiter in state.waiters.values():
                waiter.wake()
            return
        self._look(pool, state)

    def _look(self, pool: str, state: _Pool) -> None:
        if not state.waiters:
            return
        if state.check_running:
            state.check_again = True
            return
        state.check_running = True
        self.loop.create_task(self._check(pool, state))

    async def _check(self, pool: str, state: _Pool) -> None:
        try:
            while True:
                state.check_again = False
                state.last_check = time.monotonic()
                waiting = list(state.waiters.values())
                if not waiting:
                    break
                self.checks += 1
                try:
                    found = await run_db(claimable_in_pool, pool, len(waiting) + 8)
                except Exception as exc:  # the database is down: the fallback tick retries
                    logger.warning("pool check failed", extra={"pool": pool, "error": str(exc)})
                    break
                state.maybe_work = bool(found) or state.check_again
                self._wake(state, found)
                if not state.check_again:
                    break
        finally:
            state.check_running = False

    @staticmethod
    def _wake(state: _Pool, found: list[Claimable]) -> None:
        """Wake the node each bound job is for, and for each other job, first come first, a
        waiter that may take it: of its runtime spec, and not the node it is avoiding."""
        for node_id in {job.bound_node_id for job in found if job.bound_node_id is not None}:
            waiter = state.waiters.get(node_id)
            if waiter is not None:
                waiter.wake()
        by_spec: dict[str, list[Claimable]] = {}
        for job in found:
            if job.bound_node_id is None:
                by_spec.setdefault(job.runtime_spec, []).append(job)
        for waiter in list(state.waiters.values()):
            if not by_spec:
                break
            specs = [waiter.runtime_spec] if waiter.runtime_spec is not None else list(by_spec)
            for spec in specs:
                jobs = by_spec.get(spec, ())
                index = next((i for i, job in enumerate(jobs) if job.avoid_node_id != waiter.node_id), None)
                if index is None:
                    continue
                waiter.wake()
                del jobs[index]
                if not jobs:
                    del by_spec[spec]
                break

    # --- background: fallback poll and the Redis subscription --------------------------------

    def _ensure_background(self, pool: str, state: _Pool) -> None:
        if state.fallback_task is None or state.fallback_task.done():
            state.fallback_task = self.loop.create_task(self._fallback(pool, state))
        self.keep_listening()

    async def _fallback(self, pool: str, state: _Pool) -> None:
        interval = settings.KECE_CLAIM_FALLBACK_MS / 1000
        while state.waiters:
            await asyncio.sleep(interval)
            # A look, not a hint: a tick that finds no one waiting must not make the next
            # arrivals claim at once as if work had been announced.
            if time.monotonic() - state.last_check >= interval * 0.9:
                metrics.fallback_poll()
                self._look(pool, state)

    async def _listen_redis(self) -> None:
        import kece.redis_clients as redis_clients

        delay = 0.5
        while self._wants_subscription():
            # A new client each time round: through Sentinel it asks again which server is the
            # primary, so a failover ends this subscription and the next one is on the new primary.
            client = redis_clients.async_client(socket_connect_timeout=1)
            subscribed_at = None
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.psubscribe(wakeups.CHANNEL_PREFIX + "*")
                    subscribed_at = self.loop.time()
                    # Messages lost while unsubscribed may include node changes: forget
                    # cached identities once, and have the waiting claims read theirs again
                    # when they wake.
                    from judging.auth import auth_cache

                    auth_cache.clear()
                    for state in self.pools.values():
                        for waiter in state.waiters.values():
                            waiter.recheck = True
                    # A hint published while we were not subscribed is lost: check every
                    # pool once now that we are.
                    for pool in list(self.pools):
                        self.hint(pool)
                    early = 0
                    while self._wants_subscription():
                        asked = self.loop.time()
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        if message and message.get("type") == "pmessage":
                            channel = message["channel"].decode()
                            self.on_topic(channel[len(wakeups.CHANNEL_PREFIX):])
                        elif message is None and self.loop.time() - asked < 0.5:
                            # redis-py takes a connection the kernel has timed out (ETIMEDOUT,
                            # from REDIS_LINK_OPTIONS' keepalive and user timeout) for a wait
                            # that ran out, and answers None at once, every time, without
                            # yielding: this loop would spin and starve the whole process.
                            early += 1
                            if early >= 3:
                                raise ConnectionError("the subscription's link timed out")
                            continue
                        early = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if subscribed_at is not None and self.loop.time() - subscribed_at >= HEALTHY_SUBSCRIPTION_S:
                    delay = 0.5  # it had held for a while: a new outage, not the same one again
                # Not reset by a subscription that is lost at once: a link that drops each one
                # would otherwise clear the identities and check every pool twice a second.
                logger.warning("wake-up subscription lost; falling back to polling until it returns",
                               extra={"error": str(exc), "retryInSeconds": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            finally:
                try:
                    await client.aclose()
                except Exception:
                    pass


_registries: dict[int, PoolWaiters] = {}


def registry() -> PoolWaiters:
    loop = asyncio.get_running_loop()
    found = _registries.get(id(loop))
    if found is None or found.loop is not loop:
        found = _registries[id(loop)] = PoolWaiters(loop)
    return found
