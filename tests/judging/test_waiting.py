"""The waiting-claim registry: which hints cost a table check, and which waiters wake."""

import asyncio

import pytest

from judging import waiting


@pytest.fixture
def claimable(monkeypatch, settings):
    """The pool's claimable jobs as the checks see them (no database), and the checks made."""
    settings.REDIS_URL = ""  # hints come from the test, not from a subscription
    settings.KECE_CLAIM_FALLBACK_MS = 600_000  # no fallback tick during a test
    state = {"jobs": [], "looked": 0}

    def claimable_in_pool(pool, limit):
        state["looked"] += 1
        return list(state["jobs"])[:limit]

    monkeypatch.setattr(waiting, "claimable_in_pool", claimable_in_pool)
    return state


def run(scenario):
    async def main():
        pools = waiting.PoolWaiters(asyncio.get_running_loop())
        try:
            await scenario(pools)
        finally:
            for state in pools.pools.values():
                for waiter in list(state.waiters.values()):
                    pools.unregister("python", waiter)
                if state.fallback_task is not None:
                    state.fallback_task.cancel()

    asyncio.run(main())


async def settled(pools):
    """Until no check of the pool is running or due."""
    state = pools.pools["python"]
    while state.check_running:
        await asyncio.sleep(0)


def test_a_hint_while_every_waiter_is_claiming_makes_no_check_and_each_looks_once_more(claimable):
    async def scenario(pools):
        first, second = pools.register("python", 1), pools.register("python", 2)
        assert first.event.is_set() and second.event.is_set()  # a new pool may have work: they claim at once

        for _ in range(50):  # a burst of submissions while both claims run
            pools.hint("python")
        await settled(pools)
        assert claimable["looked"] == 0

        # Both claims found nothing (they started before the jobs committed): each looks again.
        pools.requeue("python", first)
        pools.requeue("python", second)
        assert first.event.is_set() and second.event.is_set()
        # Their second claims find nothing either: now they sleep until a hint or a check.
        pools.requeue("python", first)
        pools.requeue("python", second)
        assert not first.event.is_set() and not second.event.is_set()

    run(scenario)


def test_a_hint_while_some_waiter_sleeps_checks_and_wakes_one_waiter_a_job(claimable):
    async def scenario(pools):
        first, second = pools.register("python", 1), pools.register("python", 2)
        for waiter in (first, second):
            pools.requeue("python", waiter)  # their claims found nothing
        assert not first.event.is_set() and not second.event.is_set()

        claimable["jobs"] = [waiting.Claimable(None, "python-r1")]  # one ordinary job committed
        pools.hint("python")
        await asyncio.wait_for(first.event.wait(), 10)
        await settled(pools)
        assert claimable["looked"] == 1
        assert not second.event.is_set()  # one job: the other waiter sleeps on

        # While the first claims it, a second job's hint finds a sleeper: a check, which
        # counts the first job still unclaimed and so wakes the second waiter too.
        claimable["jobs"] = [waiting.Claimable(None, "python-r1"), waiting.Claimable(None, "python-r1")]
        pools.hint("python")
        await asyncio.wait_for(second.event.wait(), 10)
        await settled(pools)
        assert claimable["looked"] == 2

    run(scenario)


def test_a_job_of_another_runtime_spec_wakes_no_waiter_of_this_one(claimable):
    async def scenario(pools):
        old, new = pools.register("python", 1, "python-r1"), pools.register("python", 2, "python-r2")
        for waiter in (old, new):
            pools.requeue("python", waiter)  # their claims found nothing
        # A rollout: a job only the new runtime may take, ahead of the old runtime's waiter.
        claimable["jobs"] = [waiting.Claimable(None, "python-r2")]
        pools.hint("python")
        await asyncio.wait_for(new.event.wait(), 10)
        await settled(pools)
        assert not old.event.is_set(), "the old runtime's node would claim for nothing"

    run(scenario)


def test_a_subscription_lost_each_time_at_once_is_retried_ever_more_slowly(monkeypatch, settings):
    """A link that lets each subscription through and drops it at once: the retries back off
    (each one clears every cached identity and checks every pool), and what the
    subscription could not hear is read again by the waiting claims."""
    import kece.redis_clients as redis_clients

    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.KECE_CLAIM_FALLBACK_MS = 600_000
    real_sleep, waits, subscriptions = asyncio.sleep, [], []

    class PubSub:
        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return False

        async def psubscribe(self, pattern):
            subscriptions.append(pattern)

        async def get_message(self, **_kwargs):
            raise ConnectionError("the link dropped")

    class Client:
        def pubsub(self):
            return PubSub()

        async def aclose(self):
            pass

    monkeypatch.setattr(redis_clients, "async_client", lambda **_kwargs: Client())

    async def scenario(pools):
        done = asyncio.Event()

        async def sleep(seconds, *args):
            if 0 < seconds < 60:  # the subscription's retries, not the fallback tick's 600 s
                waits.append(seconds)
                if len(waits) == 6:
                    pools.listen_until = 0.0
                    done.set()
            await real_sleep(0)

        monkeypatch.setattr(asyncio, "sleep", sleep)
        waiter = pools.register("python", 1)
        pools.requeue("python", waiter)
        await asyncio.wait_for(done.wait(), 10)
        monkeypatch.setattr(asyncio, "sleep", real_sleep)
        pools.unregister("python", waiter)
        assert waiter.recheck

    run(scenario)
    assert waits[:6] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0] and len(subscriptions) >= 6


def test_a_job_a_node_just_failed_wakes_another_node_of_the_pool_not_that_one(claimable):
    async def scenario(pools):
        failed, other = pools.register("python", 1, "python-r1"), pools.register("python", 2, "python-r1")
        for waiter in (failed, other):
            pools.requeue("python", waiter)  # their claims found nothing
        # The first in line is the node the job just failed on: its claim would pass the job by.
        claimable["jobs"] = [waiting.Claimable(None, "python-r1", avoid_node_id=1)]
        pools.hint("python")
        await asyncio.wait_for(other.event.wait(), 10)
        await settled(pools)
        assert not failed.event.is_set(), "the node the job avoids would claim for nothing, the other sleep on"

    run(scenario)


@pytest.mark.mariadb
@pytest.mark.django_db
def test_a_pool_check_sees_whom_a_job_avoids_for_as_long_as_the_claim_does(problem, settings):
    from datetime import timedelta

    from django.utils import timezone

    from judging.models import JudgeJob
    from tests.factories import HostGroupFactory, UserFactory, make_node
    from tests.judging.helpers import claim, infra_error, settle, submit

    group = HostGroupFactory(total_slots=8)
    (failing, failing_id), _second = (make_node(pool="python", name=name, host_group=group)
                                      for name in ("failing", "second"))
    submit(UserFactory(), problem)
    [job] = claim(failing_id)
    settle(failing_id, infra_error(job, error="sandbox_crashed"))
    now = timezone.now()
    JudgeJob.objects.filter(pk=job.pk).update(available_at=now, claim_key=now)  # its retry is due
    assert waiting.claimable_in_pool("python", 10) == [waiting.Claimable(None, job.runtime_spec, failing.pk)]
    [free] = claim(_second[1])  # the other node takes it, as the wake-up asked
    assert free.pk == job.pk

    settle(_second[1], infra_error(free, error="sandbox_crashed"))
    past = timezone.now() - timedelta(milliseconds=settings.KECE_CLAIM_WAIT_MS + 1000)
    JudgeJob.objects.filter(pk=job.pk).update(available_at=past, claim_key=past)  # due for a claim wait
    assert waiting.claimable_in_pool("python", 10) == [waiting.Claimable(None, job.runtime_spec, None)]
