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

        claimable["jobs"] = [(None, "python-r1")]  # one ordinary job committed
        pools.hint("python")
        await asyncio.wait_for(first.event.wait(), 10)
        await settled(pools)
        assert claimable["looked"] == 1
        assert not second.event.is_set()  # one job: the other waiter sleeps on

        # While the first claims it, a second job's hint finds a sleeper: a check, which
        # counts the first job still unclaimed and so wakes the second waiter too.
        claimable["jobs"] = [(None, "python-r1"), (None, "python-r1")]
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
        claimable["jobs"] = [(None, "python-r2")]
        pools.hint("python")
        await asyncio.wait_for(new.event.wait(), 10)
        await settled(pools)
        assert not old.event.is_set(), "the old runtime's node would claim for nothing"

    run(scenario)
