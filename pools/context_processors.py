"""Every page's top bar reads the judge status from the same source as the homepage panel."""

from functools import cache

from django.conf import settings

from pools.status import judge_status as read_status


def judge_status(request):
    # A callable the template calls when it first needs the status: one cache read per
    # request at most, none for a page that shows no status (an error page, a fragment).
    return {
        "judge_status": cache(read_status),
        "status_refresh_seconds": max(1, settings.KECE_STATUS_REFRESH_MS // 1000),
    }
