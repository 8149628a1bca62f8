"""The students' lesson pages and the lesson statistics: a student finds a lesson's practices,
submits from a practice with its context, sees their best scores and progress; the
leaderboard, daily accepted counts and progress come from the derived rows, cached."""

import re

import pytest
from django.core.cache import cache
from django.utils import timezone

from judging.models import Lesson, PracticeBest, Submission
from judging.services.events import events_dispatch
from judging.statistics import lesson_statistics
from tests.api.helpers import make_admin, person, session_client
from tests.factories import make_practice, make_problem
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]


@pytest.fixture
def lesson(db):
    lesson = Lesson.objects.create(title="Loops")
    first, second = make_problem(languages=("python",)), make_problem(languages=("python",))
    for index, problem in enumerate((first, second)):
        problem.title = f"Loop problem {index + 1}"
        problem.save(update_fields=["title"])
    practice = make_practice(first, second)
    practice.lesson, practice.title = lesson, "Week 1"
    practice.save(update_fields=["lesson", "title"])
    return lesson, practice, first, second


def _judge_everything(identity, verdict_of):
    while jobs := claim(identity, free_slots=8):
        for job in jobs:
            settle(identity, judged(job, verdict=verdict_of(job)))
    while events_dispatch(now=timezone.now()).applied:
        pass


def test_a_student_submits_from_a_practice_and_sees_best_scores_and_progress(lesson, node_a):
    lesson, practice, first, second = lesson
    _, identity = node_a
    ann = person("ann")
    browser = session_client(ann)
    assert f"/lessons/{lesson.pk}" in browser.get("/lessons").content.decode()
    page = browser.get(f"/lessons/practices/{practice.pk}").content.decode()
    assert f"/problems/{first.pk}?practice={practice.pk}" in page and "not tried yet" in page

    form = browser.get(f"/problems/{first.pk}?practice={practice.pk}").content.decode()
    assert "This submission counts for the practice." in form
    key = form.split('name="idempotency_key" value="', 1)[1].split('"', 1)[0]
    sent = browser.post(f"/problems/{first.pk}", {"language": "python", "code": "print(1)", "practice": practice.pk,
                                                  "idempotency_key": key})
    assert sent.status_code == 302
    assert Submission.objects.get().lesson_practice_id == practice.pk, "submitted with the lesson's context"
    _judge_everything(identity, lambda job: "AC")
    assert PracticeBest.objects.get(user=ann).best_score == 100

    page = browser.get(f"/lessons/practices/{practice.pk}").content.decode()
    assert "100 — solved" in page and "1 of 2 problems solved" in page
    cache.clear()
    lesson_page = browser.get(f"/lessons/{lesson.pk}").content.decode()
    assert "1 of 2 solved" in lesson_page and "ann (you)" in lesson_page


def test_the_statistics_rank_students_count_days_and_solvers_and_are_cached(lesson, node_a):
    lesson, practice, first, second = lesson
    _, identity = node_a
    bob, cat = person("bob"), person("cat")
    for student, problem in ((bob, first), (bob, second), (cat, first)):
        submit(student, problem, lesson_practice_id=practice.pk)
    _judge_everything(identity, lambda job: "AC")
    cache.clear()
    stats = lesson_statistics(lesson)
    assert [(row["username"], row["total"], row["solved"]) for row in stats["leaderboard"]] == [
        ("bob", 200, 2), ("cat", 100, 1)]
    assert stats["daily"][-1] == {"day": timezone.now().date().isoformat(), "accepted": 3}
    assert [(p["title"], p["solvers"]) for p in stats["practices"][0]["problems"]] == [
        ("Loop problem 1", 2), ("Loop problem 2", 1)]

    submit(cat, second, lesson_practice_id=practice.pk)
    _judge_everything(identity, lambda job: "AC")
    assert lesson_statistics(lesson) == stats, "served from the cache until it is stale"
    cache.clear()
    assert lesson_statistics(lesson)["leaderboard"][1]["total"] == 200


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai", "America/New_York"])
def test_the_daily_chart_counts_from_its_first_days_midnight(lesson, settings, zone):
    """Fourteen days, today included, in the school's zone (`KECE_TIME_ZONE`): a solution
    a second before the first day's midnight there is not counted, one at midnight is, on
    that day. A class in Shanghai sees its evening's solutions on that evening's day."""
    import zoneinfo
    from datetime import datetime, time, timedelta

    from judging.models import FirstAccepted

    settings.KECE_TIME_ZONE = zone
    local = zoneinfo.ZoneInfo(zone)
    lesson, _practice, first, second = lesson
    now = timezone.now()
    first_day = (now.astimezone(local) - timedelta(days=13)).date()
    midnight = datetime.combine(first_day, time.min, tzinfo=local)
    for user, problem, at in ((person("early"), first, midnight - timedelta(seconds=1)),
                              (person("on-time"), first, midnight), (person("later"), second, midnight)):
        FirstAccepted.objects.create(user=user, problem=problem, submission_type="ALGO", submission_id=1,
                                     accepted_at=at)
    cache.clear()
    daily = lesson_statistics(lesson, now=now)["daily"]
    assert len(daily) == 14 and daily[0] == {"day": first_day.isoformat(), "accepted": 2}
    assert sum(day["accepted"] for day in daily) == 2


def test_the_daily_count_tells_no_verdict_an_exam_still_hides(lesson, node_a):
    """A lesson's problem set in an OI exam: a participant hands in early and is judged AC.
    Until the results are published, the class's daily count does not show it."""
    from datetime import timedelta

    from judging.models import Exam
    from judging.services.exams import exam_hand_in
    from tests.factories import make_exam

    lesson, _practice, first, _second = lesson
    _, identity = node_a
    taker = person("taker")
    exam = make_exam(first, mode="OI", participants=[taker])
    submit(taker, first, exam_id=exam.pk)
    exam_hand_in(exam_id=exam.pk, user=taker, now=timezone.now())
    _judge_everything(identity, lambda job: "AC")

    def accepted_today():
        cache.clear()
        return lesson_statistics(lesson)["daily"][-1]["accepted"]

    assert accepted_today() == 0, "the exam is still on"
    Exam.objects.filter(pk=exam.pk).update(ends_at=timezone.now() - timedelta(seconds=1))
    assert accepted_today() == 0, "ended, but not published"
    Exam.objects.filter(pk=exam.pk).update(published_at=timezone.now())
    assert accepted_today() == 1


def test_the_console_shows_the_leaderboard_and_who_solved_what(lesson, node_a):
    lesson, practice, first, _second = lesson
    _, identity = node_a
    submit(person("dan"), first, lesson_practice_id=practice.pk)
    _judge_everything(identity, lambda job: "AC")
    cache.clear()
    page = session_client(make_admin()).get(f"/admin/lessons/{lesson.pk}").content.decode()
    assert "Leaderboard" in page and "dan" in page and "Loop problem 1: 1 student solved it" in page


def test_a_deleted_lesson_or_practice_is_not_found_and_anonymous_visitors_sign_in(client, lesson):
    lesson, practice, _first, _second = lesson
    assert client.get(f"/lessons/{lesson.pk}").status_code == 302
    browser = session_client(person("eve"))
    Lesson.objects.filter(pk=lesson.pk).update(deleted_at=timezone.now())
    assert browser.get(f"/lessons/{lesson.pk}").status_code == 404
    assert browser.get(f"/lessons/practices/{practice.pk}").status_code == 404
    # The API and a submit naming the practice agree with the pages.
    from tests.api.helpers import error_of, send, token_client

    api = token_client(person("fay"))
    assert error_of(api.get(f"/api/v1/lessons/practices/{practice.pk}")) == (404, "not_found")
    sent = send(api, "POST", "/api/v1/submissions", {"problemId": _first.pk, "language": "python",
                                                     "code": "print(1)", "lessonPracticeId": practice.pk})
    assert error_of(sent) == (400, "invalid") and "lessonPracticeId" in sent.json()["fields"]


def test_with_the_cache_away_the_lesson_page_and_the_console_are_computed_not_broken(lesson, settings):
    """Redis down: the figures they cache are computed for each read instead (slower pages,
    not an error page), as the homepage shows its status as unavailable."""
    from tests.live import free_port

    lesson, *_ = lesson
    settings.CACHES = {"default": {"BACKEND": "kece.cache.SharedClientRedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    assert session_client(person("gil")).get(f"/lessons/{lesson.pk}").status_code == 200
    assert session_client(make_admin()).get("/admin/judgers").status_code == 200


def test_a_practice_whose_problem_is_in_my_running_exam_says_where_it_went_and_no_one_else_is_told(lesson):
    """A problem a running exam keeps leaves the practice for everyone but admins: its
    participant is told it is in their exam and opens when the exam ends; another student
    just does not see it (what an exam holds is its secret)."""
    from tests.factories import make_exam

    _lesson, practice, first, _second = lesson
    taker, other = person("taker"), person("other")
    make_exam(first, mode="ACM", participants=[taker])
    seen_by = {user: session_client(user).get(f"/lessons/practices/{practice.pk}").content.decode() for user in (taker, other)}
    for page in seen_by.values():
        assert "Loop problem 2" in page and "Loop problem 1" not in page
    sentence = "1 problem of this practice is in an exam you are taking: it opens here when the exam ends."
    assert sentence in seen_by[taker] and sentence not in seen_by[other]
    assert "in an exam" not in seen_by[other]


def test_a_practice_just_added_is_listed_at_once_while_the_figures_are_cached(lesson):
    """The lesson list said "2 practices" while the lesson's page listed one for up to a
    minute: the practices come from the rows, only the figures from the cache."""
    from judging.models import LessonPractice

    lesson, _practice, first, _second = lesson
    browser = session_client(person("bea"))
    assert "Week 2" not in browser.get(f"/lessons/{lesson.pk}").content.decode()  # the figures cached now
    added = LessonPractice.objects.create(lesson=lesson, title="Week 2")
    added.problems.add(first)
    assert "Week 2" in browser.get(f"/lessons/{lesson.pk}").content.decode()


def test_a_practice_with_no_problems_yet_says_so_instead_of_0_of_0(lesson):
    from judging.models import LessonPractice

    lesson, _practice, _first, _second = lesson
    empty = LessonPractice.objects.create(lesson=lesson, title="Week 3")
    browser = session_client(person("bea"))
    page = browser.get(f"/lessons/{lesson.pk}").content.decode()
    [row] = re.findall(r"Week 3</a></th>\s*<td>(.*?)</td>", page, re.S)
    assert "No problems in it yet" in row and "0 of 0" not in row and "<progress" not in row
    own = browser.get(f"/lessons/practices/{empty.pk}").content.decode()
    assert "No problems in it yet" in own and "0 of 0" not in own


def test_a_practice_whose_problems_an_exam_holds_is_not_called_empty(lesson):
    from tests.factories import make_exam

    lesson, _practice, first, second = lesson
    ann = person("ann")
    make_exam(first, second, participants=[ann])
    for who in (ann, person("bea")):  # taking the exam, or not: either way the problems are not open yet
        page = session_client(who).get(f"/lessons/{lesson.pk}").content.decode()
        [row] = re.findall(r"Week 1</a></th>\s*<td>(.*?)</td>", page, re.S)
        # Not "empty", and not how many an exam holds: which problems an exam uses is its secret.
        assert "No problem of this practice is open to you." in row and "No problems" not in row, who.username
        assert "2" not in row, who.username
