"""The capacity advice and a verdict's provenance in a real browser against the real server:
an admin reads on the console's pool strip whether each pool's ready slots carry the last
window's load, and on an exam's page what its burst needs (asking again with figures of their
own); a student reads who judged their submission through a rejudge. 1280 px in English,
390 px in Chinese."""

from datetime import timedelta
from itertools import count

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from judging.models import JobState, JudgeJob
from judging.services.rejudge import submission_rejudge
from tests.browser import ARTIFACTS, chromium, new_page, screenshot, sign_in  # noqa: F401 (fixture)
from tests.e2e.conftest import start_server
from tests.e2e.test_pages_browser import PASSWORD, person
from tests.factories import HostGroupFactory, make_exam, make_node, make_problem
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WINDOW_S = 600
_ids = count(10_000)


@pytest.fixture
def server(tls, tmp_path):
    live = start_server(tls, tmp_path, KECE_IN_PROCESS_SCHEDULER=0, KECE_CAPACITY_WINDOW_S=WINDOW_S)
    yield live
    live.stop()


def _history(pool, *, rate, judge_s):
    """`rate` jobs/s of `pool` over the last window, each judged in `judge_s` seconds."""
    now = timezone.now()
    rows = []
    for i in range(int(rate * WINDOW_S)):
        created = now - timedelta(seconds=5 + i / rate * (WINDOW_S - 10) / WINDOW_S)
        rows.append(JudgeJob(submission_type="ALGO", submission_id=next(_ids), pool=pool, runtime_spec=f"{pool}-r1",
                             state=JobState.COMPLETED, available_at=created, claim_key=created, created_at=created,
                             started_at=created, finished_at=created + timedelta(seconds=judge_s)))
    JudgeJob.objects.bulk_create(rows)


def _admin(username):
    user = person(username)
    user.user_permissions.add(Permission.objects.get(codename="manage_judgers", content_type__app_label="nodes"))
    return user


def _shots(page, name, section):
    """The whole page, and the section itself at full size (a phone's page is too long to read
    shrunk to fit)."""
    screenshot(page, name)
    page.locator(section).screenshot(path=str(ARTIFACTS / f"{name}-section.png"))


def _as(chromium, server, username, path, *, width, language):
    page = new_page(chromium, width=width, language=language)
    sign_in(page, server.url, username, PASSWORD, path, language=language)
    return page


def test_an_admin_reads_the_capacity_advice_and_a_student_who_judged_their_work(server, chromium):
    _admin("ada")
    student = person("sam")
    group = HostGroupFactory(total_slots=32)
    (first, first_id), (second, second_id) = (make_node(pool="python", name=f"lab-python-{n}", max_slots=4,
                                                        host_group=group) for n in (1, 2))
    make_node(pool="java", name="lab-java-1", max_slots=3, host_group=group)
    _history("python", rate=0.8, judge_s=4)  # 3.2 busy of 8 ready
    _history("java", rate=0.8, judge_s=4)  # 3.2 busy of 3 ready: add 1
    algorithm, query = make_problem(languages=("python", "java")), make_problem(kind="SQL")
    exam = make_exam(algorithm, query, mode="ACM", participants=[person(f"p{n}") for n in range(40)],
                     now=timezone.now() + timedelta(days=1))

    submission = submit(student, make_problem(languages=("python",)))
    [job] = claim(first_id)
    settle(first_id, judged(job, verdict="WA"))
    submission_rejudge(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    [job] = claim(second_id)
    settle(second_id, judged(job))

    page = _as(chromium, server, "ada", "/admin/judgers", width=1280, language="en")
    python = page.locator(".pool-card[data-pool='python'] .advice")
    assert "8 ready slots: enough to keep at most 80% busy." in python.inner_text()
    assert "Add 1 slot." in page.locator(".pool-card[data-pool='java'] .advice").inner_text()
    _shots(page, "capacity-strip-1280-en", ".pool-strip")

    page.goto(f"{server.url}/admin/exams/{exam.pk}")
    assert "40 participants × 2 problems × 3.0 per problem" in page.locator(".exam-capacity").inner_text()
    page.get_by_label("Judged within (seconds)").fill("120")
    page.get_by_role("button", name="Work it out again").click()
    page.wait_for_url(f"**/admin/exams/{exam.pk}?*within=120*")
    capacity = page.locator(".exam-capacity").inner_text()
    assert "to be judged within 120 s" in capacity and "MySQL: 120 submissions" in capacity
    _shots(page, "capacity-exam-1280-en", ".exam-capacity")

    page = _as(chromium, server, "sam", f"/submissions/ALGO/{submission.pk}", width=1280, language="en")
    provenance = page.get_by_role("region", name="Who judged it").inner_text()
    assert "Generation 2: the result shown" in provenance and "lab-python-2" in provenance
    assert "Generation 1: replaced by a later judgement" in provenance and "lab-python-1" in provenance
    assert "Wrong answer" in provenance
    _shots(page, "provenance-1280-en", ".provenance")

    chinese = _as(chromium, server, "ada", "/admin/judgers", width=390, language="zh-CN")
    assert "就绪槽位 3 个：不足以使繁忙度不超过 80%。请增加 1 个槽位。" in chinese.locator(
        ".pool-card[data-pool='java'] .advice").inner_text()
    _shots(chinese, "capacity-strip-390-zh", ".pool-strip")
    chinese.goto(f"{server.url}/admin/exams/{exam.pk}")
    assert "本场考试的评测容量" in chinese.locator(".exam-capacity").inner_text()
    _shots(chinese, "capacity-exam-390-zh", ".exam-capacity")
    chinese = _as(chromium, server, "sam", f"/submissions/ALGO/{submission.pk}", width=390, language="zh-CN")
    assert "第 2 代：当前显示的结果" in chinese.get_by_role("region", name="由谁评测").inner_text()
    _shots(chinese, "provenance-390-zh", ".provenance")
