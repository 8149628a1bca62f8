from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import JobState, JudgeJob, SettlementEvent, Submission
from judging.services.leases import RenewItem, jobs_reap_expired, lease_renew
from judging.services.rejudge import submission_delete, submission_rejudge
from kece.errors import Invalid, LeaseLost, ResultConflict, SessionSuperseded, Superseded
from nodes.services import AgentReport, node_session_open
from tests.factories import identity_of
from tests.judging.helpers import claim, infra_error, judged, released, settle, submit

pytestmark = pytest.mark.django_db


def test_it_judges_a_submission_end_to_end(student, problem, node_a):
    node, identity = node_a
    submission = submit(student, problem)
    [job] = claim(identity)
    assert job.state == JobState.RUNNING and job.lease_epoch == 1 and job.attempts == 1

    assert settle(identity, judged(job, verdict="AC")) == "settled"

    submission.refresh_from_db()
    job.refresh_from_db()
    assert (submission.verdict, submission.score, submission.judged_generation) == ("AC", 100, 1)
    assert job.state == JobState.COMPLETED and job.result["verdict"] == "AC"
    assert set(SettlementEvent.objects.filter(job=job).values_list("event_type", flat=True)) == {"problem_stats"}


def test_the_same_result_again_is_a_duplicate_and_a_different_one_a_conflict(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    [job] = claim(identity)
    assert settle(identity, judged(job, verdict="WA")) == "settled"
    assert settle(identity, judged(job, verdict="WA")) == "duplicate"
    with pytest.raises(ResultConflict):
        settle(identity, judged(job, verdict="AC"))
    assert Submission.objects.get().verdict == "WA"
    assert SettlementEvent.objects.count() == 1


def test_it_refuses_a_stale_lease(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    [job] = claim(identity)
    with pytest.raises(LeaseLost):
        settle(identity, judged(job, lease_epoch=job.lease_epoch + 1))
    with pytest.raises(LeaseLost):
        settle(identity, judged(job, lease_epoch=job.lease_epoch - 1))


def test_it_refuses_another_nodes_result(student, problem, node_a, node_b):
    _, identity_a = node_a
    _, identity_b = node_b
    submit(student, problem)
    [job] = claim(identity_a)
    with pytest.raises(LeaseLost):
        settle(identity_b, judged(job))


def test_it_refuses_an_expired_lease_even_before_the_reaper_runs(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    now = timezone.now()
    [job] = claim(identity, now=now)
    later = job.lease_until + timedelta(milliseconds=1)
    with pytest.raises(LeaseLost):
        settle(identity, judged(job), now=later)
    [answer] = lease_renew(identity=identity, items=[RenewItem(job.pk, job.lease_epoch)], now=later)
    assert answer == {"jobId": job.pk, "ok": False, "error": "lease_lost"}


@pytest.mark.parametrize("stale_first", [True, False])
def test_a_renew_batch_answers_each_item_even_when_a_job_repeats(student, problem, node_a, stale_first):
    node, identity = node_a
    submit(student, problem)
    now = timezone.now()
    [job] = claim(identity, now=now)
    live, stale = RenewItem(job.pk, job.lease_epoch), RenewItem(job.pk, job.lease_epoch - 1)
    items = [stale, live] if stale_first else [live, stale]
    later = now + timedelta(seconds=10)

    answers = lease_renew(identity=identity, items=items, now=later)

    by_epoch = dict(zip([i.lease_epoch for i in items], answers))
    assert by_epoch[job.lease_epoch]["ok"] is True
    assert by_epoch[job.lease_epoch - 1] == {"jobId": job.pk, "ok": False, "error": "lease_lost"}
    job.refresh_from_db()
    assert job.lease_until > now + timedelta(seconds=55)  # the live lease was renewed from `later`


def test_a_new_session_releases_the_old_sessions_leases_at_once(student, problem, node_a):
    node, old_identity = node_a
    submit(student, problem)
    [job] = claim(old_identity)
    node_session_open(node_id=node.pk, credential_digest_value=node.credential_digest,
                      report=AgentReport("test", "python-r1", 4), now=timezone.now())
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.node_id is None and job.available_at <= timezone.now()
    with pytest.raises(SessionSuperseded):
        settle(old_identity, judged(job))
    with pytest.raises(SessionSuperseded):
        lease_renew(identity=old_identity, items=[RenewItem(job.pk, job.lease_epoch)], now=timezone.now())
    [again] = claim(identity_of(node))
    assert again.pk == job.pk and again.lease_epoch == job.lease_epoch + 1


def test_a_rejudged_jobs_late_result_is_refused(student, problem, node_a, node_b):
    node, identity = node_a
    submission = submit(student, problem)
    [old] = claim(identity)
    new = submission_rejudge(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    assert new.generation == 2
    # Only the lease holder learns that its job was replaced.
    with pytest.raises(LeaseLost):
        settle(node_b[1], judged(old))
    with pytest.raises(Superseded):
        settle(identity, judged(old))
    [answer] = lease_renew(identity=identity, items=[RenewItem(old.pk, old.lease_epoch)], now=timezone.now())
    assert answer["error"] == "cancelled"
    [job] = claim(identity)
    assert job.pk == new.pk
    settle(identity, judged(job, verdict="WA"))
    submission.refresh_from_db()
    assert (submission.verdict, submission.judged_generation) == ("WA", 2)


def test_a_deleted_submissions_job_is_cancelled_and_its_result_refused(student, problem, node_a):
    node, identity = node_a
    submission = submit(student, problem)
    [job] = claim(identity)
    submission_delete(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    with pytest.raises(Superseded):
        settle(identity, judged(job))
    assert JudgeJob.objects.get().state == JobState.CANCELLED


def test_the_third_infrastructure_failure_fails_the_job(student, problem, node_a):
    node, identity = node_a
    submission = submit(student, problem)
    now = timezone.now()
    statuses = []
    for _ in range(3):
        [job] = claim(identity, now=now)
        statuses.append(settle(identity, infra_error(job), now=now))
        now = now + timedelta(minutes=5)  # past any backoff
    assert statuses == ["requeued", "requeued", "failed"]
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.attempts == 3
    submission.refresh_from_db()
    assert submission.verdict is None and submission.judged_generation == 1
    assert claim(identity, now=now) == []


def test_an_infrastructure_retry_waits_for_its_backoff(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    now = timezone.now()
    [job] = claim(identity, now=now)
    settle(identity, infra_error(job), now=now)
    assert claim(identity, now=now) == []
    job.refresh_from_db()
    assert claim(identity, now=job.available_at)[0].pk == job.pk


def test_released_jobs_are_claimable_at_once_and_the_attempt_is_refunded(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    now = timezone.now()
    [job] = claim(identity, now=now)
    assert settle(identity, released(job), now=now) == "requeued"
    assert settle(identity, released(job), now=now) == "duplicate"
    [again] = claim(identity, now=now)
    assert again.pk == job.pk and again.attempts == 1 and again.lease_epoch == 2


def test_the_reaper_requeues_an_expired_lease_and_fails_it_at_the_limit(student, problem, node_a):
    node, identity = node_a
    submission = submit(student, problem)
    now = timezone.now()
    for attempt in (1, 2, 3):
        [job] = claim(identity, now=now)
        now = job.lease_until
        report = jobs_reap_expired(now=now)
        assert (report.requeued, report.failed) == (([job.pk], []) if attempt < 3 else ([], [job.pk]))
        now += timedelta(minutes=5)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.error == "lease_expired"
    submission.refresh_from_db()
    assert submission.judged_generation == 1 and submission.verdict is None


def test_judged_results_must_add_up(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    [job] = claim(identity)
    with pytest.raises(Invalid):
        settle(identity, judged(job, verdict="AC", score=42))
    assert JudgeJob.objects.get().state == JobState.RUNNING


@pytest.mark.parametrize("language", ["mysql", "cobol", "Python", ""])
def test_an_unsupported_language_is_refused_and_nothing_is_written(student, problem, language):
    from judging.models import Submission

    with pytest.raises(Invalid) as refused:
        submit(student, problem, language=language)
    assert "language" in (refused.value.fields or {})
    assert not Submission.objects.exists() and not JudgeJob.objects.exists()


def test_a_sql_problem_routes_to_the_mysql_pool_and_db_submission(student):
    from judging.models import DbSubmission
    from tests.factories import make_problem

    sql_problem = make_problem(kind="SQL")
    submission = submit(student, sql_problem, language="mysql", code="SELECT 1;")
    assert isinstance(submission, DbSubmission)
    job = JudgeJob.objects.get(submission_type="SQL", submission_id=submission.pk)
    assert (job.pool, job.runtime_spec, job.snapshot["sql"]["dialect"]) == ("mysql", "mysql-r1", "mysql")
    with pytest.raises(Invalid):
        submit(student, sql_problem, language="python")


def test_a_stale_job_meta_hint_is_read_again_not_trusted(student, problem, node_a):
    from judging.services import job_meta

    _, identity = node_a
    other = submit(student, problem)
    submission = submit(student, problem)
    [job, _] = claim(identity, free_slots=2)
    if job.submission_id == other.pk:
        other, submission = submission, other
    # Say the hint points the job at another submission (as after a table was restored).
    job_meta.remember([JudgeJob(pk=job.pk, kind="JUDGE", submission_type="ALGO", submission_id=other.pk)])
    assert settle(identity, judged(job, verdict="WA")) == "settled"
    assert Submission.objects.get(pk=submission.pk).verdict == "WA"
    assert Submission.objects.get(pk=other.pk).verdict is None


def test_a_result_carrying_a_claim_takes_older_requeued_work_and_keeps_the_slots(student, problem, node_a):
    from judging.services.settle import job_settle_and_claim

    node, identity = node_a  # two slots
    submit(student, problem)
    submit(student, problem)
    submit(student, problem)
    first, second = claim(identity, free_slots=2)
    assert settle(identity, released(first)) == "requeued"  # the oldest job is queued again
    [third] = claim(identity)
    status, carried = job_settle_and_claim(identity=identity, request=judged(second), now=timezone.now(),
                                           free_slots=2)
    # The freed slot takes the older job back (a lower id than the one settled: SKIP
    # LOCKED never waits, so that order is safe); the other slot is still busy.
    assert status == "settled" and [j.pk for j in carried.jobs] == [first.pk]
    assert JudgeJob.objects.filter(node_id=node.pk, state=JobState.RUNNING).count() == 2
    assert third.pk != first.pk


def test_a_refused_result_leases_nothing_even_when_it_carries_a_claim(student, problem, node_a):
    from judging.services.settle import job_settle_and_claim

    node, identity = node_a
    submit(student, problem)
    submit(student, problem)
    [job] = claim(identity)
    assert settle(identity, judged(job)) == "settled"
    with pytest.raises(ResultConflict):
        job_settle_and_claim(identity=identity, request=judged(job, verdict="WA"), now=timezone.now(), free_slots=1)
    assert JudgeJob.objects.filter(state=JobState.RUNNING).count() == 0


def test_a_repeated_result_gets_back_the_jobs_its_lost_answer_held(student, problem, node_a):
    from judging.services.settle import job_settle_and_claim

    node, identity = node_a  # two slots
    for _ in range(3):
        submit(student, problem)
    [job] = claim(identity)
    status, carried = job_settle_and_claim(identity=identity, request=judged(job), now=timezone.now(), free_slots=1)
    [next_job] = carried.jobs
    # The answer never reached the node, which posts the same result again: the job that
    # answer leased comes back under the same lease, and nothing more is leased for the slot.
    status, again = job_settle_and_claim(identity=identity, request=judged(job), now=timezone.now(), free_slots=1)
    assert status == "duplicate"
    assert [(j.pk, j.lease_epoch) for j in again.jobs] == [(next_job.pk, next_job.lease_epoch)]
    assert list(JudgeJob.objects.filter(node_id=node.pk, state=JobState.RUNNING).values_list("pk", flat=True)) == [
        next_job.pk]

    # Once the node has renewed it, the node has it: a later repeat leases the slot anew.
    [renewed] = lease_renew(identity=identity, items=[RenewItem(next_job.pk, next_job.lease_epoch)],
                            now=timezone.now())
    assert renewed["ok"]
    status, later = job_settle_and_claim(identity=identity, request=judged(job), now=timezone.now(), free_slots=1)
    assert status == "duplicate" and [j.pk for j in later.jobs] != [next_job.pk]
    assert JudgeJob.objects.filter(node_id=node.pk, state=JobState.RUNNING).count() == 2


def test_a_repeated_result_does_not_send_again_what_the_node_no_longer_holds(student, problem, node_a):
    from judging.services.settle import job_settle_and_claim

    node, identity = node_a
    submit(student, problem)
    submit(student, problem)
    [job] = claim(identity)
    _, carried = job_settle_and_claim(identity=identity, request=judged(job), now=timezone.now(), free_slots=1)
    [next_job] = carried.jobs
    # Its lease ran out: a repeat must not hand out a lease that is no longer live.
    JudgeJob.objects.filter(pk=next_job.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    status, again = job_settle_and_claim(identity=identity, request=judged(job), now=timezone.now(), free_slots=1)
    assert status == "duplicate" and next_job.pk not in [j.pk for j in again.jobs]


def test_a_result_carrying_a_claim_never_gets_its_own_job_back(student, problem, node_a, settings):
    from judging.services.settle import job_settle_and_claim

    settings.KECE_RETRY_BACKOFF_MS = 0
    _, identity = node_a
    submit(student, problem)
    [job] = claim(identity)
    # Given back: nothing comes with it, the job waits for the next claim.
    status, carried = job_settle_and_claim(identity=identity, request=released(job), now=timezone.now(),
                                           free_slots=1)
    assert (status, carried.jobs) == ("requeued", [])
    [job] = claim(identity)
    # Failed for infrastructure with no backoff: due at once, but not to the node that just failed it.
    status, carried = job_settle_and_claim(identity=identity, request=infra_error(job), now=timezone.now(),
                                           free_slots=1)
    assert (status, carried.jobs) == ("requeued", [])
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.QUEUED


@pytest.mark.mariadb
def test_without_skip_locked_the_claim_waits_for_rows_instead_of_ignoring_locks(student, problem, node_a,
                                                                                monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _, identity = node_a
    submit(student, problem)
    monkeypatch.setattr(connection.features, "has_select_for_update_skip_locked", False)
    with CaptureQueriesContext(connection) as queries:
        [job] = claim(identity)
    [pick] = [q["sql"] for q in queries if "ORDER BY claim_key" in q["sql"]]
    assert pick.endswith("FOR UPDATE") and "SKIP LOCKED" not in pick
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.RUNNING
