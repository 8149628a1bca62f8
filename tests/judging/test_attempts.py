"""Each attempt on record: every lease that ends without settling its job leaves a row of its
own (a reclaim, a release, an infrastructure failure, a session or revoke that took it, a
cancellation), never changed; the submission's page and the admin API show the history."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from judging.models import AttemptOutcome, JobAttempt, JudgeJob
from judging.services.leases import jobs_reap_expired, release_node_leases
from judging.services.rejudge import submission_delete, submission_rejudge
from nodes.models import JudgeNode
from tests.api.helpers import ADMIN, error_of, make_admin, session_client, token_client
from tests.factories import HostGroupFactory, UserFactory, make_node
from tests.judging.helpers import claim, infra_error, judged, released, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]


@pytest.fixture
def pair(db, settings):
    settings.KECE_QUARANTINE_INFRA_ERRORS = 1000
    group = HostGroupFactory(total_slots=8)
    return make_node(pool="python", name="first", host_group=group), make_node(pool="python", name="second",
                                                                               host_group=group)


def _due_again(job):
    JudgeJob.objects.filter(pk=job.pk).update(available_at=timezone.now(), claim_key=timezone.now(),
                                              avoid_node_id=None)


def _rows(job):
    return list(JobAttempt.objects.filter(job_id=job.pk).order_by("lease_epoch").values_list(
        "lease_epoch", "node_id", "outcome", "error"))


def test_a_reclaim_a_release_and_an_infra_error_each_leave_a_row_and_the_settling_lease_none(problem, pair):
    (first, first_id), (second, second_id) = pair
    submission = submit(UserFactory(), problem)
    [job] = claim(first_id)
    later = job.lease_until
    jobs_reap_expired(now=later)  # the first node went silent
    [job] = claim(second_id, now=later)
    assert settle(second_id, released(job), now=later) == "requeued"
    [job] = claim(first_id, now=later)
    settle(first_id, infra_error(job, error="sandbox_crashed"), now=later)
    _due_again(job)
    [job] = claim(second_id, now=later + timedelta(minutes=5))
    assert settle(second_id, judged(job), now=later + timedelta(minutes=5)) == "settled"
    assert _rows(job) == [(1, first.pk, AttemptOutcome.REQUEUED, "lease_expired"),
                          (2, second.pk, AttemptOutcome.REQUEUED, "released"),
                          (3, first.pk, AttemptOutcome.REQUEUED, "sandbox_crashed")]
    attempt = JobAttempt.objects.get(job_id=job.pk, lease_epoch=1)
    assert attempt.claimed_at is not None and attempt.ended_at >= attempt.claimed_at
    assert submission.pk


def test_the_last_allowed_attempt_leaves_a_failed_row(problem, pair, settings):
    settings.KECE_MAX_ATTEMPTS = 2
    (first, first_id), _ = pair
    submit(UserFactory(), problem)
    for _ in range(2):
        [job] = claim(first_id)
        settle(first_id, infra_error(job, error="artifact_missing"))
        _due_again(job)
    assert [outcome for _e, _n, outcome, _r in _rows(job)] == [AttemptOutcome.REQUEUED, AttemptOutcome.FAILED]


def test_a_new_session_a_rejudge_and_a_deletion_each_leave_theirs(problem, pair):
    (first, first_id), _ = pair
    one, two, three = (submit(UserFactory(), problem) for _ in range(3))
    jobs = claim(first_id, free_slots=3)
    by_submission = {job.submission_id: job for job in jobs}
    with transaction.atomic():
        release_node_leases(JudgeNode.objects.select_for_update().get(pk=first.pk), now=timezone.now(),
                            reason="session_superseded")
    assert _rows(by_submission[one.pk]) == [(1, first.pk, AttemptOutcome.REQUEUED, "session_superseded")]

    jobs = {job.submission_id: job for job in claim(first_id, free_slots=3)}
    submission_rejudge(submission_type="ALGO", submission_id=two.pk, now=timezone.now())
    submission_delete(submission_type="ALGO", submission_id=three.pk, now=timezone.now())
    assert _rows(jobs[two.pk])[-1] == (2, first.pk, AttemptOutcome.CANCELLED, "superseded")
    assert _rows(jobs[three.pk])[-1] == (2, first.pk, AttemptOutcome.CANCELLED, "deleted")


def test_a_job_cancelled_while_queued_attempted_nothing(problem):
    submission = submit(UserFactory(), problem)
    submission_delete(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    assert JobAttempt.objects.count() == 0


def test_a_lease_ends_once(problem, pair):
    (_first, first_id), _ = pair
    submit(UserFactory(), problem)
    [job] = claim(first_id)
    jobs_reap_expired(now=job.lease_until)
    with pytest.raises(IntegrityError), transaction.atomic():
        JobAttempt.objects.create(job_id=job.pk, lease_epoch=1, ended_at=timezone.now(),
                                  outcome=AttemptOutcome.REQUEUED)


def _reclaimed_and_judged(problem, pair):
    (first, first_id), (second, second_id) = pair
    owner = UserFactory()
    submission = submit(owner, problem)
    [job] = claim(first_id)
    later = job.lease_until
    jobs_reap_expired(now=later)
    [job] = claim(second_id, now=later)
    assert settle(second_id, judged(job), now=later) == "settled"
    return owner, submission, first, second


def test_the_admin_api_shows_each_generation_and_lease(problem, pair):
    owner, submission, first, second = _reclaimed_and_judged(problem, pair)
    submission_rejudge(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    answer = token_client(make_admin()).get(ADMIN + f"submissions/ALGO/{submission.pk}")
    assert answer.status_code == 200
    body = answer.json()
    assert (body["submissionId"], body["userId"]) == (submission.pk, owner.pk)
    [one, two] = body["jobs"]
    assert [(a["leaseEpoch"], a["nodeId"], a["outcome"], a["error"]) for a in one["attempts"]] == [
        (1, first.pk, "REQUEUED", "lease_expired"), (2, second.pk, "SETTLED", "")]
    assert one["attempts"][0]["endedAt"].endswith("Z")
    assert (two["generation"], two["state"], two["attempts"]) == (2, "QUEUED", [])
    assert error_of(token_client(owner).get(ADMIN + f"submissions/ALGO/{submission.pk}")) == (403, "forbidden")
    assert error_of(token_client(make_admin("other")).get(ADMIN + "submissions/ALGO/999999")) == (404, "not_found")


def test_the_owner_sees_the_history_in_words_and_only_admins_see_the_nodes(problem, pair):
    owner, submission, first, _second = _reclaimed_and_judged(problem, pair)
    page = session_client(owner).get(f"/submissions/ALGO/{submission.pk}").content.decode()
    assert "Judging history" in page
    assert "Given back to the queue, judged again later: the judge stopped answering" in page
    assert "Judged: this is the result" in page
    assert f"/admin/judgers/{first.pk}" not in page, "a student is not shown the judges"
    admin_page = session_client(make_admin()).get(f"/submissions/ALGO/{submission.pk}").content.decode()
    assert f"/admin/judgers/{first.pk}" in admin_page


def test_a_restarted_judge_is_not_called_a_fault_in_the_students_history():
    """An agent that started again (a restart, an upgrade) gives its leases back: the student
    is told so, not that the judge failed; an agent's own error stays a fault, by its code."""
    from judging.display import history_rows

    lease = {"leaseEpoch": 1, "nodeId": 1, "outcome": "REQUEUED", "endedAt": None}
    history = [{"generation": 1, "attempts": [{**lease, "error": "session_replaced"},
                                              {**lease, "error": "sandbox_failed"}]}]
    restarted, failed = history_rows(history)
    assert restarted["reason"] == "the judge restarted and gave its work back"
    assert failed["reason"] == "a fault on the judge (sandbox_failed)"
