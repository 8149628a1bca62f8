"""`{% judge_status_panel %}` and `{% judge_status_topbar %}`: the status parts of a page.

Their HTML depends only on the status itself and the language, and the status changes every
few seconds at most while every visitor's page shows it: each is rendered once per
(status, language, time zone) and kept in a small in-process memo, so a busy homepage costs one cache
read, not a template render per visit.
"""

from functools import lru_cache

from django import template
from django.conf import settings
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.translation import get_language, override

from kece.timezones import zone_name

register = template.Library()


@lru_cache(maxsize=32)
def _rendered(name: str, status, language: str, oob: bool, zone: str) -> str:
    with override(language), timezone.override(zone):
        return render_to_string(name, {
            "status": status, "oob": oob, "time_zone": zone_name(),
            "status_refresh_seconds": max(1, settings.KECE_STATUS_REFRESH_MS // 1000),
        })


@register.simple_tag(takes_context=True)
def judge_status_panel(context):
    return mark_safe(_rendered("pools/_status_panel.html", context["judge_status"](), get_language(), False,
                               settings.KECE_TIME_ZONE))


@register.simple_tag(takes_context=True)
def judge_status_topbar(context, oob=False):
    return mark_safe(_rendered("pools/_topbar_status.html", context["judge_status"](), get_language(), bool(oob),
                               settings.KECE_TIME_ZONE))
