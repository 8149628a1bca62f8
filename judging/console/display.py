"""What the exam pages show in words, each with an icon (never colour alone)."""

from django.utils.translation import gettext_lazy as _

from judging.services import exams

NOT_STARTED, RUNNING, ENDED = "NOT_STARTED", "RUNNING", "ENDED"

# an exam's phase → (words, icon)
PHASE_WORDS = {
    NOT_STARTED: (_("Not started"), "queue"),
    RUNNING: (_("In progress"), "run"),
    ENDED: (_("Ended"), "ok"),
}
# a participant's state → (words, icon)
PARTICIPANT_WORDS = {
    exams.NOT_STARTED: (_("Not started"), "queue"),
    exams.OPEN: (_("Open"), "run"),
    exams.HANDED_IN: (_("Handed in"), "ok"),
    # The end-of-exam step hands in for them shortly.
    exams.CLOSED: (_("Closed, not handed in"), "down"),
}


def phase(exam, *, now) -> str:
    if now < exam.starts_at:
        return NOT_STARTED
    return RUNNING if now < exam.ends_at else ENDED


def phase_words(exam, *, now) -> tuple:
    return PHASE_WORDS[phase(exam, now=now)]


def results_words(exam) -> tuple:
    """(words, icon) of whether participants see their results."""
    if exam.judges_at_once:
        return _("Live (ACM)"), "ok"
    if exam.published_at is not None:
        return _("Published"), "ok"
    return _("Not published"), "queue"
