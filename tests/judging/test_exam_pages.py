"""The participant's exam pages go through the exam services: answer, submit into the
exam from its problem page, hand in, and see results only when they are visible."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import ExamAnswer, ExamParticipant, Submission
from judging.services.events import events_dispatch
from tests.factories import UserFactory, make_exam, make_node
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(client, student):
    client.force_login(student)
    return client


def test_saving_the_answers_keeps_what_is_ticked_in_every_question(signed_in, student, problem):
    """The page's questions are one form: saving sends them all, so ticks in one question
    are not dropped by saving another (each had its own form and button, and a reload
    after one lost the others' unsaved ticks)."""
    exam = make_exam(problem, participants=[student], questions=[
        {"kind": "SINGLE", "options": ["3", "4"], "correct": [1], "points": 5},
        {"kind": "MULTIPLE", "options": ["red", "green", "blue"], "correct": [0, 2], "points": 5}])
    first, second = exam.questions.order_by("id")
    page = signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert page.count('<form method="post" action="/exams/') == 2  # the questions' one form, and the hand-in
    assert f'name="choices-{first.pk}"' in page and f'name="choices-{second.pk}"' in page
    answer = signed_in.post(f"/exams/{exam.pk}", {"action": "answers", "question": [first.pk, second.pk],
                                                  f"choices-{first.pk}": ["1"], f"choices-{second.pk}": ["0", "2"]})
    assert answer.status_code == 302
    assert {a.question_id: a.choices for a in ExamAnswer.objects.all()} == {first.pk: [1], second.pk: [0, 2]}
    again = signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert again.count(" checked>") == 3


def test_an_oi_exam_from_the_pages(signed_in, student, problem):
    _, identity = make_node(pool="python")
    exam = make_exam(problem, mode="OI", participants=[student], questions=[
        {"kind": "MULTIPLE", "options": ["red", "green", "blue"], "correct": [0, 2], "points": 10}])
    question = exam.questions.get()
    assert exam.title in signed_in.get("/exams").content.decode()
    page = signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert f'href="/problems/{problem.pk}?exam={exam.pk}"' in page and "Hand in" in page

    assert signed_in.post(f"/exams/{exam.pk}", {"question": question.pk, "choices": ["0", "2"]}).status_code == 302
    assert ExamAnswer.objects.get().choices == [0, 2]
    assert "Your answers are saved." in signed_in.get(f"/exams/{exam.pk}").content.decode()  # said once, after the save
    form = signed_in.get(f"/problems/{problem.pk}?exam={exam.pk}").content.decode()
    assert f'name="exam" value="{exam.pk}"' in form
    for code in ("print(0)", "print(1)"):
        response = signed_in.post(f"/problems/{problem.pk}", {"language": "python", "code": code, "exam": exam.pk})
        assert response.status_code == 302
    replaced, submission = Submission.objects.order_by("id")
    assert submission.exam_id == exam.pk and submission.current_judge_job_id is None
    assert signed_in.get("/submissions").content.decode().count(
        "your last submission of each problem is judged when the exam is handed in") == 2

    unconfirmed = signed_in.post(f"/exams/{exam.pk}", {"action": "hand-in"})
    assert unconfirmed.status_code == 400 and "Nothing was handed in" in unconfirmed.content.decode()
    assert ExamParticipant.objects.get().handed_in_at is None, "final: not without the box ticked"
    assert signed_in.post(f"/exams/{exam.pk}", {"action": "hand-in", "confirm": "yes"}).status_code == 302
    assert "Handed in. The exam takes no more answers" in signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert signed_in.post(f"/exams/{exam.pk}", {"action": "hand-in", "confirm": "yes"}).status_code == 302, \
        "the same again"
    assert ExamParticipant.objects.get().objective_score == 10
    passed_over = "Not judged: a later submission of this problem was the one judged"
    assert passed_over in signed_in.get(f"/submissions/ALGO/{replaced.pk}").content.decode()
    assert signed_in.get("/submissions").content.decode().count(passed_over) == 1
    [job] = claim(identity)
    settle(identity, judged(job))
    page = signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert "Handed in" in page and "Result" not in page and "results are published" in page
    record = signed_in.get(f"/submissions/ALGO/{submission.pk}").content.decode()
    assert "Accepted" not in record
    assert "Judging history" not in record and "this is the result" not in record, \
        "how and when it was judged says what the exam keeps until it publishes"
    assert f'<dd class="submitted-for"><a href="/exams/{exam.pk}">the exam {exam.title}</a></dd>' in record

    refused = signed_in.post(f"/problems/{problem.pk}", {"language": "python", "code": "print(2)", "exam": exam.pk})
    assert refused.status_code == 400 and "handed in" in refused.content.decode()


def test_an_exam_you_are_not_in_does_not_exist_for_you(signed_in, problem):
    exam = make_exam(problem, participants=[UserFactory()])
    assert signed_in.get(f"/exams/{exam.pk}").status_code == 404
    assert signed_in.post(f"/exams/{exam.pk}", {"action": "hand-in", "confirm": "yes"}).status_code == 404
    assert signed_in.post(f"/exams/{exam.pk}", {"action": "hand-in"}).status_code == 404


def test_an_acm_exam_shows_results_live(signed_in, student, problem):
    _, identity = make_node(pool="python")
    exam = make_exam(problem, mode="ACM", participants=[student], points={0: 30})
    signed_in.post(f"/problems/{problem.pk}", {"language": "python", "code": "print(1)", "exam": exam.pk})
    [job] = claim(identity)
    settle(identity, judged(job))
    events_dispatch(now=timezone.now())
    page = signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert "Result" in page and "30 / 30" in page


def test_an_early_hand_in_shows_no_question_points_on_the_page_until_the_acm_exam_ends(signed_in, student,
                                                                                     problem):
    exam = make_exam(problem, mode="ACM", participants=[student], points={0: 30}, questions=[
        {"kind": "SINGLE", "options": ["3", "4"], "correct": [1], "points": 70}])
    question = exam.questions.get()
    signed_in.post(f"/exams/{exam.pk}", {"question": question.pk, "choices": ["1"]})
    signed_in.post(f"/exams/{exam.pk}", {"action": "hand-in", "confirm": "yes"})
    page = signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert "70 / 70" not in page and "Total: 70" not in page and "Total: 0" in page
    assert "shown when the exam has ended" in page

    exam.ends_at = timezone.now() - timedelta(seconds=1)
    exam.save(update_fields=["ends_at"])
    page = signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert "Question 1" in page and "70 / 70" in page and "Total: 70" in page


@pytest.mark.parametrize("odd", ["²", "١", "abc", "1.5", "-1", "9" * 20, "9" * 5000])
def test_an_answer_naming_no_question_or_option_is_refused_and_saves_nothing(signed_in, student, problem, odd):
    exam = make_exam(problem, participants=[student], questions=[
        {"kind": "MULTIPLE", "options": ["red", "green", "blue"], "correct": [0, 2], "points": 10}])
    question = exam.questions.get()
    assert signed_in.post(f"/exams/{exam.pk}", {"question": odd, "choices": ["0"]}).status_code == 404
    refused = signed_in.post(f"/exams/{exam.pk}", {"question": question.pk, "choices": ["0", odd]})
    assert refused.status_code == 400
    assert "Each choice must be the index of a distinct option." in refused.content.decode()
    assert not ExamAnswer.objects.exists()


def test_a_refusal_after_the_exam_ends_is_in_the_students_language(signed_in, student, problem):
    """The end of an exam is when most refusals are read: the page's frame and the reason in
    it speak one language, and the API's detail is the same sentence (its code unchanged)."""
    from judging.models import Exam
    from tests.api.helpers import token_client

    exam = make_exam(problem, mode="ACM", participants=[student], questions=[
        {"kind": "SINGLE", "options": ["yes", "no"], "correct": [0], "points": 5}])
    question = exam.questions.get()
    Exam.objects.filter(pk=exam.pk).update(ends_at=timezone.now() - timedelta(seconds=1))
    zh = {"HTTP_ACCEPT_LANGUAGE": "zh-CN"}
    page = signed_in.post(f"/exams/{exam.pk}", {"question": question.pk, "choices": ["0"]}, **zh).content.decode()
    assert "未保存：考试已结束，不再接受作答或提交。" in page
    page = signed_in.post(f"/problems/{problem.pk}", {"language": "python", "code": "print(1)", "exam": exam.pk},
                          **zh).content.decode()
    assert "提交被拒绝：考试已结束，不再接受作答或提交。" in page
    assert 'name="code"' in page and "print(1)" in page, "the refused code stays in the form"
    api = token_client(student)
    body = {"problemId": problem.pk, "language": "python", "code": "print(1)", "examId": exam.pk}
    english = api.post("/api/v1/submissions", body, content_type="application/json")
    chinese = api.post("/api/v1/submissions", body, content_type="application/json", **zh)
    assert english.status_code == chinese.status_code == 409
    assert english.json() == {"error": "exam_closed",
                              "detail": "The exam has ended; it takes no more answers or submissions."}
    assert chinese.json() == {"error": "exam_closed", "detail": "考试已结束，不再接受作答或提交。"}
    assert not Submission.objects.exists()


def test_the_problem_page_of_an_exam_not_open_says_so_before_anything_is_written(signed_in, student, problem):
    """Once the student has handed in, and after the exam ends, the problem page offers no
    form to write into the exam, but says why, with the way back; while it is open, the form.
    (Before the start the problem does not exist for them.)"""
    from judging.models import Exam

    exam = make_exam(problem, mode="ACM", participants=[student])
    open_page = signed_in.get(f"/problems/{problem.pk}?exam={exam.pk}").content.decode()
    assert 'name="code"' in open_page and "This submission goes into the exam." in open_page

    def closed(why):
        page = signed_in.get(f"/problems/{problem.pk}?exam={exam.pk}").content.decode()
        assert why in page and f'href="/exams/{exam.pk}"' in page
        assert 'name="code"' not in page and "This submission goes into the exam." not in page

    ExamParticipant.objects.filter(exam=exam).update(handed_in_at=timezone.now())
    closed("You have handed in this exam; it takes no more answers or submissions.")
    ExamParticipant.objects.filter(exam=exam).update(handed_in_at=None)
    Exam.objects.filter(pk=exam.pk).update(ends_at=timezone.now() - timedelta(seconds=1))
    closed("The exam has ended; it takes no more answers or submissions.")


def test_a_refused_answer_says_why_in_the_students_language(signed_in, student, problem):
    exam = make_exam(problem, participants=[student], questions=[
        {"kind": "SINGLE", "options": ["yes", "no"], "correct": [0], "points": 5}])
    question = exam.questions.get()
    page = signed_in.post(f"/exams/{exam.pk}", {"question": question.pk, "choices": ["0", "1"]},
                          HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "未保存：这道题只能选一个选项。" in page
    assert not ExamAnswer.objects.exists()


def test_a_deleted_oi_submission_says_cancelled_before_and_after_the_hand_in(signed_in, student, problem):
    from judging.services.exams import exam_hand_in
    from judging.services.rejudge import submission_delete

    exam = make_exam(problem, mode="OI", participants=[student])
    kept, deleted = submit(student, problem, exam_id=exam.pk), submit(student, problem, exam_id=exam.pk)
    submission_delete(submission_type="ALGO", submission_id=deleted.pk, now=timezone.now())
    for _ in ("before the hand-in", "after it"):
        page = signed_in.get(f"/submissions/ALGO/{deleted.pk}").content.decode()
        assert "Cancelled" in page and "judged when the exam is handed in" not in page
        assert "a later submission of this problem" not in page
        exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    assert "Cancelled" not in signed_in.get(f"/submissions/ALGO/{kept.pk}").content.decode(), \
        "the one left is the last, judged at the hand-in"


def test_a_student_handed_in_at_the_end_is_told_the_exam_ended_not_that_they_handed_in(signed_in, student, problem):
    """The end-of-exam step hands in for whoever had not: that student is told the exam ended
    and what they had saved was handed in for them (they read "you have handed in" as
    someone else's doing); the teacher sees who ran out of time."""
    from judging.services.exams import exams_hand_in_overdue
    from tests.api.helpers import make_admin, session_client

    now = timezone.now()
    exam = make_exam(problem, mode="OI", participants=[student], now=now - timedelta(minutes=20), minutes=10)
    assert exams_hand_in_overdue(now=now) == 1
    page = signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert "Ended: what you had saved was handed in for you" in page and "Status: Handed in" not in page
    assert "Ended: what you had saved was handed in for you" in signed_in.get("/exams").content.decode()
    refused = signed_in.post(f"/problems/{problem.pk}", {"language": "python", "code": "print(1)", "exam": exam.pk})
    assert "The exam has ended" in refused.content.decode() and "You have handed in" not in refused.content.decode()
    teacher = session_client(make_admin()).get(f"/admin/exams/{exam.pk}").content.decode()
    # They had saved nothing (`test_exam_console`: one who had is "handed in at the end").
    assert "Ended with nothing submitted or answered" in teacher


def test_after_an_early_hand_in_the_problem_page_says_when_it_can_be_practised(signed_in, student, problem):
    """Its link into the exam led to "you have handed in", and the practice form was refused:
    a loop. The page says when the problem opens again, and offers no form meanwhile."""
    from judging.services.exams import exam_hand_in

    exam = make_exam(problem, mode="ACM", participants=[student])
    exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    page = signed_in.get(f"/problems/{problem.pk}").content.decode()
    assert "which you have handed in: you can practise it once the exam ends" in page
    assert "Submit into the exam" not in page and 'name="code"' not in page


def test_an_oi_submission_the_hand_in_passed_over_reads_as_on_its_own_page(signed_in, student, problem):
    """It read "Cancelled" (as if something went wrong) on the exam's page and "Not judged: a
    later submission of this problem was the one judged" on its own."""
    from judging.services.exams import exam_hand_in

    exam = make_exam(problem, mode="OI", participants=[student])
    earlier = submit(student, problem, exam_id=exam.pk)
    submit(student, problem, exam_id=exam.pk)
    exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    words = "Not judged: a later submission of this problem was the one judged"
    assert words in signed_in.get(f"/submissions/ALGO/{earlier.pk}").content.decode()
    exam_page = signed_in.get(f"/exams/{exam.pk}").content.decode()
    assert words in exam_page and "Cancelled" not in exam_page
    # Each row names its problem (a list of "Program N" alone said nothing of which).
    assert exam_page.count(f"<td>{problem.title}</td>") == 1 + 2  # the problems table, and each of the two


def test_a_submission_after_the_end_for_a_problem_another_exam_keeps_gives_the_code_back(signed_in, student, problem):
    """The problem is hidden from everyone but the second exam's participants until it ends:
    the submit was a 404 and the code was lost. The refusal says why and gives the code back,
    without showing the problem."""
    later = make_exam(problem, mode="ACM", participants=[UserFactory()], now=timezone.now(), minutes=60)
    ended = make_exam(problem, mode="ACM", participants=[student], now=timezone.now() - timedelta(minutes=30),
                      minutes=20)
    assert signed_in.get(f"/problems/{problem.pk}").status_code == 404  # `later` keeps it
    code = "print(sum(map(int, input().split())))  # mine"
    answer = signed_in.post(f"/problems/{problem.pk}", {"language": "python", "code": code, "exam": ended.pk})
    page = answer.content.decode()
    assert answer.status_code == 409 and "Nothing was submitted" in page and "The exam has ended" in page
    assert "print(sum(map(int, input().split())))  # mine" in page and problem.title not in page
    assert not Submission.objects.exists() and later.pk != ended.pk
    outsider = signed_in.post(f"/problems/{problem.pk}", {"language": "python", "code": code, "exam": later.pk})
    assert outsider.status_code == 404  # not theirs: the problem still does not exist for them
