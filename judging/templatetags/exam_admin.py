from django import template

from kece.permissions import can_manage_exams

register = template.Library()


@register.filter
def manages_exams(user) -> bool:
    """Whether the top bar links the exam pages: the admin API's rule (`judging.manage_exams`
    or `nodes.manage_judgers`)."""
    return can_manage_exams(user)
