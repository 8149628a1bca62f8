"""Every page's top bar reads the judge status from the same source as the homepage panel."""

from django.conf import settings
from django.utils.functional import SimpleLazyObject

from pools.status import judge_status as read_status


def judge_status(request):
    # Lazy: a page that renders no top bar (an error page, a fragment) reads no cache key.
    return {
        "judge_status": SimpleLazyObject(read_status),
        "status_refresh_seconds": max(1, settings.KECE_STATUS_REFRESH_MS // 1000),
    }
