"""The participant's exam pages: my exams, one exam (questions, hand-in, results).

Thin views over the exam services and the same reads as the exam API (`exam_json`,
`result_json`): there is no second way to answer, hand in or score.
"""

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_http_methods

from judging import display
from judging.api.exams import _participation, exam_json, result_json
from judging.models import ExamParticipant
from judging.pages import PAGE_SIZE
from judging.selectors import shown_states, submission_keys, submissions_of
from judging.services import exams
from kece.converters import whole_number
from kece.errors import DomainError, NotFound
from pools.registry import POOLS

STATE_WORDS = {
    exams.NOT_STARTED: gettext_lazy("Not started"), exams.OPEN: gettext_lazy("Open"),
    exams.HANDED_IN: gettext_lazy("Handed in"), exams.CLOSED: gettext_lazy("Ended"),
}


def _state_words(exam, participant, state: str):
    if state == exams.HANDED_IN and exams.handed_in_at_the_end(exam, participant):
        return HANDED_IN_AT_THE_END
    return STATE_WORDS[state]


HANDED_IN_AT_THE_END = gettext_lazy("Ended: what you had saved was handed in for you")


def _login(request):
    from django.contrib.auth.views import redirect_to_login

    return None if request.user.is_authenticated else redirect_to_login(request.get_full_path())


@require_GET
def exam_list(request):
    if (response := _login(request)) is not None:
        return response
    now = timezone.now()
    participants = (ExamParticipant.objects.filter(user=request.user, exam__deleted_at__isnull=True)
                    .select_related("exam").order_by("-exam__starts_at", "-exam_id"))
    rows = [{"exam": p.exam, "state": str(_state_words(p.exam, p, exams.participant_state(p.exam, p, now=now)))}
            for p in participants]
    return render(request, "judging/exam_list.html", {"rows": rows})


def _exam_page(request, exam_id: int, *, error: str = "", status: int = 200):
    try:
        exam, participant = _participation(exam_id, request.user)
    except NotFound:
        raise Http404 from None  # an exam you are not in does not exist for you
    now = timezone.now()
    page = Paginator(submission_keys(exam=exam, user=request.user), PAGE_SIZE).get_page(request.GET.get("page"))
    listed = submissions_of(page)
    states = shown_states(listed, viewer=request.user, now=now)
    view = exam_json(exam, participant, viewer=request.user, now=now, submissions=listed, states=states)
    titles = {p["problemId"]: p["title"] for p in view["problems"]}
    for row, submission, state in zip(view["submissions"], listed, states):
        row["problem"] = titles.get(submission.problem_id, "")
        # In the words of the submission's own page: the API's waitReason is only a PENDING
        # one's, and an OI submission the hand-in passed over read "Cancelled" here.
        row["words"] = display.status_words(state.status, display.page_wait_reason(state.wait_reason, state.job),
                                            runtime=POOLS[submission.language].label)
        row["icon"] = display.status_icon(row["status"])
    context = {
        "exam": exam, "view": view, "page": page, "handed_in_at": participant.handed_in_at, "now": now,
        "state_words": _state_words(exam, participant, view["state"]), "error": error,
        "open": view["state"] == exams.OPEN, "handed_in": view["state"] == exams.HANDED_IN,
        "result": result_json(exam, participant, viewer=request.user, now=now)
        if exams.results_visible(exam) else None,
    }
    return render(request, "judging/exam_detail.html", context, status=status)


def _save_answers(request, exam_id: int, *, now) -> None:
    """Every question of the page's one form (`choices-<question>`), each saved as the
    service saves one; a form of one question, `choices`, as an older page sent it."""
    questions = request.POST.getlist("question")
    for question in questions:
        given = request.POST.getlist(f"choices-{question}") if "action" in request.POST else \
            request.POST.getlist("choices")
        choices = [whole_number(c) for c in given]  # the service refuses a None
        exams.exam_answer_save(exam_id=exam_id, question_id=whole_number(question) or 0, user=request.user,
                               choices=choices, now=now)


@require_http_methods(["GET", "POST"])
def exam_detail(request, exam_id: int):
    if (response := _login(request)) is not None:
        return response
    if request.method == "GET":
        return _exam_page(request, exam_id)
    now = timezone.now()
    try:
        if request.POST.get("action") == "hand-in":
            if request.POST.get("confirm") != "yes":
                # Final: the page asks first (the box is required there too). An outsider's 404
                # comes from the page itself.
                return _exam_page(request, exam_id, status=400, error=_(
                    "Nothing was handed in: tick “I have finished” first. Handing in is final."))
            exams.exam_hand_in(exam_id=exam_id, user=request.user, now=now)
            messages.success(request, _("Handed in. The exam takes no more answers or submissions from you."))
        else:
            _save_answers(request, exam_id, now=now)
            messages.success(request, _("Your answers are saved."))
    except NotFound:
        raise Http404 from None
    except DomainError as exc:
        return _exam_page(request, exam_id, error=_("That was not saved: %(reason)s") % {"reason": exc.detail},
                          status=exc.status)
    return redirect("exam", exam_id=exam_id)
