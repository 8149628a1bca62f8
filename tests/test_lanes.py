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
