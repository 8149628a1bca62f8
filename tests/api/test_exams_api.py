"""The exam, lesson-practice and idempotent-submit additions to the HTTP API."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from judging.models import Exam, ExamParticipant, IdempotencyKey, JudgeJob, Submission
from judging.services.events import events_dispatch
from tests.api.helpers import ADMIN, error_of, make_admin, person, send, token_client
from tests.concurrency import raise_first_error, run_concurrently
from tests.factories import make_exam, make_node, make_problem
from tests.judging.helpers import claim, judged, settle

SUBMIT = "/api/v1/submissions"


def _submit(client, body, key=None):
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return send(client, "POST", SUBMIT, body, **extra)


@pytest.fixture
def api(student):
    return token_client(student)


@pytest.mark.django_db
def test_a_retry_with_the_same_key_is_the_same_submission(api, problem, student):
    body = {"problemId": problem.pk, "language": "python", "code": "print(1)"}
    first = _submit(api, body, key="k-1")
    assert first.status_code == 202
    again = _submit(api, body, key="k-1")
    assert again.status_code == 200 and again.json() == first.json()
    assert Submission.objects.count() == 1 and JudgeJob.objects.count() == 1

    assert _submit(api, body | {"examId": None}, key="k-1").json() == first.json(), "null is leaving it out"
    assert _submit(api, body, key="k-2").json()["submissionId"] != first.json()["submissionId"]
    assert _submit(api, body, key="K-1").status_code == 202, "keys are compared exactly"
    assert error_of(_submit(api, body | {"code": "print(2)"}, key="k-1")) == (409, "idempotency_conflict")
    other = token_client(person("other"))
    assert _submit(other, body, key="k-1").status_code == 202, "keys are per user"
    assert error_of(_submit(api, body, key="x" * 129))[0] == 400
    assert Submission.objects.count() == 4


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_posts_with_one_key_make_one_submission(mariadb):
    student = person("racer")
    problem = make_problem(languages=("python",))
    body = {"problemId": problem.pk, "language": "python", "code": "print(1)"}
    clients = [token_client(student) for _ in range(4)]
    responses = run_concurrently([lambda c=c: _submit(c, body, key="one-key") for c in clients])
    raise_first_error(responses)
    assert sorted(r.status_code for r in responses) == [200, 200, 200, 202]
    assert len({r.json()["submissionId"] for r in responses}) == 1
    assert Submission.objects.count() == 1 and JudgeJob.objects.count() == 1
    assert IdempotencyKey.objects.count() == 1


@pytest.mark.django_db
def test_an_oi_exam_through_the_api(api, student, problem):
    _, identity = make_node(pool="python")
    admin = token_client(make_admin())
    now = timezone.now()
    created = send(admin, "POST", ADMIN + "exams", {
        "title": "midterm", "mode": "OI", "startsAt": (now - timedelta(minutes=1)).isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(), "problems": [{"problemId": problem.pk, "points": 60}],
        "questions": [{"kind": "SINGLE", "prompt": "2+2?", "options": ["3", "4"], "correct": [1], "points": 40}]})
    assert created.status_code == 201, created.json()
    exam = created.json()
    added = send(admin, "POST", ADMIN + f"exams/{exam['id']}/participants", {"userIds": [student.pk]})
    assert added.json()["added"] == 1
    base = f"/api/v1/exams/{exam['id']}"

    view = api.get(base).json()
    assert view["state"] == "OPEN" and [p["points"] for p in view["problems"]] == [60]
    [question] = view["questions"]
    assert send(api, "PUT", f"{base}/answers/{question['questionId']}", {"choices": [1]}).status_code == 200
    replaced = _submit(api, {"problemId": problem.pk, "language": "python", "code": "print(0)", "examId": exam["id"]})
    submitted = _submit(api, {"problemId": problem.pk, "language": "python", "code": "print(1)", "examId": exam["id"]})
    assert replaced.status_code == submitted.status_code == 202
    status = api.get(f"{SUBMIT}/ALGO/{submitted.json()['submissionId']}").json()
    assert (status["status"], status["waitReason"]) == ("PENDING", "hand_in")
    replaced = f"{SUBMIT}/ALGO/{replaced.json()['submissionId']}"
    assert (api.get(replaced).json()["status"], api.get(replaced).json()["waitReason"]) == ("PENDING", "hand_in")

    hand_ins = [send(api, "POST", f"{base}/hand-in").json() for _ in range(3)]
    assert hand_ins[0]["jobs"] == 1 and hand_ins.count(hand_ins[0]) == 3
    # The hand-in judges the last submission of the problem; the one before, never.
    assert (api.get(replaced).json()["status"], api.get(replaced).json()["waitReason"]) == ("CANCELLED", None)
    listed = {s["submissionId"]: s for s in api.get(base).json()["submissions"]}
    passed_over = listed[int(replaced.rsplit("/", 1)[1])]
    assert (passed_over["status"], passed_over["waitReason"]) == ("CANCELLED", None), "the exam's list says the same"
    assert api.get(base).json()["state"] == "HANDED_IN"
    refused = _submit(api, {"problemId": problem.pk, "language": "python", "code": "print(2)", "examId": exam["id"]})
    assert error_of(refused) == (409, "exam_closed")

    [job] = claim(identity)
    settle(identity, judged(job))
    events_dispatch(now=timezone.now())
    assert error_of(api.get(f"{base}/result")) == (409, "not_published")
    status = api.get(f"{SUBMIT}/ALGO/{submitted.json()['submissionId']}").json()
    assert (status["status"], status["waitReason"], status["verdict"]) == ("PENDING", "unpublished", None)
    listed = api.get(base).json()["submissions"][0]
    assert (listed["status"], listed["waitReason"], listed["score"]) == ("PENDING", "unpublished", None)
    assert send(admin, "POST", ADMIN + f"exams/{exam['id']}/publish").json()["publishedAt"]
    assert api.get(f"{SUBMIT}/ALGO/{submitted.json()['submissionId']}").json()["verdict"] == "AC"
    result = api.get(f"{base}/result").json()
    assert result["total"] == 60 and result["problems"][0]["points"] == 60, "questions: not before the end"
    _end(Exam.objects.get(pk=exam["id"]))
    result = api.get(f"{base}/result").json()
    assert result["total"] == 100 and result["problems"][0]["points"] == 60
    assert result["questions"] == [{"questionId": question["questionId"], "points": 40, "maxPoints": 40}]

    stale = send(admin, "PATCH", ADMIN + f"exams/{exam['id']}", {"revision": exam["revision"], "title": "x"})
    assert error_of(stale) == (409, "revision_conflict")
    current = send(admin, "POST", ADMIN + f"exams/{exam['id']}/publish").json()
    later = (now + timedelta(hours=2)).isoformat()
    changed = send(admin, "PATCH", ADMIN + f"exams/{exam['id']}", {"revision": current["revision"], "endsAt": later})
    assert changed.status_code == 200 and changed.json()["revision"] == current["revision"] + 1
    backwards = {"revision": changed.json()["revision"], "endsAt": (now - timedelta(hours=1)).isoformat()}
    assert error_of(send(admin, "PATCH", ADMIN + f"exams/{exam['id']}", backwards)) == (400, "invalid")
    assert send(admin, "DELETE", ADMIN + f"exams/{exam['id']}").status_code == 204
    assert api.get(base).status_code == 404


@pytest.mark.django_db
def test_exams_are_managed_with_judging_manage_exams_and_hidden_from_others(api, student, problem):
    body = {"title": "t", "mode": "ACM", "startsAt": timezone.now().isoformat(),
            "endsAt": (timezone.now() + timedelta(hours=1)).isoformat()}
    assert error_of(send(api, "POST", ADMIN + "exams", body)) == (403, "forbidden")
    student.user_permissions.add(Permission.objects.get(codename="manage_exams", content_type__app_label="judging"))
    assert send(token_client(student), "POST", ADMIN + "exams", body).status_code == 201
    exam = make_exam(problem, mode="ACM")
    assert api.get(f"/api/v1/exams/{exam.pk}").status_code == 404, "not a participant: no such exam"
    assert not ExamParticipant.objects.exists()


@pytest.mark.django_db
def test_a_lesson_practice_shows_its_problems_and_own_best_scores(api, student, problem):
    _, identity = make_node(pool="python")
    admin = token_client(make_admin())
    lesson = send(admin, "POST", ADMIN + "lessons", {"title": "loops"}).json()
    practice = send(admin, "POST", ADMIN + f"lessons/{lesson['id']}/practices",
                    {"title": "p1", "problemIds": [problem.pk]}).json()
    for _ in range(2):
        _submit(api, {"problemId": problem.pk, "language": "python", "code": "print(1)",
                      "lessonPracticeId": practice["id"]})
    first, second = claim(identity, free_slots=2)
    settle(identity, judged(first, verdict="WA", passing=[1]))
    settle(identity, judged(second, verdict="WA"))
    events_dispatch(now=timezone.now())
    view = api.get(f"/api/v1/lessons/practices/{practice['id']}").json()
    assert [p["bestScore"] for p in view["problems"]] == [50]
    assert sorted(a["score"] for a in view["answers"]) == [0, 50]

    renamed = send(admin, "PATCH", ADMIN + f"lessons/practices/{practice['id']}",
                   {"revision": practice["revision"], "title": "p2", "problemIds": [problem.pk]})
    assert (renamed.json()["title"], renamed.json()["revision"]) == ("p2", practice["revision"] + 1)
    lesson_patch = send(admin, "PATCH", ADMIN + f"lessons/{lesson['id']}", {"revision": 7, "title": "x"})
    assert error_of(lesson_patch) == (409, "revision_conflict")
    assert send(admin, "DELETE", ADMIN + f"lessons/practices/{practice['id']}").status_code == 204
    assert api.get(f"/api/v1/lessons/practices/{practice['id']}").status_code == 404
    late = _submit(api, {"problemId": problem.pk, "language": "python", "code": "print(1)",
                         "lessonPracticeId": practice["id"]})
    assert error_of(late) == (400, "invalid")


@pytest.mark.django_db
def test_django_admin_lists_and_edits_exams_and_lessons(problem):
    from django.test import Client

    from judging.models import Lesson

    superuser = person("root", is_staff=True, is_superuser=True)
    exam = make_exam(problem)
    lesson = Lesson.objects.create(title="loops")
    client = Client()
    client.force_login(superuser)
    for path in ("/django-admin/judging/exam/", f"/django-admin/judging/exam/{exam.pk}/change/",
                 f"/django-admin/judging/lesson/{lesson.pk}/change/", "/django-admin/judging/examparticipant/",
                 "/django-admin/authtoken/tokenproxy/add/"):
        assert client.get(path).status_code == 200, path


@pytest.mark.django_db
def test_django_admins_exam_and_token_pages_never_list_every_account(problem):
    """A term's tens of thousands of accounts: a form row with a list of all of them, per
    participant, made an exam's page take minutes and megabytes."""
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.db import connection

    students = [person(f"s{i}") for i in range(30)]
    exam = make_exam(problem, participants=students)
    superuser = person("root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(superuser)
    for path in (f"/django-admin/judging/exam/{exam.pk}/change/", "/django-admin/authtoken/tokenproxy/add/"):
        with CaptureQueriesContext(connection) as queries:
            page = client.get(path).content.decode()
        assert not re.search(r'<option value="\d+"[^>]*>s\d+</option>', page), path  # no option per account
        assert not [q for q in queries.captured_queries if 'FROM `auth_user`' in q["sql"]
                    and "WHERE" not in q["sql"]], path


@pytest.mark.django_db
def test_a_retry_says_how_the_submission_stands_now_as_its_owner_may_see_it(api, problem, student):
    _, identity = make_node(pool="python")
    body = {"problemId": problem.pk, "language": "python", "code": "print(1)"}
    first = _submit(api, body, key="k-judged")
    [job] = claim(identity)
    settle(identity, judged(job, verdict="WA"))
    again = _submit(api, body, key="k-judged")
    assert again.status_code == 200 and again.json() == first.json() | {"status": "WA"}
    shown = send(api, "GET", f"/api/v1/submissions/ALGO/{first.json()['submissionId']}").json()
    assert shown["status"] == "WA"

    exam = make_exam(problem, mode="OI", participants=[student])
    oi = body | {"examId": exam.pk, "code": "print(2)"}
    sent = _submit(api, oi, key="k-oi")
    assert send(api, "POST", f"/api/v1/exams/{exam.pk}/hand-in").status_code == 200
    [job] = claim(identity)
    settle(identity, judged(job, verdict="AC"))
    assert _submit(api, oi, key="k-oi").json() == sent.json(), "unpublished: still waiting, as GET says"


def _end(exam):
    """The exam's end moved into the past, as if its time were up."""
    exam.ends_at = timezone.now() - timedelta(seconds=1)
    exam.save(update_fields=["ends_at"])


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["ACM", "OI"])
def test_an_early_hand_in_shows_no_question_points_until_the_exam_ends(api, student, problem, mode):
    teacher = person("teacher")
    teacher.user_permissions.add(Permission.objects.get(codename="manage_exams", content_type__app_label="judging"))
    exam = make_exam(problem, mode=mode, participants=[student, teacher], points={0: 60}, questions=[
        {"kind": "SINGLE", "options": ["3", "4"], "correct": [1], "points": 40}])
    question = exam.questions.get()
    base = f"/api/v1/exams/{exam.pk}"
    assert send(api, "PUT", f"{base}/answers/{question.pk}", {"choices": [1]}).status_code == 200
    assert send(api, "POST", f"{base}/hand-in").status_code == 200
    if mode == "OI":
        assert error_of(api.get(f"{base}/result")) == (409, "not_published")
        send(token_client(make_admin()), "POST", ADMIN + f"exams/{exam.pk}/publish")  # published before the end

    early = api.get(f"{base}/result").json()
    assert early["questions"] == [{"questionId": question.pk, "points": None, "maxPoints": 40}]
    assert (early["total"], early["objectiveShown"]) == (0, False), "the others are still answering"
    teacher_view = token_client(teacher)
    send(teacher_view, "PUT", f"{base}/answers/{question.pk}", {"choices": [1]})
    send(teacher_view, "POST", f"{base}/hand-in")
    assert teacher_view.get(f"{base}/result").json()["questions"][0]["points"] == 40, "teachers see it"

    _end(exam)
    ended = api.get(f"{base}/result").json()
    assert ended["questions"] == [{"questionId": question.pk, "points": 40, "maxPoints": 40}]
    assert (ended["total"], ended["objectiveShown"]) == (40, True)
