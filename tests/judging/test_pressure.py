"""Backpressure: beyond a pool's thresholds practice waits at the door, exam work does not."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import JudgeJob, PriorityClass, Submission
from kece.errors import Throttled
from tests.api.helpers import person, token_client
from tests.factories import HostGroupFactory, UserFactory, make_node, make_problem
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = pytest.mark.django_db

SUBMIT = "/api/v1/submissions"


@pytest.fixture
def java(db):
    return make_problem(languages=("java",))


def _fill(problem, count, *, now):
    return [submit(UserFactory(), problem, language="java", now=now) for _ in range(count)]


def _counts():
    return Submission.objects.count(), JudgeJob.objects.count()


def test_beyond_the_backlog_a_practice_submit_is_refused_with_retry_after_and_nothing_written(java, settings):
    settings.KECE_THROTTLE_BACKLOG = {"*": 0, "java": 3}
    settings.KECE_THROTTLE_RETRY_S = 20
    make_node(pool="java")  # a judge, behind
    _fill(java, 3, now=timezone.now())
    api = token_client(person("late"))
    before = _counts()
    response = api.post(SUBMIT, {"problemId": java.pk, "language": "java", "code": "class Main {}"},
                        content_type="application/json")
    assert response.status_code == 429
    assert response["Retry-After"] == "20"
    assert response.json() == {"error": "throttled", "detail": "The Java judges are busy; your code is kept here; "
                                                               "try again in 20 s."}
    assert _counts() == before
    # Another pool is not concerned.
    python = make_problem(languages=("python",))
    assert api.post(SUBMIT, {"problemId": python.pk, "language": "python", "code": "print(1)"},
                    content_type="application/json").status_code == 202


def test_a_pool_without_a_judge_says_so_when_it_refuses(java, settings):
    """Not "busy": nothing is judging, and nothing will until a judge is back."""
    settings.KECE_THROTTLE_BACKLOG = {"*": 0}
    settings.KECE_THROTTLE_WAIT_S = {"*": 600}
    _fill(java, 1, now=timezone.now() - timedelta(seconds=601))
    api = token_client(person("late"))
    body = {"problemId": java.pk, "language": "java", "code": "class Main {}"}
    refused = api.post(SUBMIT, body, content_type="application/json")
    assert refused.status_code == 429 and refused.json()["detail"] == (
        "No Java judge is available, and work already waits for one: new practice submissions are refused until "
        "a judge is back. Your code is kept here; try again later.")
    chinese = api.post(SUBMIT, body, content_type="application/json", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert chinese.json()["detail"].startswith("目前没有可用的 Java 评测机")
    make_node(pool="java")  # a judge comes back, behind the work that waited
    assert api.post(SUBMIT, body, content_type="application/json").json()["detail"].startswith(
        "The Java judges are busy")


def test_exam_answers_are_accepted_beyond_the_thresholds(java, settings):
    settings.KECE_THROTTLE_BACKLOG = {"*": 3}
    _fill(java, 3, now=timezone.now())
    exam = submit(UserFactory(), java, language="java", priority_class=PriorityClass.EXAM)
    assert JudgeJob.objects.get(pk=exam.current_judge_job_id).priority_class == PriorityClass.EXAM


def test_a_long_wait_at_the_head_of_the_line_throttles_until_the_pool_drains(java, settings):
    settings.KECE_THROTTLE_BACKLOG = {"*": 0}
    settings.KECE_THROTTLE_WAIT_S = {"*": 60}
    start = timezone.now()
    _fill(java, 1, now=start)
    assert submit(UserFactory(), java, language="java", now=start + timedelta(seconds=59))
    with pytest.raises(Throttled):
        submit(UserFactory(), java, language="java", now=start + timedelta(seconds=61))
    # The pool drains: practice is accepted again.
    node = make_node(pool="java", max_slots=4, host_group=HostGroupFactory(total_slots=4))[1]
    for job in claim(node, free_slots=4):
        assert settle(node, judged(job)) == "settled"
    api = token_client(person("late"))
    body = {"problemId": java.pk, "language": "java", "code": "class Main {}"}
    assert api.post(SUBMIT, body, content_type="application/json").status_code == 202


def test_queued_bulk_rejudges_do_not_throttle_practice(java, settings):
    from judging.services.rejudge import submission_rejudge

    start = timezone.now()
    judged_before = _fill(java, 3, now=start - timedelta(days=1))
    settings.KECE_THROTTLE_BACKLOG = {"*": 2}
    node = make_node(pool="java", max_slots=4, host_group=HostGroupFactory(total_slots=4))[1]
    for job in claim(node, free_slots=4, now=start):
        assert settle(node, judged(job), now=start) == "settled"
    for submission in judged_before:
        submission_rejudge(submission_type="ALGO", submission_id=submission.pk, now=start,
                           priority_class=PriorityClass.REJUDGE)
    assert submit(UserFactory(), java, language="java", now=start)
    # Practice itself still counts.
    submit(UserFactory(), java, language="java", now=start)
    with pytest.raises(Throttled):
        submit(UserFactory(), java, language="java", now=start)


def test_the_problem_page_keeps_the_code_and_says_when_to_try_again(java, settings, client):
    settings.KECE_THROTTLE_BACKLOG = {"*": 1}
    make_node(pool="java")
    _fill(java, 1, now=timezone.now())
    student = UserFactory()
    client.force_login(student)
    code = "class Main { /* my answer */ }"
    response = client.post(f"/problems/{java.pk}", {"language": "java", "code": code})
    assert response.status_code == 429 and response["Retry-After"] == str(settings.KECE_THROTTLE_RETRY_S)
    page = response.content.decode()
    assert "my answer" in page
    assert "The Java judges are busy; your code is kept here; try again in 20 s." in page
    # The answer opens at the reasons, focused, not at the statement's top.
    assert '<div class="notice bad" role="alert" id="submit-refused" tabindex="-1" autofocus>' in page
    assert not Submission.objects.filter(user=student).exists()
    page = client.post(f"/problems/{java.pk}", {"language": "java", "code": code},
                       HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "my answer" in page and "Java 评测机正忙" in page


@pytest.fixture
def pool_clock(settings, monkeypatch):
    """The pool's figures kept for KECE_PRESSURE_REFRESH_S (the test run reads them on every
    submit), on a monotonic clock the test moves."""
    from types import SimpleNamespace

    from judging import pressure

    settings.KECE_PRESSURE_REFRESH_S = 5
    pressure.forget_pool_figures()
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(pressure, "time", SimpleNamespace(monotonic=lambda: clock.now))
    yield clock
    pressure.forget_pool_figures()


def _backlog_counts(queries) -> int:
    """How many of `queries` counted a pool's backlog (the bounded count over fair-share work)."""
    return sum("wait_reason <>" in query["sql"] and "COUNT(*)" in query["sql"] for query in queries)


def test_a_process_decides_on_the_pools_figures_it_read_within_the_refresh_interval(java, settings, pool_clock):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.KECE_THROTTLE_BACKLOG = {"*": 0, "java": 3}
    now = timezone.now()
    with CaptureQueriesContext(connection) as first:
        submit(UserFactory(), java, language="java", now=now)
    assert _backlog_counts(first.captured_queries) == 1
    # Within the interval the backlog is not counted again: the submits go in on what was read.
    with CaptureQueriesContext(connection) as within:
        _fill(java, 3, now=now)
    assert _backlog_counts(within.captured_queries) == 0
    assert JudgeJob.objects.filter(state="QUEUED").count() == 4
    # Once the interval is over, the next submit reads the pool again and is refused.
    pool_clock.now += 5
    with pytest.raises(Throttled):
        submit(UserFactory(), java, language="java", now=now)
    # …and so is every other submit into the pool until the figures are read again.
    pool_clock.now += 4.9
    with pytest.raises(Throttled):
        submit(UserFactory(), java, language="java", now=now)
    # The pool drains; once the figures are read again, practice is accepted.
    node = make_node(pool="java", max_slots=4, host_group=HostGroupFactory(total_slots=4))[1]
    for job in claim(node, free_slots=4, now=now):
        assert settle(node, judged(job), now=now) == "settled"
    pool_clock.now += 0.1
    assert submit(UserFactory(), java, language="java", now=now).current_judge_job_id


def test_a_users_own_active_jobs_are_counted_on_every_submit_whatever_the_pools_figures(java, settings, pool_clock):
    settings.KECE_USER_ACTIVE_MAX = 2
    student, now = UserFactory(), timezone.now()
    for _ in range(2):
        submit(student, java, language="java", now=now)
    with pytest.raises(Throttled, match="limit is yours alone"):
        submit(student, java, language="java", now=now)
    assert submit(UserFactory(), java, language="java", now=now)


def test_the_bulk_rejudge_step_reads_the_pool_afresh(java, settings, pool_clock):
    from judging.pressure import pool_throttling

    settings.KECE_THROTTLE_BACKLOG = {"*": 2}
    now = timezone.now()
    submit(UserFactory(), java, language="java", now=now)  # the pool's figures read: one queued
    submit(UserFactory(), java, language="java", now=now)
    assert pool_throttling("java", now=now)
