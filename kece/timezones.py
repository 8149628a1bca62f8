"""The zone the pages show times in and read typed times in: a school's own
(`KECE_TIME_ZONE`, e.g. Asia/Shanghai), so that an exam set for nine in the morning says
nine. The API, the database and the logs stay in UTC, as the contract writes timestamps."""

import zoneinfo

from django.conf import settings
from django.utils import timezone


def display_zone() -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(settings.KECE_TIME_ZONE)


def zoned_label(words: str) -> str:
    """`words` ("Starts (%(zone)s)", translated) naming the display zone."""
    return words % {"zone": settings.KECE_TIME_ZONE}


class DisplayTimeZoneMiddleware:
    """Pages (not the API: its clients read UTC with `Z`) render and parse times in the
    display zone."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path_info.startswith("/api/"):
            return self.get_response(request)
        with timezone.override(display_zone()):
            return self.get_response(request)
