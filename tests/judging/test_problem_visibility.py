"""An exam's problems stay its secret until it ends; a problem's visibility decides after.

Each test drives what a person would: the problem list and page, the user API's submit, the
exam API, the admin API's visibility call.
"""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from judging.models import ExamParticipant, JudgeJob, Problem, ProblemVisibility, Submission
from tests.api.helpers import ADMIN, error_of, make_admin, person, send, session_client, token_client
from tests.factories import make_exam, make_problem

SUBMIT = "/api/v1/submissions"


def _teacher():
    teacher = person("teacher")
    teacher.user_permissions.add(Permission.objects.get(codename="manage_exams", content_type__app_label="judging"))
    return teacher


def _listed(client) -> str:
    response = client.get("/problems")
    assert response.status_code == 200
    return response.content.decode()


def _practise(client, problem, **extra):
    return send(client, "POST", SUBMIT, {"problemId": problem.pk, "language": "python", "code": "print(1)", **extra})


def _move_exam(exam, *, starts_in=None, ends_in=None):
    now = timezone.now()
    if starts_in is not None:
        exam.starts_at = now + starts_in
    if ends_in is not None:
        exam.ends_at = now + ends_in
    exam.save(update_fields=["starts_at", "ends_at"])


@pytest.fixture
def cast(db):
    """An open exam holding `secret` (a public problem, as teachers often pick), a
    participant, a non-participant, an admin; and a plain public problem beside it."""
    secret = make_problem(slug="secret-problem", languages=("python",))
    secret.title = "The secret problem"
    secret.save(update_fields=["title"])
    other = make_problem(slug="open-problem", languages=("python",))
    participant, outsider = person("taker"), person("outsider")
    exam = make_exam(secret, mode="OI", participants=[participant])
    return {"secret": secret, "other": other, "exam": exam, "participant": participant, "outsider": outsider,
            "admin": make_admin()}


@pytest.mark.django_db
def test_an_open_exams_problem_is_seen_only_by_its_participants_and_admins(cast):
    secret, other = cast["secret"], cast["other"]
    for client in (Client(), session_client(cast["outsider"])):
        assert "The secret problem" not in _listed(client)
        assert f"/problems/{other.pk}" in _listed(client)
        assert client.get(f"/problems/{secret.pk}").status_code == 404
    taker = session_client(cast["participant"])
    assert "The secret problem" not in _listed(taker), "the public list is not where an exam is taken"
    page = taker.get(f"/problems/{secret.pk}")
    assert page.status_code == 200 and "The secret problem" in page.content.decode()
    admin = session_client(cast["admin"])
    assert "The secret problem" in _listed(admin)
    assert admin.get(f"/problems/{secret.pk}").status_code == 200


@pytest.mark.django_db
def test_before_the_start_not_even_a_participant_sees_the_problem_or_the_exam_content(cast):
    exam, secret = cast["exam"], cast["secret"]
    _move_exam(exam, starts_in=timedelta(minutes=10))
    taker, browser = token_client(cast["participant"]), session_client(cast["participant"])
    assert browser.get(f"/problems/{secret.pk}").status_code == 404
    view = taker.get(f"/api/v1/exams/{exam.pk}").json()
    assert view["state"] == "NOT_STARTED" and view["problems"] == [] and view["questions"] == []
    assert "The secret problem" not in browser.get(f"/exams/{exam.pk}").content.decode()
    _move_exam(exam, starts_in=timedelta(minutes=-1))
    assert [p["title"] for p in taker.get(f"/api/v1/exams/{exam.pk}").json()["problems"]] == ["The secret problem"]
    assert browser.get(f"/problems/{secret.pk}").status_code == 200


@pytest.mark.django_db
def test_before_the_start_no_answer_tells_what_the_exam_holds(cast):
    """Every call a participant or an outsider can make before the start answers the same
    whatever problem or question it names: the exam's contents stay its secret."""
    other, participant = cast["other"], cast["participant"]
    secret = make_problem(slug="upcoming-problem", languages=("python",))
    exam = make_exam(secret, mode="ACM", participants=[participant],
                     questions=[{"kind": "SINGLE", "options": ["a", "b", "c"], "correct": [1], "points": 5}])
    _move_exam(exam, starts_in=timedelta(minutes=10))
    question = exam.questions.get()
    taker, outsider = token_client(participant), token_client(cast["outsider"])

    result = taker.get(f"/api/v1/exams/{exam.pk}/result").json()  # ACM: live, so answered
    assert (result["problems"], result["questions"]) == ([], [])

    def answers(client, examples):
        return {(r.status_code, r.json()["error"], r.json()["detail"]) for r in examples(client)}

    def submits(client):
        yield _practise(client, secret, examId=exam.pk)
        yield _practise(client, other, examId=exam.pk)  # not in the exam
        yield send(client, "POST", SUBMIT, {"problemId": secret.pk, "language": "cpp", "code": "x",
                                            "examId": exam.pk})  # its languages

    [outsiders] = answers(outsider, submits)
    assert outsiders[:2] == (400, "invalid") and "participant" in outsiders[2]
    [participants] = answers(taker, submits)
    assert participants == (409, "exam_closed", "The exam has not started yet.")
    # Practice: the exam's problem is as unknown as one that does not exist.
    missing = send(taker, "POST", SUBMIT, {"problemId": 10**9, "language": "python", "code": "print(1)"}).json()
    assert _practise(taker, secret).json() == missing

    def saves(client):
        for question_id, choices in ((question.pk, [1]), (question.pk, [7]), (question.pk, [0, 1]),
                                     (question.pk + 100, [0])):
            yield send(client, "PUT", f"/api/v1/exams/{exam.pk}/answers/{question_id}", {"choices": choices})

    assert answers(outsider, saves) == {(404, "not_found", "Not found.")}
    assert answers(taker, saves) == {(409, "exam_closed", "The exam has not started yet.")}
    assert Submission.objects.count() == 0


@pytest.mark.django_db
def test_a_participant_cannot_practise_an_exam_problem_until_the_exam_ends(cast):
    """The OI bypass: the same code posted as practice would show the verdict the exam hides."""
    exam, secret, participant = cast["exam"], cast["secret"], cast["participant"]
    taker = token_client(participant)
    refused = _practise(taker, secret)
    assert error_of(refused) == (409, "exam_in_progress")
    assert str(exam.pk) in refused.json()["detail"]
    assert Submission.objects.count() == 0 and JudgeJob.objects.count() == 0, "nothing written"

    assert _practise(taker, secret, examId=exam.pk).status_code == 202, "inside the exam it is taken"
    assert send(taker, "POST", f"/api/v1/exams/{exam.pk}/hand-in").status_code == 200
    assert error_of(_practise(taker, secret)) == (409, "exam_in_progress"), \
        "handed in, but the exam is still open for the others"

    _move_exam(exam, starts_in=timedelta(hours=-2), ends_in=timedelta(minutes=-1))
    assert _practise(taker, secret).status_code == 202, "a public problem is practised once the exam ended"


@pytest.mark.django_db
def test_a_participant_is_sent_to_their_running_exam_never_to_one_not_started(cast):
    """The same problem in tomorrow's quiz, which ends before this week's exam: the page and
    the refusal name the exam under way, and tomorrow's stays its own secret."""
    exam, secret, participant = cast["exam"], cast["secret"], cast["participant"]
    _move_exam(exam, ends_in=timedelta(days=7))
    quiz = make_exam(secret, mode="ACM", participants=[participant])
    quiz.title = "Tomorrow's quiz"
    quiz.save(update_fields=["title"])
    _move_exam(quiz, starts_in=timedelta(days=1), ends_in=timedelta(days=1, hours=1))
    page = session_client(participant).get(f"/problems/{secret.pk}").content.decode()
    assert f"?exam={exam.pk}" in page and f"?exam={quiz.pk}" not in page and "quiz" not in page
    refused = _practise(token_client(participant), secret)
    assert error_of(refused) == (409, "exam_in_progress")
    assert refused.json()["fields"]["examId"] == [str(exam.pk)]


@pytest.mark.django_db
def test_someone_outside_the_exam_finds_no_such_problem_to_submit(cast):
    outsider = token_client(cast["outsider"])
    assert error_of(_practise(outsider, cast["secret"])) == (400, "invalid")
    assert error_of(_practise(outsider, cast["secret"], examId=cast["exam"].pk)) == (400, "invalid")
    assert _practise(outsider, cast["other"]).status_code == 202, "other problems are untouched"
    assert Submission.objects.filter(problem=cast["secret"]).count() == 0


@pytest.mark.django_db
def test_the_problem_page_refuses_a_practice_submit_during_the_exam_in_words(cast):
    secret, exam = cast["secret"], cast["exam"]
    taker = session_client(cast["participant"])
    page = taker.get(f"/problems/{secret.pk}").content.decode()
    assert "part of your exam" in page and f"?exam={exam.pk}" in page
    refused = taker.post(f"/problems/{secret.pk}", {"language": "python", "code": "print(42)"})
    assert refused.status_code == 409
    text = refused.content.decode()
    assert "belongs to an exam you are taking" in text and "print(42)" in text, "the code stays in the form"
    assert Submission.objects.count() == 0
    into_exam = taker.post(f"/problems/{secret.pk}", {"language": "python", "code": "print(42)", "exam": exam.pk})
    assert into_exam.status_code == 302 and Submission.objects.get().exam_id == exam.pk


@pytest.mark.django_db
@pytest.mark.parametrize("visibility, anyone, participant", [
    (ProblemVisibility.PUBLIC, True, True),
    (ProblemVisibility.EXAM_ONLY, False, True),
    (ProblemVisibility.HIDDEN, False, False),
])
def test_after_the_end_the_problems_visibility_decides(cast, visibility, anyone, participant):
    secret = cast["secret"]
    Problem.objects.filter(pk=secret.pk).update(visibility=visibility)
    _move_exam(cast["exam"], starts_in=timedelta(hours=-2), ends_in=timedelta(minutes=-1))
    for client, sees in ((Client(), anyone), (session_client(cast["outsider"]), anyone),
                         (session_client(cast["participant"]), participant), (session_client(cast["admin"]), True)):
        assert (client.get(f"/problems/{secret.pk}").status_code == 200) is sees
    assert ("The secret problem" in _listed(Client())) is anyone
    practised = _practise(token_client(cast["outsider"]), secret)
    assert practised.status_code == (202 if anyone else 400)


@pytest.mark.django_db
def test_a_deleted_exam_keeps_nothing_secret_and_a_hidden_problem_is_admins_only(cast):
    from judging.services.exams import exam_delete

    exam_delete(exam_id=cast["exam"].pk, now=timezone.now())
    assert Client().get(f"/problems/{cast['secret'].pk}").status_code == 200
    Problem.objects.filter(pk=cast["other"].pk).update(visibility=ProblemVisibility.HIDDEN)
    assert Client().get(f"/problems/{cast['other'].pk}").status_code == 404
    assert error_of(_practise(token_client(cast["outsider"]), cast["other"])) == (400, "invalid")
    assert _practise(token_client(cast["admin"]), cast["other"]).status_code == 202, "admins try hidden problems"


@pytest.mark.django_db
def test_teachers_and_admins_set_a_problems_visibility(cast):
    path = f"{ADMIN}problems/{cast['other'].pk}"
    teacher = token_client(_teacher())
    answer = send(teacher, "PATCH", path, {"visibility": "EXAM_ONLY"})
    assert answer.status_code == 200 and answer.json() == {
        "id": cast["other"].pk, "slug": "open-problem", "title": cast["other"].title, "visibility": "EXAM_ONLY"}
    assert Client().get(f"/problems/{cast['other'].pk}").status_code == 404
    assert error_of(send(teacher, "PATCH", path, {"visibility": "SECRET"})) == (400, "invalid")
    assert error_of(send(token_client(cast["outsider"]), "PATCH", path, {"visibility": "PUBLIC"})) == (403, "forbidden")
    assert error_of(send(Client(), "PATCH", path, {"visibility": "PUBLIC"})) == (401, "unauthenticated")
    assert error_of(send(teacher, "PATCH", f"{ADMIN}problems/999999", {"visibility": "PUBLIC"})) == (404, "not_found")
    assert send(token_client(cast["admin"]), "PATCH", path, {"visibility": "PUBLIC"}).status_code == 200
    assert Client().get(f"/problems/{cast['other'].pk}").status_code == 200


@pytest.mark.django_db
def test_a_package_may_say_who_sees_the_problem(tmp_path):
    import json
    import shutil

    from judging.services.problems import PackageError, problem_import
    from tests.judging.test_import_problem import SAMPLES

    package = tmp_path / "aplusb"
    shutil.copytree(SAMPLES / "aplusb", package)
    spec = json.loads((package / "problem.json").read_text())

    def with_visibility(value):
        (package / "problem.json").write_text(json.dumps(spec if value is None else spec | {"visibility": value}))
        return package

    problem, _manifest = problem_import(with_visibility("EXAM_ONLY"))
    assert problem.visibility == ProblemVisibility.EXAM_ONLY
    assert Client().get(f"/problems/{problem.pk}").status_code == 404
    Problem.objects.filter(pk=problem.pk).update(visibility=ProblemVisibility.HIDDEN)
    problem, _manifest = problem_import(with_visibility(None))
    assert problem.visibility == ProblemVisibility.HIDDEN, "a package that says nothing keeps what was set"
    with pytest.raises(PackageError):
        problem_import(with_visibility("everyone"))


@pytest.mark.django_db
def test_an_exam_added_later_hides_a_problem_that_was_public(cast):
    other = cast["other"]
    assert Client().get(f"/problems/{other.pk}").status_code == 200
    make_exam(other, participants=[cast["outsider"]])
    assert Client().get(f"/problems/{other.pk}").status_code == 404
    assert error_of(_practise(token_client(cast["participant"]), other)) == (400, "invalid")
    assert ExamParticipant.objects.filter(user=cast["outsider"]).count() == 1
    assert error_of(_practise(token_client(cast["outsider"]), other)) == (409, "exam_in_progress")


@pytest.mark.django_db
def test_a_lesson_practice_does_not_show_an_exam_problem_while_the_exam_keeps_it(cast):
    from tests.factories import make_practice

    practice = make_practice(cast["secret"], cast["other"])
    shown = token_client(cast["outsider"]).get(f"/api/v1/lessons/practices/{practice.pk}").json()
    assert [p["problemId"] for p in shown["problems"]] == [cast["other"].pk]
    admin = token_client(cast["admin"]).get(f"/api/v1/lessons/practices/{practice.pk}").json()
    assert {p["problemId"] for p in admin["problems"]} == {cast["secret"].pk, cast["other"].pk}
    refused = _practise(token_client(cast["outsider"]), cast["secret"], lessonPracticeId=practice.pk)
    assert error_of(refused) == (400, "invalid")
