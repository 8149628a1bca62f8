"""The lock helper enforces host group → node → problem/practice → exam participant →
submission → job, and is the only way in."""

import re
from pathlib import Path

import pytest
from django.db import transaction

from judging.locking import (
    LockOrderViolation, lock_exam_participant, lock_host_group, lock_job, lock_jobs, lock_node, lock_submission,
)
from judging.models import ExamParticipant, JudgeJob
from tests.factories import UserFactory, make_exam, make_node, make_problem
from tests.judging.helpers import submit

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def rows(db):
    node, _ = make_node(pool="python")
    submission = submit(UserFactory(), make_problem(languages=("python",)))
    return node, submission


def test_it_takes_locks_in_the_global_order(rows):
    node, submission = rows
    participant = ExamParticipant.objects.create(exam=make_exam(submission.problem), user=submission.user)
    with transaction.atomic():
        assert lock_host_group(node.host_group_id).pk == node.host_group_id
        assert lock_node(node.pk).pk == node.pk
        assert lock_exam_participant(participant.pk).pk == participant.pk
        assert lock_submission("ALGO", submission.pk).pk == submission.pk
        assert lock_job(submission.current_judge_job_id).pk == submission.current_judge_job_id


def test_it_refuses_a_node_lock_after_a_job_lock(rows):
    node, submission = rows
    with pytest.raises(LockOrderViolation, match="NODE .* after JOB"):
        with transaction.atomic():
            lock_job(submission.current_judge_job_id)
            lock_node(node.pk)


def test_it_refuses_a_submission_lock_after_a_job_lock(rows):
    node, submission = rows
    with pytest.raises(LockOrderViolation):
        with transaction.atomic():
            lock_job(submission.current_judge_job_id)
            lock_submission("ALGO", submission.pk)


def test_it_refuses_an_exam_participant_lock_after_a_submission_lock(rows):
    node, submission = rows
    participant = ExamParticipant.objects.create(exam=make_exam(submission.problem), user=submission.user)
    with pytest.raises(LockOrderViolation, match="EXAM_PARTICIPANT .* after SUBMISSION"):
        with transaction.atomic():
            lock_submission("ALGO", submission.pk)
            lock_exam_participant(participant.pk)


def test_it_refuses_descending_keys_within_a_rank(rows):
    node, submission = rows
    other = submit(submission.user, submission.problem)
    with pytest.raises(LockOrderViolation):
        with transaction.atomic():
            lock_jobs([other.current_judge_job_id])
            lock_jobs([submission.current_judge_job_id])


def test_relocking_a_held_row_is_free_and_a_new_transaction_starts_afresh(rows):
    node, submission = rows
    with transaction.atomic():
        lock_node(node.pk)
        lock_job(submission.current_judge_job_id)
        lock_job(submission.current_judge_job_id)
    with transaction.atomic():
        lock_node(node.pk)


def test_it_needs_a_transaction(rows):
    node, _ = rows
    with pytest.raises(LockOrderViolation, match="inside transaction.atomic"):
        lock_node(node.pk)


def test_no_code_takes_row_locks_outside_the_lock_helper():
    offenders = []
    for path in ROOT.glob("**/*.py"):
        relative = path.relative_to(ROOT).as_posix()
        # mutants/: mutmut's generated copy of the code (bench/mutation.py), git-ignored.
        skipped = (".venv/", "mutants/", "tests/", "node_agent/", "bench/")
        if relative.startswith(skipped) or relative == "judging/locking.py":
            continue
        if re.search(r"select_for_update|FOR UPDATE", path.read_text(encoding="utf-8")):
            offenders.append(relative)
    assert offenders == []


def test_job_rows_are_updated_only_after_they_are_locked(rows):
    from judging.locking import update_locked_jobs

    node, submission = rows
    with pytest.raises(LockOrderViolation, match="has not locked"):
        with transaction.atomic():
            update_locked_jobs([submission.current_judge_job_id], error="x")
    with transaction.atomic():
        lock_job(submission.current_judge_job_id)
        update_locked_jobs([submission.current_judge_job_id], error="x")
    assert JudgeJob.objects.get(pk=submission.current_judge_job_id).error == "x"


def test_locked_rows_are_written_as_save_would_and_only_once_locked(rows):
    from judging.locking import save_locked, update_locked_jobs
    from judging.models import JudgeJob, Submission

    _, submission = rows
    job_id = submission.current_judge_job_id
    with pytest.raises(LockOrderViolation, match="has not locked"):
        with transaction.atomic():
            submission.verdict = "WA"
            save_locked(submission, ["verdict"])
    with transaction.atomic():
        locked = lock_submission("ALGO", submission.pk)
        job = lock_job(job_id)
        before = job.updated_at
        locked.verdict, locked.cases = "WA", [{"ordinal": 1, "verdict": "WA"}]
        save_locked(locked, ["verdict", "cases"])
        job.error, job.result = "boom", {"outcome": "JUDGED"}
        save_locked(job, ["error", "result", "updated_at"])
        update_locked_jobs([job_id], increment=("attempts",), wait_reason="x")
        update_locked_jobs([])
    stored = Submission.objects.get(pk=submission.pk)
    assert (stored.verdict, stored.cases) == ("WA", [{"ordinal": 1, "verdict": "WA"}])
    job = JudgeJob.objects.get(pk=job_id)
    assert (job.error, job.result, job.attempts, job.wait_reason) == ("boom", {"outcome": "JUDGED"}, 1, "x")
    assert job.updated_at > before, "auto-now fields take the time, as in save()"


def test_locking_nothing_locks_nothing(rows):
    with transaction.atomic():
        assert lock_jobs([]) == {}
