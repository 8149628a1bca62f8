"""Backpressure: when a pool is beyond its thresholds, practice waits at the door.

Per pool, two thresholds (settings, 0 = none): the backlog of queued exam and practice work
(`KECE_THROTTLE_BACKLOG`) and the wait of the next job a claim would take
(`KECE_THROTTLE_WAIT_S`, its time since it became due: the head of the line). Beyond
either, a practice submit is refused with 429 `throttled` and Retry-After
(`KECE_THROTTLE_RETRY_S`) before anything is written; exam answers are never refused; the
bulk-rejudge step enqueues nothing into such a pool until it recovers. Queued bulk rejudges
count for neither figure: they sit behind all of that work anyway.

A practice submit reads its user's share (`judging.priority`) and the pool's pressure in one
statement, on the claim and user indexes, each count bounded by its threshold.
"""

from dataclasses import dataclass
from datetime import timezone as dt_timezone

from django.conf import settings
from django.db import connection
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext

from judging.models import JobKind, JobState, PriorityClass

_AHEAD_OF_PRACTICE = (PriorityClass.EXAM, PriorityClass.PRACTICE)


def threshold(setting: dict, pool: str) -> int:
    return setting.get(pool, setting.get("*", 0))


@dataclass(frozen=True)
class Admission:
    beyond_share: bool
    throttled: bool


def _bounded_count(where: str) -> str:
    return f"(SELECT COUNT(*) FROM (SELECT 1 FROM judge_job WHERE {where} LIMIT %s) AS bounded)"


_HEAD = ("(SELECT available_at FROM judge_job WHERE pool = %s AND state = %s AND claim_key <= %s AND available_at <= %s"
         " AND kind = %s AND priority_class IN (%s, %s) ORDER BY claim_key, id LIMIT 1)")
_ADMISSION = "SELECT " + ", ".join([
    _bounded_count("user_id = %s AND pool = %s AND state IN (%s, %s) AND priority_class = %s"),
    _bounded_count("pool = %s AND state = %s AND kind = %s AND priority_class IN (%s, %s)"),
    _HEAD,
])


def _figures_sql(pool: str, *, now, user_id: int | None, share: int, backlog: int):
    at = connection.ops.adapt_datetimefield_value(now)
    params = [user_id or 0, pool, JobState.QUEUED, JobState.RUNNING, PriorityClass.PRACTICE, share,
              pool, JobState.QUEUED, JobKind.JUDGE, *_AHEAD_OF_PRACTICE, backlog,
              pool, JobState.QUEUED, at, at, JobKind.JUDGE, *_AHEAD_OF_PRACTICE]
    return _ADMISSION, params


def _read(pool: str, *, now, user_id: int | None) -> tuple[int, int, float]:
    """(the user's active practice jobs, the queued exam and practice jobs, the head of the
    line's wait in seconds), each count bounded by what decides it."""
    share = settings.KECE_USER_INFLIGHT
    backlog = threshold(settings.KECE_THROTTLE_BACKLOG, pool)
    sql, params = _figures_sql(pool, now=now, user_id=user_id, share=share, backlog=backlog)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        active, queued, head = cursor.fetchone()
    # A raw cursor applies no converters: MariaDB answers a naive UTC datetime, SQLite text.
    if isinstance(head, str):
        head = parse_datetime(head)
    if head is not None and head.tzinfo is None:
        head = head.replace(tzinfo=dt_timezone.utc)
    return active, queued, (now - head).total_seconds() if head is not None else 0.0


def throttling(*, backlog: int, head_wait_s: float, pool: str) -> bool:
    backlog_limit = threshold(settings.KECE_THROTTLE_BACKLOG, pool)
    wait_limit = threshold(settings.KECE_THROTTLE_WAIT_S, pool)
    return bool(backlog_limit and backlog >= backlog_limit) or bool(wait_limit and head_wait_s >= wait_limit)


def admission(*, pool: str, now, user_id: int | None) -> Admission:
    """Whether a practice job of `user_id` may enter `pool` now, and whether it is beyond
    its user's share (one statement)."""
    active, queued, head_wait = _read(pool, now=now, user_id=user_id)
    share = settings.KECE_USER_INFLIGHT
    return Admission(beyond_share=bool(share) and active >= share,
                     throttled=throttling(backlog=queued, head_wait_s=head_wait, pool=pool))


def pool_throttling(pool: str, *, now) -> bool:
    """Whether `pool` is beyond its thresholds now (the bulk-rejudge step, the pool figures)."""
    _active, queued, head_wait = _read(pool, now=now, user_id=None)
    return throttling(backlog=queued, head_wait_s=head_wait, pool=pool)


def busy_sentence(runtime_label: str) -> str:
    """What the student reads when a practice submit is refused (the page keeps the code)."""
    return gettext("The %(runtime)s judges are busy; your code is kept here; try again in %(seconds)d s.") % {
        "runtime": runtime_label, "seconds": settings.KECE_THROTTLE_RETRY_S}
