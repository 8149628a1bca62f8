"""How a submission's state reads on a page: words and an icon for every status.

The status itself comes from `judging.selectors.submission_status`, as in the user API.
"""

from django.utils.translation import gettext, gettext_lazy as _, pgettext

from judging.models import Verdict
from judging.priority import FAIR_SHARE
from judging.services.exams import NOT_JUDGED

VERDICT_WORDS = {
    "AC": _("Accepted"), "WA": _("Wrong answer"), "TLE": _("Time limit exceeded"),
    "MLE": _("Memory limit exceeded"), "RE": _("Runtime error"), "CE": _("Compile error"),
    "OLE": _("Output limit exceeded"), "SYSTEM_ERROR": _("System error"), "CANCELLED": _("Cancelled"),
}
FINAL_STATUSES = frozenset(VERDICT_WORDS)


# What a failed verdict tells a student to look at, for a program (False) or a query (True):
# which test case gave it, the limit it went past, the usual causes.
ADVICE = {
    ("WA", False): _("Your program ran to the end, but its output on test case %(case)s is not the expected output. "
                     "Spaces at the ends of lines and blank lines at the end do not count; anything else does: a "
                     "prompt such as “Enter a number:”, a missing or extra value, another number format."),
    ("WA", True): _("Your query ran, but what it returned on test case %(case)s is not the expected result: look at "
                    "its columns, its rows and, where the problem asks for one, their order."),
    ("TLE", False): _("Your program ran past the time limit of %(ms)s ms on test case %(case)s: it may loop for "
                      "ever, wait for input that never comes, or need a faster way to the answer."),
    ("TLE", True): _("Your query ran past the time limit of %(ms)s ms on test case %(case)s: look for joins without "
                     "a condition and for subqueries run once per row."),
    ("MLE", False): _("Your program used more than the memory limit of %(mb)s MiB on test case %(case)s: look for "
                      "data that grows with the input, such as a list of every value, or recursion that goes very "
                      "deep."),
    ("MLE", True): _("Your query needed more than the memory limit of %(mb)s MiB on test case %(case)s: look for a "
                     "large intermediate result, such as a join that multiplies the rows."),
    ("OLE", False): _("Your program wrote more than the output limit of %(size)s on test case %(case)s: it may "
                      "print inside a loop that does not end."),
    ("OLE", True): _("Your query returned more than the output limit of %(size)s on test case %(case)s: look for a "
                     "missing condition in its joins or its WHERE."),
    ("RE", False): _("Your program stopped with an error on test case %(case)s: an exception not caught, a division "
                     "by zero, an index outside a list or an array, recursion too deep, or an exit status other "
                     "than 0."),
    ("RE", True): _("Your query failed on test case %(case)s: the database refused to run it, for a table or column "
                    "that does not exist or a statement this problem does not allow."),
}
# The limit each verdict's words name.
ADVICE_LIMIT = {"TLE": "ms", "MLE": "mb", "OLE": "size"}
SYSTEM_ERROR_ADVICE = _("The judges could not judge this submission, after several tries: your code is not at fault. "
                        "Your teacher or an admin can have it judged again; submitting the same code again works "
                        "too.")


def size_words(kb) -> str | None:
    """An output limit as people write it: 64 MiB, not 65536 KiB."""
    if kb is None:
        return None
    return _("%(mb)s MiB") % {"mb": kb // 1024} if kb % 1024 == 0 else _("%(kb)s KiB") % {"kb": kb}


def verdict_advice(verdict: str, *, sql: bool, case: int | None, limits: dict) -> str:
    """`ADVICE` for a final verdict. Empty for a verdict that needs none, and where the
    failing case or the limit is not on record: no sentence rather than a wrong one."""
    words = ADVICE.get((verdict, sql))
    facts = {"case": case, "ms": limits.get("timeLimitMs"), "mb": limits.get("memoryLimitMb"),
             "size": size_words(limits.get("outputLimitKb"))}
    if words is None or case is None or (verdict in ADVICE_LIMIT and facts[ADVICE_LIMIT[verdict]] is None):
        return ""
    return str(words) % facts


def is_final(status: str) -> bool:
    return status in FINAL_STATUSES


def status_icon(status: str) -> str:
    if status == "AC":
        return "ok"
    if status in ("COMPILING", "JUDGING"):
        return "run"
    if status == "PENDING":
        return "queue"
    if status == "CANCELLED":
        return "unknown"
    return "down"


def page_wait_reason(wait_reason: str | None, job) -> str | None:
    """The pages say why a queued job waits more finely than the user API's frozen
    `waitReason` (which stays `queued`): behind other users' work for its user's share."""
    if wait_reason == "queued" and job is not None and job.wait_reason == FAIR_SHARE:
        return FAIR_SHARE
    return wait_reason


def status_words(status: str, wait_reason: str | None = None, *, runtime: str = "", testcase: int | None = None,
                 cases_total: int = 0) -> str:
    if status == "PENDING":
        if wait_reason == "backoff":
            return gettext("Waiting to be judged again (a judge failed; retrying shortly)")
        if wait_reason == "hand_in":
            return gettext("Saved: your last submission of each problem is judged when the exam is handed in")
        if wait_reason == "unpublished":
            return gettext("Handed in: the result is shown once the exam's results are published")
        if wait_reason == FAIR_SHARE:
            return gettext("Waiting behind other students' work: you already have several submissions in the "
                           "queue, and they are judged in turn")
        if wait_reason == "no_node":
            return gettext("Waiting: no %(runtime)s judge is available right now; it will be judged as soon as "
                           "one is") % {"runtime": runtime}
        return gettext("Waiting for a judge")
    if status == "COMPILING":
        return gettext("Compiling")
    if status == "JUDGING":
        if testcase and cases_total:
            return gettext("Judging case %(k)d of %(n)d") % {"k": testcase, "n": cases_total}
        return gettext("Judging")
    if status == "CANCELLED" and wait_reason == NOT_JUDGED:
        return gettext("Not judged: a later submission of this problem was the one judged")
    return str(VERDICT_WORDS.get(status, status))


def runtime_words(row, *, stale: bool) -> str:
    """One runtime's live status for the submit form ("Java — queueing, 8 waiting")."""
    if row is None or row.status == "UNKNOWN":
        text = gettext("%(runtime)s — status unknown right now") % {"runtime": row.label if row else ""}
    elif row.status == "UNAVAILABLE":
        text = gettext("%(runtime)s — no judge is available right now; your submission will wait until one is") % {
            "runtime": row.label}
    elif row.status == "QUEUEING":
        text = gettext("%(runtime)s — queueing, %(n)d waiting") % {"runtime": row.label, "n": row.pending}
    else:
        text = gettext("%(runtime)s — ready") % {"runtime": row.label}
    if stale:
        text += " " + gettext("(status may be out of date)")
    return text


def verdict_class(status: str) -> str:
    if status == Verdict.AC:
        return "verdict-AC"
    return "verdict-bad" if status in FINAL_STATUSES and status != "CANCELLED" else ""


# How one lease of a job ended, in words and an icon (`judging.selectors.submission_history`).
ATTEMPT_WORDS = {
    "SETTLED": (_("Judged: this is the result"), "ok"),
    # A generation judged, then replaced by a rejudge: its verdict is on record, not shown.
    "REPLACED": (_("Judged, then replaced by a rejudge"), "unknown"),
    "RUNNING": (_("Being judged now"), "run"),
    "REQUEUED": (_("Given back to the queue, judged again later"), "queue"),
    "FAILED": (_("Failed: the last attempt allowed"), "down"),
    "CANCELLED": (_("Stopped: replaced or deleted"), "unknown"),
}
# Why a lease ended, for the reasons a person can act on or should know.
ATTEMPT_REASONS = {
    "lease_expired": _("the judge stopped answering"),
    "released": _("the judge gave it back (it was stopping)"),
    "superseded": _("a rejudge replaced it"),
    "deleted": _("the submission was deleted"),
    "node_revoked": _("the judge was revoked"),
    # Not a fault: the agent started again (a restart, an upgrade) and its work went back.
    "session_replaced": _("the judge restarted and gave its work back"),
    "node_not_judging": _("the judge was not judging it"),
}


def history_rows(history: list[dict], *, judged_generation: int | None = None) -> list[dict]:
    """The history's leases as table rows: generation, attempt number, words, icon, reason.
    A settled lease of a generation other than `judged_generation` (the one the submission
    shows) reads as replaced."""
    rows = []
    for job in history:
        for number, lease in enumerate(job["attempts"], start=1):
            outcome = lease["outcome"]
            if outcome == "SETTLED" and judged_generation is not None and job["generation"] != judged_generation:
                outcome = "REPLACED"
            words, icon = ATTEMPT_WORDS[outcome]
            reason = lease["error"]
            rows.append({**lease, "generation": job["generation"], "number": number, "words": words, "icon": icon,
                         "reason": ATTEMPT_REASONS.get(reason, _("a fault on the judge (%(error)s)") % {"error": reason}
                                                       if reason else "")})
    return rows


def provenance_blocks(history: list[dict], *, judged_generation: int | None) -> list[dict]:
    """Each judged generation's provenance, newest first, with the one whose verdict the
    submission shows marked and the judging time in words."""
    blocks = []
    for generation in reversed(history):
        provenance = generation["provenance"]
        if provenance is None:
            continue
        claimed, finished = provenance["claimedAt"], provenance["finishedAt"]
        seconds = (finished - claimed).total_seconds() if claimed and finished else None
        blocks.append({**provenance, "generation": generation["generation"],
                       "current": generation["generation"] == judged_generation,
                       "verdict_words": VERDICT_WORDS.get(provenance["verdict"], provenance["verdict"] or "—"),
                       "took": gettext("%(s).1f s") % {"s": seconds} if seconds is not None else ""})
    return blocks


def listed(items) -> str:
    """Names in a row, with the reader's language's separator (", ", in Chinese "、")."""
    return pgettext("list separator", ", ").join(str(item) for item in items)
