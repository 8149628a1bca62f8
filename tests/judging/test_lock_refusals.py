"""The lock helper's refusals and what its locks exclude, beyond the global order itself
(`test_locking.py`): ranks and keys it compares, what it lets through, and on MariaDB what a
shared and an exclusive lock keep out of another connection."""

import logging
import threading

import pytest
from django.db import OperationalError, connection, transaction

from judging.locking import (LockOrderViolation, claim_queued_jobs, lock_host_group, lock_job, lock_jobs,
                             lock_node, lock_submission, save_locked)
from judging.models import DbSubmission, JobState, JudgeJob
from tests.factories import UserFactory, make_node, make_problem
from tests.judging.helpers import submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows(db):
    node, _ = make_node(pool="python")
    user = UserFactory()
    problem = make_problem(languages=("python",))
    first, second = submit(user, problem), submit(user, problem)
    sql = submit(user, make_problem(kind="SQL"), language="mysql", code="SELECT 1;")
    return node, first, second, sql


def test_a_host_group_lock_after_a_node_lock_is_refused(rows):
    node, *_ = rows
    with pytest.raises(LockOrderViolation, match="HOST_GROUP .* after NODE"):
        with transaction.atomic():
            lock_node(node.pk)
            lock_host_group(node.host_group_id)


def test_code_submissions_come_before_sql_ones_whatever_their_ids(rows):
    _, first, second, sql = rows
    with transaction.atomic():
        lock_submission("ALGO", second.pk)
        assert lock_submission("SQL", sql.pk).pk == sql.pk
    with pytest.raises(LockOrderViolation):
        with transaction.atomic():
            lock_submission("SQL", sql.pk)
            lock_submission("ALGO", first.pk)


def test_a_batch_is_locked_in_key_order_whatever_order_it_is_given(rows):
    _, first, second, _ = rows
    ids = sorted([first.current_judge_job_id, second.current_judge_job_id])
    with transaction.atomic():
        assert sorted(lock_jobs(ids[::-1])) == ids
        # Held rows are free again, even out of order.
        assert lock_job(ids[0]).pk == ids[0]


def test_a_row_already_held_may_be_locked_again_after_higher_ranks(rows):
    node, first, *_ = rows
    with transaction.atomic():
        lock_node(node.pk)
        lock_job(first.current_judge_job_id)
        assert lock_node(node.pk).pk == node.pk


def test_a_missing_row_locks_as_none(rows):
    node, *_ = rows
    with transaction.atomic():
        assert lock_host_group(10**9) is None
    with transaction.atomic():
        assert lock_node(10**9) is None
    with transaction.atomic():
        assert lock_submission("SQL", 10**9) is None
        assert lock_job(10**9) is None


def test_with_the_checker_off_an_out_of_order_lock_is_logged_and_taken(rows, settings, caplog):
    settings.KECE_LOCK_ORDER_CHECK = False
    node, first, *_ = rows
    with caplog.at_level(logging.ERROR, logger="kece.locking"), transaction.atomic():
        lock_job(first.current_judge_job_id)
        assert lock_node(node.pk).pk == node.pk
    [record] = caplog.records
    assert "lock order violation: NODE" in record.getMessage()


def test_rows_read_under_a_lock_are_whole_and_typed(rows):
    _, first, *_ = rows
    with transaction.atomic():
        job = lock_job(first.current_judge_job_id)
    stored = JudgeJob.objects.get(pk=job.pk)
    assert (job.snapshot, job.available_at, job.state) == (stored.snapshot, stored.available_at, stored.state)
    assert job.available_at.tzinfo is not None and isinstance(job.snapshot, dict)


def test_a_sql_submission_is_written_only_once_locked(rows):
    _, _, _, sql = rows
    sql.verdict = "WA"
    with pytest.raises(LockOrderViolation, match="has not locked"):
        with transaction.atomic():
            save_locked(sql, ["verdict"])
    with transaction.atomic():
        locked = lock_submission("SQL", sql.pk)
        locked.verdict = "AC"
        save_locked(locked, ["verdict"])
    assert DbSubmission.objects.get(pk=sql.pk).verdict == "AC"


# --- the claim's SKIP LOCKED scan -------------------------------------------------------------------

def _queued(*submissions):
    """This test's queued jobs (the scan's WHERE, narrowed to them)."""
    ids = [s.current_judge_job_id for s in submissions]
    return f"state = %s AND id IN ({', '.join(['%s'] * len(ids))})", [JobState.QUEUED, *ids]


def test_the_scan_takes_nothing_for_no_slots_and_skips_rows_it_holds(rows):
    node, first, second, _ = rows
    third = submit(first.user, first.problem)
    where, params = _queued(first, second, third)
    with transaction.atomic():
        assert claim_queued_jobs(where, params, limit=0) == []
        lock_jobs([first.current_judge_job_id, second.current_judge_job_id])
        assert [j.pk for j in claim_queued_jobs(where, params, limit=3)] == [third.current_judge_job_id]


def test_the_scan_is_not_order_checked_but_what_it_took_is(rows):
    node, first, second, _ = rows
    where, params = _queued(first, second)
    with transaction.atomic():
        lock_job(max(first.current_judge_job_id, second.current_judge_job_id))
        taken = claim_queued_jobs(where, params, limit=2)  # a lower id, after a higher one: it never waits
        assert len(taken) == 1
        with pytest.raises(LockOrderViolation):
            lock_node(node.pk)


# --- what the locks keep out of another connection (MariaDB) -----------------------------------------

def _in_another_connection(action):
    """Run `action` in a transaction of its own connection with a one-second lock wait;
    True if it got its lock, False if it timed out waiting."""
    outcome = {}

    def run():
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
                action()
            outcome["locked"] = True
        except OperationalError as error:
            outcome["locked"] = error.args[0] != 1205 and error
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    return outcome["locked"]


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("held_shared, wanted_shared, granted", [
    (True, True, True), (True, False, False), (False, True, False), (False, False, False),
], ids=["shared-shared", "shared-exclusive", "exclusive-shared", "exclusive-exclusive"])
def test_only_shared_node_locks_are_held_side_by_side(held_shared, wanted_shared, granted):
    node, _ = make_node(pool="python")
    with transaction.atomic():
        lock_node(node.pk, shared=held_shared)
        assert _in_another_connection(lambda: lock_node(node.pk, shared=wanted_shared)) is granted


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_host_group_node_submission_and_job_locks_are_exclusive_by_default():
    node, _ = make_node(pool="python")
    submission = submit(UserFactory(), make_problem(languages=("python",)))
    with transaction.atomic():
        lock_host_group(node.host_group_id)
        lock_node(node.pk)
        lock_submission("ALGO", submission.pk)
        lock_job(submission.current_judge_job_id)
        assert _in_another_connection(lambda: lock_host_group(node.host_group_id)) is False
        assert _in_another_connection(lambda: lock_node(node.pk, shared=True)) is False
        assert _in_another_connection(lambda: lock_submission("ALGO", submission.pk)) is False
        assert _in_another_connection(lambda: lock_job(submission.current_judge_job_id)) is False


def test_a_violation_names_both_locks_and_the_order(rows):
    node, first, *_ = rows
    job_id = first.current_judge_job_id
    with pytest.raises(LockOrderViolation) as refused:
        with transaction.atomic():
            lock_job(job_id)
            lock_node(node.pk)
    assert str(refused.value) == (
        f"lock order violation: NODE {node.pk} requested after JOB {job_id} "
        "(order is host group → node → problem/practice → exam participant → submission → job → event → derived,"
        " ascending keys)")
    with pytest.raises(LockOrderViolation) as refused:
        with transaction.atomic():
            lock_submission("SQL", 1)
            lock_submission("ALGO", 2)
    assert "SUBMISSION (0, 2) requested after SUBMISSION (1, 1)" in str(refused.value)


def test_a_write_without_the_lock_names_the_rows(rows):
    from judging.locking import update_locked_jobs

    _, first, second, _ = rows
    ids = sorted([first.current_judge_job_id, second.current_judge_job_id])
    with pytest.raises(LockOrderViolation) as refused:
        with transaction.atomic():
            lock_job(ids[0])
            update_locked_jobs(ids, error="x")
    assert str(refused.value) == f"write to rows [(<Rank.JOB: 6>, {ids[1]})] that this transaction has not locked"
    with pytest.raises(LockOrderViolation) as refused:
        lock_job(ids[0])
    assert str(refused.value) == "row locks may only be taken inside transaction.atomic()"


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_a_due_event_another_dispatcher_holds_is_skipped_not_waited_for():
    from django.utils import timezone

    from judging.locking import lock_due_event
    from judging.models import SettlementEvent

    submission = submit(UserFactory(), make_problem(languages=("python",)))
    now = timezone.now()
    event = SettlementEvent.objects.create(job_id=submission.current_judge_job_id, event_type="problem_stats",
                                           next_attempt_at=now, created_at=now)
    seen = []
    with transaction.atomic():
        assert lock_due_event(event.pk).pk == event.pk
        assert _in_another_connection(lambda: seen.append(lock_due_event(event.pk))) is True
    assert seen == [None]
