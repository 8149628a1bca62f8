"""Every refusal of a result, each on its own: one guard gone and one of these fails."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import JobState, JudgeJob, SettlementEvent, Submission
from judging.services.rejudge import submission_delete
from judging.services.settle import CaseResult, SettleRequest, job_settle_and_claim
from kece.errors import Invalid, LeaseLost, ResultConflict, Superseded
from nodes.checks import node_check_start
from nodes.models import JudgeNode
from tests.factories import make_node, make_problem
from tests.judging.helpers import claim, infra_error, judged, released, settle, stale_identities, submit
from tests.nodes.test_checks import _diagnostic_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(student, problem, node_a):
    """node_a holds the lease of one job of a two-case problem (weights 50 and 50)."""
    node, identity = node_a
    submission = submit(student, problem)
    [job] = claim(identity)
    return node, identity, submission, job


def _untouched(job, submission):
    row = JudgeJob.objects.get(pk=job.pk)
    assert (row.state, row.settled_lease_epoch, row.result_digest) == (JobState.RUNNING, None, "")
    assert Submission.objects.get(pk=submission.pk).verdict is None
    assert not SettlementEvent.objects.exists()


# --- who posts -----------------------------------------------------------------------------------

@stale_identities()
def test_an_identity_the_node_row_no_longer_has_is_refused(running, change, error):
    node, identity, submission, job = running
    JudgeNode.objects.filter(pk=node.pk).update(**change)
    with pytest.raises(error):
        settle(identity, judged(job))
    _untouched(job, submission)


def test_an_unknown_job_is_a_lost_lease(running):
    from judging.services import job_meta

    _, identity, submission, job = running
    with pytest.raises(LeaseLost) as refused:
        settle(identity, replace(judged(job), job_id=job.pk + 1000))
    assert refused.value.detail == "No such job for this node."
    # Known to the job-meta cache but gone from the table (a restored backup, a purge):
    job_meta.remember([JudgeJob(pk=job.pk + 2000, kind="JUDGE", submission_type="ALGO",
                                submission_id=submission.pk)])
    with pytest.raises(LeaseLost) as refused:
        settle(identity, replace(judged(job), job_id=job.pk + 2000))
    assert refused.value.detail == "No such job for this node."


def test_an_unknown_outcome_is_invalid(running):
    _, identity, submission, job = running
    with pytest.raises(Invalid):
        settle(identity, replace(judged(job), outcome="MAYBE"))
    _untouched(job, submission)


# --- which lease ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("change", [
    {"session_epoch": 0}, {"lease_until": None}, {"state": JobState.QUEUED},
], ids=["earlier-session", "no-deadline", "not-running"])
def test_a_lease_that_is_not_live_is_refused(running, change):
    _, identity, submission, job = running
    JudgeJob.objects.filter(pk=job.pk).update(**change)
    with pytest.raises(LeaseLost):
        settle(identity, judged(job))
    assert JudgeJob.objects.get(pk=job.pk).settled_lease_epoch is None
    assert Submission.objects.get(pk=submission.pk).verdict is None


def test_a_lease_is_live_until_its_deadline_and_not_at_it(running):
    _, identity, submission, job = running
    with pytest.raises(LeaseLost):
        settle(identity, judged(job), now=job.lease_until)
    _untouched(job, submission)
    assert settle(identity, judged(job), now=job.lease_until - timedelta(microseconds=1)) == "settled"


def test_another_nodes_copy_of_a_settled_result_is_not_a_duplicate(running, node_b):
    """The lease is named by node and epoch: the same body from another node is refused."""
    _, identity, _, job = running
    assert settle(identity, judged(job)) == "settled"
    with pytest.raises(LeaseLost):
        settle(node_b[1], judged(job))
    with pytest.raises(LeaseLost):
        settle(node_b[1], judged(job, verdict="WA"))


def test_another_epochs_copy_of_a_settled_result_is_not_a_duplicate(running):
    _, identity, _, job = running
    assert settle(identity, judged(job)) == "settled"
    with pytest.raises(LeaseLost):
        settle(identity, judged(job, lease_epoch=job.lease_epoch + 1))


def test_a_cancelled_job_is_superseded_for_its_holder_only(running, node_b):
    _, identity, submission, job = running
    submission_delete(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    with pytest.raises(LeaseLost):
        settle(node_b[1], judged(job))
    with pytest.raises(LeaseLost):
        settle(identity, judged(job, lease_epoch=job.lease_epoch + 1))
    with pytest.raises(Superseded):
        settle(identity, judged(job))


def test_a_cancelled_diagnostic_job_is_superseded(problem):
    node, identity = make_node(pool="python")
    _diagnostic_job(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    [job] = claim(identity)
    JudgeJob.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    with pytest.raises(Superseded):
        settle(identity, judged(job))


def test_a_job_its_submission_no_longer_points_at_is_superseded(running):
    _, identity, submission, job = running
    Submission.objects.filter(pk=submission.pk).update(current_judge_job_id=None)
    with pytest.raises(Superseded):
        settle(identity, judged(job))


# --- what is posted ----------------------------------------------------------------------------------

def _cases(*cases):
    return tuple(CaseResult(ordinal=o, verdict=v, score=s) for o, v, s in cases)


@pytest.mark.parametrize("verdict, score, cases, fields", [
    ("OK", 100, _cases((1, "AC", 50), (2, "AC", 50)), {"verdict": ["unknown verdict"]}),
    ("AC", 101, _cases(), {"score": ["out of range"]}),
    ("WA", -1, _cases(), {"score": ["out of range"]}),
    ("AC", 100, _cases((1, "AC", 50), (3, "AC", 50)), {"cases": ["unknown ordinal"]}),
    ("AC", 100, _cases((1, "AC", 50), (1, "AC", 50)), {"cases": ["unknown ordinal"]}),
    ("AC", 100, _cases((1, "AC", 50), (2, "YES", 50)), {"cases": ["invalid case result"]}),
    ("WA", 51, _cases((1, "AC", 51), (2, "WA", 0)), {"cases": ["invalid case result"]}),
    ("WA", -1, _cases((1, "WA", -1)), {"score": ["out of range"]}),
    ("WA", 0, _cases((1, "WA", -1)), {"cases": ["invalid case result"]}),
    ("WA", 40, _cases((1, "AC", 50)), {"score": ["not the sum of the cases"]}),
    ("WA", 100, _cases(), {"score": ["not the sum of the cases"]}),
], ids=["verdict", "score-over", "score-under", "unknown-case", "repeated-case", "case-verdict",
        "case-over-weight", "score-negative", "case-negative", "not-the-sum", "a-score-without-cases"])
def test_a_judged_result_that_does_not_add_up_is_invalid(running, verdict, score, cases, fields):
    _, identity, submission, job = running
    request = SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED", verdict=verdict,
                            score=score, cases=cases)
    with pytest.raises(Invalid) as refused:
        settle(identity, request)
    assert refused.value.fields == fields
    _untouched(job, submission)


def test_an_invalid_result_says_what_is_wrong(running):
    _, identity, _, job = running
    details = []
    for verdict, score, cases in [("OK", 0, ()), ("WA", 101, ()), ("WA", 0, _cases((3, "WA", 0))),
                                  ("WA", 0, _cases((1, "NO", 0))), ("WA", 1, _cases((1, "WA", 0)))]:
        with pytest.raises(Invalid) as refused:
            settle(identity, SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED",
                                           verdict=verdict, score=score, cases=cases))
        details.append(refused.value.detail)
    assert details == [
        "verdict must be one of AC WA TLE MLE RE CE OLE", "score must be 0…100", "case 3 is not a case of this job",
        "case 1: bad verdict or score", "score must be the sum of the case scores"]
    with pytest.raises(Invalid) as refused:
        settle(identity, replace(judged(job), outcome="MAYBE"))
    assert (refused.value.detail, refused.value.fields) == (
        "outcome must be JUDGED, INFRA_ERROR or RELEASED", {"outcome": ["unknown outcome"]})


@pytest.mark.parametrize("verdict, score, cases", [
    ("AC", 100, _cases((1, "AC", 50), (2, "AC", 50))),
    ("WA", 0, _cases((1, "WA", 0), (2, "WA", 0))),
    ("WA", 50, _cases((2, "AC", 50))),
    ("CE", 0, _cases()),
], ids=["full", "nothing", "some-cases", "no-cases"])
def test_a_judged_result_at_the_limits_is_accepted(running, verdict, score, cases):
    _, identity, submission, job = running
    request = SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED", verdict=verdict,
                            score=score, cases=cases)
    assert settle(identity, request) == "settled"
    assert Submission.objects.get(pk=submission.pk).score == score


def test_a_sql_job_is_one_comparison_worth_the_whole_score(student, node_a):
    _, identity = node_a
    sql_node, sql_identity = make_node(pool="mysql")
    submit(student, make_problem(kind="SQL"), language="mysql", code="SELECT 1;")
    [job] = claim(sql_identity)
    with pytest.raises(Invalid):
        settle(sql_identity, SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED",
                                           verdict="AC", score=100, cases=_cases((2, "AC", 100))))
    assert settle(sql_identity, SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED",
                                              verdict="AC", score=100, cases=_cases((1, "AC", 100)))) == "settled"


def test_a_diagnostic_result_names_no_cases(problem):
    node, identity = make_node(pool="python")
    _diagnostic_job(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    [job] = claim(identity)
    with pytest.raises(Invalid):
        settle(identity, SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED",
                                       verdict="AC", score=100, cases=_cases((1, "AC", 100))))


def test_what_the_node_cuts_from_the_compile_output_does_not_change_the_result(running):
    _, identity, submission, job = running
    long = "x" * (64 * 1024)
    first = replace(judged(job, verdict="CE", score=0, passing=[]), compile_output=long + "first tail")
    assert settle(identity, first) == "settled"
    assert settle(identity, replace(first, compile_output=long + "another tail")) == "duplicate"
    with pytest.raises(ResultConflict):
        settle(identity, replace(first, compile_output=long[:-1]))
    assert Submission.objects.get(pk=submission.pk).compile_output == long


# --- what a result does ----------------------------------------------------------------------------

def test_an_accepted_result_writes_the_job_and_the_submission(running, settings):
    settings.KECE_RETRY_BACKOFF_MS = 0
    _, identity, submission, job = running
    settle(identity, infra_error(job))  # the retry's result clears the error
    now = timezone.now()
    [job] = claim(identity, now=now)
    request = replace(judged(job, verdict="WA", passing=[1]), time_ms=12, memory_kb=345, compile_output="warn")
    assert settle(identity, request, now=now) == "settled"
    row = JudgeJob.objects.get(pk=job.pk)
    assert (row.state, row.finished_at, row.result_digest, row.settled_digest) == (
        JobState.COMPLETED, now, request.digest(), request.digest())
    assert (row.error, row.error_message, row.settled_status) == ("", "", "settled")
    submission.refresh_from_db()
    assert (submission.verdict, submission.score, submission.time_ms, submission.memory_kb) == ("WA", 50, 12, 345)
    assert (submission.compile_output, submission.judged_at, submission.judged_generation) == ("warn", now, 1)
    assert JudgeJob.objects.get(pk=job.pk).error_message == ""
    assert [c["verdict"] for c in submission.cases] == ["AC", "WA"]


def test_an_infrastructure_error_without_a_code_is_recorded_as_one(running):
    _, identity, _, job = running
    assert settle(identity, replace(infra_error(job), error="")) == "requeued"
    row = JudgeJob.objects.get(pk=job.pk)
    assert (row.error, row.error_message, row.settled_status) == ("infra_error", "the sandbox died", "requeued")


@pytest.mark.parametrize("max_attempts, status", [(3, "requeued"), (1, "failed")])
def test_an_infrastructure_error_posted_again_is_a_duplicate(running, settings, max_attempts, status):
    settings.KECE_MAX_ATTEMPTS = max_attempts
    _, identity, _, job = running
    assert settle(identity, infra_error(job)) == status
    assert settle(identity, infra_error(job)) == "duplicate"
    with pytest.raises(ResultConflict):
        settle(identity, infra_error(job, error="network"))


def test_an_infrastructure_error_on_the_last_attempt_is_settled_as_failed(running, settings):
    settings.KECE_MAX_ATTEMPTS = 1
    _, identity, submission, job = running
    assert settle(identity, infra_error(job)) == "failed"
    row = JudgeJob.objects.get(pk=job.pk)
    assert (row.state, row.settled_status, row.error) == (JobState.FAILED, "failed", "sandbox_crashed")


def test_the_result_of_a_lease_that_was_given_back_is_refused(running):
    _, identity, submission, job = running
    assert settle(identity, released(job)) == "requeued"
    row = JudgeJob.objects.get(pk=job.pk)
    assert (row.settled_status, row.error) == ("requeued", "released")
    with pytest.raises(ResultConflict):
        settle(identity, judged(job))
    assert Submission.objects.get(pk=submission.pk).verdict is None


# --- the claim a result carries ---------------------------------------------------------------------

def _settle_and_claim(identity, request, free_slots=1, now=None):
    return job_settle_and_claim(identity=identity, request=request, now=now or timezone.now(),
                                free_slots=free_slots)


def test_a_result_carrying_a_claim_leases_within_the_slots_asked(running, student, problem):
    _, identity, _, job = running
    for _ in range(3):
        submit(student, problem)
    status, carried = _settle_and_claim(identity, judged(job), free_slots=2)
    assert status == "settled" and len(carried.jobs) == 2
    assert all(j.carried_by_job_id == job.pk for j in JudgeJob.objects.filter(state=JobState.RUNNING))


def test_a_result_carrying_no_slots_leases_nothing(running, student, problem):
    _, identity, _, job = running
    submit(student, problem)
    status, carried = _settle_and_claim(identity, judged(job), free_slots=0)
    assert (status, carried.jobs, carried.reason, carried.desired_state) == (
        "settled", [], "not_after_this_result", "ENABLED")


def test_a_diagnostic_result_carrying_a_claim_leases_nothing(student, problem):
    node, identity = make_node(pool="python")
    _diagnostic_job(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    [job] = claim(identity)
    submit(student, problem)
    checks = ({"name": "python", "ok": True, "detail": "ran"},)
    status, carried = _settle_and_claim(identity, replace(judged(job), checks=checks, cases=(), score=100))
    assert (status, carried.jobs) == ("settled", [])


def test_a_node_that_moved_host_group_claims_on_its_own_after_its_result(running, student, problem):
    from dataclasses import replace as with_group

    from tests.factories import HostGroupFactory

    node, identity, _, job = running
    submit(student, problem)
    hinted = with_group(identity, host_group_id=node.host_group_id)
    JudgeNode.objects.filter(pk=node.pk).update(host_group=HostGroupFactory())
    status, carried = _settle_and_claim(hinted, judged(job))
    assert (status, carried) == ("settled", None)
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.COMPLETED


def test_an_accepted_result_is_logged_with_its_lease_outcome_and_status(running, caplog):
    import logging

    _, identity, _, job = running
    with caplog.at_level(logging.INFO, logger="kece.settle"):
        settle(identity, judged(job, verdict="WA", passing=[1]))
    [record] = [r for r in caplog.records if r.getMessage() == "result accepted"]
    assert (record.job, record.leaseEpoch, record.outcome, record.status, record.verdict) == (
        job.pk, job.lease_epoch, "JUDGED", "settled", "WA")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kece.settle"):
        settle(identity, judged(job, verdict="WA", passing=[1]))
    [record] = [r for r in caplog.records if r.getMessage() == "result accepted"]
    assert (record.status, record.verdict) == ("duplicate", "WA")


def test_a_result_without_a_verdict_is_logged_without_one(running, caplog):
    import logging

    _, identity, _, job = running
    with caplog.at_level(logging.INFO, logger="kece.settle"):
        settle(identity, released(job))
    [record] = [r for r in caplog.records if r.getMessage() == "result accepted"]
    assert (record.outcome, record.status, record.verdict) == ("RELEASED", "requeued", None)


def test_jobs_sent_again_with_a_repeated_result_are_logged(running, student, problem, caplog):
    import logging

    node, identity, _, job = running
    submit(student, problem)
    _, carried = _settle_and_claim(identity, judged(job))
    with caplog.at_level(logging.INFO, logger="kece.settle"):
        _settle_and_claim(identity, judged(job))
    [record] = [r for r in caplog.records if r.getMessage() == "carried jobs sent again"]
    assert (record.job, record.node, record.jobs) == (job.pk, node.pk, [j.pk for j in carried.jobs])


def test_a_carried_lease_at_its_deadline_is_not_sent_again(running, student, problem):
    _, identity, _, job = running
    submit(student, problem)
    now = timezone.now()
    _, carried = _settle_and_claim(identity, judged(job), now=now)
    [next_job] = carried.jobs
    _, again = _settle_and_claim(identity, judged(job), now=next_job.lease_until)
    assert next_job.pk not in [j.pk for j in again.jobs]


# --- the result digest ---------------------------------------------------------------------------

def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def test_the_result_digest_is_the_sha256_of_the_canonical_json():
    """Stored with the settlement and compared when the same result comes again, possibly
    to a newer server: its form must not drift."""
    judged_request = SettleRequest(
        job_id=1, lease_epoch=3, outcome="JUDGED", verdict="WA", score=40, time_ms=12, memory_kb=345,
        compile_output="warn é", cases=(CaseResult(2, "WA", 5, 6, 0), CaseResult(1, "AC", 3, 4, 40)),
        error="ignored", message="ignored", checks=({"name": "python", "ok": True, "detail": "ran"},))
    assert judged_request.digest() == _sha256(
        '{"cases":[{"memory_kb":4,"ordinal":1,"score":40,"time_ms":3,"verdict":"AC"},'
        '{"memory_kb":6,"ordinal":2,"score":0,"time_ms":5,"verdict":"WA"}],'
        '"checks":[{"detail":"ran","name":"python","ok":true}],"compileOutput":"warn é","memoryKb":345,'
        '"outcome":"JUDGED","score":40,"timeMs":12,"verdict":"WA"}')
    infra = SettleRequest(job_id=1, lease_epoch=3, outcome="INFRA_ERROR", verdict="AC", error="sandbox",
                          message="died ü")
    assert infra.digest() == _sha256('{"error":"sandbox","message":"died ü","outcome":"INFRA_ERROR"}')
    assert SettleRequest(job_id=1, lease_epoch=3, outcome="RELEASED", error="x").digest() == _sha256(
        '{"outcome":"RELEASED"}')


def test_a_judged_job_stores_the_canonical_result(running):
    _, identity, _, job = running
    request = replace(judged(job, verdict="WA", passing=[1]), compile_output="warn")
    settle(identity, request)
    assert JudgeJob.objects.get(pk=job.pk).result == request.canonical() == {
        "outcome": "JUDGED", "verdict": "WA", "score": 50, "timeMs": 10, "memoryKb": 1024, "compileOutput": "warn",
        "cases": [{"ordinal": 1, "verdict": "AC", "time_ms": 10, "memory_kb": 1024, "score": 50},
                  {"ordinal": 2, "verdict": "WA", "time_ms": 10, "memory_kb": 1024, "score": 0}],
        "checks": []}


def test_a_released_result_leases_nothing_even_with_other_work_queued(running, student, problem):
    _, identity, _, job = running
    submit(student, problem)
    status, carried = _settle_and_claim(identity, released(job), free_slots=2)
    assert (status, carried.jobs) == ("requeued", [])
    assert not JudgeJob.objects.filter(state=JobState.RUNNING).exists()


@pytest.mark.parametrize("carried_slots, node_lock, group_lock", [
    (None, "LOCK IN SHARE MODE", None), (1, "LOCK IN SHARE MODE", "LOCK IN SHARE MODE"),
    (2, "FOR UPDATE", "FOR UPDATE"),
], ids=["plain", "replacing-its-job", "claiming-more"])
def test_results_share_the_node_lock_unless_they_may_raise_its_count(running, carried_slots, node_lock, group_lock):
    """A plain result and a one-for-one replacement (one job asked for the slot it frees)
    share the node and host group rows; a claim for more may raise the counts and takes
    them exclusively."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    node, identity, _, job = running
    with CaptureQueriesContext(connection) as queries:
        if carried_slots is None:
            settle(identity, judged(job))
        else:
            _settle_and_claim(identity, judged(job), free_slots=carried_slots)
    locking = [q["sql"] for q in queries if "WHERE `id` IN" in q["sql"]]
    [node_select] = [sql for sql in locking if "FROM `judge_node`" in sql]
    group_selects = [sql for sql in locking if "FROM `judge_host_group`" in sql]
    assert node_select.endswith(node_lock)
    assert [sql[-len(group_lock):] for sql in group_selects] == ([group_lock] if group_lock else [])


def test_a_diagnostic_result_takes_the_node_lock_exclusively():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    node, identity = make_node(pool="python")
    _diagnostic_job(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    [job] = claim(identity)
    checks = ({"name": "python", "ok": True, "detail": "ran"},)
    with CaptureQueriesContext(connection) as queries:
        settle(identity, replace(judged(job), checks=checks, cases=(), score=100))
    [node_select] = [q["sql"] for q in queries if "FROM `judge_node`" in q["sql"] and "WHERE `id` IN" in q["sql"]]
    assert node_select.endswith("FOR UPDATE")


@pytest.mark.parametrize("post, free_slots, wakes", [
    ("judged", None, True), ("released", None, True), ("duplicate", None, False),
    ("judged-carrying", 1, False), ("judged-carrying-nothing", 0, True),
])
def test_a_result_that_frees_a_slot_wakes_the_pools_waiting_claims(running, student, problem, monkeypatch, post,
                                                                    free_slots, wakes):
    from judging.services import settle as settle_module

    _, identity, _, job = running
    submit(student, problem)
    request = released(job) if post == "released" else judged(job)
    if post == "duplicate":
        settle(identity, request)
    woken = []
    monkeypatch.setattr(settle_module, "publish_after_commit", woken.append)
    if free_slots is None:
        settle(identity, request)
    else:
        _settle_and_claim(identity, request, free_slots=free_slots)
    assert woken == (["python"] if wakes else [])


def test_a_repeated_result_does_not_send_again_a_carried_job_since_settled(running, student, problem):
    _, identity, _, job = running
    for _ in range(2):
        submit(student, problem)
    _, carried = _settle_and_claim(identity, judged(job))
    [next_job] = carried.jobs
    assert settle(identity, judged(next_job)) == "settled"
    status, again = _settle_and_claim(identity, judged(job))
    assert status == "duplicate" and next_job.pk not in [j.pk for j in again.jobs]


def test_a_repeated_result_sends_again_only_this_nodes_carried_jobs(student, problem, node_a, node_b, settings):
    """A job failed for infrastructure by one node and judged by another: each carried a
    claim on its post about it."""
    settings.KECE_RETRY_BACKOFF_MS = 0
    _, identity_a = node_a
    _, identity_b = node_b
    submit(student, problem)
    [job] = claim(identity_a)
    submit(student, problem)
    _, carried_a = _settle_and_claim(identity_a, infra_error(job))
    [held_by_a] = carried_a.jobs
    [again] = claim(identity_b)
    assert again.pk == job.pk
    _, carried_b = _settle_and_claim(identity_b, judged(again))
    status, repeated = _settle_and_claim(identity_b, judged(again))
    assert (status, carried_b.jobs, repeated.jobs) == ("duplicate", [], [])
    assert JudgeJob.objects.get(pk=held_by_a.pk).node_id == identity_a.node_id


def test_a_result_is_a_transaction_of_its_own(running):
    """Nested in a caller's transaction its locks would outlive it: refused."""
    from django.db import transaction

    _, identity, _, job = running
    with pytest.raises(RuntimeError, match="durable"):
        with transaction.atomic():
            settle(identity, judged(job))


def test_a_diagnostic_result_finishes_the_nodes_self_check_when_it_is_accepted(problem):
    from nodes.models import NodeCheck

    node, identity = make_node(pool="python", max_slots=20)
    check = node_check_start(node_id=node.pk, actor=None, now=timezone.now())
    _diagnostic_job(node, check)
    jobs = claim(identity, free_slots=20)
    now = timezone.now()
    checks = ({"name": "python", "ok": True, "detail": "ran"},)
    for job in jobs:  # each canary judged as expected; the check ends with the last
        verdict = job.snapshot["canary"]["expect"]
        assert settle(identity, replace(judged(job, verdict=verdict), checks=checks), now=now) == "settled"
    check.refresh_from_db()
    assert (check.status, check.finished_at) == (NodeCheck.Status.PASSED, now)
    assert JudgeNode.objects.get(pk=node.pk).self_check_finished_at == now
    assert {JudgeJob.objects.get(pk=j.pk).state for j in jobs} == {JobState.COMPLETED}


def test_a_diagnostic_job_failing_at_its_first_attempt_fails_the_self_check(problem, settings):
    from nodes.models import CheckStatus

    node, identity = make_node(pool="python", max_slots=20)
    _diagnostic_job(node, node_check_start(node_id=node.pk, actor=None, now=timezone.now()))
    first, *others = claim(identity, free_slots=20)
    assert settings.KECE_MAX_ATTEMPTS > 1 and settle(identity, infra_error(first)) == "failed"  # not retried
    for job in others:
        settle(identity, judged(job, verdict=job.snapshot["canary"]["expect"]))
    assert JudgeNode.objects.get(pk=node.pk).self_check_status == CheckStatus.FAILED
