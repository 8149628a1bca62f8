"""The admins' lesson and practice pages (`/admin/lessons`) go through the lesson services,
with the same revision check as the exam pages."""

import pytest

from judging.models import JobState, JudgeJob, Lesson, LessonPractice
from judging.services.lessons import lesson_update, practice_update
from tests.factories import make_problem
from tests.judging.helpers import submit
from tests.judging.test_exam_console import admin, exam_manager  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


def test_an_admin_creates_a_lesson_and_a_practice_with_its_problems(admin, problem):
    sql = make_problem(kind="SQL")
    assert admin.post("/admin/lessons", {"title": ""}).status_code == 400
    response = admin.post("/admin/lessons", {"title": "week 1"})
    lesson = Lesson.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/admin/lessons/{lesson.pk}"
    assert "Created the lesson “week 1”." in admin.get(response["Location"]).content.decode()

    page = admin.get(f"/admin/lessons/{lesson.pk}/practices/new").content.decode()
    assert "<legend>Problems</legend>" in page and f"#{sql.pk} {sql.title}" in page
    response = admin.post(f"/admin/lessons/{lesson.pk}/practices/new",
                          {"title": "joins", "problems": [str(problem.pk), str(sql.pk)]})
    assert response.status_code == 302
    practice = LessonPractice.objects.get()
    assert practice.lesson_id == lesson.pk and set(practice.problems.values_list("id", flat=True)) == {
        problem.pk, sql.pk}
    page = admin.get(f"/admin/lessons/{lesson.pk}").content.decode()
    assert "joins" in page and f'href="/admin/practices/{practice.pk}"' in page
    assert "1" in admin.get("/admin/lessons").content.decode()

    refused = admin.post(f"/admin/practices/{practice.pk}", {"title": "joins", "problems": ["999999"],
                                                             "revision": practice.revision})
    assert refused.status_code == 400 and "Select a valid choice." in refused.content.decode()


def test_a_stale_lesson_or_practice_form_keeps_what_was_typed(admin, problem):
    from judging.services.lessons import lesson_create, practice_create

    lesson = lesson_create(title="week 1")
    lesson_update(lesson_id=lesson.pk, revision=lesson.revision, changes={"title": "week one"})
    response = admin.post(f"/admin/lessons/{lesson.pk}", {"title": "week 01", "revision": lesson.revision})
    page = response.content.decode()
    assert response.status_code == 409 and "Someone else saved this" in page
    assert 'value="week 01"' in page and "week one" in page
    assert Lesson.objects.get().title == "week one"

    practice = practice_create(lesson_id=lesson.pk, title="loops", problem_ids=[problem.pk])
    practice_update(practice_id=practice.pk, revision=practice.revision, changes={"title": "for loops"})
    response = admin.post(f"/admin/practices/{practice.pk}", {"title": "while loops", "problems": [],
                                                              "revision": practice.revision})
    page = response.content.decode()
    assert response.status_code == 409 and 'value="while loops"' in page and "for loops" in page
    assert LessonPractice.objects.get().problems.count() == 1
    current = LessonPractice.objects.get().revision
    response = admin.post(f"/admin/practices/{practice.pk}", {"title": "while loops", "revision": current})
    assert response.status_code == 302
    assert LessonPractice.objects.get().title == "while loops" and not LessonPractice.objects.get().problems.exists()


def test_deleting_a_practice_asks_first_then_cancels_its_open_jobs(admin, problem, student):
    from judging.services.lessons import lesson_create, practice_create

    lesson = lesson_create(title="week 1")
    practice = practice_create(lesson_id=lesson.pk, title="loops", problem_ids=[problem.pk])
    submission = submit(student, problem, lesson_practice_id=practice.pk)
    page = admin.get(f"/admin/practices/{practice.pk}/delete").content.decode()
    assert "1 submission is deleted" in page and "1 judge job still open is cancelled" in page
    response = admin.post(f"/admin/practices/{practice.pk}/delete")
    assert response.status_code == 302 and response["Location"] == f"/admin/lessons/{lesson.pk}"
    assert LessonPractice.objects.get().deleted_at is not None
    assert JudgeJob.objects.get(pk=submission.current_judge_job_id).state == JobState.CANCELLED
    assert admin.get(f"/admin/practices/{practice.pk}").status_code == 404
    assert "No practice in this lesson yet." in admin.get(f"/admin/lessons/{lesson.pk}").content.decode()
