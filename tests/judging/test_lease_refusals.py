"""Every refusal of a renew and every re-check of the reaper and of a session's release."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import JobState, JudgeJob, Submission
from judging.services.leases import RenewItem, jobs_reap_expired, lease_renew, release_node_leases
from kece.periodic import reap_step
from judging.services.rejudge import submission_delete
from judging.timing import lease_ttl
from nodes.checks import node_check_start
from nodes.models import CheckStatus, JudgeNode
from tests.factories import make_node, make_problem
from tests.judging.helpers import claim, judged, settle, stale_identities, submit
from tests.nodes.test_checks import _diagnostic_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(student, problem, node_a):
    node, identity = node_a
    submission = submit(student, problem)
    now = timezone.now()
    [job] = claim(identity, now=now)
    return node, identity, submission, job, now


def _renew(identity, *items, now):
    return lease_renew(identity=identity, items=list(items), now=now)


def _lost(job_id, error="lease_lost"):
    return {"jobId": job_id, "ok": False, "error": error}


# --- renew -------------------------------------------------------------------------------------------

def test_a_renew_restores_the_full_lease_and_records_progress(running):
    _, identity, _, job, now = running
    later = now + timedelta(seconds=20)
    [answer] = _renew(identity, RenewItem(job.pk, job.lease_epoch, "JUDGING", 2), now=later)
    assert answer == {"jobId": job.pk, "ok": True, "leaseRemainingMs": int(lease_ttl().total_seconds() * 1000)}
    row = JudgeJob.objects.get(pk=job.pk)
    assert (row.lease_until, row.progress_phase, row.progress_testcase) == (later + lease_ttl(), "JUDGING", 2)


def test_an_unknown_phase_renews_the_lease_but_records_no_progress(running):
    _, identity, _, job, now = running
    _renew(identity, RenewItem(job.pk, job.lease_epoch, "COMPILING", None), now=now)
    [answer] = _renew(identity, RenewItem(job.pk, job.lease_epoch, "DANCING", 7), now=now)
    assert answer["ok"]
    row = JudgeJob.objects.get(pk=job.pk)
    assert (row.progress_phase, row.progress_testcase) == ("COMPILING", None)


@stale_identities()
def test_a_renew_is_refused_for_an_identity_the_node_row_no_longer_has(running, change, error):
    node, identity, _, job, now = running
    JudgeNode.objects.filter(pk=node.pk).update(**change)
    with pytest.raises(error):
        _renew(identity, RenewItem(job.pk, job.lease_epoch), now=now)
    assert JudgeJob.objects.get(pk=job.pk).lease_until == job.lease_until


def test_a_lease_is_renewed_until_its_deadline_and_not_at_it(running):
    _, identity, _, job, now = running
    assert _renew(identity, RenewItem(job.pk, job.lease_epoch), now=job.lease_until) == [_lost(job.pk)]
    assert JudgeJob.objects.get(pk=job.pk).lease_until == job.lease_until
    just_before = job.lease_until - timedelta(microseconds=1)
    assert _renew(identity, RenewItem(job.pk, job.lease_epoch), now=just_before)[0]["ok"]


@pytest.mark.parametrize("change", [
    {"state": JobState.QUEUED}, {"session_epoch": 0}, {"lease_until": None},
], ids=["not-running", "earlier-session", "no-deadline"])
def test_a_lease_that_is_not_live_is_not_renewed(running, change):
    _, identity, _, job, now = running
    JudgeJob.objects.filter(pk=job.pk).update(**change)
    assert _renew(identity, RenewItem(job.pk, job.lease_epoch), now=now) == [_lost(job.pk)]


def test_another_nodes_lease_and_an_unknown_job_are_lost(running, node_b):
    _, identity, _, job, now = running
    assert _renew(node_b[1], RenewItem(job.pk, job.lease_epoch), now=now) == [_lost(job.pk)]
    assert _renew(identity, RenewItem(job.pk + 1000, 1), now=now) == [_lost(job.pk + 1000)]


def test_only_the_holder_of_the_latest_lease_hears_that_its_job_was_cancelled(running, node_b):
    _, identity, submission, job, now = running
    submission_delete(submission_type="ALGO", submission_id=submission.pk, now=now)
    assert _renew(identity, RenewItem(job.pk, job.lease_epoch), now=now) == [_lost(job.pk, "cancelled")]
    assert _renew(identity, RenewItem(job.pk, job.lease_epoch - 1), now=now) == [_lost(job.pk)]
    assert _renew(node_b[1], RenewItem(job.pk, job.lease_epoch), now=now) == [_lost(job.pk)]


def test_a_renew_ends_what_a_repeated_result_would_send_again(running, student, problem):
    from judging.services.settle import job_settle_and_claim

    _, identity, _, job, _ = running
    submit(student, problem)
    now = timezone.now()
    _, carried = job_settle_and_claim(identity=identity, request=judged(job), now=now, free_slots=1)
    [next_job] = carried.jobs
    assert JudgeJob.objects.get(pk=next_job.pk).carried_by_job_id == job.pk
    _renew(identity, RenewItem(next_job.pk, next_job.lease_epoch), now=now)
    assert JudgeJob.objects.get(pk=next_job.pk).carried_by_job_id is None


# --- the reaper ------------------------------------------------------------------------------------------

def test_the_reaper_takes_a_lease_at_its_deadline_and_not_before(running):
    _, _, _, job, _ = running
    report = jobs_reap_expired(now=job.lease_until - timedelta(microseconds=1))
    assert (report.requeued, report.failed) == ([], [])
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.RUNNING
    report = jobs_reap_expired(now=job.lease_until)
    assert report.requeued == [job.pk]
    row = JudgeJob.objects.get(pk=job.pk)
    assert (row.state, row.node_id, row.error) == (JobState.QUEUED, None, "lease_expired")
    assert row.available_at == job.lease_until, "a silent node's job is claimable at once, with no backoff"


def test_the_reaper_takes_at_most_a_batch_oldest_deadline_first(student, problem):
    _, identity = make_node(pool="python", max_slots=3)
    for _ in range(3):
        submit(student, problem)
    now = timezone.now()
    jobs = claim(identity, free_slots=3, now=now)
    for offset, job in zip((3, 1, 2), jobs):
        JudgeJob.objects.filter(pk=job.pk).update(lease_until=now - timedelta(seconds=offset))
    report = jobs_reap_expired(now=now, batch=2)
    assert report.requeued == [jobs[0].pk, jobs[2].pk]


def test_a_silent_nodes_job_goes_to_the_standby_node_at_the_first_reap(student, problem):
    """Takeover: the lease, then one reaper tick, then the next claim of an idle node."""
    _, silent = make_node(pool="python", name="silent")
    _, standby = make_node(pool="python", name="standby")
    submit(student, problem)
    now = timezone.now()
    [job] = claim(silent, now=now)
    assert claim(standby, now=job.lease_until) == [], "a live lease is nobody else's"
    reap_step(now=job.lease_until)
    [taken] = claim(standby, now=job.lease_until)
    assert (taken.pk, taken.lease_epoch) == (job.pk, job.lease_epoch + 1)


def test_one_reaper_tick_clears_a_mass_expiry_in_batches(student, problem):
    _, identity = make_node(pool="python", max_slots=7)
    for _ in range(7):
        submit(student, problem)
    now = timezone.now()
    jobs = claim(identity, free_slots=7, now=now)
    report = reap_step(now=max(j.lease_until for j in jobs), batch=3)
    assert sorted(report.requeued) == sorted(j.pk for j in jobs) and report.examined == 7
    assert set(JudgeJob.objects.values_list("state", flat=True)) == {JobState.QUEUED}


def test_the_reaper_leaves_a_lease_that_was_renewed_or_settled_meanwhile(running, monkeypatch):
    """Candidates are read without locks: each is re-checked under its lock."""
    from judging.services import leases

    _, identity, _, job, now = running
    at_deadline = job.lease_until

    def renewed_in_between(candidates, *, now):
        JudgeJob.objects.filter(pk__in=[c["id"] for c in candidates]).update(
            lease_until=at_deadline + timedelta(seconds=30))
        return original(candidates, now=now)

    original = leases._requeue_expired
    monkeypatch.setattr(leases, "_requeue_expired", renewed_in_between)
    assert jobs_reap_expired(now=at_deadline).requeued == []
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.RUNNING


@pytest.mark.parametrize("change", [
    {"lease_epoch": 99}, {"state": JobState.COMPLETED}, {"lease_until": timezone.now() + timedelta(hours=1)},
], ids=["claimed-again", "settled", "renewed"])
def test_the_reaper_fails_nothing_that_changed_after_it_looked(running, monkeypatch, settings, change):
    from judging.services import leases

    settings.KECE_MAX_ATTEMPTS = 1
    _, _, submission, job, _ = running

    def changed_in_between(candidate, *, now):
        JudgeJob.objects.filter(pk=candidate["id"]).update(**change)
        return original(candidate, now=now)

    original = leases._end_last_attempt
    monkeypatch.setattr(leases, "_end_last_attempt", changed_in_between)
    assert jobs_reap_expired(now=job.lease_until).failed == []
    assert JudgeJob.objects.get(pk=job.pk).state != JobState.FAILED


def test_a_last_attempt_given_back_after_the_reaper_looked_goes_round_again(running, monkeypatch, settings):
    """A node's run of infrastructure errors ends in quarantine and refunds the attempts it
    burned, this job's among them, between the reaper's read and its lock: the user must not
    see SYSTEM_ERROR for an attempt that no longer counts."""
    from judging.services import leases

    settings.KECE_MAX_ATTEMPTS = 1
    _, _, submission, job, _ = running

    def refunded_in_between(candidate, *, now):
        JudgeJob.objects.filter(pk=candidate["id"]).update(attempts=0)
        return original(candidate, now=now)

    original = leases._end_last_attempt
    monkeypatch.setattr(leases, "_end_last_attempt", refunded_in_between)
    report = jobs_reap_expired(now=job.lease_until)
    assert (report.requeued, report.failed) == ([job.pk], [])
    row = JudgeJob.objects.get(pk=job.pk)
    assert (row.state, row.error) == (JobState.QUEUED, "lease_expired")


def test_the_reaper_requeues_below_the_attempt_limit_and_fails_at_it(running, settings):
    _, _, submission, job, _ = running
    settings.KECE_MAX_ATTEMPTS = 2
    assert jobs_reap_expired(now=job.lease_until).requeued == [job.pk]
    # As if claimed again (the next lease) and gone silent again.
    JudgeJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, attempts=2, lease_until=job.lease_until,
                                              node_id=job.node_id, lease_epoch=job.lease_epoch + 1)
    report = jobs_reap_expired(now=job.lease_until)
    assert (report.requeued, report.failed) == ([], [job.pk])
    row = JudgeJob.objects.get(pk=job.pk)
    assert (row.state, row.error, row.error_message) == (
        JobState.FAILED, "lease_expired", "The lease expired on the last allowed attempt.")
    assert Submission.objects.get(pk=submission.pk).current_judge_job_id == job.pk


def test_an_expired_self_check_on_its_last_attempt_fails_the_nodes_check(settings):
    settings.KECE_MAX_ATTEMPTS = 1
    node, identity = make_node(pool="python", max_slots=20)
    _diagnostic_job(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    jobs = claim(identity, free_slots=20)
    assert sorted(jobs_reap_expired(now=max(j.lease_until for j in jobs)).failed) == sorted(j.pk for j in jobs)
    assert {JudgeJob.objects.get(pk=j.pk).state for j in jobs} == {JobState.FAILED}
    assert JudgeNode.objects.get(pk=node.pk).self_check_status == CheckStatus.FAILED


# --- a session's end releases its leases ---------------------------------------------------------------

def _release(node, now):
    from django.db import transaction

    from judging.locking import lock_node

    with transaction.atomic(durable=True):
        return release_node_leases(lock_node(node.pk), now=now, reason="session_replaced")


def test_a_release_gives_back_only_this_nodes_running_jobs(student, problem, node_a, node_b, caplog):
    caplog.set_level("INFO", logger="kece.jobs")
    node, identity = node_a
    for _ in range(3):
        submit(student, problem)
    now = timezone.now()
    mine, finished = claim(identity, free_slots=2, now=now)
    [theirs] = claim(node_b[1], now=now)
    settle(identity, judged(finished), now=now)

    assert _release(node, now) == 1

    # The line says which pool, node and submission: what an operator searches by.
    [requeued] = [r for r in caplog.records if r.getMessage() == "job requeued" and r.job == mine.pk]
    assert (requeued.pool, requeued.node, requeued.submission, requeued.reason) == \
        ("python", node.pk, f"ALGO:{mine.submission_id}", "session_replaced")
    states = dict(JudgeJob.objects.values_list("pk", "state"))
    assert states == {mine.pk: JobState.QUEUED, finished.pk: JobState.COMPLETED, theirs.pk: JobState.RUNNING}
    row = JudgeJob.objects.get(pk=mine.pk)
    assert (row.available_at, row.error, row.node_id) == (now, "session_replaced", None)


def test_a_release_is_counted_by_pool_and_reason_once_committed(student, problem, node_a,
                                                                 django_capture_on_commit_callbacks):
    """An agent that keeps restarting holding work costs each job an attempt while its
    heartbeats say it is alive: the count is what KeceNodeRestartsWithWork reads."""
    from kece import metrics

    def released():
        [family] = metrics.get().leases_released.collect()
        return sum(s.value for s in family.samples if s.name.endswith("_total")
                   and s.labels == {"pool": "python", "reason": "session_replaced"})

    node, identity = node_a
    for _ in range(2):
        submit(student, problem)
    now = timezone.now()
    claim(identity, free_slots=2, now=now)
    before = released()
    with django_capture_on_commit_callbacks(execute=True):
        assert _release(node, now) == 2
    assert released() - before == 2


def test_a_release_on_the_last_attempt_fails_the_job_and_its_submission_sees_it(student, settings):
    from judging.models import DbSubmission, SettlementEvent

    settings.KECE_MAX_ATTEMPTS = 1
    submission = submit(student, make_problem(kind="SQL"), language="mysql", code="SELECT 1;")
    sql_node, sql_identity = make_node(pool="mysql")
    [job] = claim(sql_identity)
    now = timezone.now()
    assert _release(sql_node, now) == 1
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.FAILED
    stored = DbSubmission.objects.get(pk=submission.pk)
    assert (stored.judged_generation, stored.judged_at, stored.verdict) == (1, now, None)
    assert SettlementEvent.objects.filter(job_id=job.pk).exists()


def test_a_release_gives_back_every_running_job_in_lock_order(student, problem):
    node, identity = make_node(pool="python", max_slots=6)
    for _ in range(6):
        submit(student, problem)
    now = timezone.now()
    claim(identity, free_slots=6, now=now)
    assert _release(node, now) == 6
    assert not JudgeJob.objects.filter(state=JobState.RUNNING).exists()


def test_a_release_of_a_node_with_nothing_running_changes_nothing(node_a):
    node, _ = node_a
    assert _release(node, timezone.now()) == 0


@pytest.mark.parametrize("in_between", ["requeued", "other-node"])
def test_a_release_leaves_a_job_that_changed_hands_in_between(running, node_b, monkeypatch, in_between, student,
                                                               problem):
    """The running jobs are read before they are locked (the reaper locks only the job);
    each is re-checked under its lock."""
    from judging.services import leases

    node, identity, _, job, now = running
    submit(student, problem)
    [other] = claim(identity)  # a higher id: the changed job is looked at first
    change = {"state": JobState.QUEUED} if in_between == "requeued" else {"node_id": node_b[0].pk}

    def changed_in_between(ids):
        JudgeJob.objects.filter(pk=job.pk).update(error="lease_expired", **change)
        return original(ids)

    original = leases.lock_jobs
    monkeypatch.setattr(leases, "lock_jobs", changed_in_between)
    assert _release(node, now) == 1
    assert JudgeJob.objects.get(pk=job.pk).error == "lease_expired"
    assert JudgeJob.objects.get(pk=other.pk).state == JobState.QUEUED


def _node_lock_of(queries, node):
    [sql] = [q["sql"] for q in queries if "FROM `judge_node`" in q["sql"] and f"WHERE `id` IN ({node.pk})" in q["sql"]]
    return sql


def test_renewals_share_the_node_lock(running):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    node, identity, _, job, now = running
    with CaptureQueriesContext(connection) as queries:
        _renew(identity, RenewItem(job.pk, job.lease_epoch), now=now)
    assert _node_lock_of(queries, node).endswith("LOCK IN SHARE MODE")


def test_an_expired_self_check_locks_its_node_before_failing_it(settings):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.KECE_MAX_ATTEMPTS = 1
    node, identity = make_node(pool="python")
    _diagnostic_job(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    [job] = claim(identity)
    with CaptureQueriesContext(connection) as queries:
        jobs_reap_expired(now=job.lease_until)
    assert _node_lock_of(queries, node).endswith("FOR UPDATE")


@pytest.mark.parametrize("service", ["renew", "reap-requeue", "reap-fail"])
def test_each_lease_service_is_a_transaction_of_its_own(running, settings, service):
    """Nested in a caller's transaction its locks would outlive it: refused."""
    from django.db import transaction

    _, identity, _, job, now = running
    settings.KECE_MAX_ATTEMPTS = 1 if service == "reap-fail" else 3
    with pytest.raises(RuntimeError, match="durable"):
        with transaction.atomic():
            if service == "renew":
                _renew(identity, RenewItem(job.pk, job.lease_epoch), now=now)
            else:
                jobs_reap_expired(now=job.lease_until)


def test_the_reapers_batch_is_spent_only_on_expired_running_leases(student, problem, settings):
    """Settled jobs keep their last deadline and live leases are not due: neither may
    crowd an expired lease out of a small batch. Equal deadlines go by id."""
    settings.KECE_RETRY_BACKOFF_MS = 0
    node, identity = make_node(pool="python", max_slots=4)
    for _ in range(4):
        submit(student, problem)
    now = timezone.now()
    settled, live, expired, twin = claim(identity, free_slots=4, now=now)
    settle(identity, judged(settled), now=now)
    JudgeJob.objects.filter(pk__in=[settled.pk, expired.pk, twin.pk]).update(lease_until=now - timedelta(seconds=5))
    assert jobs_reap_expired(now=now, batch=1).requeued == [expired.pk]
    assert jobs_reap_expired(now=now, batch=1).requeued == [twin.pk]
    assert JudgeJob.objects.get(pk=live.pk).state == JobState.RUNNING
