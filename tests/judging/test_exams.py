"""Exams: submits serialised with the hand-in on the participant's lock, one judging batch
per participant however many hand-ins race, scores from the outbox."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from judging.models import (
    DbSubmission, Exam, ExamAnswer, ExamParticipant, ExamScore, FirstAccepted, JobState, JudgeJob, PriorityClass, Submission,
)
from judging.services.events import events_dispatch
from judging.api.exams import result_json
from judging.services.exams import (
    exam_answer_save, exam_delete, exam_hand_in, exam_publish, exam_update, exams_hand_in_overdue, participants_add,
)
from judging.services.rejudge import submission_rejudge
from kece import periodic
from kece.errors import ExamClosed, Invalid, RevisionConflict, Superseded
from tests.concurrency import raise_first_error, run_concurrently
from tests.factories import UserFactory, make_exam, make_node, make_problem
from tests.judging.helpers import claim, judged, settle, submit


def _jobs_of(*submissions):
    refs = [(s.TYPE, s.pk) for s in submissions]
    return [j for j in JudgeJob.objects.order_by("id") if j.submission_ref in refs]


def _judge_all(identity, verdict="AC"):
    jobs = claim(identity, free_slots=8)
    for job in jobs:
        assert settle(identity, judged(job, verdict=verdict)) == "settled"
    return jobs


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_oi_hand_ins_make_one_batch_and_one_confirmation(mariadb):
    student = UserFactory()
    algo, sql = make_problem(), make_problem(kind="SQL")
    exam = make_exam(algo, sql, mode="OI", participants=[student])
    first = submit(student, algo, exam_id=exam.pk, code="print(0)")
    last = submit(student, algo, exam_id=exam.pk, code="print(1)")
    query = submit(student, sql, language="mysql", code="SELECT 1;", exam_id=exam.pk)
    assert _jobs_of(first, last, query) == [], "OI submissions are saved, not judged"

    now = timezone.now()
    results = run_concurrently([lambda: exam_hand_in(exam_id=exam.pk, user=student, now=now)] * 20)
    raise_first_error(results)
    assert len(set(results)) == 1 and results[0].jobs == 2
    assert sum(r.fresh for r in results) == 1, "exactly one of them handed in"
    jobs = _jobs_of(first, last, query)
    assert sorted(j.submission_ref for j in jobs) == sorted([("ALGO", last.pk), ("SQL", query.pk)])
    assert all(j.generation == 1 for j in jobs)
    again = exam_hand_in(exam_id=exam.pk, user=student, now=now + timedelta(minutes=5))
    assert again == results[0] and len(_jobs_of(first, last, query)) == 2


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_a_submission_deleted_while_its_exam_is_handed_in_is_never_judged(mariadb, monkeypatch, unlimited_submits):
    """An admin deletes the last OI submission just as the hand-in has read it: the deletion
    waits for the hand-in's participant lock, then cancels the job the hand-in queued. No
    deleted submission is left with work to judge."""
    import threading

    from judging.services import exams
    from judging.services.rejudge import submission_delete
    from tests.concurrency import lock_waits, wait_until

    student, problem = UserFactory(), make_problem()
    exam = make_exam(problem, mode="OI", participants=[student])
    submit(student, problem, exam_id=exam.pk)
    last = submit(student, problem, exam_id=exam.pk)
    read, deleting = exams._last_submissions, {}

    def read_then_an_admin_deletes(exam_, user_id):
        found = read(exam_, user_id)

        def delete():
            try:
                submission_delete(submission_type="ALGO", submission_id=last.pk, now=timezone.now())
                deleting["done"] = True
            finally:
                connection.close()

        deleting["thread"] = thread = threading.Thread(target=delete, daemon=True)
        thread.start()
        wait_until(lambda: lock_waits() > 0 or not thread.is_alive(), timeout=30,
                   message="the deletion neither waited nor finished")
        return found

    monkeypatch.setattr(exams, "_last_submissions", read_then_an_admin_deletes)
    assert exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now()).jobs == 1
    deleting["thread"].join(30)
    assert deleting.get("done"), "the deletion did not finish"
    gone = Submission.objects.get(pk=last.pk)
    assert gone.deleted_at is not None
    job = JudgeJob.objects.get(pk=gone.current_judge_job_id)
    assert job.state == JobState.CANCELLED, "a deleted submission would be judged"


@pytest.mark.django_db
def test_after_hand_in_or_the_end_the_exam_refuses_work(student, problem):
    exam = make_exam(problem, mode="ACM", participants=[student],
                     questions=[{"kind": "SINGLE", "options": ["a", "b"], "correct": [1], "points": 5}])
    exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    with pytest.raises(ExamClosed, match="handed in"):
        submit(student, problem, exam_id=exam.pk)
    question = exam.questions.get()
    with pytest.raises(ExamClosed):
        exam_answer_save(exam_id=exam.pk, question_id=question.pk, user=student, choices=[1], now=timezone.now())

    other = UserFactory()
    ended = make_exam(problem, participants=[other], minutes=-1)
    with pytest.raises(ExamClosed, match="ended"):
        submit(other, problem, exam_id=ended.pk)
    with pytest.raises(Invalid, match="not a participant"):
        submit(UserFactory(), problem, exam_id=exam.pk)
    assert not Submission.objects.filter(exam__isnull=False).exists()


@pytest.mark.django_db
def test_acm_judges_at_once_and_the_hand_in_does_not_judge_again(student, problem, node_a):
    _, identity = node_a
    unsolved = make_problem()
    exam = make_exam(problem, unsolved, mode="ACM", participants=[student], points={0: 40, 1: 60})
    wrong = submit(student, problem, exam_id=exam.pk)
    [job] = _judge_all(identity, "WA")
    right = submit(student, problem, exam_id=exam.pk)
    _judge_all(identity, "AC")
    events_dispatch(now=timezone.now())
    score = ExamScore.objects.get(exam=exam, user=student, problem=problem)
    assert (score.score, score.points, score.attempts, score.submission_id) == (100, 40, 2, right.pk)

    confirmation = exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    assert confirmation.jobs == 0
    assert [j.generation for j in _jobs_of(wrong, right)] == [1, 1], "nothing judged twice"
    assert job.submission_id == wrong.pk


@pytest.mark.django_db
def test_objective_questions_are_scored_at_hand_in_without_a_job(student, problem):
    exam = make_exam(problem, participants=[student], questions=[
        {"kind": "SINGLE", "options": ["a", "b"], "correct": [1], "points": 5},
        {"kind": "MULTIPLE", "options": ["a", "b", "c"], "correct": [0, 2], "points": 7},
        {"kind": "MULTIPLE", "options": ["a", "b", "c"], "correct": [0, 1], "points": 9},
    ])
    single, multiple, wrong = exam.questions.order_by("ordinal")
    now = timezone.now()
    exam_answer_save(exam_id=exam.pk, question_id=single.pk, user=student, choices=[0], now=now)
    exam_answer_save(exam_id=exam.pk, question_id=single.pk, user=student, choices=[1], now=now)
    exam_answer_save(exam_id=exam.pk, question_id=multiple.pk, user=student, choices=[2, 0], now=now)
    exam_answer_save(exam_id=exam.pk, question_id=wrong.pk, user=student, choices=[0], now=now)
    with pytest.raises(Invalid):
        exam_answer_save(exam_id=exam.pk, question_id=single.pk, user=student, choices=[0, 1], now=now)
    assert exam_hand_in(exam_id=exam.pk, user=student, now=now).jobs == 0
    assert ExamParticipant.objects.get(exam=exam, user=student).objective_score == 12
    assert sorted(ExamAnswer.objects.values_list("score", flat=True)) == [0, 5, 7]
    assert not JudgeJob.objects.exists()


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_the_end_of_exam_step_hands_in_once_with_two_workers(mariadb):
    student, punctual = UserFactory(), UserFactory()
    problem = make_problem()
    now = timezone.now()
    exam = make_exam(problem, mode="OI", participants=[student, punctual], now=now, minutes=10)
    late = submit(student, problem, exam_id=exam.pk, now=now)
    exam_hand_in(exam_id=exam.pk, user=punctual, now=now)
    assert exams_hand_in_overdue(now=now) == 0, "not over yet"

    after = now + timedelta(minutes=11)
    results = run_concurrently([lambda: periodic.exams_step(now=after)] * 2)
    raise_first_error(results)
    assert sorted(results) == [0, 1]
    participant = ExamParticipant.objects.get(exam=exam, user=student)
    assert participant.handed_in_at == exam.ends_at and participant.hand_in_jobs == 1
    assert len(_jobs_of(late)) == 1
    assert periodic.exams_step(now=after) == 0


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_code_and_sql_submissions_with_one_id_settle_to_their_own_rows_and_scores(mariadb):
    student = UserFactory()
    algo, sql = make_problem(), make_problem(kind="SQL")
    exam = make_exam(algo, sql, mode="ACM", participants=[student], points={0: 30, 1: 70})
    with connection.cursor() as cursor:
        for table in ("submission", "db_submission"):
            cursor.execute(f"ALTER TABLE {table} AUTO_INCREMENT = 5000")
    code = submit(student, algo, exam_id=exam.pk)
    query = submit(student, sql, language="mysql", code="SELECT 1;", exam_id=exam.pk)
    assert code.pk == query.pk
    _, python = make_node(pool="python")
    _, mysql = make_node(pool="mysql")
    _judge_all(python, "WA")
    _judge_all(mysql, "AC")
    events_dispatch(now=timezone.now())
    assert Submission.objects.get(pk=code.pk).verdict == "WA"
    assert DbSubmission.objects.get(pk=query.pk).verdict == "AC"
    scores = {s.problem_id: (s.submission_type, s.score, s.points) for s in ExamScore.objects.filter(exam=exam)}
    assert scores == {algo.pk: ("ALGO", 0, 0), sql.pk: ("SQL", 100, 70)}


@pytest.mark.django_db
def test_a_rejudge_after_publishing_moves_the_score_and_revokes_first_accepted(student, problem, node_a):
    _, identity = node_a
    exam = make_exam(problem, mode="OI", participants=[student], points={0: 50})
    submission = submit(student, problem, exam_id=exam.pk)
    exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    _judge_all(identity, "AC")
    events_dispatch(now=timezone.now())
    exam = exam_publish(exam_id=exam.pk, now=timezone.now())
    participant = ExamParticipant.objects.get(exam=exam, user=student)
    assert result_json(exam, participant, viewer=student, now=timezone.now())["total"] == 50
    assert FirstAccepted.objects.filter(user=student, problem=problem).exists()

    submission_rejudge(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    _judge_all(identity, "WA")
    events_dispatch(now=timezone.now())
    assert result_json(exam, participant, viewer=student, now=timezone.now())["total"] == 0
    assert not FirstAccepted.objects.filter(user=student, problem=problem).exists()


@pytest.mark.django_db
def test_deleting_an_exam_mid_judging_cancels_its_jobs_and_refuses_late_results(student, problem, node_a):
    _, identity = node_a
    exam = make_exam(problem, mode="ACM", participants=[student])
    running, queued = submit(student, problem, exam_id=exam.pk), submit(student, problem, exam_id=exam.pk)
    [job] = claim(identity)
    exam_delete(exam_id=exam.pk, now=timezone.now())
    assert {j.state for j in _jobs_of(running, queued)} == {JobState.CANCELLED}
    with pytest.raises(Superseded):
        settle(identity, judged(job))
    assert Submission.objects.get(pk=running.pk).verdict is None
    with pytest.raises(Invalid):
        submit(student, problem, exam_id=exam.pk)


@pytest.mark.django_db
@pytest.mark.parametrize("what", ["problem", "practice"])
def test_deleting_a_problem_or_a_practice_cancels_open_jobs_and_refuses_late_results(student, problem, node_a,
                                                                                     what):
    from judging.services.lessons import practice_delete, problem_delete
    from tests.factories import make_practice

    _, identity = node_a
    practice = make_practice(problem)
    running = submit(student, problem, lesson_practice_id=practice.pk)
    queued = submit(student, problem)
    [job] = claim(identity)
    if what == "problem":
        problem_delete(problem_id=problem.pk, now=timezone.now())
        cancelled = [running, queued]
    else:
        practice_delete(practice_id=practice.pk, now=timezone.now())
        cancelled = [running]
    assert {j.state for j in _jobs_of(*cancelled)} == {JobState.CANCELLED}
    with pytest.raises(Superseded):
        settle(identity, judged(job))
    with pytest.raises(Invalid):
        submit(student, problem, lesson_practice_id=practice.pk)
    if what == "practice":
        assert _jobs_of(queued)[0].state == JobState.QUEUED, "a practice deletes only its own"


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("what", ["problem", "practice", "problem of a plain submit"])
def test_a_submit_in_flight_when_its_practice_or_problem_is_deleted_is_swept_too(mariadb, what):
    """A submit that passed its checks and has not committed when the deletion commits: the
    deletion waits for it, so its sweep deletes that submission too. (A plain submit, with
    no practice, locks its problem in the statement that inserts the submission.)"""
    import threading

    from judging.services.lessons import practice_delete, problem_delete
    from tests.factories import make_practice

    student, problem = UserFactory(), make_problem()
    practice = make_practice(problem)
    inserted, release, deleter = threading.Event(), threading.Event(), {}

    def submitting():
        linked = {} if what == "problem of a plain submit" else {"lesson_practice_id": practice.pk}
        return submit(student, problem, **linked, after_insert=lambda s: (inserted.set(), release.wait(30)))

    def deleting():
        assert inserted.wait(30)
        with connection.cursor() as cursor:
            cursor.execute("SELECT CONNECTION_ID()")
            deleter["id"] = cursor.fetchone()[0]
        if what != "practice":
            problem_delete(problem_id=problem.pk, now=timezone.now())
        else:
            practice_delete(practice_id=practice.pk, now=timezone.now())
        deleter["done"] = True

    def releasing():
        # Let the submit commit once the deletion has finished or waits for a lock; at the
        # latest after 5 s, well inside the deleter's statement bound (KECE_DB_READ_TIMEOUT_S):
        # the sweep's assertion below holds either way.
        with connection.cursor() as cursor:
            for _ in range(500):
                if deleter.get("done"):
                    break
                if "id" in deleter:
                    cursor.execute("SELECT COUNT(*) FROM information_schema.INNODB_TRX"
                                   " WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id = %s", [deleter["id"]])
                    if cursor.fetchone()[0]:
                        break
                release.wait(0.01)
        release.set()

    results = run_concurrently([submitting, deleting, releasing])
    raise_first_error(results)
    submission = Submission.objects.get(pk=results[0].pk)
    assert submission.deleted_at is not None, "the submit in flight escaped the deletion's sweep"
    assert JudgeJob.objects.get(pk=submission.current_judge_job_id).state == JobState.CANCELLED


@pytest.mark.parametrize("mode", ["ACM", "OI"])
def test_exam_work_goes_first_in_its_pool_whatever_waits_there(student, problem, node_a, mode):
    """An exam's jobs (judged at once in ACM, at the hand-in in OI) are of the EXAM class:
    they are claimed before the practice work already waiting in the pool."""
    _, identity = node_a
    practice = [submit(UserFactory(), problem) for _ in range(3)]
    exam = make_exam(problem, mode=mode, participants=[student])
    answer = submit(student, problem, exam_id=exam.pk)
    if mode == "OI":
        assert answer.current_judge_job_id is None  # saved, judged at the hand-in
        exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    answer.refresh_from_db()
    assert JudgeJob.objects.get(pk=answer.current_judge_job_id).priority_class == PriorityClass.EXAM
    [first] = claim(identity, free_slots=1)
    assert first.submission_id == answer.pk and first.pk not in {p.current_judge_job_id for p in practice}


# --- administration ------------------------------------------------------------------------------

def _later_exam(*problems, **kwargs):
    """An exam that starts in an hour."""
    return make_exam(*problems, now=timezone.now() + timedelta(hours=1), **kwargs)


@pytest.mark.django_db
def test_an_exam_not_started_yet_takes_new_mode_problems_and_questions_in_order(problem):
    sql = make_problem(kind="SQL", languages=("mysql",))
    exam = _later_exam(problem, questions=[{"kind": "SINGLE", "options": ["a", "b"], "correct": [0], "points": 5}])
    updated = exam_update(exam_id=exam.pk, revision=exam.revision, now=timezone.now(), changes={
        "title": "final", "mode": "ACM",
        "problems": [{"problem_id": sql.pk, "points": 30}, {"problem_id": problem.pk, "points": 70}],
        "questions": [{"kind": "MULTIPLE", "prompt": "which?", "options": ["x", "y", "z"], "correct": [2, 0],
                       "points": 8}]})
    assert (updated.title, updated.mode, updated.revision) == ("final", "ACM", exam.revision + 1)
    assert list(updated.problems.values_list("problem_id", "points", "ordinal")) == [(sql.pk, 30, 0), (problem.pk, 70, 1)]
    [question] = updated.questions.all()
    assert (question.kind, question.options, sorted(question.correct), question.points) == (
        "MULTIPLE", ["x", "y", "z"], [0, 2], 8)


@pytest.mark.django_db
def test_once_started_only_title_and_times_change_and_the_same_content_is_no_change(student, problem):
    exam = make_exam(problem, participants=[student], questions=[
        {"kind": "SINGLE", "options": ["a", "b"], "correct": [1], "points": 5}])
    question = exam.questions.get()
    same = {"mode": exam.mode, "problems": [{"problem_id": problem.pk, "points": 100}],
            "questions": [{"kind": "SINGLE", "prompt": question.prompt, "options": ["a", "b"], "correct": [1],
                           "points": 5}]}
    updated = exam_update(exam_id=exam.pk, revision=exam.revision, now=timezone.now(),
                          changes={"title": "renamed", **same})
    assert updated.title == "renamed" and exam.questions.get().pk == question.pk, "the question row is kept"
    for changed in ({"mode": "ACM"}, {"problems": []}, {"questions": []}):
        with pytest.raises(Invalid, match="fixed once it has started") as refused:
            exam_update(exam_id=exam.pk, revision=updated.revision, now=timezone.now(), changes=changed)
        assert list(refused.value.fields) == list(changed)
    assert Exam.objects.get(pk=exam.pk).revision == updated.revision


@pytest.mark.django_db
def test_a_stale_revision_changes_nothing(problem):
    exam = _later_exam(problem)
    exam_update(exam_id=exam.pk, revision=exam.revision, now=timezone.now(), changes={"title": "first"})
    with pytest.raises(RevisionConflict):
        exam_update(exam_id=exam.pk, revision=exam.revision, now=timezone.now(),
                    changes={"title": "second", "problems": []})
    current = Exam.objects.get(pk=exam.pk)
    assert current.title == "first" and current.problems.count() == 1


@pytest.mark.django_db
def test_participants_are_added_by_username_all_or_none(problem, student):
    exam = make_exam(problem)
    other = UserFactory(username="olga")
    with pytest.raises(Invalid) as refused:
        participants_add(exam_id=exam.pk, usernames=["student", "nobody", "Olga"])
    assert refused.value.fields == {"usernames": ["Olga", "nobody"]}
    assert not ExamParticipant.objects.exists(), "nobody is added when a name is unknown"
    assert participants_add(exam_id=exam.pk, usernames=["student", "olga"]) == 2
    assert participants_add(exam_id=exam.pk, usernames=["olga"], user_ids=[student.pk]) == 0
    assert set(ExamParticipant.objects.values_list("user_id", flat=True)) == {student.pk, other.pk}


@pytest.mark.django_db
def test_the_end_of_exam_step_hands_in_a_large_exam_in_one_pass_not_a_batch_a_tick():
    """A batch a tick took a 10 000-participant exam four minutes to hand in (the last
    students' submissions judged that much later): batches follow one another within the
    pass's time."""
    import time

    problem = make_problem()
    now = timezone.now()
    students = [UserFactory() for _ in range(5)]
    exam = make_exam(problem, mode="OI", participants=students, now=now - timedelta(minutes=20), minutes=10)
    assert exams_hand_in_overdue(now=now, batch=2) == 2, "one batch without a time to go on until"
    assert exams_hand_in_overdue(now=now, batch=2, until=time.monotonic() + 60) == 3
    assert not ExamParticipant.objects.filter(exam=exam, handed_in_at__isnull=True).exists()
