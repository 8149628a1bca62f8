"""The student's pages: problems, the submit form, a submission as it is judged, my submissions.

Thin views over the same services and reads as the user API (`submission_submit`,
`submission_state`): there is no second way to submit or to compute a status.
"""

from django.contrib.auth.views import redirect_to_login
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods

from judging import artifacts, display, visibility
from judging.markdown import render_statement
from judging.models import SUBMISSION_MODELS, Problem, ProblemKind, SubmissionType
from judging.selectors import shown_states, submission_history, submission_keys, submission_state, submissions_of
from judging.services.exams import closed_to, held_status, hidden_wait, submit_window
from judging.services.idempotency import checked_key, form_key, submit_once
from judging.services.submit import MAX_SOURCE_BYTES, submission_submit
from kece.converters import whole_number
from kece.errors import ExamClosed, ExamInProgress, IdempotencyConflict, Invalid, Throttled, Unavailable
from kece.permissions import can_manage_judgers
from pools.registry import POOLS
from pools.status import judge_status

PAGE_SIZE = 50


@require_GET
def problem_list(request):
    problems = visibility.listed_problems(request.user, now=timezone.now()).select_related(
        "current_manifest").order_by("id")
    page = Paginator(problems, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [{"problem": p, "languages": [POOLS[lang].label for lang in p.current_manifest.languages]} for p in page]
    return render(request, "judging/problem_list.html", {"page": page, "rows": rows})


def _schema_text(manifest) -> str:
    """A SQL problem's table definitions, which the student needs to write the query."""
    entry = (manifest.sql or {}).get("schema")
    if not entry:
        return ""
    try:
        return artifacts.path_for(entry["digest"]).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _practice(request, problem):
    """The lesson practice a problem page submits into (`?practice=` on the link from the
    practice's page), if it holds the problem; else None (free practice)."""
    from judging.models import LessonPractice

    practice_id = whole_number(request.POST.get("practice") or request.GET.get("practice"))
    if not practice_id:
        return None
    return LessonPractice.objects.filter(pk=practice_id, deleted_at__isnull=True, lesson__deleted_at__isnull=True,
                                         problems=problem).first()


def _exam_id(request) -> int | None:
    """The exam a problem page submits into (`?exam=` on the link from the exam's page)."""
    return whole_number(request.POST.get("exam") or request.GET.get("exam")) or None


def _submitted_after_the_exam(request):
    """A participant's submission into their exam that has just ended, for a problem another
    exam keeps hidden until its own end: not a 404 that loses the code, but the refusal with
    the code given back (the problem itself still not shown)."""
    exam_id = _exam_id(request)
    reason = closed_to(exam_id, request.user, now=timezone.now()) if exam_id and request.user.is_authenticated \
        else None
    if reason is None:
        return None
    return render(request, "judging/submit_refused.html", {
        "reason": reason, "code": request.POST.get("code", ""), "exam_id": exam_id}, status=409)


def _problem_page(request, problem, *, language="", code="", errors=(), status=200):
    manifest = problem.current_manifest
    judges = judge_status()
    languages = []
    for name in manifest.languages:
        row = judges.row(name)
        languages.append({"code": name, "label": POOLS[name].label,
                          "status": display.runtime_words(row, stale=judges.freshness == "stale")})
    chosen = language if language in manifest.languages else manifest.languages[0]
    now, exam_id = timezone.now(), _exam_id(request)
    # The exam this page submits into: why it takes nothing now, or its end (for the time left).
    exam_closed, exam_ends_at = submit_window(exam_id, request.user, now=now) if exam_id else (None, None)
    keeping = None if exam_id else visibility.exam_keeping(problem, request.user, now=now)
    context = {
        "problem": problem, "manifest": manifest, "statement": render_statement(problem.statement, title=problem.title),
        "output_limit": display.size_words(manifest.output_limit_kb),
        "schema": _schema_text(manifest) if problem.kind == ProblemKind.SQL else "",
        "languages": languages, "chosen": chosen, "chosen_status": next(
            lang["status"] for lang in languages if lang["code"] == chosen),
        "code": code, "errors": errors, "exam_id": exam_id, "idempotency_key": form_key(),
        # The submission a prefilled form came from: the way into the exam keeps its code.
        "from_id": whole_number(request.GET.get("from")) if code and request.method == "GET" else None,
        # An exam not open to the student: said before they write anything, not after.
        "exam_closed": exam_closed, "exam_ends_at": exam_ends_at, "now": now,
        "practice": None if exam_id else _practice(request, problem),
        "keeping_exam": keeping,
        # An exam that keeps the problem but that the student has handed in: no way to submit
        # it until the exam ends, which the page says (its link led to "you have handed in").
        "kept_until": keeping.ends_at if keeping and closed_to(keeping.pk, request.user, now=now) else None,
    }
    return render(request, "judging/problem_detail.html", context, status=status)


def _form_errors(exc: Invalid, code: str) -> list[str]:
    """The service's refusal as sentences a student can act on."""
    fields = exc.fields or {}
    errors = []
    if "language" in fields:
        errors.append(_("Choose one of the languages this problem accepts."))
    if "code" in fields:
        if not code.strip():
            errors.append(_("Write or paste your code first."))
        elif "\x00" in code:
            errors.append(_("The code contains a NUL character; remove it and submit again."))
        else:
            errors.append(_("The code is larger than %(kib)d KiB.") % {"kib": MAX_SOURCE_BYTES // 1024})
    return errors or [_("The submission was refused: %(reason)s") % {"reason": exc.detail}]


def _submit_form_once(request, problem, *, language: str, code: str):
    """Submit under the form's key, as the API does under `Idempotency-Key`: the same form
    posted again gets the first post's submission."""
    exam_id = _exam_id(request)
    practice = None if exam_id else _practice(request, problem)
    practice_id = practice.pk if practice else None
    body = {"problemId": problem.pk, "language": language, "code": code, "examId": exam_id,
            "lessonPracticeId": practice_id}
    submission, _created = submit_once(
        lambda after_insert: submission_submit(user=request.user, problem_id=problem.pk, language=language, code=code,
                                               exam_id=exam_id, lesson_practice_id=practice_id,
                                               after_insert=after_insert),
        user=request.user, key=checked_key(request.POST.get("idempotency_key") or None), data=body,
        now=timezone.now())
    return submission


@require_http_methods(["GET", "POST"])
def problem_detail(request, problem_id: int):
    problem = get_object_or_404(Problem.objects.select_related("current_manifest"), pk=problem_id,
                                current_manifest__isnull=False, is_canary=False, deleted_at__isnull=True)
    if not visibility.may_view(problem, request.user, now=timezone.now()):
        if request.method == "POST" and (refused := _submitted_after_the_exam(request)) is not None:
            return refused
        raise Http404  # an exam's problem before its end, or a hidden one, does not exist for you
    if request.method == "GET":
        language, code = _submission_to_edit(request, problem)
        return _problem_page(request, problem, language=language, code=code)
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    language, code = request.POST.get("language", ""), request.POST.get("code", "")
    try:
        submission = _submit_form_once(request, problem, language=language, code=code)
    except ExamInProgress:
        return _problem_page(request, problem, language=language, code=code, status=409, errors=[
            _("This problem belongs to an exam you are taking: submit it from the exam's page until the exam ends.")])
    except IdempotencyConflict:
        errors = [_("This form had already been sent with other code. Submit again to send this code as a new "
                    "submission.")]
        return _problem_page(request, problem, language=language, code=code, errors=errors, status=409)
    except (Invalid, ExamClosed) as exc:
        # The code stays in the form: nothing the student typed is lost to a refusal.
        return _problem_page(request, problem, language=language, code=code, errors=_form_errors(exc, code),
                             status=400)
    except (Throttled, Unavailable) as exc:
        # Unavailable: this server's clock disagrees with the database's (an exam's window is
        # a deadline), or the database is away; the code stays in the form all the same.
        errors = [exc.detail] if isinstance(exc, Throttled) else [
            _("The server cannot take this submission right now; your code is kept here. Try again in %(seconds)d s.")
            % {"seconds": exc.retry_after}]
        response = _problem_page(request, problem, language=language, code=code, errors=errors, status=exc.status)
        response["Retry-After"] = str(exc.retry_after)
        return response
    return redirect("submission", submission_type=submission.TYPE, submission_id=submission.pk)


def _submission_to_edit(request, problem) -> tuple[str, str]:
    """`?from=<id>` (a submission page's "Edit this code"): the viewer's own submission of
    this problem, whose language and code the form starts from. Anything else, someone
    else's included, starts the form empty, as the page would without it."""
    submission_id = whole_number(request.GET.get("from"))
    if not submission_id or not request.user.is_authenticated:
        return "", ""
    model = SUBMISSION_MODELS[SubmissionType.SQL if problem.kind == ProblemKind.SQL else SubmissionType.ALGO]
    found = model.objects.filter(pk=submission_id, user=request.user, problem=problem).values_list(
        "language", "code").first()
    return found or ("", "")


def _edit_link(submission, user) -> tuple[str | None, object]:
    """Where the submitter edits this code and submits it again, and, where they cannot now,
    when they can: into the exam that holds the problem for them (this submission's or
    another they are taking) while it takes their submissions, and not before it ends once
    they have handed it in (its page has no form until then); else into the same practice
    while it is there, or practice on their own."""
    from judging.models import LessonPractice

    if submission.user_id != user.pk or submission.problem.deleted_at is not None:
        return None, None
    now = timezone.now()
    query = f"?from={submission.pk}"
    if (keeping := visibility.exam_keeping(submission.problem, user, now=now)) is not None:
        if closed_to(keeping.pk, user, now=now):
            return None, keeping.ends_at
        query += f"&exam={keeping.pk}"
    elif submission.lesson_practice_id and LessonPractice.objects.filter(
            pk=submission.lesson_practice_id, deleted_at__isnull=True, lesson__deleted_at__isnull=True).exists():
        query += f"&practice={submission.lesson_practice_id}"
    return reverse("problem", args=[submission.problem_id]) + query, None


def _own_submission(request, submission_type: str, submission_id: int):
    model = SUBMISSION_MODELS.get(submission_type)
    submission = model.objects.select_related("problem").filter(pk=submission_id).first() if model else None
    if submission is None or (submission.user_id != request.user.pk and not can_manage_judgers(request.user)):
        raise Http404  # someone else's submission does not exist for you
    return submission


HIDDEN_POLL_S = 30


def _live(submission, *, now, viewer) -> dict:
    job, status, wait_reason = submission_state(submission, now=now)
    if (hidden := hidden_wait(submission, viewer)) is not None:
        status, wait_reason = held_status(hidden), hidden
    cases_total = len((job.snapshot or {}).get("cases") or []) if job else 0
    final = display.is_final(status)
    words = display.status_words(status, display.page_wait_reason(wait_reason, job),
                                 runtime=POOLS[submission.language].label,
                                 testcase=job.progress_testcase if job else None, cases_total=cases_total)
    score = submission.score if final and submission.verdict else None
    return {
        "status": status, "final": final, "icon": display.status_icon(status), "hidden": hidden is not None,
        # A result an exam keeps until its hand-in or publishing comes in hours, not seconds.
        "poll_s": HIDDEN_POLL_S if hidden else 1,
        "verdict_class": display.verdict_class(status),
        "words": words,
        # What a screen reader is told: not each case as it runs (once a renewal on a long
        # problem), and the verdict with its score.
        "announce": display.status_words(status) if status == "JUDGING" else
        words if score is None else _("%(verdict)s, %(score)d / 100") % {"verdict": words, "score": score},
        "cases": submission.cases if final else [],
        "score": score,
        "time_ms": submission.time_ms if final and submission.verdict else None,
        "memory_kb": submission.memory_kb if final and submission.verdict else None,
        "compile_output": submission.compile_output if final else "",
        "verdict_words": display.VERDICT_WORDS,
        "advice": display.SYSTEM_ERROR_ADVICE if status == "SYSTEM_ERROR" else
        _advice(submission, job) if score is not None else "",
    }


def _advice(submission, job) -> str:
    # The case that gave the verdict: the first with it (the agent stops at or reports from
    # the first failing case, but the verdict is the submission's, not any case's).
    failing = [case["ordinal"] for case in submission.cases or [] if case.get("verdict") == submission.verdict]
    limits = ((job.snapshot or {}) if job else {}).get("limits") or {}
    return display.verdict_advice(submission.verdict, sql=submission.TYPE == SubmissionType.SQL,
                                  case=min(failing, default=None), limits=limits)


def _login_required(request):
    return None if request.user.is_authenticated else redirect_to_login(request.get_full_path())


@require_GET
def submission_detail(request, submission_type: str, submission_id: int):
    if submission_type != submission_type.upper() and submission_type.upper() in SUBMISSION_MODELS:
        # A link typed, or lower-cased on its way, to the page's own address.
        return redirect("submission", submission_type.upper(), submission_id, permanent=True)
    if (response := _login_required(request)) is not None:
        return response
    submission = _own_submission(request, submission_type, submission_id)
    live = _live(submission, now=timezone.now(), viewer=request.user)
    edit_link, edit_opens_at = _edit_link(submission, request.user)
    context = {"submission": submission, "live": live, **_record(submission, request.user, hidden=live["hidden"]),
               "edit_link": edit_link, "edit_opens_at": edit_opens_at}
    return render(request, "judging/submission_detail.html", context)


def _record(submission, viewer, *, hidden: bool) -> dict:
    """Who judged the submission, and each attempt: the page's record below its status.
    `hidden`: the result is still hidden from the viewer (`_live` found out)."""
    # A result still hidden from the viewer (an exam's, before publishing) hides who judged it,
    # how and when too: a judged attempt's end says the result is in, its length hints at it.
    if hidden:
        return {"history": [], "provenance": [], "show_nodes": can_manage_judgers(viewer)}
    history = submission_history(submission)
    judged_generation = submission.judged_generation if submission.verdict else None
    return {"history": display.history_rows(history, judged_generation=judged_generation),
            "provenance": display.provenance_blocks(history, judged_generation=judged_generation),
            "show_nodes": can_manage_judgers(viewer)}


@require_GET
def submission_live(request, submission_type: str, submission_id: int):
    """The live part of a submission's page, polled until the verdict is in."""
    if not request.user.is_authenticated:
        raise Http404
    submission = _own_submission(request, submission_type, submission_id)
    context = {"submission": submission, "live": _live(submission, now=timezone.now(), viewer=request.user)}
    if context["live"]["final"]:
        # The last poll: the record below, written while it was judged, is replaced too
        # (out of band), or the page would show the verdict above "being judged now".
        context |= _record(submission, request.user, hidden=context["live"]["hidden"]) | {"oob": True}
        html = render_to_string("judging/_submission_live.html", context, request) + \
            render_to_string("judging/_submission_record.html", context, request)
        response = HttpResponse(html)
    else:
        response = render(request, "judging/_submission_live.html", context)
    response["Cache-Control"] = "no-store"
    return response


@require_GET
def my_submissions(request):
    if (response := _login_required(request)) is not None:
        return response
    page = Paginator(submission_keys(user=request.user), PAGE_SIZE).get_page(request.GET.get("page"))
    submissions = submissions_of(page)
    rows = []
    for submission, shown in zip(submissions, shown_states(submissions, viewer=request.user, now=timezone.now())):
        rows.append({"submission": submission, "status": shown.status, "icon": display.status_icon(shown.status),
                     "score": submission.score if not shown.hidden and submission.verdict else None,
                     "words": display.status_words(shown.status, display.page_wait_reason(shown.wait_reason, shown.job),
                                                   runtime=POOLS[submission.language].label)})
    return render(request, "judging/my_submissions.html", {"page": page, "rows": rows})
