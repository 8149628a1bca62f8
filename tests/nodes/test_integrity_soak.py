"""The proof, through the node API as agents speak it (`tests/nodes/api_nodes.py`): a node
that judges its self-check honestly and answers AC to all other work passes the check and
is then quarantined through ordinary work; honest nodes are never quarantined over a
1,000-job soak with canaries and cross-checks at high rates."""

import pytest
from django.utils import timezone

from judging.models import JobKind, JobState, JudgeJob, ProblemResult, SettlementEvent, Submission
from kece.periodic import events_step, integrity_step
from nodes.checks import _queue_self_check
from nodes.models import CheckStatus, CrossCheck, HiddenCanary, JudgeNode, NodeCheck
from tests.factories import UserFactory, make_node, make_problem
from tests.judging.helpers import submit
from tests.nodes.api_nodes import ApiNode

# The node API's claim runs on connections of its own: committed data.
pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]

PROGRAMS = {  # the students' programs for the test problem (A + B), with an honest verdict
    "AC": "print(sum(map(int, open(0).read().split())))\n",
    "WA": "print(0)\n",
}


def _self_check(api: ApiNode, *, now) -> NodeCheck:
    """The node's self-check, as an admin's check queues it once the probe passed; the node
    claims its DIAGNOSTIC jobs and answers them."""
    node = JudgeNode.objects.get(pk=api.node.pk)
    check = NodeCheck.objects.create(node=node, config_revision=node.config_revision, runtime_spec=node.runtime_spec,
                                     agent_version=node.agent_version, started_at=now)
    _queue_self_check(check, node, items=[], now=now)
    api.heartbeat()
    assert api.work(free_slots=8) == 6  # the Python pool's six canary programs
    check.refresh_from_db()
    return check


@pytest.mark.usefixtures("unlimited_submits")  # dozens of jobs from one account, as fast as a loop
def test_a_node_that_lies_outside_its_self_check_passes_it_and_is_quarantined_through_ordinary_work(settings):
    rate = 10
    settings.KECE_CANARY_RATE = rate
    settings.KECE_CANARY_MIN_INTERVAL_S = 0
    now = timezone.now()
    student, problem = UserFactory(), make_problem(languages=("python",), cases=3)
    node, _ = make_node(pool="python", name="tampered")
    JudgeNode.objects.filter(pk=node.pk).update(self_check_status=CheckStatus.NONE)
    tampered = ApiNode(node, tampered=True)

    check = _self_check(tampered, now=now)
    assert check.status == NodeCheck.Status.PASSED
    assert all(job["kind"] == "DIAGNOSTIC" for job in tampered.seen)

    # Ordinary work: the students' right and wrong programs, five at a time, and the
    # periodic step between rounds. Each canary is planted after at most 2 × rate - 1 judge
    # jobs; one in six expects AC (which the liar gets right by chance), so 30 rounds of
    # five leave it about 7 canaries to fail, every one of which it would.
    judged = 0
    for round_ in range(30):
        for index in range(5):
            submit(student, problem, code=PROGRAMS["WA" if index % 2 else "AC"])
        tampered.heartbeat()
        judged += tampered.work()
        integrity_step()
        node.refresh_from_db()
        if node.quarantined_at is not None:
            break
    assert node.quarantine_reason.startswith("canary_mismatch:"), (judged, node.quarantine_reason)
    failed = HiddenCanary.objects.get(node_id=node.pk, ok=False)
    assert failed.expect != "AC"
    # Every canary before the failed one expected AC: the liar was caught by the first
    # canary it could fail.
    assert set(HiddenCanary.objects.filter(node_id=node.pk, ok=True).values_list("expect", flat=True)) <= {"AC"}
    # It lied on the students' wrong programs meanwhile; now it gets no judge job at all.
    assert Submission.objects.filter(user=student, code=PROGRAMS["WA"], verdict="AC").exists()
    submit(student, problem, code=PROGRAMS["AC"])
    tampered.heartbeat()
    assert tampered.claim(4) == []


@pytest.mark.usefixtures("unlimited_submits")  # a thousand jobs from a few accounts, as fast as a loop
def test_honest_nodes_are_never_quarantined_over_a_1000_job_soak(settings):
    settings.KECE_CANARY_RATE = 20
    settings.KECE_CANARY_MIN_INTERVAL_S = 0
    settings.KECE_CROSS_CHECK_RATE = 20
    settings.KECE_CROSS_CHECK_QUARANTINE_AFTER = 1  # one disagreement would do
    student, problem = UserFactory(), make_problem(languages=("python",), cases=3)
    honest = [ApiNode(make_node(pool="python", name=f"honest-{n}")[0]) for n in "ab"]

    def round_(count: int) -> None:
        for index in range(count):
            submit(student, problem, code=PROGRAMS["WA" if index % 3 == 0 else "AC"])
        for api in honest:
            api.heartbeat()
        honest[0].work(at_most=count // 2)
        honest[1].work()
        honest[0].work()
        integrity_step()

    for _ in range(40):
        round_(25)
    for _ in range(3):  # the last canaries and checks planted
        round_(0)

    assert not JudgeNode.objects.filter(quarantined_at__isnull=False).exists()
    students = Submission.objects.filter(user=student)
    assert students.count() == 1000
    assert {(s.code, s.verdict) for s in students} == {(PROGRAMS["AC"], "AC"), (PROGRAMS["WA"], "WA")}
    canaries = HiddenCanary.objects.all()
    assert {c.ok for c in canaries} == {True}
    assert {c.node_id for c in canaries} == {api.node.pk for api in honest}
    checks = CrossCheck.objects.all()
    assert checks.count() >= 10 and {c.agreed for c in checks} == {True}
    assert {c.original_node_id != c.check_node_id for c in checks} == {True}
    # Nothing of theirs is counted: the student's attempts are the student's own.
    hidden = JudgeJob.objects.filter(kind=JobKind.JUDGE, bound_node__isnull=False)
    assert hidden.count() == canaries.count() + checks.count()
    assert not SettlementEvent.objects.filter(job_id__in=hidden.values("id")).exists()
    assert not hidden.exclude(state=JobState.COMPLETED).exists()
    events_step()
    assert ProblemResult.objects.get(user=student, problem=problem).attempts == 1000
