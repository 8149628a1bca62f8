"""Every page and API call that lists a user's own submissions shows them a page at a time,
newest first, and reads the same number of statements whether there are 3 or 60."""

import pytest
from django.utils import timezone

from judging.services.events import events_dispatch
from tests.api.helpers import error_of, token_client
from tests.factories import make_exam, make_node, make_practice, make_problem
from tests.judging.helpers import claim, judged, settle, submit

# One student with 60 submissions, as no student sends within the fair-use limits.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("unlimited_submits")]

PAGE = 50
COUNTS = [3, PAGE + 10]


@pytest.fixture
def sql_problem(db):
    return make_problem(kind="SQL")


def _fill(student, problem, sql_problem, count, **link) -> list:
    """`count` submissions linked as `link` says, the oldest judged, the newest a SQL one (so
    that a page holds both tables' rows whatever the count), the rest waiting for a judge."""
    _, identity = make_node(pool="python")
    made = [submit(student, problem, **link) for _ in range(count - 1)]
    [job] = claim(identity)
    settle(identity, judged(job))
    events_dispatch(now=timezone.now())
    made.append(submit(student, sql_problem, language="mysql", code="SELECT 1;", **link))
    return made[::-1]


def _ids(listed) -> list:
    return [(s["submissionType"], s["submissionId"]) for s in listed]


def _keys(submissions) -> list:
    return [(s.TYPE, s.pk) for s in submissions]


@pytest.mark.parametrize("count", COUNTS)
def test_my_submissions_reads_the_same_statements_for_any_count(client, student, problem, sql_problem, count,
                                                                  django_assert_num_queries):
    exam = make_exam(problem, sql_problem, mode="ACM", participants=[student])
    newest = _fill(student, problem, sql_problem, count, exam_id=exam.pk)
    client.force_login(student)
    # session, user, count, keys, each table's rows, jobs, ready nodes, the viewer's
    # permissions (two: for an exam's submissions)
    with django_assert_num_queries(10):
        page = client.get("/submissions").content.decode()
    shown = [f'href="/submissions/{kind}/{pk}"' for kind, pk in _keys(newest)]
    assert all(link in page for link in shown[:PAGE]) and not any(link in page for link in shown[PAGE:])


@pytest.mark.parametrize("count", COUNTS)
def test_the_exam_page_pages_its_submissions_in_the_same_statements_for_any_count(
        client, student, problem, sql_problem, count, django_assert_num_queries):
    exam = make_exam(problem, sql_problem, mode="ACM", participants=[student])
    newest = _fill(student, problem, sql_problem, count, exam_id=exam.pk)
    client.force_login(student)
    # session, user, participant, count, keys, each table's rows, answers, jobs, ready nodes, the
    # viewer's permissions (two), problems, questions; the result: scores, problems, questions
    with django_assert_num_queries(17):
        page = client.get(f"/exams/{exam.pk}").content.decode()
    shown = [f'href="/submissions/{kind}/{pk}"' for kind, pk in _keys(newest)]
    assert all(link in page for link in shown[:PAGE]) and not any(link in page for link in shown[PAGE:])
    assert ("Page 1 of 2" in page) == (count > PAGE)
    if count > PAGE:
        rest = client.get(f"/exams/{exam.pk}?page=2").content.decode()
        assert all(link in rest for link in shown[PAGE:]) and shown[0] not in rest


@pytest.mark.parametrize("count", COUNTS)
def test_the_exam_api_pages_its_submissions_in_the_same_statements_for_any_count(
        student, problem, sql_problem, count, django_assert_num_queries):
    exam = make_exam(problem, sql_problem, mode="ACM", participants=[student])
    newest = _fill(student, problem, sql_problem, count, exam_id=exam.pk)
    api = token_client(student)
    # token and user, participant, count, keys, each table's rows, answers, jobs, ready nodes,
    # the viewer's permissions (two), problems, questions
    with django_assert_num_queries(13):
        view = api.get(f"/api/v1/exams/{exam.pk}").json()
    assert _ids(view["submissions"]) == _keys(newest)[:PAGE]
    assert [s["status"] for s in view["submissions"]][:2] == ["PENDING", "PENDING"]
    assert view["submissionsPage"]["count"] == count and view["submissionsPage"]["previous"] is None
    if count > PAGE:
        assert "page=2" in view["submissionsPage"]["next"]
        rest = api.get(view["submissionsPage"]["next"]).json()
        assert _ids(rest["submissions"]) == _keys(newest)[PAGE:] and rest["submissions"][-1]["status"] == "AC"
    else:
        assert view["submissionsPage"]["next"] is None and view["submissions"][-1]["status"] == "AC"
    small = api.get(f"/api/v1/exams/{exam.pk}?pageSize=2").json()
    assert _ids(small["submissions"]) == _keys(newest)[:2] and small["submissionsPage"]["count"] == count
    assert error_of(api.get(f"/api/v1/exams/{exam.pk}?page=9")) == (400, "invalid")


@pytest.mark.parametrize("count", COUNTS)
def test_the_practice_api_pages_its_answers_in_the_same_statements_for_any_count(
        student, problem, sql_problem, count, django_assert_num_queries):
    practice = make_practice(problem, sql_problem)
    newest = _fill(student, problem, sql_problem, count, lesson_practice_id=practice.pk)
    api = token_client(student)
    # token and user, practice, best scores, the user's permissions (which problems they may
    # see: two), problems, count, keys, each table's rows, jobs, ready nodes
    with django_assert_num_queries(12):
        view = api.get(f"/api/v1/lessons/practices/{practice.pk}").json()
    assert _ids(view["answers"]) == _keys(newest)[:PAGE]
    assert view["answersPage"]["count"] == count
    assert (view["answersPage"]["next"] is not None) == (count > PAGE)
    if count > PAGE:
        assert _ids(api.get(view["answersPage"]["next"]).json()["answers"]) == _keys(newest)[PAGE:]


def test_oi_lists_read_the_same_statements_for_any_count(client, student, problem):
    """OI submissions wait without a job until the hand-in, and whether the hand-in passed
    one over is read for the whole page at once, not per row."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    exam = make_exam(problem, mode="OI", participants=[student])
    client.force_login(student)
    api = token_client(student)

    def statements() -> list:
        counts = []
        for read in (lambda: client.get("/submissions"), lambda: client.get(f"/exams/{exam.pk}"),
                     lambda: api.get(f"/api/v1/exams/{exam.pk}")):
            with CaptureQueriesContext(connection) as captured:
                assert read().status_code == 200
            counts.append(len(captured))
        return counts

    for _ in range(3):
        submit(student, problem, exam_id=exam.pk)
    few = statements()
    for _ in range(PAGE + 7):
        submit(student, problem, exam_id=exam.pk)
    assert statements() == few
