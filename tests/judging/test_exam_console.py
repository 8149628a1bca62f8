"""The admins' exam pages (`/admin/exams`) go through the admin API's exam services: who may
open them, create and edit with the revision check, participants by username, publishing,
the results table and deleting."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from judging.models import Exam, ExamParticipant, ExamProblem, ExamQuestion, JobState, JudgeJob
from judging.services.events import events_dispatch
from judging.services.exams import exam_hand_in, exam_update
from tests.api.helpers import make_admin, make_teacher, person
from tests.factories import make_exam, make_node, make_problem
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = pytest.mark.django_db

MOMENT = "%Y-%m-%dT%H:%M"


def exam_manager(username="tina"):
    user = person(username)
    user.user_permissions.add(Permission.objects.get(codename="manage_exams", content_type__app_label="judging"))
    return user


@pytest.fixture
def admin(client):
    client.force_login(exam_manager())
    return client


def later(hours=1):
    return (timezone.now() + timedelta(hours=hours)).replace(second=0, microsecond=0)


def exam_form(*, title="midterm", mode="OI", starts=None, ends=None, problems=(), questions=(), initial=(0, 0),
              revision=None) -> dict:
    """What the exam form posts: its fields, then the problem and question rows (each a dict
    of the row's fields; `ORDER` and `DELETE` as the page names them)."""
    starts, ends = starts or later(1), ends or later(3)
    data = {"title": title, "mode": mode, "starts_at": starts.strftime(MOMENT), "ends_at": ends.strftime(MOMENT)}
    if revision is not None:
        data["revision"] = revision
    for prefix, rows, initial_count in (("problems", problems, initial[0]), ("questions", questions, initial[1])):
        data.update({f"{prefix}-TOTAL_FORMS": len(rows), f"{prefix}-INITIAL_FORMS": initial_count,
                     f"{prefix}-MIN_NUM_FORMS": 0, f"{prefix}-MAX_NUM_FORMS": 200})
        for index, row in enumerate(rows):
            data.update({f"{prefix}-{index}-{name}": value for name, value in row.items()})
    return data


def question(prompt="2 + 2?", options="3\n4\n5", correct="2", kind="SINGLE", points=10, **more):
    return {"kind": kind, "prompt": prompt, "options": options, "correct": correct, "points": points, **more}


# --- who may open the pages ----------------------------------------------------------------------

def _pages(exam, practice):
    return [
        "/admin/exams", "/admin/exams/new", f"/admin/exams/{exam.pk}", f"/admin/exams/{exam.pk}/edit",
        f"/admin/exams/{exam.pk}/results", f"/admin/exams/{exam.pk}/publish", f"/admin/exams/{exam.pk}/delete",
        "/admin/lessons", f"/admin/lessons/{practice.lesson_id}", f"/admin/lessons/{practice.lesson_id}/practices/new",
        f"/admin/practices/{practice.pk}", f"/admin/practices/{practice.pk}/delete",
    ]


@pytest.fixture
def practice(problem):
    from judging.services.lessons import lesson_create, practice_create

    lesson = lesson_create(title="week 1")
    return practice_create(lesson_id=lesson.pk, title="loops", problem_ids=[problem.pk])


def test_anonymous_visitors_sign_in_others_get_403_and_exam_or_judger_admins_get_in(client, problem, practice):
    exam = make_exam(problem)
    pages = _pages(exam, practice)
    for url in pages:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(f"/accounts/login/?next={url}"), url
    for user in (person("sam"), make_teacher()):
        client.force_login(user)
        for url in pages:
            response = client.get(url)
            assert response.status_code == 403 and "Your account may not open this page." in response.content.decode()
        assert client.post(f"/admin/exams/{exam.pk}/delete").status_code == 403
        assert client.post(f"/admin/exams/{exam.pk}/publish").status_code == 403
        assert client.post("/admin/exams/new", exam_form()).status_code == 403
    exam.refresh_from_db()
    assert exam.deleted_at is None and exam.published_at is None and Exam.objects.count() == 1
    for user in (exam_manager(), make_admin()):
        client.force_login(user)
        for url in pages:
            response = client.get(url)
            assert response.status_code == 200 and response["Cache-Control"] == "no-store", url


def test_the_top_bar_links_the_exam_pages_only_for_who_may_open_them(client):
    client.force_login(person("sam"))
    assert 'href="/admin/exams"' not in client.get("/problems").content.decode()
    client.force_login(exam_manager())
    page = client.get("/problems").content.decode()
    assert '<a href="/admin/exams" id="nav-exam-admin">Manage exams</a>' in page
    assert 'id="nav-judgers"' not in page, "managing exams is not managing judgers"


def test_every_post_needs_the_csrf_token(problem):
    exam = make_exam(problem)
    client = Client(enforce_csrf_checks=True)
    client.force_login(exam_manager())
    assert client.post(f"/admin/exams/{exam.pk}/delete").status_code == 403
    assert client.post("/admin/exams/new", exam_form()).status_code == 403
    assert client.post(f"/admin/exams/{exam.pk}/participants", {"usernames": "tina"}).status_code == 403
    assert Exam.objects.get().deleted_at is None and Exam.objects.count() == 1


# --- create and edit -----------------------------------------------------------------------------

def test_an_admin_creates_an_exam_with_problems_and_questions_in_the_chosen_order(admin, problem):
    sql = make_problem(kind="SQL")
    page = admin.get("/admin/exams/new").content.decode()
    for label in ("Title", "Mode", "Starts (UTC)", "Ends (UTC)", "Problem", "Points", "Position", "Remove",
                  "Kind", "Question", "Options, one per line", "Correct options"):
        assert f">{label}</label>" in page or f">{label}</legend>" in page, label
    assert '<optgroup label="SQL">' in page and f"#{sql.pk} {sql.title}" in page

    response = admin.post("/admin/exams/new", exam_form(
        problems=[{"problem": problem.pk, "points": 60, "ORDER": 2}, {"problem": sql.pk, "points": 40, "ORDER": 1},
                  {"problem": "", "points": 100}],
        questions=[question(), question(prompt="primes?", kind="MULTIPLE", options="2\n4\n5", correct="1, 3"),
                   question(prompt="dropped", DELETE="on"), {"kind": "SINGLE", "points": 10}]))
    exam = Exam.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/admin/exams/{exam.pk}"
    assert (exam.title, exam.mode) == ("midterm", "OI")
    assert list(ExamProblem.objects.values_list("problem_id", "points")) == [(sql.pk, 40), (problem.pk, 60)]
    assert [(q.prompt, q.options, q.correct) for q in ExamQuestion.objects.all()] == [
        ("2 + 2?", ["3", "4", "5"], [1]), ("primes?", ["2", "4", "5"], [0, 2])]
    page = admin.get(response["Location"]).content.decode()
    assert "Saved “midterm”." in page and "Not started" in page and "Not published" in page


def test_a_refused_form_shows_each_error_by_its_field_keeps_what_was_typed_and_saves_nothing(admin, problem):
    response = admin.post("/admin/exams/new", exam_form(
        title="", starts=later(3), ends=later(1),
        problems=[{"problem": problem.pk, "points": 50}, {"problem": problem.pk, "points": 30}],
        questions=[question(correct="4"), question(prompt="two?", correct="1, 2"), question(correct="x")]))
    assert response.status_code == 400 and not Exam.objects.exists()
    page = response.content.decode()
    assert 'id="id_title_error"' in page and "This field is required." in page
    assert "Name distinct options that exist; a single-choice question has exactly one correct option." in page
    assert page.count("Name distinct options that exist") == 2
    assert "Write the numbers of the correct options, such as 1, 3." in page
    assert ">\ntwo?</textarea>" in page, "what was typed is kept"

    # The form is right; the service refuses the window and the repeated problem.
    response = admin.post("/admin/exams/new", exam_form(
        starts=later(3), ends=later(1),
        problems=[{"problem": problem.pk, "points": 50}, {"problem": problem.pk, "points": 30}]))
    page = response.content.decode()
    assert response.status_code == 400 and not Exam.objects.exists()
    assert "The exam must end after it starts." in page and 'id="id_ends_at_error"' in page


@pytest.mark.parametrize("broken", [
    {"problems-TOTAL_FORMS": "lots"}, {"problems-0-problem": "999999999"}, {"starts_at": "tomorrow"},
    {"mode": "IOI"}, {"questions-0-points": "-1"}, {"problems-0-points": "many"},
    {"questions-0-correct": "²"}, {"questions-0-correct": "1, ١"}, {"questions-0-correct": "9" * 5000},
])
def test_bad_input_is_a_form_with_errors_never_a_500(admin, problem, broken):
    data = exam_form(problems=[{"problem": problem.pk, "points": 50}], questions=[question()]) | broken
    assert admin.post("/admin/exams/new", data).status_code == 400
    assert not Exam.objects.exists()


def test_unknown_ids_are_404(admin):
    for url in ("/admin/exams/999999", "/admin/exams/999999/edit", "/admin/exams/999999/results",
                "/admin/exams/999999/publish", "/admin/exams/999999/delete", "/admin/lessons/999999",
                "/admin/practices/999999", "/admin/exams/0", "/admin/exams/abc"):
        assert admin.get(url).status_code == 404, url
    assert admin.post("/admin/exams/999999/participants", {"usernames": "tina"}).status_code == 404
    assert admin.post("/admin/exams/999999/delete").status_code == 404


def test_editing_reorders_removes_and_adds_rows(admin, problem):
    second, third = make_problem(), make_problem()
    exam = make_exam(problem, second, now=later(2), questions=[
        {"kind": "SINGLE", "options": ["a", "b"], "correct": [0], "points": 5}])
    page = admin.get(f"/admin/exams/{exam.pk}/edit").content.decode()
    assert f'name="revision" value="{exam.revision}"' in page and 'value="question 0"' not in page
    assert ">\nquestion 0</textarea>" in page

    response = admin.post(f"/admin/exams/{exam.pk}/edit", exam_form(
        title="renamed", mode="ACM", starts=later(2), ends=later(4), revision=exam.revision, initial=(2, 1),
        problems=[{"problem": problem.pk, "points": 100, "ORDER": 1, "DELETE": "on"},
                  {"problem": second.pk, "points": 70, "ORDER": 2},
                  {"problem": third.pk, "points": 30, "ORDER": 1}],
        questions=[question(prompt="question 0", options="a\nb", correct="1", points=5, ORDER=1)]))
    assert response.status_code == 302, response.content.decode()
    exam.refresh_from_db()
    assert (exam.title, exam.mode) == ("renamed", "ACM")
    assert list(ExamProblem.objects.filter(exam=exam).values_list("problem_id", "points")) == [
        (third.pk, 30), (second.pk, 70)]


def test_a_stale_form_says_someone_else_saved_keeps_what_was_typed_and_saves_nothing(admin, problem):
    exam = make_exam(problem, now=later(2))
    read_at = exam.revision
    exam_update(exam_id=exam.pk, revision=read_at, changes={"title": "changed by bob"}, now=timezone.now())

    mine = exam_form(title="my title", starts=later(2), ends=later(5), revision=read_at, initial=(1, 0),
                     problems=[{"problem": problem.pk, "points": 55, "ORDER": 1}])
    response = admin.post(f"/admin/exams/{exam.pk}/edit", mine)
    page = response.content.decode()
    assert response.status_code == 409
    assert "Someone else saved this while you were editing it." in page and "The saved version" in page
    assert "changed by bob" in page, "the saved version is shown beside the form"
    assert 'value="my title"' in page and 'value="55"' in page, "nothing typed is lost"
    for odd in ("x", "²", "9" * 5000):
        assert admin.post(f"/admin/exams/{exam.pk}/edit", mine | {"revision": odd}).status_code == 409
    current = Exam.objects.get(pk=exam.pk)
    assert current.title == "changed by bob" and ExamProblem.objects.get(exam=exam).points == 100
    assert f'name="revision" value="{current.revision}"' in page

    # Saving again replaces the saved version, knowingly.
    assert admin.post(f"/admin/exams/{exam.pk}/edit", mine | {"revision": current.revision}).status_code == 302
    assert Exam.objects.get(pk=exam.pk).title == "my title" and ExamProblem.objects.get(exam=exam).points == 55


def test_once_started_the_page_fixes_mode_problems_and_questions(admin, problem, student):
    exam = make_exam(problem, participants=[student])
    page = admin.get(f"/admin/exams/{exam.pk}/edit").content.decode()
    assert "problems-TOTAL_FORMS" not in page and "Fixed once the exam has started." in page
    assert "The exam has started: its mode, problems and questions are fixed." in page
    starts, ends = exam.starts_at.replace(second=0, microsecond=0), later(5)
    retitled = {"title": "retitled", "mode": "ACM", "starts_at": starts.strftime(MOMENT),
                "ends_at": ends.strftime(MOMENT), "revision": exam.revision}
    assert admin.post(f"/admin/exams/{exam.pk}/edit", retitled).status_code == 302
    exam.refresh_from_db()
    assert (exam.title, exam.mode, exam.ends_at) == ("retitled", "OI", ends), "the mode stays as it is"

    # A page opened before the start still sends its rows: refused next to them, kept.
    late = exam_form(title="late", starts=starts, ends=ends, revision=exam.revision, initial=(1, 0),
                     problems=[{"problem": problem.pk, "points": 10, "ORDER": 1}])
    response = admin.post(f"/admin/exams/{exam.pk}/edit", late)
    assert response.status_code == 400
    assert "The problems and questions are fixed once the exam has started" in response.content.decode()
    assert ExamProblem.objects.get(exam=exam).points == 100 and Exam.objects.get(pk=exam.pk).title == "retitled"


# --- participants, results, publish, delete ------------------------------------------------------------

def test_participants_are_added_by_username_and_an_unknown_one_adds_nobody(admin, problem):
    exam = make_exam(problem)
    person("ann"), person("bo")
    response = admin.post(f"/admin/exams/{exam.pk}/participants", {"usernames": "ann\nzed, ghost\nbo"})
    page = response.content.decode()
    assert response.status_code == 400 and "No users are named ghost, zed." in page and "Nobody was added" in page
    assert "ann\nzed, ghost\nbo</textarea>" in page, "the list is kept to correct"
    assert not ExamParticipant.objects.exists()

    response = admin.post(f"/admin/exams/{exam.pk}/participants", {"usernames": "ann\n bo \n\nann"})
    assert response.status_code == 302
    assert "Added 2 participants." in admin.get(f"/admin/exams/{exam.pk}").content.decode()
    admin.post(f"/admin/exams/{exam.pk}/participants", {"usernames": "ann"})
    page = admin.get(f"/admin/exams/{exam.pk}").content.decode()
    assert "Added 0 participants. 1 was already taking part." in page
    assert ExamParticipant.objects.filter(exam=exam).count() == 2
    assert 'data-participant="ann"' in page and "Open" in page
    assert admin.post(f"/admin/exams/{exam.pk}/participants", {"usernames": " \n "}).status_code == 400


def test_the_results_table_shows_each_participants_scores_and_total(admin, problem, student):
    _, identity = make_node(pool="python")
    other = make_problem()
    exam = make_exam(problem, other, participants=[student, person("idle")], points={0: 60, 1: 40}, questions=[
        {"kind": "SINGLE", "options": ["a", "b"], "correct": [1], "points": 5}])
    from judging.services.exams import exam_answer_save

    exam_answer_save(exam_id=exam.pk, question_id=exam.questions.get().pk, user=student, choices=[1],
                     now=timezone.now())
    submit(student, problem, exam_id=exam.pk)
    exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    [job] = claim(identity)
    settle(identity, judged(job))
    events_dispatch(now=timezone.now())

    page = admin.get(f"/admin/exams/{exam.pk}/results").content.decode()
    row = page[page.index('data-participant="student"'):]
    row = row[:row.index("</tr>")]
    assert "Handed in" in row and ">60<" in row and "<strong>65</strong>" in row and ">5<" in row
    idle = page[page.index('data-participant="idle"'):]
    assert "no score yet" in idle[:idle.index("</tr>")]
    fragment = admin.get(f"/admin/exams/{exam.pk}/results", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.startswith('<div id="exam-results"') and "<h1>" not in fragment
    overview = admin.get(f"/admin/exams/{exam.pk}").content.decode()
    assert ">65<" in overview and "Closed, not handed in" not in overview


def test_the_results_tell_who_ended_the_exam_having_submitted_and_answered_nothing(admin, problem, student):
    """A 0 from no attempt reads apart from a poor result: a participant the exam ended for with
    nothing submitted and nothing answered says so, on the page and in the file."""
    import csv

    from judging.services.exams import exam_answer_save, exams_hand_in_overdue

    exam = make_exam(problem, mode="OI", participants=[student, person("answerer"), person("absent")],
                     questions=[{"kind": "SINGLE", "options": ["a", "b"], "correct": [1], "points": 5}])
    submit(student, problem, exam_id=exam.pk)  # saved, judged only at the hand-in
    def answer(name, choices):
        exam_answer_save(exam_id=exam.pk, question_id=exam.questions.get().pk, user=ExamParticipant.objects.get(
            exam=exam, user__username=name).user, choices=choices, now=timezone.now())

    answer("answerer", [0])
    answer("absent", [])  # the page's form saved with nothing ticked: no answer

    def states():
        page = admin.get(f"/admin/exams/{exam.pk}/results").content.decode()
        rows = {}
        for name in ("student", "answerer", "absent"):
            row = page[page.index(f'data-participant="{name}"'):]
            rows[name] = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row[:row.index("</td>", row.index('class="state"'))]))
        return rows

    assert all("Ended with nothing" not in state for state in states().values()), "not while it is open"
    now = timezone.now()
    Exam.objects.filter(pk=exam.pk).update(starts_at=now - timedelta(hours=2), ends_at=now - timedelta(hours=1))
    closed = states()
    assert "Ended with nothing submitted or answered" in closed["absent"]
    assert "Closed, not handed in" in closed["student"] and "Closed, not handed in" in closed["answerer"]

    assert exams_hand_in_overdue(now=now) == 3
    ended = states()
    assert "Ended with nothing submitted or answered" in ended["absent"]
    assert "Handed in at the end, by the system" in ended["student"]
    assert "Handed in at the end, by the system" in ended["answerer"]
    rows = {row[0]: row for row in csv.reader(
        admin.get(f"/admin/exams/{exam.pk}/results.csv").content.decode("utf-8")[1:].splitlines())}
    assert rows["absent"][1] == "Ended with nothing submitted or answered"
    assert rows["answerer"][1] == "Handed in at the end, by the system"
    chinese = admin.get(f"/admin/exams/{exam.pk}/results", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "考试结束，未提交也未作答" in chinese


def test_every_participants_results_download_as_a_csv_a_spreadsheet_reads(admin, problem, student, monkeypatch):
    import csv
    from urllib.parse import unquote

    from judging.console import export, views

    # More participants than a page, read in more than one batch: the file holds them all.
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    monkeypatch.setattr(export, "BATCH", 2)
    _, identity = make_node(pool="python")
    problem.title = "Sums 求和"
    problem.save(update_fields=["title"])
    late = [person(name) for name in ("=cmd|calc", "+1", "-1", "@SUM(1)", "zed")]
    exam = make_exam(problem, mode="ACM", participants=[student, *late], points={0: 60}, questions=[
        {"kind": "SINGLE", "options": ["a", "b"], "correct": [1], "points": 5}])
    submit(student, problem, exam_id=exam.pk)
    [job] = claim(identity)
    settle(identity, judged(job))
    events_dispatch(now=timezone.now())
    exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())

    page = admin.get(f"/admin/exams/{exam.pk}/results").content.decode()
    assert f'href="/admin/exams/{exam.pk}/results.csv"' in page
    response = admin.get(f"/admin/exams/{exam.pk}/results.csv")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="{exam.title} Results.csv"'
    text = response.content.decode("utf-8")
    assert text.startswith("\ufeff")  # a spreadsheet reads it as UTF-8
    header, *rows = list(csv.reader(text[1:].splitlines()))
    assert header == ["Username", "State", "Handed in (UTC)", "Sums 求和 (/60)", "Sums 求和: attempts", "Q1 (/5)",
                      "Total"]
    by_name = {row[0]: row for row in rows}
    # All of them; what a spreadsheet would take for a formula written as text.
    assert sorted(by_name) == ["'+1", "'-1", "'=cmd|calc", "'@SUM(1)", "student", "zed"]
    assert by_name["student"][1] == "Handed in" and by_name["student"][3:] == ["60", "1", "", "60"]  # Q1 unanswered
    assert by_name["zed"][2:] == ["", "", "", "", ""]
    as_teacher = Client()
    as_teacher.force_login(make_teacher())
    assert as_teacher.get(f"/admin/exams/{exam.pk}/results.csv").status_code == 403
    exam.title = "Mid/term 月考"
    exam.save(update_fields=["title"])
    named = admin.get(f"/admin/exams/{exam.pk}/results.csv")["Content-Disposition"]
    assert named.startswith("attachment; filename*=utf-8''")
    assert unquote(named.split("''", 1)[1]) == "Mid term 月考 Results.csv"  # no slash in a file's name


def test_the_results_rank_the_whole_exam_by_total_a_page_at_a_time(admin, problem, monkeypatch):
    from judging.console import views

    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    _, identity = make_node(pool="python")
    people = [person(name) for name in ("amy", "bob", "cal")]
    exam = make_exam(problem, mode="ACM", participants=people, points={0: 60}, questions=[
        {"kind": "SINGLE", "options": ["a", "b"], "correct": [1], "points": 5}])
    from judging.services.exams import exam_answer_save

    for who, verdict in ((people[2], "AC"), (people[1], "WA")):  # cal solves it, bob does not
        submit(who, problem, exam_id=exam.pk)
        [job] = claim(identity)
        settle(identity, judged(job, verdict=verdict))
    events_dispatch(now=timezone.now())
    exam_answer_save(exam_id=exam.pk, question_id=exam.questions.get().pk, user=people[1], choices=[1],
                     now=timezone.now())
    exam_hand_in(exam_id=exam.pk, user=people[1], now=timezone.now())  # bob: 0 + 5

    def order(query):
        page = admin.get(f"/admin/exams/{exam.pk}/results{query}").content.decode()
        return re.findall(r'data-participant="([^"]+)"', page), page

    assert order("")[0] == ["amy", "bob"]
    first, page = order("?order=total")
    assert first == ["cal", "bob"]  # 60, then 5, across the whole exam
    assert 'href="?order=total&amp;page=2"' in page  # the next page keeps the order
    assert order("?order=total&page=2")[0] == ["amy"]
    assert '<strong aria-current="true">highest total first</strong>' in page


def test_publishing_asks_first_then_publishes_through_the_service(admin, problem, student):
    exam = make_exam(problem, participants=[student])
    submit(student, problem, exam_id=exam.pk)
    exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    page = admin.get(f"/admin/exams/{exam.pk}/publish").content.decode()
    assert "1 of 1 participants have handed in." in page and "1 submission is still waiting" in page
    assert "The exam has not ended yet" in page and Exam.objects.get().published_at is None
    assert 'href="/admin/exams/%d/publish"' % exam.pk in admin.get(f"/admin/exams/{exam.pk}").content.decode()

    response = admin.post(f"/admin/exams/{exam.pk}/publish")
    assert response.status_code == 302 and response["Location"] == f"/admin/exams/{exam.pk}"
    exam.refresh_from_db()
    assert exam.published_at is not None
    page = admin.get(response["Location"]).content.decode()
    assert "are published." in page and "Published" in page and "Publish results…" not in page
    assert "Published" in admin.get("/admin/exams").content.decode()
    acm = make_exam(problem, mode="ACM")
    assert "There is nothing to publish." in admin.get(f"/admin/exams/{acm.pk}/publish").content.decode()


def test_deleting_asks_first_then_cancels_the_open_jobs(admin, problem, student):
    exam = make_exam(problem, mode="ACM", participants=[student])
    submission = submit(student, problem, exam_id=exam.pk)
    page = admin.get(f"/admin/exams/{exam.pk}/delete").content.decode()
    assert "1 submission is deleted" in page and "1 judge job still open is cancelled" in page
    assert Exam.objects.get().deleted_at is None

    response = admin.post(f"/admin/exams/{exam.pk}/delete")
    assert response.status_code == 302 and response["Location"] == "/admin/exams"
    assert Exam.objects.get().deleted_at is not None
    assert JudgeJob.objects.get(pk=submission.current_judge_job_id).state == JobState.CANCELLED
    page = admin.get("/admin/exams").content.decode()
    assert f"Deleted “{exam.title}”." in page and f'data-exam="{exam.pk}"' not in page
    assert admin.get(f"/admin/exams/{exam.pk}").status_code == 404
