"""Every refusal of the claim, each on its own: one guard gone and one of these fails."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.identity import NodeIdentity
from judging import priority
from judging.models import JobKind, JobState, JudgeJob, PriorityClass
from judging.services.claim import job_claim
from judging.timing import lease_ttl, offline_after
from kece.errors import Unauthenticated
from nodes.checks import node_check_start
from nodes.models import DesiredState, HostGroupStatus, JudgeHostGroup, JudgeNode
from tests.factories import HostGroupFactory, make_node, make_problem
from tests.judging.helpers import claim, stale_identities, submit
from tests.nodes.test_checks import _diagnostic_job, _diagnostic_jobs

pytestmark = pytest.mark.django_db


def _claim(identity, *, free_slots=1, now):
    return job_claim(identity=identity, free_slots=free_slots, now=now)


def _beat(node, at):
    JudgeNode.objects.filter(pk=node.pk).update(last_heartbeat_at=at)


# --- credential and session, re-checked on the locked row --------------------------------------

@stale_identities()
def test_it_refuses_an_identity_the_node_row_no_longer_has(student, problem, node_a, change, error):
    node, identity = node_a
    submit(student, problem)
    JudgeNode.objects.filter(pk=node.pk).update(**change)
    with pytest.raises(error):
        claim(identity)
    assert JudgeJob.objects.get().state == JobState.QUEUED


def test_an_unknown_node_is_unauthenticated(db):
    with pytest.raises(Unauthenticated) as refused:
        _claim(NodeIdentity(10**9, "0" * 64, 1), now=timezone.now())
    assert refused.value.detail == "The node credential is unknown or revoked."


def test_a_node_deleted_since_it_authenticated_is_unauthenticated(node_a):
    node, identity = node_a
    hinted = NodeIdentity(node.pk, identity.credential_digest, identity.session_epoch, node.host_group_id)
    JudgeNode.objects.filter(pk=node.pk).delete()
    with pytest.raises(Unauthenticated):
        _claim(hinted, now=timezone.now())


def test_a_node_whose_host_group_keeps_changing_under_the_claim_is_told_to_retry(student, problem, node_a,
                                                                                 monkeypatch):
    from judging.services import claim as claim_module

    node, identity = node_a
    submit(student, problem)
    elsewhere = HostGroupFactory()
    looked = []

    def moving(node_id):  # each read without locks sees a group the node has left again
        looked.append(node_id)
        return elsewhere.pk

    monkeypatch.setattr(claim_module, "node_host_group_id", moving)
    with pytest.raises(Unauthenticated) as refused:
        claim(identity)
    assert (refused.value.detail, looked) == ("The node is being reconfigured; retry.", [node.pk] * 3)
    assert JudgeJob.objects.get().state == JobState.QUEUED


def test_a_node_that_moved_to_another_host_group_is_claimed_for_in_its_new_group(student, problem, node_a):
    node, identity = node_a
    old_group = node.host_group
    submit(student, problem)
    new_group = HostGroupFactory()
    JudgeNode.objects.filter(pk=node.pk).update(host_group=new_group)
    hinted = NodeIdentity(node.pk, identity.credential_digest, identity.session_epoch, old_group.pk)

    [job] = claim(hinted)

    assert job.host_group_id == new_group.pk


# --- heartbeat freshness ----------------------------------------------------------------------

def test_a_node_without_a_heartbeat_gets_nothing(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    JudgeNode.objects.filter(pk=node.pk).update(last_heartbeat_at=None)
    result = _claim(identity, now=timezone.now())
    assert (result.jobs, result.reason) == ([], "stale_heartbeat")


def test_a_heartbeat_older_than_the_offline_limit_gets_nothing_and_one_just_within_it_claims(student, problem,
                                                                                              node_a):
    node, identity = node_a
    submit(student, problem)
    now = timezone.now()
    _beat(node, now - offline_after() - timedelta(microseconds=1))
    result = _claim(identity, now=now)
    assert (result.jobs, result.reason) == ([], "stale_heartbeat")
    assert JudgeJob.objects.get().state == JobState.QUEUED

    _beat(node, now - offline_after())
    assert len(_claim(identity, now=now).jobs) == 1


def test_a_stale_node_gets_not_even_its_own_diagnostic_job(problem):
    node, identity = make_node(pool="python")
    diagnostic = _diagnostic_job(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    now = timezone.now()
    _beat(node, now - offline_after() - timedelta(seconds=1))
    assert _claim(identity, now=now).jobs == []
    _beat(node, now)
    assert [j.pk for j in _claim(identity, now=now).jobs] == [diagnostic.pk]


# --- asked slots ----------------------------------------------------------------------------------

@pytest.mark.parametrize("free_slots", [0, -1])
def test_no_free_slots_asked_leases_nothing(student, problem, node_a, free_slots):
    node, identity = node_a
    submit(student, problem)
    result = _claim(identity, free_slots=free_slots, now=timezone.now())
    assert (result.jobs, result.reason) == ([], "no_free_slots")


# --- desired state and verification -----------------------------------------------------------------

def test_a_draining_node_gets_no_judge_job_but_its_own_check(student, problem):
    """Drained for maintenance, then checked before it is enabled again: the check's
    diagnostic jobs are its to run, the students' work is not."""
    node, identity = make_node(pool="python", max_slots=20)
    submit(student, problem)
    JudgeNode.objects.filter(pk=node.pk).update(desired_state=DesiredState.DRAINING)
    result = _claim(identity, free_slots=4, now=timezone.now())
    assert (result.jobs, result.reason, result.desired_state) == ([], "not_enabled", DesiredState.DRAINING)
    diagnostics = _diagnostic_jobs(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    result = _claim(identity, free_slots=len(diagnostics) + 4, now=timezone.now())
    assert {job.pk for job in result.jobs} == {job.pk for job in diagnostics}
    assert JudgeJob.objects.filter(kind="JUDGE", state=JobState.QUEUED).count() == 1


@pytest.mark.parametrize("state", [DesiredState.PENDING_VERIFICATION, DesiredState.DISABLED])
def test_a_node_that_is_not_enabled_gets_only_its_own_diagnostic_job(student, problem, state):
    node, identity = make_node(pool="python", max_slots=20)
    submit(student, problem)
    diagnostics = _diagnostic_jobs(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    JudgeNode.objects.filter(pk=node.pk).update(desired_state=state)

    result = _claim(identity, free_slots=20, now=timezone.now())

    assert sorted(j.pk for j in result.jobs) == sorted(j.pk for j in diagnostics)  # and no judge job
    assert _claim(identity, free_slots=4, now=timezone.now()).reason == "not_ready"


@pytest.mark.parametrize("change", [
    {"health_ok": False},
    {"self_check_status": "FAILED"},
    {"self_check_agent_version": "an-older-agent"},
    {"self_check_runtime_spec": "python-r0"},
    {"self_check_revision": 0},
], ids=["unhealthy", "failed-self-check", "agent-version", "runtime-spec", "config-revision"])
def test_a_node_not_verified_for_what_it_runs_now_gets_no_judge_jobs(student, problem, node_a, change):
    node, identity = node_a
    submit(student, problem)
    JudgeNode.objects.filter(pk=node.pk).update(**change)
    result = _claim(identity, free_slots=4, now=timezone.now())
    assert (result.jobs, result.reason) == ([], "not_ready")


def test_a_node_in_a_disabled_host_group_gets_no_judge_jobs(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    JudgeHostGroup.objects.filter(pk=node.host_group_id).update(status=HostGroupStatus.DISABLED)
    assert _claim(identity, now=timezone.now()).reason == "not_ready"


def test_a_diagnostic_job_bound_to_another_node_is_never_claimed(student, problem, node_a):
    node, identity = node_a
    other, _ = make_node(pool="python")
    _diagnostic_job(other, node_check_start(node_id=other.pk, actor=None, now=timezone.now()))
    result = _claim(identity, free_slots=4, now=timezone.now())
    assert (result.jobs, result.reason) == ([], "empty")


# --- what is claimable ------------------------------------------------------------------------------

def test_only_jobs_of_the_nodes_runtime_spec_are_claimed(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    JudgeJob.objects.update(runtime_spec="python-r2")
    assert _claim(identity, now=timezone.now()).reason == "empty"
    JudgeNode.objects.filter(pk=node.pk).update(runtime_spec="python-r2", self_check_runtime_spec="python-r2")
    assert len(_claim(identity, now=timezone.now()).jobs) == 1


def test_only_jobs_of_the_nodes_pool_are_claimed(student, node_a, foreign_node):
    _, identity = node_a
    submit(student, make_problem(languages=("cpp",)), language="cpp")
    assert _claim(identity, free_slots=4, now=timezone.now()).reason == "empty"
    assert len(_claim(foreign_node[1], free_slots=4, now=timezone.now()).jobs) == 1


def test_a_job_is_claimable_from_its_available_time_on(student, problem, node_a):
    node, identity = node_a
    now = timezone.now()
    submit(student, problem)
    JudgeJob.objects.update(available_at=now + timedelta(microseconds=1))
    assert _claim(identity, now=now).jobs == []
    JudgeJob.objects.update(available_at=now)
    assert len(_claim(identity, now=now).jobs) == 1


def test_jobs_are_claimed_oldest_available_first(student, problem, node_a):
    node, identity = node_a
    first, second, third = (submit(student, problem) for _ in range(3))
    now = timezone.now()
    due = now - timedelta(minutes=5)
    JudgeJob.objects.filter(submission_id=third.pk).update(
        available_at=due, claim_key=priority.claim_key(PriorityClass.PRACTICE, due))
    [a, b] = _claim(identity, free_slots=2, now=now).jobs
    assert [a.submission_id, b.submission_id] == [third.pk, first.pk]


def test_a_claim_writes_the_whole_lease(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    now = timezone.now()
    JudgeJob.objects.update(lease_epoch=4, attempts=1, progress_phase="JUDGING", progress_testcase=2,
                            error="lease_expired", wait_reason="backoff")

    [job] = _claim(identity, now=now).jobs

    row = JudgeJob.objects.get()
    for leased in (job, row):
        assert (leased.state, leased.node_id, leased.last_node_id, leased.host_group_id) == (
            JobState.RUNNING, node.pk, node.pk, node.host_group_id)
        assert (leased.session_epoch, leased.lease_epoch, leased.attempts) == (1, 5, 2)
        assert (leased.lease_until, leased.started_at) == (now + lease_ttl(), now)
        assert (leased.progress_phase, leased.progress_testcase, leased.error, leased.wait_reason) == (
            "", None, "", "")
        assert leased.carried_by_job_id is None


# --- slot headroom ------------------------------------------------------------------------------

def test_the_node_never_runs_more_than_its_max_slots(student, problem):
    node, identity = make_node(pool="python", max_slots=2)
    for _ in range(4):
        submit(student, problem)
    assert len(claim(identity, free_slots=1)) == 1
    assert len(claim(identity, free_slots=4)) == 1
    result = _claim(identity, free_slots=4, now=timezone.now())
    assert (result.jobs, result.reason) == ([], "node_full")


def test_the_host_group_never_runs_more_than_its_total_slots(student, problem):
    group = HostGroupFactory(total_slots=3)
    _, first = make_node(pool="python", host_group=group, max_slots=3)
    _, second = make_node(pool="cpp", host_group=group, max_slots=4)
    for _ in range(4):
        submit(student, problem)
    submit(student, make_problem(languages=("cpp",)), language="cpp")
    assert len(claim(first, free_slots=2)) == 2
    assert len(claim(second, free_slots=4)) == 1
    result = _claim(second, free_slots=4, now=timezone.now())
    assert (result.jobs, result.reason) == ([], "group_full")
    # The first node has a slot left of its own: the group refuses it.
    assert _claim(first, free_slots=4, now=timezone.now()).reason == "group_full"


def test_an_idle_host_group_lends_all_its_slots(student, problem):
    _, identity = make_node(pool="python", host_group=HostGroupFactory(total_slots=2), max_slots=4)
    for _ in range(3):
        submit(student, problem)
    assert len(claim(identity, free_slots=4)) == 2


def test_an_expired_lease_still_takes_its_slot_until_it_is_reaped(student, problem):
    node, identity = make_node(pool="python", max_slots=1)
    submit(student, problem)
    submit(student, problem)
    now = timezone.now()
    claim(identity, now=now)
    later = now + lease_ttl() + timedelta(seconds=1)
    _beat(node, later)
    assert _claim(identity, now=later).reason == "node_full"


def test_finished_jobs_give_their_slot_back(student, problem):
    node, identity = make_node(pool="python", max_slots=1)
    submit(student, problem)
    submit(student, problem)
    [job] = claim(identity)
    JudgeJob.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    assert len(claim(identity)) == 1


def test_a_diagnostic_job_counts_against_the_slots_too(student, problem):
    node, identity = make_node(pool="python", max_slots=1)
    _diagnostic_job(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    [diagnostic] = claim(identity)
    assert diagnostic.kind == JobKind.DIAGNOSTIC
    submit(student, problem)
    assert _claim(identity, now=timezone.now()).reason == "node_full"


def test_each_lease_is_logged_with_its_job_lease_node_pool_and_attempt(student, problem, node_a, caplog):
    import logging

    node, identity = node_a
    submit(student, problem)
    with caplog.at_level(logging.INFO, logger="kece.claim"):
        [job] = claim(identity)
    [record] = [r for r in caplog.records if r.getMessage() == "job leased"]
    assert (record.job, record.leaseEpoch, record.node, record.pool, record.attempt) == (
        job.pk, 1, node.pk, "python", 1)


def test_a_claim_is_a_transaction_of_its_own(student, problem, node_a):
    """Nested in a caller's transaction its locks would outlive it: refused."""
    from django.db import transaction

    _, identity = node_a
    submit(student, problem)
    with pytest.raises(RuntimeError, match="durable"):
        with transaction.atomic():
            claim(identity)
