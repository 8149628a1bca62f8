"""The timings of ARCHITECTURE §4, read from settings at call time (tests change them)."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone


def lease_ttl() -> timedelta:
    return timedelta(milliseconds=settings.KECE_LEASE_TTL_MS)


def claim_wait() -> timedelta:
    return timedelta(milliseconds=settings.KECE_CLAIM_WAIT_MS)


def offline_after() -> timedelta:
    return timedelta(milliseconds=settings.KECE_OFFLINE_AFTER_MS)


def retry_backoff(attempts: int) -> timedelta:
    """Delay before an infrastructure retry: doubles per attempt, capped at one minute."""
    base = settings.KECE_RETRY_BACKOFF_MS
    return timedelta(milliseconds=min(base * 2 ** max(attempts - 1, 0), 60000))


def ms_between(later, earlier) -> int:
    return max(0, int((later - earlier).total_seconds() * 1000))


def now_under_locks(now):
    """The time to check a lease's deadline by once its rows are locked: the caller's `now`
    (when the request arrived, which the writes keep), or this process's clock if it has
    moved on since. A request that waited on a lock, or on a link that stalled before its
    transaction began, must not keep a lease that expired while it waited (and that the
    reaper or the node's retry may have been answered about meanwhile)."""
    return max(now, timezone.now())
