"""Lesson statistics: a leaderboard, daily accepted counts and each practice's progress.

Read from the rows the outbox derives (`PracticeBest`, `FirstAccepted`), never from the job or
submission tables the judging path writes, and cached for `KECE_STATS_CACHE_S`: a class
opening its lesson page at once costs the database one computation, and nothing of it stands
in the way of a submit, a claim or a result. A student's own figures are one small read of
their own rows beside it.
"""

from datetime import datetime, time, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, Exists, OuterRef, Q, Sum
from django.utils import timezone

from judging.models import SUBMISSION_MODELS, Exam, ExamMode, FirstAccepted, LessonPractice, PracticeBest
from judging.system import system_user_id
from kece.caches import shared_or_computed
from kece.timezones import display_zone

FORM = 2  # `asOf` a time, not text; days in the pages' zone
BOARD_SIZE = 10
DAYS = 14
SOLVED = 100  # a practice problem counts as solved at full marks


def _practices(lesson_id: int) -> list[LessonPractice]:
    return list(LessonPractice.objects.filter(lesson_id=lesson_id, deleted_at__isnull=True).order_by("id")
                .prefetch_related("problems"))


def _results_not_shown(now) -> Q:
    """First acceptances others may not learn of yet: made in an exam that has not ended
    (each participant sees only their own standing) or in an OI exam not yet published. A
    lesson's daily count would otherwise tell a class which verdicts an exam still hides."""
    hidden = Exam.objects.filter(Q(ends_at__gt=now) | Q(mode=ExamMode.OI, published_at__isnull=True))
    found = Q(pk__in=[])
    for submission_type, model in SUBMISSION_MODELS.items():
        in_hidden_exam = model.objects.filter(pk=OuterRef("submission_id"), exam__in=hidden)
        found |= Q(Exists(in_hidden_exam), submission_type=submission_type)
    return found


def _compute(lesson_id: int, *, now) -> dict:
    practices = _practices(lesson_id)
    practice_ids = [p.pk for p in practices]
    bests = PracticeBest.objects.filter(practice_id__in=practice_ids).exclude(user_id=system_user_id())
    board = list(bests.values("user_id").annotate(total=Sum("best_score"),
                                                  solved=Count("id", filter=Q(best_score__gte=SOLVED)))
                 .order_by("-total", "-solved", "user_id")[:BOARD_SIZE])
    names = dict(get_user_model().objects.filter(pk__in=[row["user_id"] for row in board])
                 .values_list("pk", "username"))
    solvers = {(row["practice_id"], row["problem_id"]): row["n"] for row in bests.filter(best_score__gte=SOLVED)
               .values("practice_id", "problem_id").annotate(n=Count("id"))}
    problem_ids = {problem.pk for practice in practices for problem in practice.problems.all()}
    # The school's days (the pages' zone), each counted between its midnights as times: a
    # date of `accepted_at` would be DATE(CONVERT_TZ(…)), which no index serves (it would
    # read every solution the problems ever had) and which needs the database's zone tables.
    zone = display_zone()
    today = timezone.localtime(now, zone).date()
    days = [today - timedelta(days=DAYS - 1 - i) for i in range(DAYS)]
    midnights = [datetime.combine(day, time.min, tzinfo=zone) for day in days + [today + timedelta(days=1)]]
    daily = (FirstAccepted.objects.filter(problem_id__in=problem_ids, accepted_at__gte=midnights[0],
                                          accepted_at__lt=midnights[-1])
             .exclude(user_id=system_user_id()).exclude(_results_not_shown(now))
             .aggregate(**{f"day{i}": Count("id", filter=Q(accepted_at__gte=midnights[i],
                                                           accepted_at__lt=midnights[i + 1])) for i in range(DAYS)}))
    return {
        "asOf": now,
        "leaderboard": [{"rank": i, "username": names.get(row["user_id"], "?"), "total": row["total"],
                         "solved": row["solved"]} for i, row in enumerate(board, start=1)],
        "daily": [{"day": day.isoformat(), "accepted": daily[f"day{i}"] or 0} for i, day in enumerate(days)],
        "practices": _practice_rows(practices, solvers),
    }


def _practice_rows(practices, solvers: dict) -> list[dict]:
    return [{"id": practice.pk, "title": practice.title, "problems": [
        {"id": problem.pk, "title": problem.title, "solvers": solvers.get((practice.pk, problem.pk), 0)}
        for problem in sorted(practice.problems.all(), key=lambda p: p.pk)]} for practice in practices]


def current_practices(lesson_id: int, stats: dict) -> list[dict]:
    """The lesson's practices and their problems as they are now (one read: a practice a
    teacher just added is listed at once, not when the figures are next computed), each
    problem with its solvers from the shared figures (0 until they count it)."""
    solvers = {(practice["id"], problem["id"]): problem["solvers"]
               for practice in stats["practices"] for problem in practice["problems"]}
    return _practice_rows(_practices(lesson_id), solvers)


def lesson_statistics(lesson, *, now=None) -> dict:
    """The lesson's shared figures, from the cache when fresh. The key carries the lesson's
    creation time too (a database recreated with the same ids must not read another's), the
    zone its days are counted in, and the figures' form (`FORM`: an older process's entry
    is not read for a newer one's)."""
    key = f"kece:lesson-stats:{FORM}:{lesson.pk}:{lesson.created_at.timestamp()}:{settings.KECE_TIME_ZONE}"
    return shared_or_computed(key, lambda: _compute(lesson.pk, now=now or timezone.now()),
                              timeout=settings.KECE_STATS_CACHE_S)


def my_bests(user, practice_ids: list) -> dict:
    """(practice id, problem id) → the user's best score: one read of their own rows."""
    return {(row.practice_id, row.problem_id): row.best_score
            for row in PracticeBest.objects.filter(user=user, practice_id__in=practice_ids)}
