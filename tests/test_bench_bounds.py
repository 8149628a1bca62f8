"""The dispatch benchmark's bounds: the makespan that arrivals, slots and a per-job post cost allow,
and the machine's CPU it reports beside them."""

import os

import pytest

from bench.dispatch import Burst, MachineCpu, list_makespan


def test_a_burst_that_arrives_at_once_is_bounded_by_the_busiest_slot():
    # 300 jobs on 16 slots: twelve slots run 19 jobs, so 19 judge times, not 300 / 16.
    assert list_makespan([0.0] * 300, 16, 0.2) == pytest.approx(19 * 0.2)


def test_jobs_arriving_slower_than_slots_free_up_end_one_judge_time_after_the_last_arrival():
    arrivals = [i * 0.5 for i in range(10)]
    assert list_makespan(arrivals, 4, 0.2) == pytest.approx(4.5 + 0.2)


def test_a_job_waits_for_the_first_slot_to_free_up():
    # Two slots, three jobs at once: the third starts when the first slot is free.
    assert list_makespan([0.0, 0.0, 0.0], 2, 1.0) == pytest.approx(2.0)
    assert list_makespan([0.0, 0.1, 0.2], 2, 1.0) == pytest.approx(2.0)


def test_a_result_post_cost_lengthens_every_cycle_of_the_busiest_slot():
    burst = Burst(makespan=4.0, slots=16, judge_seconds=0.2, server_cpu_per_job=0.0, fill=0.0,
                  arrivals=[0.0] * 300, result_posts=[])
    assert burst.ideal == pytest.approx(3.75)
    assert burst.bound() == pytest.approx(3.8 / 3.75)
    # Nineteen cycles of 200 ms + 10 ms on the busiest slots.
    assert burst.bound(0.010) == pytest.approx(19 * 0.21 / 3.75)


def _stat(user, nice, system, idle, iowait, irq, softirq, steal):
    tick = os.sysconf("SC_CLK_TCK")
    ticks = [round(v * tick) for v in (user, nice, system, idle, iowait, irq, softirq, steal)]
    # guest and guest_nice are already counted in user and nice
    return "cpu  " + " ".join(map(str, ticks)) + " 7 0\n"


def test_the_machine_cpu_counts_stolen_time_apart_from_busy_and_idle():
    before = MachineCpu.parse(_stat(10, 1, 4, 50, 2, 0, 1, 3))
    after = MachineCpu.parse(_stat(16, 1, 6, 52, 3, 0, 2, 5))
    during = after - before
    assert (during.busy, during.idle, during.stolen) == pytest.approx((9, 3, 2))
    assert during.share(during.stolen) == pytest.approx(2 / 14)


def test_the_machine_line_sets_the_work_against_what_the_cores_offer_in_the_target_makespan():
    burst = Burst(makespan=4.0, slots=16, judge_seconds=0.2, server_cpu_per_job=0.0, fill=0.0,
                  arrivals=[0.0] * 300, result_posts=[], machine=MachineCpu(busy=6.0, idle=1.5, stolen=0.5))
    line = burst.machine_during(target_makespan=4.0)
    cores = os.cpu_count()
    assert "75 % busy" in line and "6 % stolen" in line
    assert "20.0 ms a job" in line
    assert f"of the {cores * 4.0:.2f} that {cores} cores offer" in line
    assert f"{6.0 / (cores * 4.0):.2f} of them" in line


def test_slot_time_splits_the_slots_time_into_judging_posts_and_no_job():
    # 16 slots for 4.0 s: 64 slot-s; 300 jobs of 0.2 s judge 60; posts took 3.0 in all.
    line = Burst(makespan=4.0, slots=16, judge_seconds=0.2, server_cpu_per_job=0.0, fill=0.0,
                 arrivals=[0.0] * 300, result_posts=[0.01] * 300).slot_time()
    assert "64.0 slot-s: judging 60.0, result posts 3.0" in line
    assert "no job to run 1.0" in line
    assert "p50 10.0 ms" in line and "mean 10.0 ms" in line


def test_the_simulated_slots_wake_at_their_cases_ends_never_before_and_in_order():
    import asyncio
    import time

    from bench.acceptance import Waker

    async def run():
        loop = asyncio.get_running_loop()
        waker = Waker(loop)
        waker.start()
        woke = {}

        async def sleeper(name, after):
            due = time.monotonic() + after
            await waker.until(due)
            woke[name] = (due, time.monotonic())

        try:
            # The later one first, so that the earlier one must cut in ahead of the wait under way.
            later = asyncio.create_task(sleeper("later", 1.0))
            await asyncio.sleep(0)
            await asyncio.gather(sleeper("earlier", 0.01), later, sleeper("now", 0.0))
        finally:
            waker.stop()
        return woke

    woke = asyncio.run(run())
    assert sorted(woke, key=lambda name: woke[name][1]) == ["now", "earlier", "later"]
    assert all(at >= due for due, at in woke.values()), woke
    # Not held back behind the later one's wait.
    assert woke["earlier"][1] < woke["later"][0]
