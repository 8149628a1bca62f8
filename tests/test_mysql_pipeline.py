"""Statements sent together (`kece.mysql.pipeline`): inside a transaction, writes no one
reads the answer of and locks taken together go to MariaDB with the next statement that
needs an answer, in one round trip; the transaction is still the same transaction, in the
same order, failing where it would have failed and leaving nothing when it does."""

import pytest
from django.db import IntegrityError, connection, transaction

from judging.locking import host_group_row, job_rows, lock_together, node_row
from judging.models import JobAttempt, JudgeJob
from kece.rows import insert_values, update_by_pk
from nodes.models import JudgeNode
from bench._django import count_round_trips
from tests.judging.helpers import claim, judged, submit
from tests.factories import UserFactory, make_node, make_problem
from tests.test_mysql_backend import _locked_elsewhere, _name_elsewhere, _status

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def round_trips():
    """What this thread's connection sends to the server from now on, one entry per round
    trip."""
    sent = []
    count_round_trips(sent.append)
    yield sent
    connection.close()


def _attempt(job_id: int, epoch: int) -> dict:
    from django.utils import timezone

    now = timezone.now()
    return {"job_id": job_id, "lease_epoch": epoch, "node_id": None, "session_epoch": 1, "claimed_at": now,
            "ended_at": now, "outcome": "REQUEUED", "error": "", "message": ""}


def test_writes_go_with_the_next_read_and_the_commit_with_the_last_writes(round_trips):
    node, _ = make_node()
    round_trips.clear()
    with transaction.atomic():
        update_by_pk(JudgeNode, [node.pk], {"name": "first"})
        update_by_pk(JudgeNode, [node.pk], {"name": "second"})
        assert round_trips == []  # nothing sent yet, not even START TRANSACTION
        # The read sees both writes, in the order given.
        assert JudgeNode.objects.get(pk=node.pk).name == "second"
        assert len(round_trips) == 1
        assert round_trips[0].startswith(b"START TRANSACTION;\nUPDATE")
        update_by_pk(JudgeNode, [node.pk], {"name": "third"})
        assert _name_elsewhere(node.pk) == node.name  # not committed, not even sent
    assert len(round_trips) == 2 and round_trips[1].endswith(b";\nCOMMIT")
    assert _name_elsewhere(node.pk) == "third"


def test_a_transaction_that_runs_nothing_sends_nothing(round_trips):
    begins = _status("Com_begin")
    round_trips.clear()
    with transaction.atomic():
        pass
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            raise RuntimeError
    assert round_trips == []
    assert _status("Com_begin") == begins


def test_outside_a_transaction_a_write_is_sent_and_committed_at_once(round_trips):
    node, _ = make_node()
    round_trips.clear()
    update_by_pk(JudgeNode, [node.pk], {"name": "at once"})
    assert len(round_trips) == 1
    assert _name_elsewhere(node.pk) == "at once"


@pytest.mark.parametrize("carried_by", ["a read", "the commit"])
def test_a_write_that_fails_fails_what_carried_it_and_the_transaction_leaves_nothing(carried_by):
    node, _ = make_node()
    problem = make_problem(languages=("python",))
    job_id = submit(UserFactory(), problem).current_judge_job_id
    insert_values(JobAttempt, [_attempt(job_id, 1)])
    with pytest.raises(IntegrityError):
        with transaction.atomic():
            JudgeNode.objects.select_for_update().get(pk=node.pk)
            update_by_pk(JudgeNode, [node.pk], {"name": "lost"})
            insert_values(JobAttempt, [_attempt(job_id, 1)])  # the same attempt again: refused
            if carried_by == "a read":
                JudgeNode.objects.get(pk=node.pk)
    assert _name_elsewhere(node.pk) == node.name
    assert not _locked_elsewhere(node.pk)
    assert JobAttempt.objects.filter(job_id=job_id).count() == 1
    # The connection goes on as before.
    with transaction.atomic():
        update_by_pk(JudgeNode, [node.pk], {"name": "kept"})
    assert _name_elsewhere(node.pk) == "kept"


def test_locks_taken_together_are_one_round_trip_and_held_until_the_commit(round_trips):
    node, _ = make_node()
    problem = make_problem(languages=("python",))
    job_id = submit(UserFactory(), problem).current_judge_job_id
    round_trips.clear()
    with transaction.atomic():
        group, locked, jobs = lock_together(host_group_row(node.host_group_id), node_row(node.pk),
                                            job_rows([job_id, job_id + 10_000]))
        assert len(round_trips) == 1
        assert (group.pk, locked.pk, list(jobs)) == (node.host_group_id, node.pk, [job_id])
        assert locked.name == node.name and jobs[job_id].state == JudgeJob.objects.get(pk=job_id).state
        assert _locked_elsewhere(node.pk)
    assert not _locked_elsewhere(node.pk)


def test_a_judged_result_that_asks_for_the_next_job_and_its_source_makes_three_round_trips(round_trips):
    """The hottest transaction: its four locks (host group, node, submission, job) with the
    running counts; its writes with the claim's pick; the lease and the next job's source
    with the COMMIT. (The node's host group comes with its identity, as authenticated.)"""
    from dataclasses import replace

    from django.utils import timezone

    from judging.services.settle import job_settle_and_claim

    node, identity = make_node(pool="python")
    identity = replace(identity, host_group_id=node.host_group_id)
    student, problem = UserFactory(), make_problem(languages=("python",))
    submit(student, problem)
    [job] = claim(identity)
    waiting = submit(student, problem, code="print('next')\n").current_judge_job_id
    round_trips.clear()
    status, carried = job_settle_and_claim(identity=identity, request=judged(job), now=timezone.now(),
                                           free_slots=1, with_sources=True)
    assert (status, [j.pk for j in carried.jobs]) == ("settled", [waiting])
    assert carried.sources_read() == {waiting: "print('next')\n"}
    assert len(round_trips) == 3
    locks, pick, lease = round_trips
    assert locks.count(b"FOR UPDATE") + locks.count(b"LOCK IN SHARE MODE") == 4 and b"COUNT(*)" in locks
    # The settle's own writes go before the pick: its job's index entry is no longer RUNNING
    # when another post's pick reads past the queue's end.
    assert pick.index(b"UPDATE") < pick.index(b"SKIP LOCKED") and pick.endswith(b"SKIP LOCKED")
    assert b"UPDATE" in lease and lease.endswith(b";\nCOMMIT")
    assert JudgeJob.objects.get(pk=waiting).node_id == identity.node_id


def test_writes_given_after_a_savepoint_that_is_rolled_back_are_never_sent(round_trips):
    node, _ = make_node()
    problem = make_problem(languages=("python",))
    job_id = submit(UserFactory(), problem).current_judge_job_id
    insert_values(JobAttempt, [_attempt(job_id, 1)])
    round_trips.clear()
    with transaction.atomic():
        update_by_pk(JudgeNode, [node.pk], {"name": "kept"})
        with pytest.raises(RuntimeError):
            with transaction.atomic():
                update_by_pk(JudgeNode, [node.pk], {"name": "undone"})
                insert_values(JobAttempt, [_attempt(job_id, 1)])  # would be refused, if sent
                raise RuntimeError
    assert not any(b"INSERT INTO `judge_job_attempt`" in sent for sent in round_trips)
    assert _name_elsewhere(node.pk) == "kept"
