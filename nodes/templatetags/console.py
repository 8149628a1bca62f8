from django import template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils import timezone
from django.utils.translation import gettext as _, ngettext

register = template.Library()


@register.simple_tag(takes_context=True)
def judgers_nav(context):
    """The "Judgers" entry with a badge counting enabled nodes that are offline or unhealthy
    (one aggregate query; the layout only calls it for admins); marked as the current
    section on the console's pages."""
    from nodes.selectors import pool_node_counts

    match = getattr(context.get("request"), "resolver_match", None)
    current = mark_safe(' aria-current="page"') if match and (match.url_name or "").startswith("console-") else ""
    unwell = sum(row["unwell"] for row in pool_node_counts(now=timezone.now()).values())
    if not unwell:
        return format_html('<a href="{}" id="nav-judgers"{}>{}</a>', reverse("console-fleet"), current, _("Judgers"))
    words = ngettext("%(n)d node offline or unhealthy", "%(n)d nodes offline or unhealthy", unwell) % {"n": unwell}
    return format_html('<a href="{}" id="nav-judgers"{}>{} <span class="badge" title="{}">'
                       '<span class="icon icon-down" aria-hidden="true"></span>{}<span class="visually-hidden">: {}'
                       '</span></span></a>', reverse("console-fleet") + "?observed=offline", current, _("Judgers"),
                       words, unwell, words)


@register.filter
def pool_label(pool: str) -> str:
    """A pool as people name it (Python, C++), not its code."""
    from pools.registry import POOLS

    return POOLS[pool].label if pool in POOLS else pool


@register.filter
def job_error(error: str) -> str:
    """A job's error code in words, as the node's timeline says it."""
    from nodes.console.display import job_error_words

    return job_error_words(error) if error else "—"
