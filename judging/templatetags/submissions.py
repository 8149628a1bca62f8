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
