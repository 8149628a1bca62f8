"""The students' lesson pages: the lessons, one lesson (its practices, the student's progress,
the leaderboard and the daily accepted counts), one practice (its problems and the student's
best scores, each a link to submit with the practice's context).

Thin views over the same reads as the lesson API (`judging.services.lessons`) and the cached
statistics (`judging.statistics`); a problem a student may not see is not listed
(`judging.visibility`).
"""

from django.contrib.auth.views import redirect_to_login
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from judging import statistics, visibility
from judging.models import Lesson, LessonPractice

PAGE_SIZE = 50


def _signed_in(request):
    return None if request.user.is_authenticated else redirect_to_login(request.get_full_path())


@require_GET
def lesson_list(request):
    if (response := _signed_in(request)) is not None:
        return response
    lessons = (Lesson.objects.filter(deleted_at__isnull=True)
               .annotate(practice_count=Count("practices", filter=Q(practices__deleted_at__isnull=True)))
               .order_by("-id"))
    return render(request, "judging/lesson_list.html",
                  {"page": Paginator(lessons, PAGE_SIZE).get_page(request.GET.get("page"))})


def _progress(practices: list, bests: dict, shown: set) -> list:
    rows = []
    for practice in practices:
        problems = [p for p in practice["problems"] if p["id"] in shown]
        solved = sum(1 for p in problems if bests.get((practice["id"], p["id"]), 0) >= statistics.SOLVED)
        # Held: problems the practice has that are not open to this student now (an exam
        # holds them): a practice of those is not an empty one, and how many an exam holds
        # (a future one's among them) is not said.
        rows.append({**practice, "problems": problems, "solved": solved, "total": len(problems),
                     "held": len(practice["problems"]) - len(problems)})
    return rows


@require_GET
def lesson_detail(request, lesson_id: int):
    if (response := _signed_in(request)) is not None:
        return response
    lesson = Lesson.objects.filter(pk=lesson_id, deleted_at__isnull=True).first()
    if lesson is None:
        raise Http404
    stats = statistics.lesson_statistics(lesson)
    practices = statistics.current_practices(lesson.pk, stats)
    bests = statistics.my_bests(request.user, [p["id"] for p in practices])
    shown = set(visibility.listed_problems(request.user, now=timezone.now()).filter(
        lesson_practices__lesson=lesson).values_list("id", flat=True))
    peak = max([day["accepted"] for day in stats["daily"]] + [1])
    return render(request, "judging/lesson_detail.html", {
        "lesson": lesson, "stats": stats, "progress": _progress(practices, bests, shown),
        "daily": [{**day, "share": round(100 * day["accepted"] / peak)} for day in stats["daily"]]})


@require_GET
def practice_detail(request, practice_id: int):
    if (response := _signed_in(request)) is not None:
        return response
    practice = LessonPractice.objects.filter(pk=practice_id, deleted_at__isnull=True,
                                             lesson__deleted_at__isnull=True).select_related("lesson").first()
    if practice is None:
        raise Http404
    now = timezone.now()
    problems = visibility.listed_problems(request.user, now=now).filter(lesson_practices=practice).order_by("id")
    bests = statistics.my_bests(request.user, [practice.pk])
    rows = [{"problem": problem, "best": bests.get((practice.pk, problem.pk))} for problem in problems]
    in_my_exam = visibility.kept_by_my_exams(practice.problems.all(), request.user, now=now)
    return render(request, "judging/practice_detail.html", {
        "practice": practice, "rows": rows, "in_my_exam": in_my_exam,
        "empty": not rows and not practice.problems.exists(),
        "solved": sum(1 for row in rows if (row["best"] or 0) >= statistics.SOLVED)})
