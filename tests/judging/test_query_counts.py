"""Hot paths pin their statement counts: a change that adds a query per job shows here."""

import pytest
from django.utils import timezone

from judging.identity import NodeIdentity
from judging.models import JudgeJob, PriorityClass
from judging.services import job_meta
from judging.services.claim import job_claim
from judging.services.settle import job_settle_and_claim
from judging.services.leases import RenewItem, lease_renew
from nodes.services import AgentReport, HeartbeatReport, node_heartbeat
from tests.factories import HostGroupFactory, make_node
from tests.judging.helpers import judged, settle, submit

pytestmark = pytest.mark.django_db

# Each test runs inside a transaction of its own, so the service's transaction becomes a
# savepoint here: SAVEPOINT and RELEASE SAVEPOINT, which production does not send.
SAVEPOINT = 2


@pytest.fixture
def big_node(db):
    node, identity = make_node(pool="python", max_slots=16, host_group=HostGroupFactory(total_slots=16))
    return node, NodeIdentity(identity.node_id, identity.credential_digest, identity.session_epoch,
                              node.host_group_id)


def test_a_practice_submit_is_four_statements(student, problem, django_assert_num_queries):
    # problem + manifest with the user's share and the pool's pressure (judging.pressure); in
    # the transaction the submission inserted by the statement that locks the problem row
    # shared (a deletion waits for the submit), job, pointer
    with django_assert_num_queries(4 + SAVEPOINT):
        submit(student, problem)


def test_an_exam_class_submit_is_four_statements(student, problem, django_assert_num_queries):
    with django_assert_num_queries(4 + SAVEPOINT):  # an exam answer is never held back for its user
        submit(student, problem, priority_class=PriorityClass.EXAM)


def test_a_claim_of_eight_jobs_is_five_statements(student, problem, big_node, django_assert_num_queries):
    _, identity = big_node
    for _ in range(8):
        submit(student, problem)
    with django_assert_num_queries(5 + SAVEPOINT):  # group, node, slot counts, SKIP LOCKED pick, lease
        jobs = job_claim(identity=identity, free_slots=8, now=timezone.now()).jobs
    assert len(jobs) == 8
    # Nothing is read back: the leased jobs handed out are the rows as committed.
    fields = ("state", "node_id", "session_epoch", "lease_epoch", "lease_until", "attempts", "started_at",
              "host_group_id", "last_node_id", "snapshot", "progress_phase", "wait_reason")
    for job in jobs:
        stored = JudgeJob.objects.get(pk=job.pk)
        assert {f: getattr(job, f) for f in fields} == {f: getattr(stored, f) for f in fields}


def test_settling_a_result_is_five_statements(student, problem, big_node, django_assert_num_queries):
    _, identity = big_node
    submit(student, problem)
    [job] = job_claim(identity=identity, free_slots=1, now=timezone.now()).jobs
    # node, submission, job, the job's and the submission's result in one update, outbox
    with django_assert_num_queries(5 + SAVEPOINT):
        assert settle(identity, judged(job)) == "settled"


def test_settling_a_job_another_process_leased_reads_its_meta_first(student, problem, big_node,
                                                                      django_assert_num_queries):
    _, identity = big_node
    submit(student, problem)
    [job] = job_claim(identity=identity, free_slots=1, now=timezone.now()).jobs
    job_meta.forget_all()
    with django_assert_num_queries(6 + SAVEPOINT):  # + job meta
        assert settle(identity, judged(job)) == "settled"


def test_a_result_with_its_next_claim_is_nine_statements_in_one_transaction(student, problem, big_node,
                                                                            django_assert_num_queries):
    _, identity = big_node
    submit(student, problem)
    submit(student, problem)
    [job] = job_claim(identity=identity, free_slots=1, now=timezone.now()).jobs
    # group, node, submission, job, job and result update, outbox, slot counts, SKIP LOCKED pick, lease
    with django_assert_num_queries(9 + SAVEPOINT):
        status, claim = job_settle_and_claim(identity=identity, request=judged(job), now=timezone.now(),
                                             free_slots=1)
    assert status == "settled" and len(claim.jobs) == 1 and claim.jobs[0].pk != job.pk


def test_renewing_eight_leases_is_ten_statements(student, problem, big_node, django_assert_num_queries):
    _, identity = big_node
    for _ in range(8):
        submit(student, problem)
    jobs = job_claim(identity=identity, free_slots=8, now=timezone.now()).jobs
    with django_assert_num_queries(10 + SAVEPOINT):  # node, the jobs, one update per lease
        answers = lease_renew(identity=identity, now=timezone.now(),
                              items=[RenewItem(j.pk, j.lease_epoch, "JUDGING", 1) for j in jobs])
    assert all(a["ok"] for a in answers)


def test_a_heartbeat_is_two_statements(big_node, django_assert_num_queries):
    node, identity = big_node
    beat = HeartbeatReport(AgentReport("t", "python-r1", 2), 0, True, {})
    with django_assert_num_queries(2 + SAVEPOINT):  # lock the node, write it
        node_heartbeat(node_id=node.pk, credential_digest_value=identity.credential_digest,
                       session_epoch=identity.session_epoch, beat=beat, now=timezone.now())
