"""The dispatch benchmark's cost-free bound: the makespan that arrivals and slots allow."""

import pytest

from bench.dispatch import dispatch_free_makespan


def test_a_burst_that_arrives_at_once_is_bounded_by_the_busiest_slot():
    # 300 jobs on 16 slots: twelve slots run 19 jobs, so 19 judge times, not 300 / 16.
    assert dispatch_free_makespan([0.0] * 300, 16, 0.2) == pytest.approx(19 * 0.2)


def test_jobs_arriving_slower_than_slots_free_up_end_one_judge_time_after_the_last_arrival():
    arrivals = [i * 0.5 for i in range(10)]
    assert dispatch_free_makespan(arrivals, 4, 0.2) == pytest.approx(4.5 + 0.2)


def test_a_job_waits_for_the_first_slot_to_free_up():
    # Two slots, three jobs at once: the third starts when the first slot is free.
    assert dispatch_free_makespan([0.0, 0.0, 0.0], 2, 1.0) == pytest.approx(2.0)
    assert dispatch_free_makespan([0.0, 0.1, 0.2], 2, 1.0) == pytest.approx(2.0)
