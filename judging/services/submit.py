"""submit: a user's code becomes a submission, its first judge job and the pointer between."""

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from judging import artifacts, pressure, priority
from judging.models import SUBMISSION_MODELS, JudgeJob, LessonPractice, PriorityClass, Problem, ProblemKind
from judging.services.snapshot import job_snapshot
from judging.wakeups import publish_after_commit
from kece.errors import Invalid, Throttled
from pools.registry import UnsupportedLanguage, pool_for

logger = logging.getLogger("kece.submit")

MAX_SOURCE_BYTES = 256 * 1024


def _validated_practice(lesson_practice_id, problem):
    if lesson_practice_id is None:
        return None
    practice = LessonPractice.objects.filter(pk=lesson_practice_id).first()
    if practice is None or not practice.problems.filter(pk=problem.pk).exists():
        raise Invalid("This lesson practice does not exist or does not contain the problem.",
                      fields={"lessonPracticeId": ["unknown for this problem"]})
    return practice


def submission_submit(*, user, problem_id: int, language: str, code: str, lesson_practice_id=None, now=None,
                      priority_class: str = PriorityClass.PRACTICE):
    """Accept a submission and queue its judging.

    1. Validate problem, language (→ pool), code size and practice link.
    2. Store the source in the content store (outside the transaction: content-addressed,
       so a rolled-back submit leaves at most an unreferenced file).
    3. One transaction: insert the submission, its job (generation 1) and the pointer.
    4. After commit, wake the pool's waiting claims (best effort).
    """
    now = now or timezone.now()
    problem = Problem.objects.select_related("current_manifest").filter(pk=problem_id, is_canary=False).first()
    if problem is None or problem.current_manifest is None:
        raise Invalid("Unknown problem.", fields={"problemId": ["unknown problem"]})
    manifest = problem.current_manifest
    try:
        pool = pool_for(problem_kind=problem.kind, language=language, allowed_languages=manifest.languages)
    except UnsupportedLanguage as exc:
        raise Invalid(str(exc), fields={"language": [str(exc)]}) from exc
    if not isinstance(code, str) or not code.strip():
        raise Invalid("The code is empty.", fields={"code": ["may not be empty"]})
    source_bytes = code.encode("utf-8")
    if len(source_bytes) > MAX_SOURCE_BYTES:
        raise Invalid(f"The code is larger than {MAX_SOURCE_BYTES} bytes.", fields={"code": ["too long"]})
    practice = _validated_practice(lesson_practice_id, problem)
    beyond_share = False
    if priority_class == PriorityClass.PRACTICE:
        # Read outside the transaction: a share decided on a count a concurrent submit of
        # the same user is about to change only moves one job a place in the queue.
        admission = pressure.admission(pool=pool.name, now=now, user_id=user.pk)
        if admission.throttled:
            raise Throttled(pressure.busy_sentence(pool.label), retry_after=settings.KECE_THROTTLE_RETRY_S)
        beyond_share = admission.beyond_share
    source = artifacts.store_bytes(source_bytes)

    submission_type = ProblemKind(problem.kind).value  # ALGO → submission, SQL → db_submission
    model = SUBMISSION_MODELS[submission_type]
    with transaction.atomic(durable=True):
        submission = model.objects.create(
            user=user, problem=problem, language=language, code=code,
            source_digest=source["digest"], source_bytes=source["bytes"], lesson_practice=practice,
        )
        job = JudgeJob.objects.create(
            submission_type=submission_type, submission_id=submission.pk, generation=1,
            pool=pool.name, runtime_spec=pool.spec.id, manifest=manifest,
            snapshot=job_snapshot(problem=problem, manifest=manifest, pool=pool.name, language=language, source=source),
            lesson_practice=practice, available_at=now, created_at=now, user_id=user.pk,
            priority_class=priority_class, claim_key=priority.claim_key(priority_class, now, beyond_share=beyond_share),
            wait_reason=priority.FAIR_SHARE if beyond_share else "",
        )
        model.objects.filter(pk=submission.pk).update(current_judge_job=job)
        submission.current_judge_job = job
        publish_after_commit(pool.name)
    logger.info("submission queued", extra={"submission": f"{submission_type}:{submission.pk}", "job": job.pk,
                                            "pool": pool.name})
    return submission
