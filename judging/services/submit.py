"""submit: a user's code becomes a submission, its first judge job and the pointer between."""

import logging
from contextlib import contextmanager

from django.db import connection, transaction
from django.utils import timezone
from django.utils.translation import gettext

from judging import artifacts, pressure, priority, rates, visibility
from judging.locking import insert_under_live_parent, lock_parent
from judging.models import (
    SUBMISSION_MODELS, JudgeJob, LessonPractice, Manifest, PriorityClass, Problem, ProblemKind, ProblemVisibility,
)
from judging.services.exams import exam_entry, exam_for_submit, exam_open_to, not_a_participant
from judging.services.snapshot import job_snapshot
from judging.wakeups import publish_after_commit
from kece.rows import insert as insert_row
from kece.rows import load_joined
from kece.rows import shape as row_shape
from kece.rows import update_by_pk
import kece.metrics as metrics
from kece.errors import ExamInProgress, Invalid, NotFound, Throttled
from pools.registry import POOLS, UnsupportedLanguage, pool_for

logger = logging.getLogger("kece.submit")

MAX_SOURCE_BYTES = 256 * 1024


# What a submit reads of the problem: its statement and samples stay in the database.
_PROBLEM_FIELDS = ("id", "slug", "kind", "current_manifest_id")


# A problem everyone may practise: public, and held by no exam that has not ended
# (`judging.visibility`). Stated in the submit's one read of the problem, so the usual
# submission pays no statement for it; any other problem is looked at again, slowly.
_OPEN_TO_ALL = (" AND p.visibility = %s AND NOT EXISTS (SELECT 1 FROM exam_problem ep JOIN exam e ON e.id = ep.exam_id"
                " WHERE ep.problem_id = p.id AND e.deleted_at IS NULL AND e.ends_at > %s)")


def _read_problem(problem_id, *, open_to_all_at=None, admission=None) -> tuple:
    """(the live, non-canary problem with its current manifest, or None; what `admission`
    read): one plain join (a select_related costs more to compile than to run, on every
    submission). With `open_to_all_at`, only a problem everyone may practise at that time.
    `admission`: `pressure.admission_columns` of the pool the submission names, read in
    the same statement (a practice submit needs them next)."""
    try:
        problem_id = int(problem_id)
    except (TypeError, ValueError):
        return None, None
    problem_shape, manifest_shape = row_shape(Problem, _PROBLEM_FIELDS), row_shape(Manifest)
    columns, params = admission if admission is not None else ("", [])
    sql = (f"SELECT {problem_shape.columns_of('p')}, {manifest_shape.columns_of('m')}{', ' if columns else ''}"
           f"{columns} FROM {problem_shape.table} p JOIN {manifest_shape.table} m ON m.id = p.current_manifest_id"
           " WHERE p.id = %s AND p.is_canary = %s AND p.deleted_at IS NULL")
    params = [*params, problem_id, False]
    if open_to_all_at is not None:
        sql += _OPEN_TO_ALL
        params += [ProblemVisibility.PUBLIC, connection.ops.adapt_datetimefield_value(open_to_all_at)]
    found = load_joined(problem_shape, manifest_shape, sql, params, more=True)
    if found is None:
        return None, None
    problem, problem.current_manifest, read = found
    return problem, (read if columns else None)


def _problem_for_submit(problem_id, *, open_to_all_at=None):
    return _read_problem(problem_id, open_to_all_at=open_to_all_at)[0]


def _unknown_practice():
    return Invalid(gettext("This lesson practice does not exist or does not contain the problem."),
                   fields={"lessonPracticeId": ["unknown for this problem"]})


def _unknown_problem():
    return Invalid(gettext("Unknown problem."), fields={"problemId": ["unknown problem"]})


def _problem_to_practise(problem_id, *, user, now, admission=None) -> tuple:
    """(the problem of a submission outside an exam, what `admission` read with it): one
    everyone may practise, or one this user may see and no exam of theirs keeps secret
    (`judging.visibility`)."""
    problem, read = _read_problem(problem_id, open_to_all_at=now, admission=admission)
    if problem is not None:
        return problem, read
    problem = _problem_for_submit(problem_id)
    # A problem you may not see does not exist for you, whatever exam holds it (before
    # its start, even the exam you take).
    if problem is None or not visibility.may_view(problem, user, now=now):
        raise _unknown_problem()
    exam = visibility.exam_keeping(problem, user, now=now)
    if exam is not None:
        raise ExamInProgress(f"This problem belongs to exam {exam.pk}, which you are taking: submit it there"
                             f" (examId {exam.pk}) until the exam ends.", fields={"examId": [str(exam.pk)]})
    return problem, None


def _validated_practice(lesson_practice_id, problem):
    if lesson_practice_id is None:
        return None
    practice = LessonPractice.objects.filter(pk=lesson_practice_id, deleted_at__isnull=True,
                                             lesson__deleted_at__isnull=True).first()
    if practice is None or not practice.problems.filter(pk=problem.pk).exists():
        raise _unknown_practice()
    return practice


# What the submit's shared lock reads of the problem and the practice: it has read the rest.
_LIVENESS = ("id", "deleted_at")


def _still_live(problem, practice) -> None:
    """Under shared locks, so a deletion committing meanwhile waits for this submit."""
    if lock_parent(Problem, problem.pk, shared=True, names=_LIVENESS).deleted_at is not None:
        raise _unknown_problem()
    if practice is not None and \
            lock_parent(LessonPractice, practice.pk, shared=True, names=_LIVENESS).deleted_at is not None:
        raise _unknown_practice()


@contextmanager
def _counting_throttle(pool):
    """A submit refused with 429 (the user's limits or the pool's pressure) is counted."""
    try:
        yield
    except Throttled:
        metrics.submit_throttled(pool.name)
        raise


def submission_submit(*, user, problem_id: int, language: str, code: str, lesson_practice_id=None, exam_id=None,
                      after_insert=None, now=None, priority_class: str = PriorityClass.PRACTICE):
    """Accept a submission and queue its judging.

    1. Validate problem, language (→ pool), code size and practice link.
    2. Digest the source. Its only copy is the submission row, which nodes download it
       from (`selectors.artifact_for_lease`), so no file is written and synced for it
       besides the database's own commit.
    3. One transaction: insert the submission, its job (generation 1) and the pointer. A
       plain submit (no practice, no exam) inserts its submission in the statement that
       locks its problem shared (`locking.insert_under_live_parent`).
    4. After commit, wake the pool's waiting claims (best effort).

    An exam submission (`exam_id`) is checked and written under its participant's lock
    (`judging.services.exams.exam_entry`); in an OI exam it is saved without a job, which
    the hand-in creates; its jobs are of the EXAM class, and a participant's take turns with
    the others' (`judging.priority`). A submission beyond its user's own limits, or a practice
    one beyond its pool's backlog or wait thresholds, is refused (`Throttled`,
    `judging.pressure`); a practice one beyond its user's fair share queues behind other
    users' work. `after_insert(submission)`
    runs inside the transaction (the idempotency key is written there, so a duplicate key
    rolls the submission back).
    """
    now = now or timezone.now()
    read = named = None
    if exam_id is None:
        # A practice submit's admission figures come with its problem: one statement less.
        named = POOLS.get(language) if priority_class == PriorityClass.PRACTICE else None
        admission = pressure.admission_columns(named.name, now=now, user_id=user.pk) if named else None
        problem, read = _problem_to_practise(problem_id, user=user, now=now, admission=admission)
        exam = None
    else:
        # Who may submit, before which problem: an outsider, or a participant before the
        # start, learns neither what the exam holds nor the languages of any problem.
        try:
            exam_open_to(exam_id, user=user, now=now)
        except NotFound:
            raise not_a_participant() from None
        problem = _problem_for_submit(problem_id)
        exam = exam_for_submit(exam_id, problem=problem, practice=lesson_practice_id)
    manifest = problem.current_manifest
    try:
        pool = pool_for(problem_kind=problem.kind, language=language, allowed_languages=manifest.languages)
    except UnsupportedLanguage as exc:
        raise Invalid(str(exc), fields={"language": [str(exc)]}) from exc
    if not isinstance(code, str) or not code.strip():
        raise Invalid(gettext("The code is empty."), fields={"code": ["may not be empty"]})
    source_bytes = code.encode("utf-8")
    if len(source_bytes) > MAX_SOURCE_BYTES:
        raise Invalid(gettext("The code is larger than %(bytes)d bytes.") % {"bytes": MAX_SOURCE_BYTES},
                      fields={"code": ["too long"]})
    if "\x00" in code:  # as the API's parser refuses it: one rule whichever way the code came
        raise Invalid(gettext("The code contains a NUL character."), fields={"code": ["contains a NUL character"]})
    practice = _validated_practice(lesson_practice_id, problem)
    taken = rates.NOTHING_TAKEN
    if exam is not None:
        # Exam work goes first and is refused only for its participant's own rate and active jobs.
        priority_class = PriorityClass.EXAM
        with _counting_throttle(pool):
            taken = pressure.exam_rate(exam_id=exam.pk, user_id=user.pk, now=now)
    beyond_share, exam_rank = False, 0
    if priority_class == PriorityClass.PRACTICE:
        # Read outside the transaction: a share decided on a count a concurrent submit of
        # the same user is about to change only moves one job a place in the queue.
        with _counting_throttle(pool):
            beyond_share, taken = pressure.practice_admission(pool=pool, now=now, user_id=user.pk,
                                                              read=read if pool is named else None)
    source = artifacts.entry_for(source_bytes)

    submission_type = ProblemKind(problem.kind).value  # ALGO → submission, SQL → db_submission
    model = SUBMISSION_MODELS[submission_type]
    # Refused or rolled back from here on (the exam's active cap, a repeated idempotency key,
    # the problem deleted meanwhile), the submission costs its user no rate.
    with taken.returned_on_error(), transaction.atomic(durable=True):
        # A plain practice submit locks its problem and writes its submission in one statement.
        alone = practice is None and exam is None
        if not alone:
            _still_live(problem, practice)
        if exam is not None:
            exam_entry(exam, user=user, now=now)
            if exam.judges_at_once:
                with _counting_throttle(pool):
                    exam_rank = pressure.exam_admission(pool=pool, user_id=user.pk)
        submission = model(
            user=user, problem=problem, language=language, code=code,
            source_digest=source["digest"], source_bytes=source["bytes"], lesson_practice=practice, exam=exam,
        )
        if not alone:
            insert_row(submission)
        elif not insert_under_live_parent(submission, Problem, problem.pk):
            raise _unknown_problem()
        if after_insert is not None:
            after_insert(submission)
        if exam is not None and not exam.judges_at_once:
            logger.info("exam submission saved", extra={"submission": f"{submission_type}:{submission.pk}",
                                                        "exam": exam.pk})
            return submission
        job = JudgeJob(
            submission_type=submission_type, submission_id=submission.pk, generation=1,
            pool=pool.name, runtime_spec=pool.spec.id, manifest=manifest,
            snapshot=job_snapshot(problem=problem, manifest=manifest, pool=pool.name, language=language, source=source),
            lesson_practice=practice, available_at=now, created_at=now, user_id=user.pk,
            priority_class=priority_class, claim_key=priority.claim_key(priority_class, now, beyond_share=beyond_share,
                                                                exam_rank=exam_rank),
            wait_reason=priority.FAIR_SHARE if beyond_share else "",
        )
        insert_row(job)
        update_by_pk(model, [submission.pk], {"current_judge_job": job.pk})
        submission.current_judge_job = job
        publish_after_commit(pool.name)
    logger.info("submission queued", extra={"submission": f"{submission_type}:{submission.pk}", "job": job.pk,
                                            "pool": pool.name})
    return submission
