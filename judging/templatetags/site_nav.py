"""The top bar's current section: `{% current "problems" %}` marks the link of the section
the page belongs to (`aria-current="page"`), so a reader is told where they are, by a screen
reader and by the link's look, not by colour."""

from django import template
from django.utils.safestring import mark_safe

register = template.Library()

# The pages of each section of the top bar, by URL name (a prefix where it ends in "-").
SECTIONS = {
    "problems": ("problems", "problem"),
    "submissions": ("my-submissions", "submission"),
    "exams": ("exams", "exam"),
    "lessons": ("lessons", "lesson", "practice"),
    "manage-exams": ("exam-admin", "lesson-admin", "practice-admin"),
}


def _in_section(url_name: str, section: str) -> bool:
    names = SECTIONS[section]
    if section == "manage-exams":
        return url_name.startswith(names)
    return url_name in names


@register.simple_tag(takes_context=True)
def current(context, section: str) -> str:
    match = getattr(context.get("request"), "resolver_match", None)
    return mark_safe(' aria-current="page"') if match and match.url_name and _in_section(match.url_name, section) \
        else ""
