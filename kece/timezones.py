"""The zone the pages show times in and read typed times in: a school's own
(`KECE_TIME_ZONE`, e.g. Asia/Shanghai), so that an exam set for nine in the morning says
nine. The API, the database and the logs stay in UTC, as the contract writes timestamps."""

import zoneinfo

from django import forms
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _, gettext_lazy


def display_zone() -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(settings.KECE_TIME_ZONE)


def within_years(moment):
    """A typed moment between the years 2000 and 9000, else a form error in words: far-off
    years overflow once moved to UTC (in the database's adapter, or the zone's own
    arithmetic), which would be a 500."""
    if moment is not None and not 2000 <= moment.year <= 9000:
        raise forms.ValidationError(_("Give a date between the years 2000 and 9000."))
    return moment


# What people call a zone, where they have a usual name for it ("Beijing time", 北京时间, not
# "Asia/Shanghai"); any other zone is named as configured.
ZONE_NAMES = {"Asia/Shanghai": gettext_lazy("Beijing time"), "PRC": gettext_lazy("Beijing time")}


def zone_name() -> str:
    """The display zone as the pages name it, in the reader's language."""
    return str(ZONE_NAMES.get(settings.KECE_TIME_ZONE, settings.KECE_TIME_ZONE))


def zoned_label(words: str) -> str:
    """`words` ("Starts (%(zone)s)", translated) naming the display zone."""
    return words % {"zone": zone_name()}


# Paths that keep UTC: the API (its clients read UTC with `Z`) and Django's admin, whose
# date drill-downs (django-axes' sign-in attempts) would need the database's zone tables:
# MySQL's CONVERT_TZ answers NULL without them.
UTC_PATHS = ("/api/", "/django-admin/")


class DisplayTimeZoneMiddleware:
    """The site's own pages render and parse times in the display zone."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path_info.startswith(UTC_PATHS):
            return self.get_response(request)
        with timezone.override(display_zone()):
            return self.get_response(request)
