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
    _fill(java, 1, now=timezone.now())
    student = UserFactory()
    client.force_login(student)
    code = "class Main { /* my answer */ }"
    response = client.post(f"/problems/{java.pk}", {"language": "java", "code": code})
    assert response.status_code == 429 and response["Retry-After"] == str(settings.KECE_THROTTLE_RETRY_S)
    page = response.content.decode()
    assert "my answer" in page
    assert "The Java judges are busy; your code is kept here; try again in 20 s." in page
    assert not Submission.objects.filter(user=student).exists()
    page = client.post(f"/problems/{java.pk}", {"language": "java", "code": code},
                       HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "my answer" in page and "Java 评测机正忙" in page
