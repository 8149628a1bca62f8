"""The participant's exam page in a real browser against the real server: a student answers a
question, submits into an ACM exam from the problem page, hands in early and sees the
problems' result but not the questions' points while the exam is still open for others;
English and Chinese, 1280 and 390 px."""

import re
from pathlib import Path

import pytest

from judging.services.problems import problem_import
from tests.browser import chromium, new_page, screenshot, sign_in  # noqa: F401 (fixture)
from tests.e2e.test_pages_browser import PASSWORD, person, quiet_server  # noqa: F401 (fixture)
from tests.factories import make_exam

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def test_an_early_hand_in_shows_no_answer_key_while_the_exam_is_open(quiet_server, chromium):
    student = person("sam")
    algo, _ = problem_import(SAMPLES / "aplusb")
    exam = make_exam(algo, mode="ACM", participants=[student], points={0: 60}, questions=[
        {"kind": "SINGLE", "options": ["3", "4"], "correct": [1], "points": 40}])
    base = quiet_server.url
    path = f"/exams/{exam.pk}"

    page = new_page(chromium)
    sign_in(page, base, "sam", PASSWORD, path)
    page.get_by_role("radio", name="4").check()  # saved as it is ticked, without pressing Save
    page.get_by_role("status").filter(has_text="Your answers are saved.").wait_for()
    page.reload()
    assert page.get_by_role("radio", name="4").is_checked()
    page.get_by_role("link", name=algo.title).click()
    page.get_by_label("Code").fill("a, b = map(int, input().split())\nprint(a + b)\n")
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r"/submissions/ALGO/\d+$"))
    page.goto(base + path)
    page.get_by_label("I have finished").check()
    with page.expect_navigation():
        page.get_by_role("button", name="Hand in").click()
    assert page.get_by_role("status").filter(has_text="Handed in.").is_visible()

    result = page.locator("main").inner_text()
    assert "Handed in" in result and "Result" in result and "Total: 0" in result
    assert "The questions' points are shown when the exam has ended" in result
    assert "40 / 40" not in result and "Question 1" not in result
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        screenshot(page, f"exam-early-hand-in-{width}-en")
    page.context.close()

    chinese = new_page(chromium, language="zh-CN")
    sign_in(chinese, base, "sam", PASSWORD, path, language="zh-CN")
    assert "客观题的得分在考试结束后显示" in chinese.locator("main").inner_text()
    for width in (1280, 390):
        chinese.set_viewport_size({"width": width, "height": 900})
        screenshot(chinese, f"exam-early-hand-in-{width}-zh")
    chinese.context.close()


@pytest.mark.parametrize("language, width, save, unsaved, refused", [
    ("en", 1280, "Save answers", "Your last change is not saved",
     "That was not saved: The exam has ended; it takes no more answers or submissions."),
    ("zh-CN", 390, "保存答案", "你最近的修改尚未保存", "未保存：考试已结束，不再接受作答或提交。"),
])
def test_an_answer_saved_after_the_end_is_refused_in_the_students_language(quiet_server, chromium, language,
                                                                          width, save, unsaved, refused):
    from datetime import timedelta

    from django.utils import timezone

    from judging.models import Exam, ExamAnswer

    student = person("sam")
    algo, _ = problem_import(SAMPLES / "aplusb")
    exam = make_exam(algo, participants=[student], questions=[
        {"kind": "SINGLE", "options": ["3", "4"], "correct": [1], "points": 40}])
    page = new_page(chromium, width=width, language=language)
    sign_in(page, quiet_server.url, "sam", PASSWORD, f"/exams/{exam.pk}", language=language)
    # The exam ends while the page is open: the answer comes a second late. Ticked, it is
    # not saved, and the page says so; pressed, the refusal says why.
    Exam.objects.filter(pk=exam.pk).update(ends_at=timezone.now() - timedelta(seconds=1))
    page.get_by_role("radio", name="4").check()
    page.get_by_role("status").filter(has_text=unsaved).wait_for()
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.get_by_role("button", name=save).click()
    assert refused in page.locator("main").inner_text()
    assert not ExamAnswer.objects.exists()
    screenshot(page, f"exam-answer-after-end-{width}-{language}")
    page.context.close()


def test_the_exam_and_its_problems_count_down_and_warn_before_the_end(quiet_server, chromium):
    """The exam's page and its problem's say the time left, from the server's clock, and a
    screen reader hears it five minutes before the end (there was no countdown at all)."""
    from datetime import timedelta

    from django.utils import timezone

    from judging.models import Exam

    student = person("tim")
    algo, _ = problem_import(SAMPLES / "aplusb")
    exam = make_exam(algo, mode="ACM", participants=[student])
    Exam.objects.filter(pk=exam.pk).update(ends_at=timezone.now() + timedelta(minutes=5, seconds=3))
    page = new_page(chromium)
    sign_in(page, quiet_server.url, "tim", PASSWORD, f"/exams/{exam.pk}")
    clock = page.locator(".exam-clock .words")
    page.wait_for_function("() => /^Time left: 5:0\\d$/.test(document.querySelector('.exam-clock .words').textContent)")
    page.get_by_role("status").filter(has_text="Five minutes left").wait_for(timeout=15000)
    assert re.fullmatch(r"Time left: (5:00|4:5\d)", clock.inner_text())
    screenshot(page, "exam-time-left-1280-en")
    page.goto(f"{quiet_server.url}/problems/{algo.pk}?exam={exam.pk}")
    page.wait_for_function("() => /^Time left: 4:\\d\\d$/.test(document.querySelector('.exam-clock .words').textContent)")
    page.context.close()
