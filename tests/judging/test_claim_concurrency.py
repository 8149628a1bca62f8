"""Claims racing on MariaDB: no job twice, no slot limit exceeded."""

import collections
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from judging.models import JobState, JudgeJob
from judging.services.claim import job_claim
from tests.concurrency import raise_first_error, run_concurrently
from tests.factories import HostGroupFactory, UserFactory, make_node, make_problem
from tests.judging.helpers import submit

# One student submits hundreds of jobs here, as no student could: fair use is out of the way.
pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("unlimited_submits")]


def _claimer(identity, *, rounds, free_slots, now):
    def run():
        taken = []
        for _ in range(rounds):
            taken += [job.pk for job in job_claim(identity=identity, free_slots=free_slots, now=now).jobs]
        return taken
    return run


def test_concurrent_claimers_never_get_the_same_job():
    student = UserFactory()
    problem = make_problem(languages=("python",))
    for _ in range(120):
        submit(student, problem)
    now = timezone.now()
    # Twelve nodes in six host groups, generous slots: only SKIP LOCKED keeps them apart.
    identities = [make_node(pool="python", max_slots=20, host_group=HostGroupFactory(total_slots=40), now=now)[1]
                  for _ in range(12)]

    results = run_concurrently([_claimer(i, rounds=5, free_slots=4, now=now) for i in identities])
    raise_first_error(results)

    taken = [job_id for result in results for job_id in result]
    assert len(taken) == len(set(taken)) == 120
    owners = dict(JudgeJob.objects.values_list("id", "node_id"))
    for identity, result in zip(identities, results):
        assert all(owners[job_id] == identity.node_id for job_id in result)
    assert set(JudgeJob.objects.values_list("lease_epoch", flat=True)) == {1}


def test_node_and_host_group_slots_hold_under_concurrent_claims_and_expired_leases():
    student = UserFactory()
    problem = make_problem(languages=("python",))
    for _ in range(60):
        submit(student, problem)
    now = timezone.now()
    group = HostGroupFactory(total_slots=7)
    nodes = [make_node(pool="python", max_slots=3, host_group=group, now=now) for _ in range(4)]

    # Round one fills the group; then every lease expires but the reaper has not run.
    raise_first_error(run_concurrently([_claimer(i, rounds=3, free_slots=2, now=now) for _, i in nodes]))
    running = collections.Counter(JudgeJob.objects.filter(state=JobState.RUNNING).values_list("node_id", flat=True))
    assert sum(running.values()) == 7
    assert all(count <= 3 for count in running.values())

    later = now + timedelta(hours=1)
    from nodes.models import JudgeNode
    JudgeNode.objects.update(last_heartbeat_at=later)
    results = run_concurrently([_claimer(i, rounds=3, free_slots=3, now=later) for _, i in nodes])
    raise_first_error(results)
    assert sum(len(r) for r in results) == 0, "expired-but-unreaped leases must still hold their slots"


def test_the_claim_query_uses_the_pool_state_available_index():
    student = UserFactory()
    problems = {pool: make_problem(languages=(pool,)) for pool in ("python", "cpp", "java")}
    for pool, problem in problems.items():
        for _ in range(150):
            submit(student, problem, language=pool)
    JudgeJob.objects.filter(id__lte=200).update(state=JobState.COMPLETED)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE TABLE judge_job")
        cursor.fetchall()
    _, identity = make_node(pool="python")
    with CaptureQueriesContext(connection) as queries:
        job_claim(identity=identity, free_slots=2, now=timezone.now())
    [claim_sql] = [q["sql"] for q in queries if "SKIP LOCKED" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + claim_sql)
        columns = [c[0] for c in cursor.description]
        plan = [dict(zip(columns, row)) for row in cursor.fetchall()]
    assert plan[0]["key"] == "judge_job_claim", plan


def test_concurrent_claimers_take_the_classes_in_order_and_each_class_in_fifo_order():
    from judging.models import PriorityClass
    from judging.services.rejudge import submission_rejudge

    problem = make_problem(languages=("python",))
    now = timezone.now()
    users = [UserFactory() for _ in range(10)]
    rejudges = []
    for index in range(100):
        old = submit(users[index % 10], problem, now=now - timedelta(days=1))
        JudgeJob.objects.filter(pk=old.current_judge_job_id).update(state=JobState.COMPLETED)
        rejudges.append(submission_rejudge(submission_type="ALGO", submission_id=old.pk, now=now,
                                           priority_class=PriorityClass.REJUDGE).pk)
    # Practice and exam work posted after the backlog.
    practice = [submit(users[i % 10], problem, now=now + timedelta(seconds=1)).current_judge_job_id
                for i in range(30)]
    exam = [submit(users[i % 10], problem, now=now + timedelta(seconds=2),
                   priority_class=PriorityClass.EXAM).current_judge_job_id for i in range(30)]
    identities = [make_node(pool="python", max_slots=20, host_group=HostGroupFactory(total_slots=20), now=now)[1]
                  for _ in range(8)]

    results = run_concurrently([_claimer(i, rounds=3, free_slots=4, now=now + timedelta(seconds=3))
                                for i in identities])
    raise_first_error(results)
    taken = {job_id for result in results for job_id in result}
    assert len(taken) == 96
    # Each claim takes the smallest keys it can lock, so together they took every exam and
    # practice job and, of the backlog, exactly its oldest.
    assert set(exam) | set(practice) <= taken
    assert taken - set(exam) - set(practice) == set(rejudges[:36])


def _rows_read(sql: str, params) -> int:
    """Index and table rows MariaDB reads to answer `sql` (this session's handler counters)."""
    with connection.cursor() as cursor:
        cursor.execute("FLUSH STATUS")
        cursor.execute(sql, params)
        cursor.fetchall()
        cursor.execute("SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_next', 'Handler_read_rnd_next')")
        return sum(int(value) for _, value in cursor.fetchall())


def test_the_claim_counts_its_node_and_group_each_on_its_own_index():
    student = UserFactory()
    python, java = make_problem(languages=("python",)), make_problem(languages=("java",))
    group = HostGroupFactory(total_slots=400)
    _, busy = make_node(pool="python", host_group=group, max_slots=200)
    _, claimer = make_node(pool="python", host_group=group, max_slots=200)
    other_group = HostGroupFactory(total_slots=100)
    _, other = make_node(pool="java", host_group=other_group, max_slots=100)
    for _ in range(300):
        submit(student, python)
    for _ in range(100):
        submit(student, java, language="java")
    now = timezone.now()
    assert len(job_claim(identity=busy, free_slots=200, now=now).jobs) == 200
    assert len(job_claim(identity=claimer, free_slots=80, now=now).jobs) == 80
    assert len(job_claim(identity=other, free_slots=100, now=now).jobs) == 100
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE TABLE judge_job")
        cursor.fetchall()

    with CaptureQueriesContext(connection) as queries:
        assert len(job_claim(identity=claimer, free_slots=5, now=now).jobs) == 5
    [count_sql] = [q["sql"] for q in queries if "COUNT(" in q["sql"]]

    # Counted again now (the node's 85 running jobs, its group's 285), each count reads its
    # own range of the (node_id, state) and (host_group_id, state) indexes: 370 entries,
    # whatever else runs. A plan over the table, or over every running job, reads more.
    own = (JudgeJob.objects.filter(node_id=claimer.node_id, state=JobState.RUNNING).count()
           + JudgeJob.objects.filter(host_group=group, state=JobState.RUNNING).count())
    assert own == 85 + 285
    assert _rows_read(count_sql, None) <= own + 2, "the running counts read beyond their own index ranges"
