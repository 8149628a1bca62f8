"""An exam's problem in a real browser: nobody outside the exam finds it, a participant
finds it from the start, and a practice submit of it during the exam is refused in words."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import Exam, Submission
from tests.browser import chromium, new_page, screenshot, sign_in  # noqa: F401 (fixture)
from tests.e2e.test_pages_browser import PASSWORD, person, quiet_server  # noqa: F401 (fixture)
from tests.factories import make_exam, make_problem

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REFUSAL = {"en": "This problem belongs to an exam you are taking", "zh-CN": "此题属于你正在参加的考试"}


def _title_on(page, url: str) -> bool:
    page.goto(url)
    return "Exam secret" in page.content()


def test_an_exam_problem_is_seen_from_the_start_by_participants_only(quiet_server, chromium):
    problem = make_problem(slug="exam-secret", languages=("python",))
    problem.title = "Exam secret"
    problem.save(update_fields=["title"])
    taker = person("taker")
    person("outsider")
    exam = make_exam(problem, mode="OI", participants=[taker])
    Exam.objects.filter(pk=exam.pk).update(starts_at=timezone.now() + timedelta(minutes=10))
    url = quiet_server.url

    anonymous = new_page(chromium)
    assert not _title_on(anonymous, f"{url}/problems")
    response = anonymous.goto(f"{url}/problems/{problem.pk}")
    assert response.status == 404 and "Exam secret" not in anonymous.content()
    screenshot(anonymous, "exam-secret-anonymous-1280-en")
    anonymous.context.close()

    for username in ("outsider", "taker"):
        page = new_page(chromium)
        sign_in(page, url, username, PASSWORD, next_path="/problems")
        assert "Exam secret" not in page.content()
        assert page.goto(f"{url}/problems/{problem.pk}").status == 404, f"{username} before the start"
        page.context.close()

    Exam.objects.filter(pk=exam.pk).update(starts_at=timezone.now() - timedelta(minutes=1))
    for width, language in ((1280, "en"), (390, "zh-CN")):
        outsider_page = new_page(chromium, width=width, language=language)
        sign_in(outsider_page, url, "outsider", PASSWORD, next_path="/problems", language=language)
        assert outsider_page.goto(f"{url}/problems/{problem.pk}").status == 404, "an outsider during the exam"
        outsider_page.context.close()

        page = new_page(chromium, width=width, language=language)
        sign_in(page, url, "taker", PASSWORD, next_path=f"/problems/{problem.pk}", language=language)
        assert page.get_by_role("heading", name="Exam secret").is_visible()
        page.locator("#id_code").fill("print(42)")
        page.get_by_role("button", name="Submit" if language == "en" else "提交").click()
        alert = page.get_by_role("alert")
        alert.wait_for()
        assert REFUSAL[language] in alert.inner_text()
        assert page.locator("#id_code").input_value() == "print(42)", "the code stays in the form"
        screenshot(page, f"exam-secret-refused-{width}-{language}")
        page.context.close()
    assert Submission.objects.count() == 0
