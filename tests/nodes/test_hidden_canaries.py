"""Hidden canaries: a canary program among a node's ordinary judge jobs, which the node
cannot tell from a student's, graded by the server; a wrong verdict quarantines the node;
nothing a student sees or any statistic counts them."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import (
    JobState, JudgeJob, ProblemResult, SettlementEvent, Submission,
)
from judging.services.bulk_rejudge import rejudge_request
from judging.system import system_user_id
from kece.periodic import integrity_step
from nodes.canaries import canaries_for
from nodes.models import HiddenCanary, JudgeNode, NodeAudit
from nodes.selectors import pool_figures
from pools.snapshot import compute
from tests.api.helpers import make_admin, session_client
from tests.judging.helpers import claim, infra_error, judged, settle, submit
from tests.nodes.api_nodes import ApiNode

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]

AC_PROGRAM = "print(sum(map(int, open(0).read().split())))\n"


@pytest.fixture
def canaries_on(settings):
    settings.KECE_CANARY_RATE = 3
    settings.KECE_CANARY_MIN_INTERVAL_S = 0
    settings.KECE_CROSS_CHECK_RATE = 0
    return settings


def _judge_until_a_canary_is_planted(identity, student, problem, *, now) -> HiddenCanary:
    """The node judges students' jobs; the periodic step runs after each one. A canary is
    due after at most 2 × rate - 1 of them."""
    for _ in range(2 * 3 - 1):
        submit(student, problem, code=AC_PROGRAM, now=now)
        [job] = claim(identity, now=now)
        settle(identity, judged(job), now=now)
        integrity_step(now=now)
        canary = HiddenCanary.objects.filter(node_id=identity.node_id).first()
        if canary is not None:
            return canary
    raise AssertionError("no canary was planted within twice the rate")


def _canary_job(identity, canary, *, now):
    [job] = claim(identity, now=now)
    assert job.pk == canary.job_id
    return job


@pytest.mark.django_db(transaction=True)  # the node API's claim runs on a connection of its own
def test_a_canary_reaches_the_node_as_an_ordinary_judge_job(student, problem, node_a, canaries_on):
    node, identity = node_a
    now = timezone.now()
    api = ApiNode(node)
    canary = _judge_until_a_canary_is_planted(identity, student, problem, now=now)
    before = Submission.objects.exclude(user_id=system_user_id()).order_by("-id").first()
    after = submit(student, problem, code=AC_PROGRAM)
    api.heartbeat()
    student_job, canary_job = api.claim(free_slots=2)
    assert canary_job["jobId"] == canary.job_id

    # Kind, shape and fields of a judge job of the pool; nothing on the wire says canary.
    assert set(canary_job) == set(student_job)
    assert (canary_job["kind"], canary_job["submissionType"], canary_job["generation"]) == ("JUDGE", "ALGO", 1)
    assert {c["ordinal"] for c in canary_job["cases"]} and all(
        set(c) == set(student_job["cases"][0]) for c in canary_job["cases"])
    # Its ids come from the tables' own sequences, between the students' of the moment.
    assert before.pk < canary_job["submissionId"] < after.pk
    assert before.current_judge_job_id < canary_job["jobId"] < after.current_judge_job_id
    # Its source is not the self-check's program, byte for byte.
    program = next(c for c in canaries_for("python") if c.name == canary.program)
    assert canary_job["source"]["digest"] != program.source["digest"]
    assert canary_job["source"]["bytes"] != program.source["bytes"]


@pytest.mark.parametrize("answers_right", [True, False], ids=["right", "wrong"])
def test_a_wrong_canary_verdict_quarantines_the_node_and_a_right_one_does_not(
        student, problem, node_a, canaries_on, answers_right):
    node, identity = node_a
    now = timezone.now()
    canary = _judge_until_a_canary_is_planted(identity, student, problem, now=now)
    job = _canary_job(identity, canary, now=now)
    wrong = "AC" if canary.expect != "AC" else "WA"
    settle(identity, judged(job, verdict=canary.expect if answers_right else wrong), now=now)
    integrity_step(now=now)

    canary.refresh_from_db()
    node.refresh_from_db()
    assert canary.ok is answers_right and canary.graded_at == now
    if answers_right:
        assert node.quarantined_at is None
        return
    assert node.quarantined_at == now
    assert node.quarantine_reason == (f"canary_mismatch: {canary.program} expected {canary.expect}, got {wrong} "
                                      f"(job {job.pk})")
    assert list(NodeAudit.objects.filter(node_id=node.pk, action="quarantine").values_list("actor_name", flat=True)) \
        == ["system"]
    submit(student, problem, code=AC_PROGRAM, now=now)
    assert claim(identity, now=now) == []  # no more judge work for it
    # The console says why, as for every quarantine, and lists the canary.
    operator = session_client(make_admin())
    page = operator.get(f"/admin/judgers/{node.pk}").content.decode()
    account = node.quarantine_reason.removeprefix("canary_mismatch: ")
    assert f"Quarantined by the server: a hidden canary judged wrongly: {account}" in page
    chinese = operator.get(f"/admin/judgers/{node.pk}", HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert "canary_mismatch" not in chinese.content.decode()  # the rule in words, the account as recorded
    assert f"{canary.program} (job {job.pk}): expected {canary.expect}, got {wrong}" in page
    assert "wrong: the node was quarantined" in page


def test_a_canary_counts_in_no_statistic_and_no_rejudge(student, problem, node_a, canaries_on):
    node, identity = node_a
    now = timezone.now()
    canary = _judge_until_a_canary_is_planted(identity, student, problem, now=now)
    # Queued: not in the public panel's pending count, nor the pools' figures.
    python = next(p for p in compute(now=now)["pools"] if p["pool"] == "python")
    assert python["pending"] == 0
    assert next(f for f in pool_figures(now=now) if f["pool"] == "python")["pending"] == 0

    job = _canary_job(identity, canary, now=now)
    settle(identity, judged(job, verdict=canary.expect), now=now)
    assert not SettlementEvent.objects.filter(job_id=job.pk).exists()
    assert not ProblemResult.objects.filter(user_id=system_user_id()).exists()
    # A bulk rejudge of what the node judged takes the students' submissions only.
    operation = rejudge_request(selector={"nodeId": node.pk, "since": now}, actor=None, now=now)
    assert operation.total == Submission.objects.filter(user=student).count()
    # Nor can an admin rejudge it into ordinary work.
    answer = session_client(make_admin()).post(f"/api/v1/admin/submissions/ALGO/{job.submission_id}/rejudge")
    assert answer.status_code == 404
    assert JudgeJob.objects.filter(submission_type="ALGO", submission_id=job.submission_id).count() == 1


def test_a_node_that_may_not_judge_is_not_given_its_canary_which_is_withdrawn(student, problem, node_a, canaries_on):
    node, identity = node_a
    now = timezone.now()
    canary = _judge_until_a_canary_is_planted(identity, student, problem, now=now)
    JudgeNode.objects.filter(pk=node.pk).update(quarantined_at=now, quarantine_reason="stalled: test")
    # A node that may not judge gets only its diagnostic jobs: not the judge job bound to it.
    assert claim(identity, now=now) == []
    integrity_step(now=now)
    assert JudgeJob.objects.get(pk=canary.job_id).state == JobState.CANCELLED
    integrity_step(now=now)  # ends the canary, judged by no one: neither right nor wrong
    canary.refresh_from_db()
    assert (canary.graded_at, canary.ok) == (now, None)


def test_a_canary_that_ends_in_infrastructure_errors_is_neither_right_nor_wrong_and_counts_nowhere(
        student, problem, node_a, canaries_on):
    node, identity = node_a
    now = timezone.now()
    canary = _judge_until_a_canary_is_planted(identity, student, problem, now=now)
    for attempt in range(canaries_on.KECE_MAX_ATTEMPTS):
        later = now + timedelta(minutes=10 * attempt)
        job = _canary_job(identity, canary, now=later)
        settle(identity, infra_error(job), now=later)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert not SettlementEvent.objects.filter(job_id=job.pk).exists()
    integrity_step(now=later)
    canary.refresh_from_db()
    node.refresh_from_db()
    assert (canary.ok, canary.graded_at, node.quarantined_at) == (None, later, None)
