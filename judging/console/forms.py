"""The exam and lesson pages' forms: they parse what a person types (dates, option lines,
option numbers, usernames) into the services' arguments. The rules themselves (an exam ends
after it starts, a correct set names distinct options…) are the services'; a refusal is
placed next to the field it concerns (`judging.console.views.place_refusal`)."""

import re

from django import forms
from django.forms import formset_factory
from django.utils.translation import gettext_lazy as _

from judging.models import ExamMode, Problem, ProblemKind, QuestionKind
from judging.services.exams import question_checked
from kece.converters import whole_number
from kece.errors import Invalid
from kece.timezones import within_years, zoned_label

DATETIME_INPUT = "%Y-%m-%dT%H:%M"
MAX_OPTIONS = 26
MAX_USERNAMES = 5000

MODE_CHOICES = [
    (ExamMode.ACM, _("ACM — each submission is judged at once; the best one counts, with its attempts")),
    (ExamMode.OI, _("OI — submissions are judged at the hand-in; the last one counts; results shown once published")),
]
KIND_CHOICES = [(QuestionKind.SINGLE, _("Single choice")), (QuestionKind.MULTIPLE, _("Multiple choice"))]


class LocalDateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, attrs=None):
        super().__init__(attrs, format=DATETIME_INPUT)


def _moment(label):
    return forms.DateTimeField(label=label, widget=LocalDateTimeInput, validators=[within_years],
                               input_formats=[DATETIME_INPUT, "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"])


def problem_choices() -> list:
    """The problems an exam or practice may hold (the services accept these), by kind."""
    problems = Problem.objects.filter(is_canary=False, deleted_at__isnull=True).order_by("id").values_list(
        "id", "title", "kind")
    groups = {ProblemKind.ALGO: (_("Programming"), []), ProblemKind.SQL: (_("SQL"), [])}
    for pk, title, kind in problems:
        groups[kind][1].append((pk, f"#{pk} {title}"))
    return [group for group in groups.values() if group[1]]


class _Form(forms.Form):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")  # labels as the other pages write them: no colon
        super().__init__(*args, **kwargs)


class ExamForm(_Form):
    title = forms.CharField(label=_("Title"), max_length=200)
    mode = forms.ChoiceField(label=_("Mode"), choices=MODE_CHOICES, widget=forms.RadioSelect)
    starts_at = _moment(None)  # labelled with the zone, as the form is made
    ends_at = _moment(None)

    def __init__(self, *args, mode_fixed: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        # Typed and shown in the pages' zone (`kece.timezones`), which the label names.
        self.fields["starts_at"].label = zoned_label(_("Starts (%(zone)s)"))
        self.fields["ends_at"].label = zoned_label(_("Ends (%(zone)s)"))
        if mode_fixed:
            # Shown, not sent: a disabled field keeps its saved value whatever is posted.
            self.fields["mode"].disabled = True
            self.fields["mode"].help_text = _("Fixed once the exam has started.")


class ProblemRowForm(_Form):
    lead = ("problem", "points")  # shown before Position and Remove
    problem = forms.TypedChoiceField(label=_("Problem"), coerce=int)
    points = forms.IntegerField(label=_("Points"), min_value=0, max_value=100000, initial=100)

    def __init__(self, *args, choices=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["problem"].choices = [("", _("Choose a problem"))] + list(choices)


def _option_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _numbers(text: str) -> list[int] | None:
    numbers = [whole_number(p) for p in re.split(r"[\s,;，、]+", text.strip()) if p]
    return numbers if numbers and None not in numbers else None


class QuestionRowForm(_Form):
    lead = ("kind", "points")  # shown before Position and Remove; the texts follow
    # An initial kind, so that an untouched blank row is not a change.
    kind = forms.ChoiceField(label=_("Kind"), choices=KIND_CHOICES, initial=QuestionKind.SINGLE)
    points = forms.IntegerField(label=_("Points"), min_value=0, max_value=100000, initial=10)
    prompt = forms.CharField(label=_("Question"), max_length=10000, widget=forms.Textarea(attrs={"rows": 2}))
    options = forms.CharField(label=_("Options, one per line"), widget=forms.Textarea(attrs={"rows": 4}))
    correct = forms.CharField(label=_("Correct options"), max_length=200,
                              help_text=_("Their numbers, counting the first line as 1: for example 2, or 1, 3."))

    def clean_options(self):
        lines = _option_lines(self.cleaned_data["options"])
        if not 1 <= len(lines) <= MAX_OPTIONS:
            raise forms.ValidationError(_("Give 1 to %(n)d options, one per line.") % {"n": MAX_OPTIONS})
        if any(len(line) > 1000 for line in lines):
            raise forms.ValidationError(_("An option is at most 1000 characters."))
        return lines

    def clean(self):
        data = super().clean()
        numbers = _numbers(data.get("correct", ""))
        if "correct" in data and numbers is None:
            self.add_error("correct", _("Write the numbers of the correct options, such as 1, 3."))
        elif "correct" in data and "options" in data and "kind" in data:
            data["correct"] = [n - 1 for n in numbers]
            try:
                question_checked({"kind": data["kind"], "options": data["options"], "correct": data["correct"]})
            except Invalid:
                self.add_error("correct", _("Name distinct options that exist; a single-choice question has "
                                            "exactly one correct option."))
        return data

    def question(self) -> dict:
        data = self.cleaned_data
        return {"kind": data["kind"], "prompt": data["prompt"], "options": data["options"],
                "correct": data["correct"], "points": data["points"]}


class _OrderedFormSet(forms.BaseFormSet):
    """Rows with a visible Position (to reorder) and Remove; blank rows at the end add."""

    def add_fields(self, form, index):
        super().add_fields(form, index)
        form.fields["ORDER"].label = _("Position")
        form.fields["DELETE"].label = _("Remove")
        form.order_fields([*form.lead, "ORDER", "DELETE"])

    def kept(self):
        """The rows to save, in their chosen order (call after is_valid)."""
        return [form for form in self.ordered_forms if form.cleaned_data]


ProblemFormSet = formset_factory(ProblemRowForm, formset=_OrderedFormSet, extra=3, can_order=True,
                                 can_delete=True, max_num=200, absolute_max=200, validate_max=True)
QuestionFormSet = formset_factory(QuestionRowForm, formset=_OrderedFormSet, extra=2, can_order=True,
                                  can_delete=True, max_num=200, absolute_max=200, validate_max=True)


def problem_initial(exam) -> list[dict]:
    return [{"problem": p.problem_id, "points": p.points, "ORDER": i}
            for i, p in enumerate(exam.problems.all(), start=1)]


def question_initial(exam) -> list[dict]:
    return [{"kind": q.kind, "prompt": q.prompt, "options": "\n".join(q.options),
             "correct": ", ".join(str(c + 1) for c in sorted(q.correct)), "points": q.points, "ORDER": i}
            for i, q in enumerate(exam.questions.all(), start=1)]


class ParticipantsForm(_Form):
    usernames = forms.CharField(
        label=_("Usernames"), widget=forms.Textarea(attrs={"rows": 4}),
        help_text=_("One per line, or separated by spaces or commas. If any is unknown, nobody is added."))

    def clean_usernames(self):
        names = list(dict.fromkeys(n for n in re.split(r"[\s,;，、]+", self.cleaned_data["usernames"]) if n))
        if not names:
            raise forms.ValidationError(_("Write at least one username."))
        if len(names) > MAX_USERNAMES:
            raise forms.ValidationError(_("At most %(n)d usernames at once.") % {"n": MAX_USERNAMES})
        return names


class CapacityForm(_Form):
    """The exam page's capacity question: how many submissions, judged within how long."""
    within = forms.IntegerField(label=_("Judged within (seconds)"), min_value=1, max_value=86_400)
    # An OI exam judges one submission per problem, at the hand-in, whatever this says.
    per_problem = forms.FloatField(label=_("Submissions per participant and problem (ACM)"), min_value=0.1,
                                   max_value=1000)
    submissions = forms.IntegerField(label=_("Or your own figure: submissions in the burst"), required=False,
                                     min_value=1, max_value=10_000_000)


class LessonForm(_Form):
    title = forms.CharField(label=_("Title"), max_length=200)


class PracticeForm(_Form):
    title = forms.CharField(label=_("Title"), max_length=200)
    problems = forms.TypedMultipleChoiceField(label=_("Problems"), coerce=int, required=False,
                                              widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args, choices=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["problems"].choices = list(choices)
