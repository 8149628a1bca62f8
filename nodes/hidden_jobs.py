"""Hidden judge jobs: work the server gives a node for its own sake, which the node cannot
tell from any other judge job of its pool.

On the wire such a job is an ordinary judge job: kind `JUDGE`, a submission type and id,
generation 1, its manifest, source and cases. Its id comes from the job table's sequence and
its submission's id from the submission table's, because the submission is a real row
(owned by the system account, `judging.system`), inserted between the students' of the
moment. What makes it hidden stays on the server: it is bound to one node (`bound_node`),
which the node API never shows. Being bound, it writes no settlement event and is counted
in no statistic or pending figure (`JudgeJob.hidden`), and it is queued at REJUDGE class,
so it never delays a student's work: it waits behind the queue (at most
`KECE_MAX_CLASS_WAIT_S`, `judging.priority`), as a bulk rejudge does.
"""

from judging import artifacts
from judging.locking import lock_jobs, lock_submission
from judging.models import SUBMISSION_MODELS, JobState, JudgeJob, PriorityClass
from judging.priority import claim_key
from judging.services import outcomes
from judging.wakeups import publish_after_commit
from kece.rows import insert as insert_row
from kece.rows import update_by_pk


def hidden_job_create(*, user_id: int, problem_id: int, submission_type: str, language: str, code: str,
                      snapshot: dict, manifest_id: int, pool: str, runtime_spec: str, node_id: int, now) -> JudgeJob:
    """Insert the system account's submission, its job bound to `node_id` and the pointer,
    inside the caller's transaction (new rows only: nothing to lock). `snapshot` is the job
    snapshot; its source is replaced by `code`'s."""
    source = artifacts.entry_for(code.encode("utf-8"))
    model = SUBMISSION_MODELS[submission_type]
    submission = model(user_id=user_id, problem_id=problem_id, language=language, code=code,
                       source_digest=source["digest"], source_bytes=source["bytes"])
    insert_row(submission)
    job = JudgeJob(
        submission_type=submission_type, submission_id=submission.pk, generation=1, pool=pool,
        runtime_spec=runtime_spec, manifest_id=manifest_id,
        snapshot={**snapshot, "source": {"language": language, **source}},
        bound_node_id=node_id, available_at=now, created_at=now, priority_class=PriorityClass.REJUDGE,
        claim_key=claim_key(PriorityClass.REJUDGE, now),
    )
    insert_row(job)
    update_by_pk(model, [submission.pk], {"current_judge_job": job.pk})
    publish_after_commit(pool)
    return job


def hidden_job_cancel(job_id: int, *, now, reason: str) -> bool:
    """Cancel a hidden job that is still queued (its node no longer judges); the caller's
    transaction, no node lock held: submission → job, as a delete takes them."""
    meta = JudgeJob.objects.filter(pk=job_id).values("submission_type", "submission_id").first()
    if meta is None:
        return False
    lock_submission(meta["submission_type"], meta["submission_id"])
    job = lock_jobs([job_id]).get(job_id)
    if job is None or job.state != JobState.QUEUED:
        return False
    outcomes.cancel(job, now=now, reason=reason)
    return True
