"""The exam pages for admins at `/admin/exams`: thin views over the admin API's services
(`judging.services.exams`): there is no second way to create, change, fill, publish or delete
an exam. `judging.manage_exams` (or `nodes.manage_judgers`) only, as for the admin API.

A change is based on the revision the form was read at: a stale one is refused by the service,
and the page shows what the user typed again, with the saved version above it.
"""

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.utils import timezone
from django.utils.translation import gettext as _, ngettext
from django.views.decorators.http import require_http_methods, require_POST

from judging.capacity import exam_advice
from judging.console import display
from judging.console.export import participant_words, results_csv, results_file_name
from judging.console.forms import (
    CapacityForm, ExamForm, ParticipantsForm, ProblemFormSet, QuestionFormSet, problem_choices, problem_initial, question_initial,
)
from judging.display import listed
from judging.models import Exam, ExamParticipant
from judging.selectors import deletion_impact, exam_standings, standing_total
from judging.services import exams
from kece.converters import whole_number
from kece.errors import Invalid, NotFound, RevisionConflict
from kece.permissions import can_manage_exams, pages_for
from kece.timezones import zoned_label
from pools.registry import POOLS

PAGE_SIZE = 50

# Anonymous → the login page; signed in without the permission → the 403 page.
exam_admins_only = pages_for(can_manage_exams)


def live_or_404(model, pk: int):
    row = model.objects.filter(pk=pk, deleted_at__isnull=True).first()
    if row is None:
        raise Http404
    return row


def posted_revision(request) -> int:
    return whole_number(request.POST.get("revision")) or 0


def conflict_words() -> str:
    return _("Someone else saved this while you were editing it. Nothing of yours was saved: what you typed is "
             "still in the form, and the saved version is shown above it. Save again to replace the saved version "
             "with yours, or leave the page to keep it.")


def _when(moment) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M")


def saved_facts(row) -> list[tuple]:
    """What the saved version of an exam, lesson or practice says, to compare with the form."""
    facts = [(_("Revision"), row.revision), (_("Title"), row.title)]
    if isinstance(row, Exam):
        facts += [(_("Mode"), row.mode), (zoned_label(_("Starts (%(zone)s)")), _when(row.starts_at)),
                  (zoned_label(_("Ends (%(zone)s)")), _when(row.ends_at)),
                  (_("Problems"), listed(p.problem.title for p in row.problems.select_related("problem")) or "—"),
                  (_("Objective questions"), row.questions.count())]
    return facts


def refusal_words(exc) -> str:
    return _("That was refused: %(reason)s") % {"reason": exc.detail}


def paged(request, rows):
    return Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))


# --- the list --------------------------------------------------------------------------------------

@require_http_methods(["GET"])
@exam_admins_only
def exam_list(request):
    now = timezone.now()
    page = paged(request, Exam.objects.filter(deleted_at__isnull=True).annotate(
        participant_count=Count("participants")).order_by("-starts_at", "-id"))
    rows = [{"exam": e, "phase": display.phase_words(e, now=now), "results": display.results_words(e)} for e in page]
    return render(request, "judging/console/exam_list.html", {"rows": rows, "page": page})


# --- create and edit ------------------------------------------------------------------------------

def _exam_forms(request, exam, *, now):
    """The exam's form and, while its content may change, its problem and question rows (on a
    post: whichever the page sent)."""
    data = request.POST if request.method == "POST" else None
    if exam is None:
        content = True
    elif data is not None:
        content = "problems-TOTAL_FORMS" in data
    else:
        content = now < exam.starts_at
    initial = {} if exam is None else {"title": exam.title, "mode": exam.mode, "starts_at": exam.starts_at,
                                       "ends_at": exam.ends_at}
    form = ExamForm(data, initial=initial, mode_fixed=not content)
    if not content:
        return form, None, None
    # A posted form is taken as it was typed: with the saved rows as initial data, a blank row
    # the user left alone would count as a change when someone else has added a row meanwhile.
    shown = exam is not None and data is None
    problems = ProblemFormSet(data, prefix="problems", initial=problem_initial(exam) if shown else None,
                              form_kwargs={"choices": problem_choices()})
    questions = QuestionFormSet(data, prefix="questions", initial=question_initial(exam) if shown else None)
    return form, problems, questions


def _save_exam(form, problems, questions, *, exam, revision, now):
    values = {name: form.cleaned_data[name] for name in ("title", "mode", "starts_at", "ends_at")}
    content = {}
    if problems is not None:
        content["problems"] = [{"problem_id": row.cleaned_data["problem"], "points": row.cleaned_data["points"]}
                               for row in problems.kept()]
        content["questions"] = [row.question() for row in questions.kept()]
    if exam is None:
        return exams.exam_create(**values, **content)
    return exams.exam_update(exam_id=exam.pk, revision=revision, changes={**values, **content}, now=now)


def _place_exam_refusal(exc: Invalid, form, problems, questions) -> str:
    """Put the service's refusal next to the field it concerns; what is left, as a sentence."""
    fields, left = exc.fields or {}, ""
    if "endsAt" in fields:
        form.add_error("ends_at", _("The exam must end after it starts."))
    if fields.get("mode") == [exams.FIXED_ONCE_STARTED]:
        form.add_error("mode", _("The mode is fixed once the exam has started (or anyone has answered)."))
    for name, rows in (("problems", problems), ("questions", questions)):
        if name not in fields:
            continue
        if fields[name] == [exams.FIXED_ONCE_STARTED]:
            rows.non_form_errors().append(
                _("The problems and questions are fixed once the exam has started (or anyone has answered); "
                  "the title and times can still change."))
        elif name == "problems":
            rows.non_form_errors().append(_("Each problem may appear once."))
        else:
            left = refusal_words(exc)
    return left


@require_http_methods(["GET", "POST"])
@exam_admins_only
def exam_edit(request, exam_id: int | None = None):
    now = timezone.now()
    exam = live_or_404(Exam, exam_id) if exam_id else None
    form, problems, questions = _exam_forms(request, exam, now=now)
    context = {"exam": exam, "revision": exam.revision if exam else None, "saved": None, "error": ""}
    status = 200
    if request.method == "POST":
        context["revision"] = posted_revision(request)
        if all([f.is_valid() for f in (form, problems, questions) if f is not None]):
            try:
                saved = _save_exam(form, problems, questions, exam=exam, revision=context["revision"], now=now)
            except NotFound:
                raise Http404 from None
            except RevisionConflict:
                status, saved_now = 409, live_or_404(Exam, exam.pk)
                context.update(error=conflict_words(), saved=saved_now, saved_facts=saved_facts(saved_now),
                               revision=saved_now.revision)
            except Invalid as exc:
                status, context["error"] = 400, _place_exam_refusal(exc, form, problems, questions)
            else:
                messages.success(request, _("Saved “%(title)s”.") % {"title": saved.title})
                return redirect("exam-admin-detail", exam_id=saved.pk)
        else:
            status = 400
    context.update(form=form, problems=problems, questions=questions,
                   saved_problems=list(exam.problems.select_related("problem")) if exam else [],
                   saved_questions=list(exam.questions.all()) if exam else [])
    return render(request, "judging/console/exam_form.html", context, status=status)


# --- one exam: participants, results --------------------------------------------------------------

def _standings(request, exam, *, now):
    """A page of the participants, by username, or highest total first (`?order=total`)."""
    participants = ExamParticipant.objects.filter(exam=exam).select_related("user")
    if request.GET.get("order") == "total":
        participants = participants.annotate(ranked=standing_total(exam)).order_by("-ranked", "user__username", "id")
    else:
        participants = participants.order_by("user__username", "id")
    page = paged(request, participants)
    rows = exam_standings(exam, list(page), now=now)
    for row in rows:
        row["words"], row["icon"] = participant_words(exam, row)
    return page, rows


def _exam_page(request, exam, template: str, *, status: int = 200, **extra):
    """One exam's page: its facts, problems and questions, and a page of its participants with
    their scores."""
    now = timezone.now()
    page, rows = _standings(request, exam, now=now)
    query = request.GET.copy()  # what the pager's links keep: the order, the figures asked about
    query.pop("page", None)
    context = {"exam": exam, "page": page, "rows": rows, "phase": display.phase_words(exam, now=now),
               "query": query.urlencode(), "by_total": request.GET.get("order") == "total",
               "results": display.results_words(exam), "problems": list(exam.problems.select_related("problem")),
               "questions": list(exam.questions.all()), **extra}
    return render(request, template, context, status=status)


def _capacity(request, exam, *, now) -> dict:
    """The exam's burst against the ready slots now (`judging.capacity`), for the figures the
    admin asked about (`?within=&per_problem=&submissions=`), else the configured ones."""
    defaults = {"within": settings.KECE_EXAM_BURST_TARGET_S, "per_problem": settings.KECE_EXAM_SUBMISSIONS_PER_PROBLEM}
    asked = {k: v for k, v in request.GET.items() if k in CapacityForm.base_fields and v.strip()}
    form = CapacityForm({**defaults, **asked})
    chosen = form.cleaned_data if form.is_valid() else {**defaults, "submissions": None}
    advice = exam_advice(exam, now=now, target_s=chosen["within"], per_problem=chosen["per_problem"],
                         submissions=chosen["submissions"])
    return {"capacity_form": form, "burst": display.burst_words(advice),
            "burst_needs": display.burst_need_rows(advice, labels={n: p.label for n, p in POOLS.items()}),
            "exam_problem_count": advice.problems}


def _detail_page(request, exam, *, form, status: int = 200):
    return _exam_page(request, exam, "judging/console/exam_detail.html", form=form, status=status,
                      **_capacity(request, exam, now=timezone.now()))


@require_http_methods(["GET"])
@exam_admins_only
def exam_detail(request, exam_id: int):
    return _detail_page(request, live_or_404(Exam, exam_id), form=ParticipantsForm())


@require_POST
@exam_admins_only
def participants_add(request, exam_id: int):
    exam = live_or_404(Exam, exam_id)
    form = ParticipantsForm(request.POST)
    if form.is_valid():
        names = form.cleaned_data["usernames"]
        try:
            added = exams.participants_add(exam_id=exam.pk, usernames=names)
        except NotFound:
            raise Http404 from None
        except Invalid as exc:
            unknown = (exc.fields or {}).get("usernames") or []
            form.add_error("usernames", ngettext(
                "No user is named %(names)s. Nobody was added: correct the list and add again.",
                "No users are named %(names)s. Nobody was added: correct the list and add again.",
                len(unknown)) % {"names": listed(unknown)})
        else:
            text = ngettext("Added %(n)d participant.", "Added %(n)d participants.", added) % {"n": added}
            if added < len(names):
                text += " " + ngettext("%(n)d was already taking part.", "%(n)d were already taking part.",
                                       len(names) - added) % {"n": len(names) - added}
            messages.success(request, text)
            return redirect("exam-admin-detail", exam_id=exam.pk)
    return _detail_page(request, exam, form=form, status=400)


@require_http_methods(["GET"])
@exam_admins_only
def exam_results(request, exam_id: int):
    # The table refreshes itself (htmx asks for the fragment) while scores arrive.
    fragment = request.headers.get("HX-Request") == "true"
    return _exam_page(request, live_or_404(Exam, exam_id),
                      "judging/console/_exam_results.html" if fragment else "judging/console/exam_results.html")


@require_http_methods(["GET"])
@exam_admins_only
def exam_results_download(request, exam_id: int):
    exam = live_or_404(Exam, exam_id)
    # Made whole here, in the request's time zone and thread (a class's file is small).
    response = HttpResponse("".join(results_csv(exam, now=timezone.now())), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(True, results_file_name(exam))
    response["Cache-Control"] = "no-store"
    return response


# --- publish and delete ---------------------------------------------------------------------------

def confirmed(request, *, act, done: str, after: str, template: str, context):
    """A confirmation page (GET: the template with `context()`, what the action would do) and
    the action it confirms (POST: `act()`, a service call; then `done` is flashed and the
    browser goes on to `after`)."""
    if request.method == "POST":
        try:
            act()
        except NotFound:
            raise Http404 from None
        messages.success(request, done)
        return redirect(after)
    return render(request, template, context())


def _publish_context(exam) -> dict:
    participants = ExamParticipant.objects.filter(exam=exam)
    return {"exam": exam, "ended": timezone.now() >= exam.ends_at, "participants": participants.count(),
            "handed_in": participants.filter(handed_in_at__isnull=False).count(),
            "judging": deletion_impact(exam=exam)["open_jobs"], "results": display.results_words(exam)}


@require_http_methods(["GET", "POST"])
@exam_admins_only
def exam_publish(request, exam_id: int):
    exam = live_or_404(Exam, exam_id)
    return confirmed(
        request, act=lambda: exams.exam_publish(exam_id=exam.pk, now=timezone.now()),
        done=_("The results of “%(title)s” are published.") % {"title": exam.title},
        after=reverse("exam-admin-detail", kwargs={"exam_id": exam.pk}),
        template="judging/console/exam_publish.html", context=lambda: _publish_context(exam))


@require_http_methods(["GET", "POST"])
@exam_admins_only
def exam_delete(request, exam_id: int):
    exam = live_or_404(Exam, exam_id)
    return confirmed(
        request, act=lambda: exams.exam_delete(exam_id=exam.pk, now=timezone.now()),
        done=_("Deleted “%(title)s”.") % {"title": exam.title}, after=reverse("exam-admin"),
        template="judging/console/confirm_delete.html", context=lambda: {
            "title": exam.title, "kind": "exam", "impact": deletion_impact(exam=exam),
            "participants": ExamParticipant.objects.filter(exam=exam).count(),
            "back": reverse("exam-admin-detail", kwargs={"exam_id": exam.pk})})
