"""The timings of ARCHITECTURE §4, read from settings at call time (tests change them)."""

from datetime import timedelta

from django.conf import settings


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
