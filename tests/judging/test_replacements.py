"""A judged result whose freed slot asks for the next job replaces its job one for one: such
posts of one host group and node run side by side (shared locks, MariaDB), while a claim
for more, and everything that changes the limits, still takes the rows exclusively."""

import contextlib
import threading

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from judging.models import JobState, JudgeJob
from judging.services.claim import job_claim
from judging.services.settle import job_settle_and_claim
from nodes.models import JudgeHostGroup, JudgeNode
from tests.concurrency import lock_waits, raise_first_error, raw_connection, run_concurrently, wait_until
from tests.factories import HostGroupFactory, UserFactory, make_node, make_problem
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]


def _post(identity, job, *, lock_wait_seconds=None):
    """The result post with its carried claim, on this thread's connection."""
    if lock_wait_seconds is not None:
        with connection.cursor() as cursor:
            cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {lock_wait_seconds}")
    return job_settle_and_claim(identity=identity, request=judged(job), now=timezone.now(), free_slots=1)


def _running(**where) -> int:
    return JudgeJob.objects.filter(state=JobState.RUNNING, **where).count()


@pytest.fixture
def student():
    return UserFactory()


@pytest.fixture
def problem():
    return make_problem(languages=("python",))


@contextlib.contextmanager
def _post_held_at_its_submission(identity, job):
    """The job's result post (with its carried claim) in a thread of its own, stopped at its
    submission's lock, which another client holds: the post holds whatever it locked before
    it. Yields the dict its answer lands in once the block ends and the lock is let go."""
    connection.close()
    holder = raw_connection()
    holder.cursor().execute("START TRANSACTION")
    holder.cursor().execute(f"SELECT id FROM submission WHERE id = {job.submission_id} FOR UPDATE")
    outcome = {}

    def post():
        try:
            outcome["post"] = _post(identity, job)
        finally:
            connection.close()

    blocked = threading.Thread(target=post)
    blocked.start()
    try:
        wait_until(lambda: lock_waits() >= 1, timeout=20, message="the post waits on its submission")
        yield outcome
    finally:
        holder.rollback()
        holder.close()
        blocked.join(30)


def test_two_replacements_of_one_node_run_side_by_side(student, problem):
    group = HostGroupFactory(total_slots=2)
    node, identity = make_node(pool="python", max_slots=2, host_group=group)
    for _ in range(4):
        submit(student, problem)
    first, second = claim(identity, free_slots=2)
    with _post_held_at_its_submission(identity, first) as outcome:
        # Exclusive host-group or node locks would make this one wait for the first.
        status, replacement = _post(identity, second, lock_wait_seconds=2)
        assert status == "settled"
        assert len(replacement.jobs) == 1
        assert "post" not in outcome
    status, replacement = outcome["post"]
    assert status == "settled" and len(replacement.jobs) == 1
    assert _running(node_id=node.pk) == 2


def test_a_claim_for_more_waits_for_a_replacement_in_flight(student, problem):
    group = HostGroupFactory(total_slots=3)
    _node, identity = make_node(pool="python", max_slots=2, host_group=group)
    _other, other_identity = make_node(pool="python", max_slots=2, host_group=group)
    for _ in range(6):
        submit(student, problem)
    [job] = claim(identity, free_slots=1)
    with _post_held_at_its_submission(identity, job) as outcome:
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
        with pytest.raises(OperationalError) as waited:
            job_claim(identity=other_identity, free_slots=2, now=timezone.now())
        assert waited.value.args[0] == 1205  # the lock wait timed out: it queued behind the post
    connection.close()
    assert outcome["post"][0] == "settled"
    assert len(job_claim(identity=other_identity, free_slots=2, now=timezone.now()).jobs) == 2
    assert _running(host_group_id=group.pk) == 3


@pytest.mark.parametrize("lowered, reason", [("group", "group_full"), ("node", "node_full")])
def test_a_replacement_respects_a_lowered_limit(student, problem, lowered, reason):
    group = HostGroupFactory(total_slots=2)
    node, identity = make_node(pool="python", max_slots=2, host_group=group)
    for _ in range(4):
        submit(student, problem)
    first, second = claim(identity, free_slots=2)
    if lowered == "group":
        JudgeHostGroup.objects.filter(pk=group.pk).update(total_slots=1)
    else:
        JudgeNode.objects.filter(pk=node.pk).update(max_slots=1)

    status, replacement = _post(identity, first)
    assert status == "settled" and replacement.jobs == [] and replacement.reason == reason
    status, replacement = _post(identity, second)
    assert status == "settled" and len(replacement.jobs) == 1
    assert _running(host_group_id=group.pk) == _running(node_id=node.pk) == 1


def test_a_job_counted_in_the_nodes_former_group_is_not_replaced_past_the_new_groups_limit(student, problem):
    former, full = HostGroupFactory(total_slots=4), HostGroupFactory(total_slots=1)
    node, identity = make_node(pool="python", max_slots=2, host_group=former)
    _busy, busy_identity = make_node(pool="python", max_slots=1, host_group=full)
    for _ in range(4):
        submit(student, problem)
    [job] = claim(identity, free_slots=1)
    claim(busy_identity, free_slots=1)
    JudgeNode.objects.filter(pk=node.pk).update(host_group=full)

    status, replacement = _post(identity, job)
    assert status == "settled" and replacement.jobs == [] and replacement.reason == "group_full"
    assert _running(host_group_id=full.pk) == 1
    assert _running(host_group_id=former.pk) == 0


@pytest.mark.usefixtures("unlimited_submits")
def test_concurrent_replacements_and_claims_never_exceed_the_limits(student, problem):
    """Three nodes of one host group, whose limit is below the nodes' sum: each node's slots
    post their results with carried claims while the nodes also claim for more. Every read
    of the committed counts in between stays within the limits, no job is leased twice, and
    every job is judged exactly once."""
    group = HostGroupFactory(total_slots=5)
    nodes = [make_node(pool="python", max_slots=3, host_group=group) for _ in range(3)]
    jobs = 90
    for _ in range(jobs):
        submit(student, problem)
    connection.close()
    over = []

    def check_limits():
        running = JudgeJob.objects.filter(state=JobState.RUNNING, host_group_id=group.pk)
        per_node = {n.pk: 0 for n, _ in nodes}
        for node_id in running.values_list("node_id", flat=True):
            per_node[node_id] += 1
        if sum(per_node.values()) > 5 or max(per_node.values()) > 3:
            over.append(per_node)

    def slot_worker(identity):
        def run():
            judged_here = []
            held = list(job_claim(identity=identity, free_slots=1, now=timezone.now()).jobs)
            idle = 0
            while idle < 20:
                if not held:
                    idle += 1
                    held = list(job_claim(identity=identity, free_slots=1, now=timezone.now()).jobs)
                    continue
                job = held.pop()
                status, replacement = _post(identity, job)
                assert status == "settled", status
                judged_here.append(job.pk)
                held += replacement.jobs
                check_limits()
            return judged_here
        return run

    def greedy_claimer(identity):
        def run():
            taken = []
            for _ in range(15):
                for job in job_claim(identity=identity, free_slots=3, now=timezone.now()).jobs:
                    assert settle(identity, judged(job)) == "settled"
                    taken.append(job.pk)
                check_limits()
            return taken
        return run

    workers = [slot_worker(identity) for _, identity in nodes for _ in range(2)]
    workers += [greedy_claimer(identity) for _, identity in nodes[:1]]
    results = run_concurrently(workers)
    raise_first_error(results)

    done = [job_id for result in results for job_id in result]
    assert len(done) == len(set(done)) == jobs
    assert not over, over
    assert JudgeJob.objects.filter(state=JobState.COMPLETED).count() == jobs
    assert set(JudgeJob.objects.values_list("lease_epoch", flat=True)) == {1}
