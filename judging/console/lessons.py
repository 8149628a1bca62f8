"""The lesson and practice pages for admins at `/admin/lessons`: thin views over the admin
API's services (`judging.services.lessons`), with the same revision check as the exam pages."""

from django.contrib import messages
from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from judging.console.forms import LessonForm, PracticeForm, problem_choices
from judging.console.views import (
    confirmed, conflict_words, exam_admins_only, live_or_404, paged, posted_revision, saved_facts,
)
from judging.models import Lesson, LessonPractice
from judging.selectors import deletion_impact
from judging.statistics import lesson_statistics
from judging.services import lessons
from kece.errors import Invalid, NotFound, RevisionConflict


def _live_practices():
    return Count("practices", filter=Q(practices__deleted_at__isnull=True))


@require_http_methods(["GET", "POST"])
@exam_admins_only
def lesson_list(request):
    form = LessonForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        lesson = lessons.lesson_create(title=form.cleaned_data["title"])
        messages.success(request, _("Created the lesson “%(title)s”.") % {"title": lesson.title})
        return redirect("lesson-admin-detail", lesson_id=lesson.pk)
    page = paged(request, Lesson.objects.filter(deleted_at__isnull=True).annotate(
        practice_count=_live_practices()).order_by("-id"))
    return render(request, "judging/console/lesson_list.html", {"page": page, "form": form},
                  status=400 if form.is_bound else 200)


@require_http_methods(["GET", "POST"])
@exam_admins_only
def lesson_detail(request, lesson_id: int):
    lesson = live_or_404(Lesson, lesson_id)
    form = LessonForm(request.POST if request.method == "POST" else None, initial={"title": lesson.title})
    context = {"lesson": lesson, "revision": lesson.revision, "error": "", "saved": None}
    status = 200
    if request.method == "POST":
        context["revision"] = posted_revision(request)
        status = 400
        if form.is_valid():
            try:
                lesson = lessons.lesson_update(lesson_id=lesson.pk, revision=context["revision"],
                                               changes={"title": form.cleaned_data["title"]})
            except NotFound:
                raise Http404 from None
            except RevisionConflict:
                saved = live_or_404(Lesson, lesson.pk)
                status = 409
                context.update(error=conflict_words(), saved=saved, saved_facts=saved_facts(saved),
                               revision=saved.revision)
            else:
                messages.success(request, _("Saved “%(title)s”.") % {"title": lesson.title})
                return redirect("lesson-admin-detail", lesson_id=lesson.pk)
    practices = LessonPractice.objects.filter(lesson=lesson, deleted_at__isnull=True).annotate(
        problem_count=Count("problems")).order_by("id")
    context.update(form=form, practices=practices)
    context["stats"] = lesson_statistics(lesson)
    return render(request, "judging/console/lesson_detail.html", context, status=status)


def _practice_initial(practice) -> dict:
    if practice is None:
        return {}
    return {"title": practice.title, "problems": list(practice.problems.order_by("id").values_list("id", flat=True))}


@require_http_methods(["GET", "POST"])
@exam_admins_only
def practice_edit(request, lesson_id: int | None = None, practice_id: int | None = None):
    practice = live_or_404(LessonPractice, practice_id) if practice_id else None
    lesson = live_or_404(Lesson, lesson_id if practice is None else practice.lesson_id)
    form = PracticeForm(request.POST if request.method == "POST" else None, initial=_practice_initial(practice),
                        choices=problem_choices())
    context = {"lesson": lesson, "practice": practice, "revision": practice.revision if practice else None,
               "error": "", "saved": None}
    status = 200
    if request.method == "POST":
        context["revision"] = posted_revision(request)
        status = 400
        if form.is_valid():
            title, problems = form.cleaned_data["title"], form.cleaned_data["problems"]
            try:
                if practice is None:
                    practice = lessons.practice_create(lesson_id=lesson.pk, title=title, problem_ids=problems)
                else:
                    practice = lessons.practice_update(practice_id=practice.pk, revision=context["revision"],
                                                       changes={"title": title, "problem_ids": problems})
            except NotFound:
                raise Http404 from None
            except RevisionConflict:
                saved = live_or_404(LessonPractice, practice.pk)
                status = 409
                titles = ", ".join(saved.problems.order_by("id").values_list("title", flat=True)) or "—"
                context.update(error=conflict_words(), saved=saved, revision=saved.revision,
                               saved_facts=saved_facts(saved) + [(_("Problems"), titles)])
            except Invalid:
                form.add_error("problems", _("Each problem must exist and be chosen once."))
            else:
                messages.success(request, _("Saved “%(title)s”.") % {"title": practice.title})
                return redirect("lesson-admin-detail", lesson_id=lesson.pk)
    context["form"] = form
    return render(request, "judging/console/practice_form.html", context, status=status)


@require_http_methods(["GET", "POST"])
@exam_admins_only
def practice_delete(request, practice_id: int):
    practice = live_or_404(LessonPractice, practice_id)
    return confirmed(
        request, act=lambda: lessons.practice_delete(practice_id=practice.pk, now=timezone.now()),
        done=_("Deleted “%(title)s”.") % {"title": practice.title},
        after=reverse("lesson-admin-detail", kwargs={"lesson_id": practice.lesson_id}) if practice.lesson_id
        else reverse("lesson-admin"),
        template="judging/console/confirm_delete.html", context=lambda: {
            "title": practice.title, "kind": "practice", "impact": deletion_impact(lesson_practice=practice),
            "back": reverse("practice-admin", kwargs={"practice_id": practice.pk})})
