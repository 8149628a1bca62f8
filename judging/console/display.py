"""What the exam pages show in words, each with an icon (never colour alone)."""

from django.utils.translation import gettext, gettext_lazy as _, ngettext

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
# Handed in by the end-of-exam step: the participant ran out of time (not a finish).
HANDED_IN_AT_THE_END = (_("Handed in at the end, by the system"), "unknown")
# Ended without handing in, having submitted and answered nothing: a 0 that is no attempt
# (a teacher tells an absence from a poor result; whether they opened the exam is not kept).
ENDED_WITHOUT_WORK = (_("Ended with nothing submitted or answered"), "down")


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


def figure(value: float) -> str:
    """A measured figure to the precision it deserves: 12, 3.2, 0.25, 0.004."""
    if value >= 10:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 0.01 else f"{value:.3f}"


def window_words(seconds: int) -> str:
    if seconds < 7200:
        return gettext("%(n)d min") % {"n": seconds // 60}
    return gettext("%(n)d h") % {"n": seconds // 3600}


def sentences(*parts: str) -> str:
    """Sentences one after another as the language writes them (a space in English, none in
    Chinese, whose full stops carry their own)."""
    text = parts[0]
    for part in parts[1:]:
        text = gettext("%(first)s %(next)s") % {"first": text, "next": part}
    return text


def add_slots_words(n: int) -> str:
    return ngettext("Add %(n)d slot.", "Add %(n)d slots.", n) % {"n": n}


def burst_words(advice) -> str:
    """Where an exam's expected burst comes from, in one sentence with its figures."""
    values = {"n": figure(advice.submissions), "per": figure(advice.per_problem), "t": advice.target_s,
              "participants": ngettext("%(p)d participant", "%(p)d participants", advice.participants)
              % {"p": advice.participants},
              "problems": ngettext("%(k)d problem", "%(k)d problems", advice.problems) % {"k": advice.problems}}
    if advice.own_figure:
        return gettext("Expected burst: %(n)s submissions (your figure), to be judged within %(t)d s.") % values
    if not advice.participants and advice.problems:
        return gettext("No participant yet: add them above, or give the submissions you expect below, to size "
                       "the burst.")
    if advice.at_hand_in:
        return gettext("Expected burst: %(n)s submissions (%(participants)s × %(problems)s × 1 — in OI the last "
                       "submission of each problem, judged at the hand-in), to be judged within %(t)d s.") % values
    return gettext("Expected burst: %(n)s submissions (%(participants)s × %(problems)s × %(per)s per problem), "
                   "to be judged within %(t)d s.") % values


def burst_need_rows(advice, *, labels: dict) -> list[dict]:
    """Per pool: the slots the burst needs, against the ready slots now, in words and an icon."""
    rows = []
    for need in advice.needs:
        source = (gettext("measured over the last %(window)s") % {"window": window_words(advice.window_s)}
                  if need.measured else gettext("estimated from the problems' declared limits: every case at its "
                                                "time limit"))
        work = gettext("%(pool)s: %(n)s submissions × %(s)s s (%(source)s).") % {
            "pool": labels[need.pool], "n": figure(need.submissions), "s": figure(need.judge_seconds),
            "source": source}
        if not need.in_time:
            verdict = gettext("A judgement takes longer than the %(t)d s target: no number of slots finishes in "
                              "time; allow longer.") % {"t": advice.target_s}
        else:
            slots = ngettext("Needs %(k)d slot to finish within %(t)d s.", "Needs %(k)d slots to finish within "
                             "%(t)d s.", need.slots_needed) % {"k": need.slots_needed, "t": advice.target_s}
            ready = need.ready_slots
            if need.enough:
                verdict = sentences(slots, ngettext("%(n)d ready slot now: enough.", "%(n)d ready slots now: enough.",
                                                    ready) % {"n": ready})
            else:
                verdict = sentences(slots, ngettext("%(n)d ready slot now: not enough.",
                                                    "%(n)d ready slots now: not enough.", ready) % {"n": ready},
                                    add_slots_words(need.add_slots))
        rows.append({"pool": need.pool, "enough": need.enough, "icon": "ok" if need.enough else "down",
                     "words": sentences(work, verdict)})
    return rows
