"""Self-checks, health and verification decide who may judge."""

import asyncio
from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import JobKind, JobState, JudgeJob
from judging.services.leases import RenewItem, lease_renew
from judging.services.rejudge import submission_rejudge
from judging.selectors import ready_nodes
from nodes.checks import _queue_self_check, checks_expire, connectivity_items, node_check_start
from nodes.models import CheckStatus, DesiredState, JudgeNode, NodeCheck
from nodes.services import AgentReport, node_session_open, node_update
from tests.factories import UserFactory, identity_of, make_node, make_problem
from tests.judging.helpers import claim, settle, submit

pytestmark = pytest.mark.django_db


def _diagnostic_jobs(node, check) -> list:
    _queue_self_check(check, node, items=[], now=timezone.now())
    return list(JudgeJob.objects.filter(kind=JobKind.DIAGNOSTIC, submission_id=check.pk).order_by("generation"))


def _diagnostic_job(node, check):
    return _diagnostic_jobs(node, check)[0]


def test_an_unhealthy_node_gets_no_judge_jobs_but_its_own_diagnostic(student, problem):
    node, identity = make_node(pool="python")
    JudgeNode.objects.filter(pk=node.pk).update(health_ok=False)
    submit(student, problem)
    check = node_check_start(node_id=node.pk, actor=None, now=timezone.now())
    diagnostics = {j.pk for j in _diagnostic_jobs(node, check)}
    jobs = claim(identity, free_slots=4)
    assert len(jobs) == 4 and {j.pk for j in jobs} <= diagnostics
    assert not ready_nodes(now=timezone.now()).filter(pool="python").exists()


def test_a_new_agent_version_needs_a_new_self_check(student, problem):
    node, identity = make_node(pool="python")
    submit(student, problem)
    node_session_open(node_id=node.pk, credential_digest_value=node.credential_digest,
                      report=AgentReport("0.2-upgraded", "python-r1", 2), now=timezone.now())
    assert claim(identity_of(node)) == []
    node.refresh_from_db()
    from kece.errors import NotVerified

    node_update(node_id=node.pk, revision=node.revision, changes={"desired_state": "DISABLED"},
                actor=None, now=timezone.now())
    node.refresh_from_db()
    assert node.desired_state == "DISABLED", "taking a node out of service needs no check"
    with pytest.raises(NotVerified):
        node_update(node_id=node.pk, revision=node.revision, changes={"desired_state": "ENABLED"},
                    actor=None, now=timezone.now())
    node.refresh_from_db()
    assert node.desired_state == "DISABLED"


def test_checking_an_enabled_node_keeps_it_in_service_until_a_verdict(student, problem):
    node, identity = make_node(pool="python")
    node_check_start(node_id=node.pk, actor=None, now=timezone.now())
    assert ready_nodes(now=timezone.now()).filter(pool="python").exists()
    submit(student, problem)
    assert len(claim(identity)) == 1


def test_an_expired_check_cancels_its_diagnostic_job_even_while_it_runs():
    node, identity = make_node(pool="python", desired_state=DesiredState.PENDING_VERIFICATION)
    started = timezone.now() - timedelta(hours=1)
    check = node_check_start(node_id=node.pk, actor=None, now=started)
    diagnostics = _diagnostic_jobs(node, check)
    [running] = claim(identity)
    assert running.pk == diagnostics[0].pk
    assert checks_expire(now=timezone.now()) == 1
    check.refresh_from_db()
    assert check.status == NodeCheck.Status.FAILED
    assert {JudgeJob.objects.get(pk=j.pk).state for j in diagnostics} == {JobState.CANCELLED}
    assert {"ac.py": "expected AC, got no result"}.items() <= {i["name"]: i["detail"] for i in check.items}.items()
    [answer] = lease_renew(identity=identity, items=[RenewItem(running.pk, running.lease_epoch)],
                           now=timezone.now())
    assert answer["error"] == "cancelled"
    node.refresh_from_db()
    assert node.self_check_status == CheckStatus.FAILED


def test_a_probe_that_finishes_after_the_check_expired_queues_no_job():
    node, _ = make_node(pool="python", desired_state=DesiredState.PENDING_VERIFICATION)
    check = node_check_start(node_id=node.pk, actor=None, now=timezone.now() - timedelta(hours=1))
    checks_expire(now=timezone.now())
    _queue_self_check(check, node, items=[], now=timezone.now())
    assert not JudgeJob.objects.filter(kind=JobKind.DIAGNOSTIC).exists()


def test_a_self_check_failed_by_a_session_change_stays_failed():
    node, identity = make_node(pool="python", desired_state=DesiredState.PENDING_VERIFICATION)
    check = node_check_start(node_id=node.pk, actor=None, now=timezone.now())
    diagnostics = _diagnostic_jobs(node, check)
    JudgeJob.objects.filter(pk__in=[j.pk for j in diagnostics]).update(attempts=2)
    JudgeNode.objects.filter(pk=node.pk).update(max_slots=len(diagnostics))
    assert len(claim(identity, free_slots=len(diagnostics))) == len(diagnostics)  # third attempts
    node_session_open(node_id=node.pk, credential_digest_value=node.credential_digest,
                      report=AgentReport(node.agent_version, "python-r1", 2), now=timezone.now())
    node.refresh_from_db()
    assert {JudgeJob.objects.get(pk=j.pk).state for j in diagnostics} == {JobState.FAILED}
    assert node.self_check_status == CheckStatus.FAILED and node.session_epoch == 2


def test_only_the_lease_holder_hears_that_a_job_was_cancelled(student, problem):
    node_a, identity_a = make_node(pool="python")
    node_b, identity_b = make_node(pool="python")
    submission = submit(student, problem)
    [job] = claim(identity_a)
    submission_rejudge(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    item = [RenewItem(job.pk, job.lease_epoch)]
    assert lease_renew(identity=identity_a, items=item, now=timezone.now())[0]["error"] == "cancelled"
    assert lease_renew(identity=identity_b, items=item, now=timezone.now())[0]["error"] == "lease_lost"


def test_a_malformed_proof_fails_identity_without_crashing_the_check():
    node, _ = make_node(pool="python")
    answer = {"nodeId": node.pk, "pool": "python", "protocolVersion": 1, "runtimeSpec": "python-r1",
              "proof": "ünïcödé-☃"}
    items = {i["name"]: i["ok"] for i in connectivity_items(node, answer, "c0ffee")}
    assert items["identity"] is False and items["pool"] is True


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_a_claim_with_no_wait_looks_once(client):
    # Committed data: the claim runs on the server's database pool, another connection.
    node, _ = make_node(pool="python")
    submit(UserFactory(), make_problem(languages=("python",)))
    response = client.post("/api/v1/internal/judgers/jobs/claim", {"freeSlots": 1, "waitMs": 0},
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {node.secret}",
                           HTTP_X_JUDGE_SESSION=str(node.session_epoch))
    assert len(response.json()["jobs"]) == 1


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_a_claim_answer_that_cannot_be_delivered_is_given_back_at_once():
    from judging.api.claim import _claim_once

    node, identity = make_node(pool="python")
    submit(UserFactory(), make_problem(languages=("python",)))

    async def hang_up():
        attempt = asyncio.ensure_future(_claim_once(identity, 1))
        await asyncio.sleep(0)  # the claim transaction is under way on its thread
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt

    asyncio.run(hang_up())
    job = JudgeJob.objects.get()
    assert (job.state, job.attempts, job.lease_epoch, job.settled_status) == (JobState.QUEUED, 0, 1, "requeued")
    assert job.available_at <= timezone.now()


def test_a_failing_self_check_result_carrying_a_claim_gets_no_judge_job(student, problem):
    from judging.services.settle import SettleRequest, job_settle_and_claim

    node, identity = make_node(pool="python")  # enabled and verified: the admin re-checks it
    check = node_check_start(node_id=node.pk, actor=None, now=timezone.now())
    diagnostics = _diagnostic_jobs(node, check)
    submit(student, problem)
    JudgeNode.objects.filter(pk=node.pk).update(max_slots=len(diagnostics))
    *others, job = claim(identity, free_slots=len(diagnostics))
    assert {j.pk for j in [*others, job]} == {j.pk for j in diagnostics}
    for other in others:
        _answer(identity, other, _expected(other))
    failing = SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED", verdict="AC")
    assert _expected(job) != "AC"
    status, carried = job_settle_and_claim(identity=identity, request=failing, now=timezone.now(), free_slots=1)
    node.refresh_from_db()
    assert status == "settled" and node.self_check_status == CheckStatus.FAILED
    assert carried.jobs == [], "the verdict that just failed the node must not be overtaken by its claim"
    assert claim(identity) == []
    assert JudgeJob.objects.filter(kind=JobKind.JUDGE, state=JobState.QUEUED).count() == 1


WEAK_ITEMS = ({"name": "sandbox_isolated", "ok": False, "detail": "WEAK: rlimit-only sandbox"},
              {"name": "run", "ok": True, "detail": "sum probe: AC"})


def _answer(identity, job, verdict, checks=()):
    from judging.services.settle import SettleRequest

    return settle(identity, SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED",
                                          verdict=verdict, checks=checks))


def _expected(job) -> str:
    return job.snapshot["canary"]["expect"]


def _run_self_check(pool="python", *, verdicts=None, own=(), infra=None, skip=()):
    """Start a check, then answer every canary job as a node would: the expected verdict
    unless `verdicts` names another; `infra`: the canary answered INFRA_ERROR; `skip`: no
    answer at all. The job that asks for them gets `own` items."""
    from judging.services.settle import SettleRequest

    node, identity = make_node(pool=pool, desired_state=DesiredState.PENDING_VERIFICATION)
    JudgeNode.objects.filter(pk=node.pk).update(max_slots=20)
    check = node_check_start(node_id=node.pk, actor=None, now=timezone.now())
    _diagnostic_jobs(node, check)
    for job in claim(identity, free_slots=20):
        name = job.snapshot["canary"]["name"]
        if name in skip:
            continue
        if name == infra:
            settle(identity, SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="INFRA_ERROR",
                                           error="sandbox_error", message="bwrap: permission denied"))
            continue
        _answer(identity, job, (verdicts or {}).get(name, _expected(job)),
                checks=own if job.snapshot.get("ownChecks") else ())
    node.refresh_from_db()
    check.refresh_from_db()
    return node, check


def _items(check) -> dict:
    return {i["name"]: (i["ok"], i["detail"]) for i in check.items}


def _self_check_of_a_weak_node(items):
    return _run_self_check(own=items)


def test_a_node_with_a_weak_sandbox_fails_its_self_check():
    node, check = _self_check_of_a_weak_node(WEAK_ITEMS)
    assert node.self_check_status == CheckStatus.FAILED and check.status == NodeCheck.Status.FAILED


def test_a_weak_sandbox_passes_only_where_the_server_accepts_weak_nodes(settings):
    settings.KECE_ALLOW_WEAK_SANDBOX = True
    node, check = _self_check_of_a_weak_node(WEAK_ITEMS)
    assert node.self_check_status == CheckStatus.PASSED
    isolation = next(i for i in check.items if i["name"] == "sandbox_isolated")
    assert not isolation["ok"] and "KECE_ALLOW_WEAK_SANDBOX" in isolation["detail"], "the console shows what was accepted"


def test_accepting_weak_nodes_does_not_excuse_any_other_failure(settings):
    settings.KECE_ALLOW_WEAK_SANDBOX = True
    broken = WEAK_ITEMS + ({"name": "filesystems_bounded", "ok": False, "detail": "writable without a bound: /dev"},)
    node, _check = _self_check_of_a_weak_node(broken)
    assert node.self_check_status == CheckStatus.FAILED
