"""The reaper racing a late result on MariaDB: exactly one of them takes effect."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from judging.models import JobState, JudgeJob, SettlementEvent
from judging.locking import lock_jobs
from judging.services.leases import RenewItem, jobs_reap_expired, lease_renew
from kece.errors import LeaseLost
from tests.concurrency import lock_waits, raise_first_error, run_concurrently, wait_until
from tests.factories import UserFactory, make_node, make_problem
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("attempts_before", [0, 2], ids=["requeue", "final-failure"])
def test_reaper_and_late_result_never_both_win(attempts_before):
    student = UserFactory()
    problem = make_problem(languages=("python",))
    node, identity = make_node(pool="python", max_slots=1)
    outcomes = {"settle": 0, "reaper": 0}
    for round_number in range(25):
        submission = submit(student, problem)
        JudgeJob.objects.filter(submission_id=submission.pk).update(attempts=attempts_before)
        now = timezone.now()
        [job] = claim(identity, now=now)
        # The node's clock says "just in time", the reaper's says "expired".
        settle_at = job.lease_until - timedelta(milliseconds=1)
        reap_at = job.lease_until

        # Alternate a small head start so that each side wins some rounds.
        settle_delay, reap_delay = (0.0, 0.003) if round_number % 2 else (0.003, 0.0)
        settled, reaped = run_concurrently([
            lambda: time.sleep(settle_delay) or settle(identity, judged(job), now=settle_at),
            lambda: time.sleep(reap_delay) or jobs_reap_expired(now=reap_at),
        ])
        job.refresh_from_db()
        submission.refresh_from_db()
        reaper_won = job.pk in (reaped.requeued + reaped.failed)
        settle_won = settled == "settled"
        assert reaper_won != settle_won, (settled, reaped, job.state)
        if settle_won:
            assert job.state == JobState.COMPLETED and submission.verdict == "AC"
        else:
            assert isinstance(settled, LeaseLost)
            assert job.state == (JobState.QUEUED if attempts_before == 0 else JobState.FAILED)
            assert submission.verdict is None
            if job.state == JobState.QUEUED:
                JudgeJob.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)  # out of the next round's way
        outcomes["settle" if settle_won else "reaper"] += 1
    # Each (job, event type) at most once, and only for jobs that reached a terminal state.
    assert SettlementEvent.objects.count() == JudgeJob.objects.filter(
        state__in=[JobState.COMPLETED, JobState.FAILED]).count()
    print("race winners:", outcomes)


def _result(identity, job, now):
    try:
        return settle(identity, judged(job), now=now)
    except LeaseLost as error:
        return error.code


def _renewal(identity, job, now):
    [answer] = lease_renew(identity=identity, items=[RenewItem(job.pk, job.lease_epoch)], now=now)
    return "renewed" if answer["ok"] else answer["error"]


@pytest.mark.parametrize("call", [_result, _renewal], ids=["result", "renew"])
def test_a_call_that_waited_on_a_lock_past_its_lease_is_refused_as_its_retry_is(call):
    """A result (or renew) that arrived while its lease was live, then waited for a row
    lock (or a stalled link) until the lease had ended, is refused like the retry that
    came after it: the agent is never told `lease_lost` for a result that took effect."""
    student = UserFactory()
    problem = make_problem(languages=("python",))
    node, identity = make_node(pool="python", max_slots=1)
    submission = submit(student, problem)
    [job] = claim(identity)
    arrived = timezone.now()
    ends = arrived + timedelta(milliseconds=1)
    JudgeJob.objects.filter(pk=job.pk).update(lease_until=ends)
    locked, release = threading.Event(), threading.Event()

    def holder():  # another transaction holding the job's row
        with transaction.atomic():
            lock_jobs([job.pk])
            locked.set()
            assert release.wait(60)

    def late_call():
        assert locked.wait(60)
        return call(identity, job, arrived)

    def lease_ends_while_it_waits():
        assert locked.wait(60)
        wait_until(lambda: lock_waits() == 1, timeout=60, message="the late call waits for the job's lock")
        wait_until(lambda: timezone.now() > ends, timeout=60, message="the lease has ended")
        release.set()

    results = run_concurrently([holder, late_call, lease_ends_while_it_waits])
    raise_first_error(results)
    assert results[1] == "lease_lost"
    assert call(identity, job, timezone.now()) == "lease_lost"  # the retry
    job.refresh_from_db()
    submission.refresh_from_db()
    assert job.state == JobState.RUNNING and job.lease_until == ends and submission.verdict is None
    assert job.pk in jobs_reap_expired(now=timezone.now()).requeued
    assert call(identity, job, timezone.now()) == "lease_lost"
    assert not SettlementEvent.objects.filter(job=job).exists()
