"""The students' lesson pages and a submission's judging history in a real browser, English
and Chinese, at 1280 and 390 px."""

import pytest
from django.core.cache import cache

from judging.models import Lesson
from judging.services.events import events_dispatch
from judging.services.leases import jobs_reap_expired
from tests.browser import chromium, new_page, screenshot, sign_in  # noqa: F401 (fixture)
from tests.e2e.test_pages_browser import PASSWORD, person, quiet_server  # noqa: F401 (fixture)
from tests.factories import make_node, make_practice, make_problem
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WORDS = {
    "en": {"lesson": "Loops", "progress": "1 of 2 solved", "you": "ann (you)", "context": "counts for the practice",
           "history": "Given back to the queue, judged again later: the judge stopped answering"},
    "zh-CN": {"lesson": "Loops", "progress": "已解决 1 / 2", "you": "ann (你)", "context": "本次提交计入该练习",
              "history": "已退回队列，稍后重新评测：评测机没有响应"},
}


def test_a_student_follows_a_lesson_to_a_practice_and_reads_a_submissions_history(quiet_server, chromium):
    lesson = Lesson.objects.create(title="Loops")
    problems = [make_problem(languages=("python",)) for _ in range(2)]
    practice = make_practice(*problems)
    practice.lesson, practice.title = lesson, "Week 1"
    practice.save(update_fields=["lesson", "title"])
    ann = person("ann")
    _, silent = make_node(pool="python", name="silent")
    _, sound = make_node(pool="python", name="sound")
    submission = submit(ann, problems[0], lesson_practice_id=practice.pk)
    [job] = claim(silent)
    later = job.lease_until
    jobs_reap_expired(now=later)  # the first judge went silent: a reclaim on record
    [job] = claim(sound, now=later)
    settle(sound, judged(job), now=later)
    while events_dispatch(now=later).applied:
        pass
    cache.clear()

    for width, language in ((1280, "en"), (390, "zh-CN")):
        words = WORDS[language]
        page = new_page(chromium, width=width, language=language)
        sign_in(page, quiet_server.url, "ann", PASSWORD, "/lessons", language=language)
        page.get_by_role("link", name=words["lesson"]).click()
        page.wait_for_url(f"{quiet_server.url}/lessons/{lesson.pk}")
        assert words["progress"] in page.locator("table.practices").inner_text()
        assert words["you"] in page.locator("table.leaderboard").inner_text()
        screenshot(page, f"lesson-{width}-{language}")
        page.get_by_role("link", name="Week 1").click()
        page.wait_for_url(f"{quiet_server.url}/lessons/practices/{practice.pk}")
        screenshot(page, f"practice-{width}-{language}")
        page.locator("table.practice-problems a").nth(1).click()
        assert words["context"] in page.content()
        page.goto(f"{quiet_server.url}/submissions/ALGO/{submission.pk}")
        assert words["history"] in page.locator("table.history").inner_text()
        screenshot(page, f"submission-history-{width}-{language}")
        page.context.close()
