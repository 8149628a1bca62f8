"""One clock: leases, renewals, results, reaping and heartbeats are set and compared by this
process's clock, guarded against the database's.

Reading the database's time in every statement that sets or checks a deadline would cost the
hot path a round trip or a rewrite of every guarded UPDATE; instead each process compares its
clock with the database's (`UNIX_TIMESTAMP(NOW(6))`, against the middle of the round trip) at most every
`KECE_CLOCK_CHECK_MS`, and while they differ by more than `KECE_CLOCK_SKEW_MAX_MS` it refuses
the node calls that set or check a deadline (503 `unavailable` with Retry-After: the node
retries, its work waits for a process whose clock agrees) and its reaper takes nothing. So a
web host minutes off can neither reap a live lease early nor grant one that outlives its
bound, and the console says why. Within the bound, processes agree to the bound, which is
small beside a lease.
"""

import logging
import math
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from kece.errors import Unavailable

logger = logging.getLogger("kece.clock")

_lock = threading.Lock()
_last = {"at": -math.inf, "skew": 0.0}


def _measure() -> float | None:
    """This process's clock less the database's, in seconds (0 where the database is a file
    on this host; None if it cannot be reached now). On a connection of its own, so no
    request's transaction or statement count carries it."""
    if connection.vendor != "mysql":
        return 0.0
    import MySQLdb

    db = connection.settings_dict
    try:
        link = MySQLdb.connect(host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 3306), user=db["USER"],
                               passwd=db["PASSWORD"] or "", connect_timeout=2, read_timeout=2, write_timeout=2,
                               init_command="SET time_zone = '+00:00'")
    except MySQLdb.Error:
        return None
    try:
        cursor = link.cursor()
        before = time.time()
        # NOW(6) read back as Unix seconds in the session's zone, UTC: in a zone with daylight
        # saving the repeated hour would read an hour ahead.
        cursor.execute("SELECT UNIX_TIMESTAMP(NOW(6))")
        database = float(cursor.fetchone()[0])
        after = time.time()
    except MySQLdb.Error:
        return None  # the link stalled after the connect (bounded as the connect is)
    finally:
        link.close()
    return (before + after) / 2 - database


def skew_seconds() -> float:
    """The last measured skew, measured again when older than KECE_CLOCK_CHECK_MS."""
    now = time.monotonic()
    with _lock:
        if now - _last["at"] < settings.KECE_CLOCK_CHECK_MS / 1000:
            return _last["skew"]
    measured = _measure()
    with _lock:
        # Unreachable: keep what was known (the request's own statements will say it is down).
        skew = _last["skew"] if measured is None else measured
        _last.update(at=now, skew=skew)
    if abs(skew) > bound_seconds():
        logger.error("clock disagrees with the database", extra={"skewSeconds": round(skew, 3),
                                                                 "boundSeconds": bound_seconds()})
    return skew


def bound_seconds() -> float:
    return settings.KECE_CLOCK_SKEW_MAX_MS / 1000


@dataclass(frozen=True)
class ClockStatus:
    skew: float
    bound: float

    @property
    def ok(self) -> bool:
        return abs(self.skew) <= self.bound


def clock_status() -> ClockStatus:
    return ClockStatus(skew=skew_seconds(), bound=bound_seconds())


def require_agreeing_clock() -> None:
    """Refuse (503) to set or check a deadline while this process's clock disagrees."""
    status = clock_status()
    if not status.ok:
        raise Unavailable(f"This server's clock is {status.skew:+.1f} s off the database's (at most "
                          f"{status.bound:g} s allowed): it sets and checks no lease until they agree.",
                          retry_after=max(1, math.ceil(settings.KECE_CLOCK_CHECK_MS / 1000)))
