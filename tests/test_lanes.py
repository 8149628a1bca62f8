"""A lane (`kece.lanes`): synchronous work on a few warm threads, answered on the caller's
event loop."""

import asyncio
import contextvars
import multiprocessing
import threading

import pytest

from kece.lanes import Lane

request_id = contextvars.ContextVar("request_id", default=None)


@pytest.fixture
def lane(settings):
    settings.KECE_TEST_LANE_THREADS = 3
    made = Lane("test-lane", "KECE_TEST_LANE_THREADS")
    yield made
    made.stop(timeout=10)


def _thread_name() -> str:
    return threading.current_thread().name


def test_one_request_at_a_time_keeps_to_one_thread(lane):
    async def one_after_another():
        return {await lane.run(_thread_name) for _ in range(30)}

    # A thread (and its database connection) for each moment's concurrency, not one per slot.
    assert asyncio.run(one_after_another()) == {"test-lane_0"}


def test_work_runs_side_by_side_up_to_the_lane_size_and_then_waits(lane):
    release = threading.Event()
    running = []
    three_running = threading.Event()

    def hold():
        running.append(_thread_name())
        if len(running) == 3:
            three_running.set()
        release.wait(30)
        return _thread_name()

    async def five_at_once():
        tasks = [asyncio.ensure_future(lane.run(hold)) for _ in range(5)]
        await asyncio.get_running_loop().run_in_executor(None, three_running.wait, 30)
        assert len(running) == 3  # the fourth and fifth wait for a thread
        release.set()
        return await asyncio.gather(*tasks)

    names = asyncio.run(five_at_once())
    assert len(running) == 5 and set(names) == {"test-lane_0", "test-lane_1", "test-lane_2"}


def test_errors_and_the_request_context_reach_the_caller(lane):
    def fail():
        raise KeyError(request_id.get())

    async def call():
        request_id.set("r-17")
        assert await lane.run(request_id.get) == "r-17"
        with pytest.raises(KeyError, match="r-17"):
            await lane.run(fail)
        # A task ending in StopIteration (a `next()` on an empty iterator) answers too.
        with pytest.raises(RuntimeError, match="StopIteration"):
            await asyncio.wait_for(lane.run(next, iter(())), 10)
        return await lane.run(lambda a, b=0: a + b, 2, b=3)

    assert asyncio.run(call()) == 5


def test_work_given_up_on_before_it_starts_never_runs(lane, settings):
    settings.KECE_TEST_LANE_THREADS = 1
    release, started = threading.Event(), threading.Event()
    ran = []

    def hold():
        started.set()
        release.wait(30)

    async def cancel_the_waiting_one():
        busy = asyncio.ensure_future(lane.run(hold))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 30)
        waiting = asyncio.ensure_future(lane.run(ran.append, "ran"))
        await asyncio.sleep(0)  # queued behind the busy thread
        waiting.cancel()
        release.set()
        await busy
        return await lane.run(_thread_name)  # after the cancelled one's turn

    asyncio.run(cancel_the_waiting_one())
    assert ran == []


def test_a_stopped_lane_ends_its_threads_and_starts_new_ones_for_the_next_task(lane):
    async def one():
        return await lane.run(threading.current_thread)

    first = asyncio.run(one())
    lane.stop(timeout=10)
    assert not first.is_alive()
    second = asyncio.run(one())
    assert second is not first and second.is_alive()


def _run_in_child(lane, answers):
    answers.put(asyncio.run(lane.run(lambda: "answered in the child")))


def test_a_forked_child_gets_threads_of_its_own(lane):
    async def warm():
        return await lane.run(_thread_name)

    asyncio.run(warm())  # the parent's thread exists, and a fork does not copy it
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_run_in_child, args=(lane, answers))
    child.start()
    try:
        assert answers.get(timeout=30) == "answered in the child"
    finally:
        child.join(30)
    assert child.exitcode == 0


def _connection_id() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT CONNECTION_ID()" if connection.vendor == "mysql" else "SELECT 1")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_task_that_leaves_a_transaction_open_does_not_break_the_next_task_on_its_thread(lane, settings):
    from django.db import connection, transaction

    from judging.models import JudgeJob

    settings.KECE_TEST_LANE_THREADS = 1

    def leave_open():
        transaction.atomic().__enter__()
        JudgeJob.objects.exists()

    def durable_work():
        with transaction.atomic(durable=True):
            return JudgeJob.objects.count(), connection.in_atomic_block

    async def call():
        await lane.run(leave_open)
        return await lane.run(durable_work)

    assert asyncio.run(call()) == (0, True)


@pytest.mark.django_db(transaction=True)
def test_a_refusal_keeps_the_connection_and_a_crash_does_not(lane, settings):
    from kece.errors import LeaseLost

    settings.KECE_TEST_LANE_THREADS = 1

    def refuse():
        _connection_id()
        raise LeaseLost("the lease is gone")

    def crash():
        _connection_id()
        raise KeyError("a bug")

    async def call():
        first = await lane.run(_connection_id)
        with pytest.raises(LeaseLost):
            await lane.run(refuse)
        kept = await lane.run(_connection_id)
        with pytest.raises(KeyError):
            await lane.run(crash)
        return first, kept, await lane.run(_connection_id)

    first, kept, after_crash = asyncio.run(call())
    assert kept == first and after_crash != first
