"""rejudge and delete: both lock the submission first, then its current job."""

import logging

from django.db import transaction
from django.db.models import Q

from judging import pressure, priority
from judging.locking import lock_exam_participant, lock_job, lock_submission
from judging.models import SUBMISSION_MODELS, Exam, ExamMode, ExamParticipant, JobState, JudgeJob, PriorityClass
from judging.services import outcomes
from judging.services.snapshot import job_snapshot
from judging.wakeups import publish_after_commit
from judging.system import system_user_id
from kece.errors import NotFound
from pools.registry import runtime_spec

logger = logging.getLogger("kece.rejudge")


def locked_live_submission(submission_type: str, submission_id: int):
    if submission_type not in SUBMISSION_MODELS:
        raise NotFound()
    submission = lock_submission(submission_type, submission_id)
    if submission is None or submission.deleted_at is not None:
        raise NotFound()
    return submission


def queue_generation(submission, *, generation: int, now, priority_class: str) -> JudgeJob:
    """A new job for a submission this transaction has locked, against its problem's current
    test data, at `priority_class`; the submission's pointer moves to it (rejudge, and an
    exam's hand-in, which is never refused: an exam job only takes its turn among its
    participant's, `judging.priority`)."""
    problem = submission.problem
    manifest = problem.current_manifest
    pool = submission.language
    source = {"digest": submission.source_digest, "bytes": submission.source_bytes}
    job = JudgeJob.objects.create(
        submission_type=submission.TYPE, submission_id=submission.pk, generation=generation,
        pool=pool, runtime_spec=runtime_spec(pool).id, manifest=manifest,
        snapshot=job_snapshot(problem=problem, manifest=manifest, pool=pool, language=submission.language,
                              source=source),
        lesson_practice_id=submission.lesson_practice_id, available_at=now, created_at=now,
        user_id=submission.user_id, priority_class=priority_class,
        claim_key=priority.claim_key(priority_class, now, exam_rank=pressure.exam_rank(
            pool=pool, user_id=submission.user_id) if priority_class == PriorityClass.EXAM else 0),
    )
    type(submission).objects.filter(pk=submission.pk).update(current_judge_job=job)
    submission.current_judge_job = job
    publish_after_commit(pool)
    return job


def submission_rejudge(*, submission_type: str, submission_id: int, now, priority_class: str | None = None) -> JudgeJob:
    """Judge again as a new generation against the problem's current test data, at
    `priority_class` (a bulk rejudge's REJUDGE) or else the class of the job it replaces.

    The old job, if still active, is cancelled: its renewals answer `cancelled` and its
    late result is refused as `superseded` because the pointer has moved on. The current
    effective result stays until the new generation settles.
    """
    with transaction.atomic(durable=True):
        submission = locked_live_submission(submission_type, submission_id)
        refusal = rejudge_refusal(submission)
        if refusal is not None:
            raise refusal
        job = rejudge_locked(submission, now=now, priority_class=priority_class)
    logger.info("rejudge queued", extra={"submission": f"{submission_type}:{submission_id}", "job": job.pk,
                                         "generation": job.generation, "class": job.priority_class})
    return job


def rejudge_refusal(submission) -> NotFound | None:
    """Why a submission the caller has locked may not be judged again, or None.

    - A hidden canary or cross-check is judged once, for the server: a new generation
      would be ordinary, counted work of no one's.
    - An OI exam submission with no job is judged by its exam's hand-in (the last of each
      problem) or never (one a later submission replaced): judged now, it would show what
      the exam hides, and its hand-in would queue nothing for it."""
    if submission.user_id == system_user_id():
        return NotFound()
    if submission.current_judge_job_id is None and submission.exam_id is not None \
            and Exam.objects.filter(pk=submission.exam_id, mode=ExamMode.OI).exists():
        return NotFound("This exam submission is judged when its exam is handed in, not before.")
    return None


def awaiting_hand_in():
    """A filter for the submissions `rejudge_refusal` refuses as OI work not yet judged."""
    return Q(exam__mode=ExamMode.OI, current_judge_job_id__isnull=True)


def rejudge_locked(submission, *, now, priority_class: str | None = None) -> JudgeJob:
    """`submission_rejudge` on a submission the caller has locked (and found live).
    `priority_class`: the new job's, for work that was done (a bulk rejudge's backlog); a
    job still waiting or running is replaced in its own class, or an exam answer being
    judged would lose its turn, and its owner's active work would stop counting where its
    class counts (the caps, the fair share, the backlog)."""
    old = lock_job(submission.current_judge_job_id) if submission.current_judge_job_id else None
    active = old is not None and old.state in JobState.ACTIVE
    if active:
        outcomes.cancel(old, now=now, reason="superseded")
    if active or priority_class is None:
        priority_class = old.priority_class if old else PriorityClass.PRACTICE
    return queue_generation(submission, generation=(old.generation if old else 0) + 1, now=now,
                            priority_class=priority_class)


def _lock_participant_of(submission_type: str, submission_id: int) -> None:
    """An exam submission's participant, locked before the submission as an exam's hand-in
    locks them: a hand-in reads its last live submissions under that lock, so a deletion
    lands wholly before it (the one before becomes the last) or after it (its job is
    cancelled), never between its read and its queueing."""
    model = SUBMISSION_MODELS.get(submission_type)
    owner = model.objects.filter(pk=submission_id).values("exam_id", "user_id").first() if model else None
    if owner is None or owner["exam_id"] is None:
        return
    participant = ExamParticipant.objects.filter(exam_id=owner["exam_id"], user_id=owner["user_id"]) \
        .values_list("pk", flat=True).first()
    if participant is not None:
        lock_exam_participant(participant)


def submission_delete(*, submission_type: str, submission_id: int, now) -> None:
    """Delete (hide) a submission: its active job is cancelled and late results refused;
    statistics are recomputed without it through the outbox."""
    with transaction.atomic(durable=True):
        _lock_participant_of(submission_type, submission_id)
        submission = locked_live_submission(submission_type, submission_id)
        job = lock_job(submission.current_judge_job_id) if submission.current_judge_job_id else None
        if job is not None and job.state in JobState.ACTIVE:
            outcomes.cancel(job, now=now, reason="deleted")
        submission.deleted_at = now
        submission.save(update_fields=["deleted_at"])
        if job is not None:
            outcomes.write_events(job, submission, now=now, suffix=outcomes.DELETED_SUFFIX)
    logger.info("submission deleted", extra={"submission": f"{submission_type}:{submission_id}"})
