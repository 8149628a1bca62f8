"""An exam's results as a CSV file for a spreadsheet: every participant (the page shows them
a page at a time), each problem's points (and, in ACM, attempts), each question's score and
the total, as the results page shows them; times in the pages' zone. Participants are read a
batch at a time."""

import csv
import re

from django.utils import timezone
from django.utils.translation import gettext as _

from judging.console import display
from judging.models import ExamMode, ExamParticipant
from judging.selectors import exam_standings
from judging.services import exams
from kece.timezones import zoned_label

BATCH = 500
# A spreadsheet takes a cell starting with one of these for a formula: a username or title
# such as "=HYPERLINK(…)" is written as text instead (OWASP's advice for CSV files).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class _Line:
    """What `csv.writer` writes to: each row handed back as a string."""

    def write(self, text: str) -> str:
        return text


def participant_words(exam, row: dict) -> tuple:
    """The words and icon of a participant's state (a row of `exam_standings`), as the results
    table shows it."""
    state = row["state"]
    by_the_end = state == exams.HANDED_IN and exams.handed_in_at_the_end(exam, row["participant"])
    if (by_the_end or state == exams.CLOSED) and not row["worked"]:
        return display.ENDED_WITHOUT_WORK
    return display.HANDED_IN_AT_THE_END if by_the_end else display.PARTICIPANT_WORDS[state]


def _cell(value) -> str | int:
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def results_rows(exam, *, now):
    """The header, then one row per participant by username, read a batch at a time."""
    problems = list(exam.problems.select_related("problem"))
    questions = list(exam.questions.all())
    acm = exam.mode == ExamMode.ACM
    header = [_("Username"), _("State"), zoned_label(_("Handed in (%(zone)s)"))]
    for p in problems:
        header.append(f"{p.problem.title} (/{p.points})")
        if acm:
            header.append(_("%(title)s: attempts") % {"title": p.problem.title})
    header += [f"{_('Q%(n)s') % {'n': n}} (/{q.points})" for n, q in enumerate(questions, start=1)]
    yield header + [_("Total")]
    participants = ExamParticipant.objects.filter(exam=exam).select_related("user").order_by("user__username", "id")
    count = participants.count()
    for start in range(0, count, BATCH):
        batch = list(participants[start:start + BATCH])
        for participant, row in zip(batch, exam_standings(exam, batch, now=now)):
            handed_in = participant.handed_in_at
            line = [participant.user.username, participant_words(exam, row)[0],
                    timezone.localtime(handed_in).strftime("%Y-%m-%d %H:%M:%S") if handed_in else None]
            for score in row["problems"]:
                line.append(score.points if score else None)
                if acm:
                    line.append(score.attempts if score else None)
            yield line + row["questions"] + [row["total"]]


def results_file_name(exam) -> str:
    """The download's name, such as "Midterm Results.csv": a teacher's downloads of several
    exams tell which is which. No character a file system refuses (a title may hold one)."""
    title = re.sub(r'[\x00-\x1f\x7f/\\:*?"<>|]+', " ", exam.title).strip() or str(exam.pk)
    return f"{title} {_('Results')}.csv"


def results_csv(exam, *, now):
    """`results_rows` as CSV text, a row at a time, after a byte-order mark: a spreadsheet
    then reads it as UTF-8 (a Chinese title or name), not as the system's code page."""
    writer = csv.writer(_Line())
    yield "\ufeff"
    for row in results_rows(exam, now=now):
        yield writer.writerow([_cell(value) for value in row])
