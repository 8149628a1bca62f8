"""Lessons and their practices: a practice holds problems; a student's submission is bound
to it at submit time and its best score per problem is kept by the outbox."""

import logging

from django.db import transaction
from django.utils import timezone

from judging import visibility
from judging.locking import lock_parent
from judging.models import Lesson, LessonPractice, PracticeBest, Problem
from judging.services.exams import checked_problem_ids, delete_with_submissions, update_at_revision
from kece.errors import NotFound

logger = logging.getLogger("kece.lessons")


def lesson_create(*, title: str) -> Lesson:
    return Lesson.objects.create(title=title)


def lesson_update(*, lesson_id: int, revision: int, changes: dict) -> Lesson:
    if not Lesson.objects.filter(pk=lesson_id).exists():
        raise NotFound()
    return update_at_revision(Lesson, lesson_id, revision, changes)


def _checked_problems(problem_ids: list) -> list:
    return checked_problem_ids(problem_ids, field="problemIds")


def practice_create(*, lesson_id: int, title: str, problem_ids: list) -> LessonPractice:
    if not Lesson.objects.filter(pk=lesson_id).exists():
        raise NotFound()
    with transaction.atomic(durable=True):
        practice = LessonPractice.objects.create(lesson_id=lesson_id, title=title)
        practice.problems.set(_checked_problems(problem_ids))
    return practice


def practice_update(*, practice_id: int, revision: int, changes: dict) -> LessonPractice:
    problem_ids = changes.pop("problem_ids", None)
    with transaction.atomic(durable=True):
        practice = update_at_revision(LessonPractice, practice_id, revision, changes)
        if problem_ids is not None:
            practice.problems.set(_checked_problems(problem_ids))
    return practice


def practice_delete(*, practice_id: int, now) -> None:
    """No new submission may name the practice once this commits; its submissions are then
    deleted."""
    delete_with_submissions(LessonPractice, practice_id, now=now, link="lesson_practice",
                            lock=lambda practice: lock_parent(LessonPractice, practice.pk))


def practice_view(*, practice_id: int, user) -> tuple:
    """(practice, [(problem, best row or None)], the keys of their own submissions to page
    through, newest first) for the student."""
    from judging.selectors import submission_keys

    practice = LessonPractice.objects.filter(pk=practice_id, deleted_at__isnull=True,
                                             lesson__deleted_at__isnull=True).first()
    if practice is None:
        raise NotFound()
    best = {row.problem_id: row for row in PracticeBest.objects.filter(practice=practice, user=user)}
    # Only what the student may see and practise: a practice that holds an exam's problem
    # does not show it while the exam keeps it secret (`judging.visibility`).
    shown = visibility.listed_problems(user, now=timezone.now()).filter(lesson_practices=practice)
    problems = [(problem, best.get(problem.pk)) for problem in shown.order_by("id")]
    return practice, problems, submission_keys(lesson_practice=practice, user=user)


def problem_delete(*, problem_id: int, now) -> None:
    """A deleted problem takes no new submissions (submit reads `deleted_at`); its
    submissions, in free practice, lessons and exams alike, are then deleted."""
    delete_with_submissions(Problem, problem_id, now=now, link="problem", is_canary=False,
                            lock=lambda problem: lock_parent(Problem, problem.pk))
