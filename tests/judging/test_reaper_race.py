"""The reaper racing a late result on MariaDB: exactly one of them takes effect."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import JobState, JudgeJob, SettlementEvent
from judging.services.leases import jobs_reap_expired
from kece.errors import LeaseLost
from tests.concurrency import run_concurrently
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
