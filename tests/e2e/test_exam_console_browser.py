"""The admins' exam pages in a real browser against the real server: an exam manager creates
an OI exam with a programming problem, an SQL problem and a question through the form, adds a
participant by username (an unknown one first adds nobody), publishes after the confirmation
and sees the results, and is told when someone else saved the exam meanwhile; the Chinese
pages have Chinese labels; a student gets 403."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from judging.models import Exam, ExamParticipant
from judging.services.exams import exam_answer_save, exam_hand_in, exam_update
from judging.services.problems import problem_import
from tests.browser import chromium, new_page, screenshot, sign_in  # noqa: F401 (fixture)
from tests.e2e.test_pages_browser import PASSWORD, person, quiet_server  # noqa: F401 (fixture)

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
MOMENT = "%Y-%m-%dT%H:%M"


def exam_manager(username: str):
    user = person(username)
    user.user_permissions.add(Permission.objects.get(codename="manage_exams", content_type__app_label="judging"))
    return user


def test_an_exam_manager_creates_an_exam_adds_a_participant_and_publishes(quiet_server, chromium):
    exam_manager("tina")
    person("sam")
    algo, _ = problem_import(SAMPLES / "aplusb")
    sql, _ = problem_import(SAMPLES / "sql-top-students")
    base = quiet_server.url
    now = timezone.now()

    page = new_page(chromium)
    sign_in(page, base, "tina", PASSWORD, "/admin/exams")
    assert page.locator("#nav-exam-admin").inner_text() == "Manage exams"
    page.get_by_role("link", name="Create an exam").first.click()
    page.wait_for_url(base + "/admin/exams/new")
    page.get_by_label("Title", exact=True).fill("Midterm")
    page.get_by_role("radio", name=re.compile(r"^OI — ")).check()
    page.get_by_label("Starts (UTC)").fill((now - timedelta(minutes=10)).strftime(MOMENT))
    page.get_by_label("Ends (UTC)").fill((now + timedelta(hours=2)).strftime(MOMENT))
    rows = page.get_by_role("group", name="Add a problem")
    rows.nth(0).get_by_label("Problem", exact=True).select_option(str(algo.pk))
    rows.nth(0).get_by_label("Points", exact=True).fill("60")
    rows.nth(1).get_by_label("Problem", exact=True).select_option(str(sql.pk))
    rows.nth(1).get_by_label("Points", exact=True).fill("30")
    question = page.get_by_role("group", name="Add a question").first
    question.get_by_label("Kind", exact=True).select_option("SINGLE")
    question.get_by_label("Question", exact=True).fill("Which keyword sorts the rows of a query?")
    question.get_by_label("Options, one per line").fill("GROUP BY\nORDER BY\nWHERE")
    question.get_by_label("Correct options").fill("2")
    question.get_by_label("Points", exact=True).fill("10")
    screenshot(page, "exam-admin-create-1280-en")
    page.get_by_role("button", name="Create the exam").click()
    page.wait_for_url(re.compile(r"/admin/exams/\d+$"))
    exam = Exam.objects.get()
    assert "Saved “Midterm”." in page.locator(".messages").inner_text()
    assert "In progress" in page.locator(".exam-facts .state").inner_text()
    assert "Not published" in page.locator(".exam-facts .published").inner_text()
    assert list(exam.problems.values_list("problem_id", "points")) == [(algo.pk, 60), (sql.pk, 30)]

    page.get_by_label("Usernames").fill("sam\nghost")
    page.get_by_role("button", name="Add participants").click()
    assert "No user is named ghost. Nobody was added" in page.locator("#add-participants").inner_text()
    assert not ExamParticipant.objects.exists()
    screenshot(page, "exam-admin-participants-refused-1280-en")
    page.get_by_label("Usernames").fill("sam")
    page.get_by_role("button", name="Add participants").click()
    page.wait_for_url(re.compile(r"/admin/exams/\d+$"))
    assert "Added 1 participant." in page.locator(".messages").inner_text()
    assert "Open" in page.locator("tr[data-participant='sam'] .state").inner_text()
    screenshot(page, "exam-admin-detail-1280-en")
    page.set_viewport_size({"width": 390, "height": 900})
    screenshot(page, "exam-admin-detail-390-en")
    page.set_viewport_size({"width": 1280, "height": 900})

    # sam answers the question and hands in (as the exam page would, through the services).
    sam = ExamParticipant.objects.get().user
    exam_answer_save(exam_id=exam.pk, question_id=exam.questions.get().pk, user=sam, choices=[1],
                     now=timezone.now())
    exam_hand_in(exam_id=exam.pk, user=sam, now=timezone.now())
    page.reload()
    assert "Handed in" in page.locator("tr[data-participant='sam'] .state").inner_text()

    page.get_by_role("link", name="Publish results…").click()
    assert "1 of 1 participants have handed in." in page.locator("main").inner_text()
    screenshot(page, "exam-admin-publish-1280-en")
    page.get_by_role("button", name="Publish results").click()
    page.wait_for_url(re.compile(r"/admin/exams/\d+$"))
    assert "are published" in page.locator(".messages").inner_text()
    assert "Published" in page.locator(".exam-facts .published").inner_text()
    exam.refresh_from_db()
    assert exam.published_at is not None

    page.get_by_role("link", name="Results", exact=True).click()
    page.wait_for_url(re.compile(r"/admin/exams/\d+/results$"))
    row = page.locator("#exam-results tr[data-participant='sam']")
    assert row.locator(".total").inner_text() == "10"
    screenshot(page, "exam-admin-results-1280-en")
    page.goto(base + "/admin/exams")
    assert "Midterm" in page.locator("table.exams").inner_text()
    screenshot(page, "exam-admin-list-1280-en")
    page.goto(f"{base}/admin/exams/{exam.pk}/edit")
    screenshot(page, "exam-admin-edit-started-1280-en")
    # Someone else renames it while this page is open: saving says so and keeps the typing.
    exam.refresh_from_db()
    exam_update(exam_id=exam.pk, revision=exam.revision, changes={"title": "Midterm (bob)"}, now=timezone.now())
    page.get_by_label("Title", exact=True).fill("Midterm 1")
    page.get_by_role("button", name="Save", exact=True).click()
    assert "Someone else saved this while you were editing it." in page.locator("#form-error").inner_text()
    assert "Midterm (bob)" in page.locator(".saved-version").inner_text()
    assert page.get_by_label("Title", exact=True).input_value() == "Midterm 1"
    screenshot(page, "exam-admin-edit-conflict-1280-en")
    page.set_viewport_size({"width": 390, "height": 900})
    page.goto(base + "/admin/exams/new")
    screenshot(page, "exam-admin-create-390-en")
    page.set_viewport_size({"width": 1280, "height": 900})

    # A lesson with a practice of both problems.
    # The console's own "Lessons" (the top bar's is the students' lesson list).
    page.get_by_role("navigation", name="Exams and lessons").get_by_role("link", name="Lessons", exact=True).click()
    page.get_by_label("Title", exact=True).fill("Week 1")
    page.get_by_role("button", name="Create the lesson").click()
    page.wait_for_url(re.compile(r"/admin/lessons/\d+$"))
    page.get_by_role("link", name="Add a practice").click()
    page.get_by_label("Title", exact=True).fill("Warm-up")
    page.get_by_label(f"#{algo.pk} {algo.title}").check()
    page.get_by_label(f"#{sql.pk} {sql.title}").check()
    screenshot(page, "lesson-admin-practice-1280-en")
    page.get_by_role("button", name="Add the practice").click()
    page.wait_for_url(re.compile(r"/admin/lessons/\d+$"))
    assert "Saved “Warm-up”." in page.locator(".messages").inner_text()
    assert "2" in page.locator("table.practices").inner_text()
    screenshot(page, "lesson-admin-lesson-1280-en")
    lesson_path = page.url[len(base):]
    page.context.close()

    chinese = new_page(chromium, language="zh-CN")
    sign_in(chinese, base, "tina", PASSWORD, f"/admin/exams/{exam.pk}", language="zh-CN")
    text = chinese.locator("main").inner_text()
    assert "考生" in text and "已公布" in text and "进行中" in text and "添加考生" in text
    assert chinese.locator("#nav-exam-admin").inner_text() == "考试管理"
    for width, path, name in ((1280, f"/admin/exams/{exam.pk}", "exam-admin-detail"),
                              (1280, "/admin/exams/new", "exam-admin-create"),
                              (1280, f"/admin/exams/{exam.pk}/results", "exam-admin-results"),
                              (1280, lesson_path, "lesson-admin-lesson"), (390, "/admin/exams", "exam-admin-list")):
        chinese.set_viewport_size({"width": width, "height": 900})
        chinese.goto(base + path)
        assert "考试与课程" in chinese.locator(".console-nav").get_attribute("aria-label")
        screenshot(chinese, f"{name}-{width}-zh")
    assert "开始时间（UTC）" in chinese.locator("table.exams").inner_text()
    chinese.context.close()

    student = new_page(chromium)
    sign_in(student, base, "sam", PASSWORD, "/problems")
    assert student.locator("#nav-exam-admin").count() == 0
    response = student.goto(base + "/admin/exams")
    assert response.status == 403 and "Your account may not open this page." in student.content()
    student.context.close()
