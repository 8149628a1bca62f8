"""Per-user submission rates: a sliding window counted in the cache.

A rate (`KECE_USER_SUBMIT_RATE`, `KECE_EXAM_SUBMIT_RATE`) is *count* submissions in any
window of *period* seconds. Each user and scope has a counter per fixed window of one
period (the window's number is in the key). A submission is admitted while the previous
window's count, weighted by the share of it the sliding window still covers, plus the
current window's count (this submission included) stays within the limit: the sliding-window
counter estimate, two small keys per user, no list of timestamps. Only admitted submissions
count (a refusal gives its increment back, and so does a submission refused or rolled back
after its rate was taken: `Taken.returned_on_error`), so a client that keeps retrying is
admitted again as soon as its window has moved on, and Retry-After says when that is.

The window follows the `now` the caller read (tests move it); the keys expire after two
periods. The cache holds hints, not facts: when it cannot be reached the rate is not
enforced (the active caps, counted in the database, still are) and a warning is logged, so
a Redis outage refuses no one.
"""

import logging
import math
from contextlib import contextmanager
from dataclasses import dataclass

from django.core.cache import cache

from kece.redis_clients import already_reported

logger = logging.getLogger("kece.rates")


@dataclass(frozen=True)
class Refusal:
    count: int  # the limit
    period: int  # its window, in seconds
    retry_after: int  # seconds until one more submission fits, at least 1


@dataclass(frozen=True)
class Taken:
    """An admitted submission's count in its window (`key`; None when nothing was counted)."""
    key: str | None = None

    @contextmanager
    def returned_on_error(self):
        """The count stays only if the block ends normally: a submission refused or rolled
        back after its rate was taken (its exam's active cap, a repeated idempotency key, a
        problem deleted meanwhile) is not one of the window's."""
        try:
            yield
        except BaseException:
            if self.key is not None:
                try:
                    cache.decr(self.key)
                except Exception as exc:  # noqa: BLE001 - the window's key expired or the cache is gone: a hint lost
                    if not already_reported(exc):
                        logger.warning("submission rate not given back", exc_info=True, extra={"key": self.key})
            raise


NOTHING_TAKEN = Taken()


def retry_after(*, count: int, period: int, previous: int, current: int, elapsed: float) -> int:
    """Seconds from `elapsed` (into the current window) until previous × (1 − f) + current + 1
    ≤ count, with no other submission meanwhile; `current` excludes the refused one."""
    if current + 1 <= count and previous:
        fraction = 1 - (count - current - 1) / previous  # still inside this window
        wait = fraction * period - elapsed
    else:  # in the next window, where this window's count is the previous one
        fraction = max(0.0, 1 - (count - 1) / current) if current else 0.0
        wait = period - elapsed + fraction * period
    return max(1, math.ceil(wait))


def _increment(key: str, *, timeout: int) -> int:
    """The window's count after this one. Only the window's first submission creates its key
    (with its expiry, which increments keep); the others cost Django's increment alone."""
    try:
        return cache.incr(key)
    except ValueError:  # the window's first submission
        if cache.add(key, 1, timeout=timeout):
            return 1
        return cache.incr(key)  # a concurrent first one created it meanwhile


def take(scope: str, *, rate: tuple[int, int] | None, now) -> Refusal | Taken:
    """Count one submission of `scope` (e.g. "practice:17") at `now`, or refuse it (a `Taken`:
    admitted)."""
    if rate is None:
        return NOTHING_TAKEN
    count, period = rate
    stamp = now.timestamp()
    window = math.floor(stamp / period)
    elapsed = stamp - window * period
    key, previous_key = f"kece:rate:{scope}:{window}", f"kece:rate:{scope}:{window - 1}"
    try:
        current = _increment(key, timeout=2 * period + 1)
        previous = cache.get(previous_key) or 0
        # previous × (1 − elapsed / period) + current ≤ count, without dividing (a submission
        # sent exactly at its Retry-After must fit).
        if previous * (period - elapsed) <= (count - current) * period + 1e-6:
            return Taken(key)
        cache.decr(key)
    except Exception as exc:  # noqa: BLE001 - any cache failure: a hint lost, not a refusal
        if not already_reported(exc):
            logger.warning("submission rate not checked: the cache is unavailable", exc_info=True,
                           extra={"scope": scope})
        return NOTHING_TAKEN
    return Refusal(count=count, period=period, retry_after=retry_after(
        count=count, period=period, previous=previous, current=current - 1, elapsed=elapsed))
