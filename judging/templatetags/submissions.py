"""A submission as students read it: "Program 35", "SQL 12". The type in its address (ALGO,
SQL) is a table's name, not a word (`{{ s.TYPE|submission_name:s.pk }}`)."""

from django import template
from django.utils.translation import gettext

register = template.Library()


@register.filter
def submission_name(submission_type: str, submission_id) -> str:
    if submission_type == "SQL":
        return gettext("SQL %(id)s") % {"id": submission_id}
    return gettext("Program %(id)s") % {"id": submission_id}


@register.filter
def code_lines(code: str) -> list[str]:
    """The code's lines, numbered by the page's style (a CSS counter: the numbers are not
    copied with the code), so that "line 12" in a compiler's message can be found."""
    # As a browser reads the page: a lone carriage return ends a line too.
    lines = (code or "").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines
