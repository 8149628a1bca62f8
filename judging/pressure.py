"""Backpressure: when a pool is beyond its thresholds, practice waits at the door.

Per pool, two thresholds (settings, 0 = none): the backlog of queued exam and practice work
(`KECE_THROTTLE_BACKLOG`) and the wait of the next job a claim would take
(`KECE_THROTTLE_WAIT_S`, its time since it became due: the head of the line). Beyond
either, a practice submit is refused with 429 `throttled` and Retry-After
(`KECE_THROTTLE_RETRY_S`) before anything is written; exam answers are never refused; the
bulk-rejudge step enqueues nothing into such a pool until it recovers. Queued bulk rejudges
count for neither figure: they sit behind all of that work anyway.

Practice beyond its user's fair share (`judging.priority.FAIR_SHARE`) counts for neither: it
queues behind everyone else's work, so one account's burst cannot push a pool into
backpressure for everyone.

Fair use refuses the user, not the pool (429 `throttled`, a sentence that says the limit is
theirs): a practice submit while its user has `KECE_USER_ACTIVE_MAX` active practice jobs in
the pool, or beyond `KECE_USER_SUBMIT_RATE` (`judging.rates`); an exam submit while its
participant has `KECE_EXAM_ACTIVE_MAX` active exam jobs in the pool (counted under the
participant's lock, so exact), or beyond `KECE_EXAM_SUBMIT_RATE`. Exam work is never refused
for other users' work or the pool's pressure, and a hand-in never.

A practice submit reads its user's active jobs (their share and their cap) and the pool's
pressure in one statement, on the claim and user indexes, each count bounded by what decides it.
The pool's two figures are the same for every submit into it, and counting its backlog reads
up to KECE_THROTTLE_BACKLOG index entries just when the pool is behind: a process reads them
at most once every KECE_PRESSURE_REFRESH_S seconds per pool, and decides the submits in
between on what it read (a pool beyond a threshold is refused, and one back below it
admitted, up to that much later). The user's own count is read every time.
"""

import time
from dataclasses import dataclass
from datetime import datetime, timezone as dt_timezone

from django.conf import settings
from django.db import connection
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext

from judging import rates
from judging.models import JobKind, JobState, PriorityClass
from judging.priority import FAIR_SHARE
from kece.errors import Throttled

_AHEAD_OF_PRACTICE = (PriorityClass.EXAM, PriorityClass.PRACTICE)


def threshold(setting: dict, pool: str) -> int:
    return setting.get(pool, setting.get("*", 0))


@dataclass(frozen=True)
class Admission:
    beyond_share: bool
    throttled: bool
    at_user_cap: bool = False


def _bounded_count(where: str) -> str:
    return f"(SELECT COUNT(*) FROM (SELECT 1 FROM judge_job WHERE {where} LIMIT %s) AS bounded)"


@dataclass(frozen=True)
class _PoolFigures:
    """A pool's backlog and its head of line's available_at, as this process last read them."""
    queued: int
    head_at: datetime | None
    read_at: float  # time.monotonic()


_pool_figures: dict[str, _PoolFigures] = {}


def _recent_figures(pool: str) -> _PoolFigures | None:
    figures = _pool_figures.get(pool)
    refresh = settings.KECE_PRESSURE_REFRESH_S
    if figures is None or not refresh or time.monotonic() - figures.read_at >= refresh:
        return None
    return figures


def forget_pool_figures() -> None:
    _pool_figures.clear()


# Work within fair share: practice beyond its user's share waits behind it and counts for neither figure.
_HEAD = ("(SELECT available_at FROM judge_job WHERE pool = %s AND state = %s AND claim_key <= %s AND available_at <= %s"
         " AND kind = %s AND priority_class IN (%s, %s) AND wait_reason <> %s ORDER BY claim_key, id LIMIT 1)")
_ACTIVE = "user_id = %s AND pool = %s AND state IN (%s, %s) AND priority_class = %s"
_USER_COLUMN = _bounded_count(_ACTIVE)
_POOL_COLUMNS = ", ".join([
    _bounded_count("pool = %s AND state = %s AND kind = %s AND priority_class IN (%s, %s) AND wait_reason <> %s"),
    _HEAD,
])


def admission_columns(pool: str, *, now, user_id: int | None, fresh: bool = False) -> tuple[str, list]:
    """`admission`'s figures as select-list expressions and their params: a statement of its
    own (a practice submit's read of its problem) may carry them, and pass what it read to
    `practice_admission` (`read`). The pool's two only if this process's are not recent
    (`KECE_PRESSURE_REFRESH_S`) or `fresh` asks for them."""
    active_bound = max(settings.KECE_USER_INFLIGHT, settings.KECE_USER_ACTIVE_MAX)
    params = [user_id or 0, pool, JobState.QUEUED, JobState.RUNNING, PriorityClass.PRACTICE, active_bound]
    if not fresh and _recent_figures(pool) is not None:
        return _USER_COLUMN, params
    backlog = threshold(settings.KECE_THROTTLE_BACKLOG, pool)
    at = connection.ops.adapt_datetimefield_value(now)
    params += [pool, JobState.QUEUED, JobKind.JUDGE, *_AHEAD_OF_PRACTICE, FAIR_SHARE, backlog,
               pool, JobState.QUEUED, at, at, JobKind.JUDGE, *_AHEAD_OF_PRACTICE, FAIR_SHARE]
    return f"{_USER_COLUMN}, {_POOL_COLUMNS}", params


def _read(pool: str, *, now, user_id: int | None, read=None, fresh: bool = False) -> tuple[int, int, float]:
    """(the user's active practice jobs, the queued exam and practice jobs within fair share,
    the head of the line's wait in seconds), each count bounded by what decides it; from
    `read`, the columns of `admission_columns` another statement read, if given."""
    if read is None:
        columns, params = admission_columns(pool, now=now, user_id=user_id, fresh=fresh)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {columns}", params)
            read = cursor.fetchone()
    if len(read) == 1:  # the pool's figures as recently read
        figures = _pool_figures.get(pool)
        if figures is None:  # forgotten meanwhile
            return _read(pool, now=now, user_id=user_id, fresh=True)
        (active,), queued, head = read, figures.queued, figures.head_at
    else:
        active, queued, head = read
        # A raw cursor applies no converters: MariaDB answers a naive UTC datetime, SQLite text.
        if isinstance(head, str):
            head = parse_datetime(head)
        if head is not None and head.tzinfo is None:
            head = head.replace(tzinfo=dt_timezone.utc)
        _pool_figures[pool] = _PoolFigures(queued, head, time.monotonic())
    return active, queued, (now - head).total_seconds() if head is not None else 0.0


def throttling(*, backlog: int, head_wait_s: float, pool: str) -> bool:
    backlog_limit = threshold(settings.KECE_THROTTLE_BACKLOG, pool)
    wait_limit = threshold(settings.KECE_THROTTLE_WAIT_S, pool)
    return bool(backlog_limit and backlog >= backlog_limit) or bool(wait_limit and head_wait_s >= wait_limit)


def admission(*, pool: str, now, user_id: int | None, read=None) -> Admission:
    """Whether a practice job of `user_id` may enter `pool` now, and whether it is beyond
    its user's share (one statement, or none given what another one `read`)."""
    active, queued, head_wait = _read(pool, now=now, user_id=user_id, read=read)
    share, cap = settings.KECE_USER_INFLIGHT, settings.KECE_USER_ACTIVE_MAX
    return Admission(beyond_share=bool(share) and active >= share,
                     throttled=throttling(backlog=queued, head_wait_s=head_wait, pool=pool),
                     at_user_cap=bool(cap) and active >= cap)


def practice_admission(*, pool, now, user_id: int, read=None) -> tuple[bool, rates.Taken]:
    """Admit a practice submit into `pool` (a `pools.registry` pool) or raise `Throttled`:
    the user's active jobs, the pool's pressure, then the user's rate (last, so that a submit
    refused for the others costs none of it). Returns whether the job is beyond its user's
    fair share, and the rate taken (to give back if the submit goes no further). `read`: the
    figures as another statement read them (`admission_columns`)."""
    figures = admission(pool=pool.name, now=now, user_id=user_id, read=read)
    if figures.at_user_cap:
        raise Throttled(own_active_sentence(pool.label, settings.KECE_USER_ACTIVE_MAX),
                        retry_after=settings.KECE_THROTTLE_RETRY_S)
    if figures.throttled:
        raise Throttled(busy_sentence(pool.label, judged=_pool_has_a_ready_judge(pool.name, now=now)),
                        retry_after=settings.KECE_THROTTLE_RETRY_S)
    return figures.beyond_share, _take_rate(f"practice:{user_id}", settings.KECE_USER_SUBMIT_RATE, now=now)


def exam_rate(*, exam_id: int, user_id: int, now) -> rates.Taken:
    """Count an exam submission against its participant's rate, or raise `Throttled`."""
    return _take_rate(f"exam:{exam_id}:{user_id}", settings.KECE_EXAM_SUBMIT_RATE, now=now)


_EXAM_ACTIVE = f"SELECT {_bounded_count(_ACTIVE)}"


def exam_rank(*, pool: str, user_id: int) -> int:
    """The user's active exam jobs in `pool`, up to KECE_EXAM_ACTIVE_MAX: the place a new one
    takes among them (`judging.priority.claim_key`)."""
    with connection.cursor() as cursor:
        cursor.execute(_EXAM_ACTIVE, [user_id, pool, JobState.QUEUED, JobState.RUNNING, PriorityClass.EXAM,
                                      settings.KECE_EXAM_ACTIVE_MAX])
        return cursor.fetchone()[0]


def exam_admission(*, pool, user_id: int) -> int:
    """Inside an exam submit's transaction, under its participant's lock (which serialises the
    participant's submits, so the count is exact): the new job's rank, or `Throttled` when the
    participant already has KECE_EXAM_ACTIVE_MAX active exam jobs in the pool."""
    rank = exam_rank(pool=pool.name, user_id=user_id)
    if rank >= settings.KECE_EXAM_ACTIVE_MAX:
        raise Throttled(own_active_sentence(pool.label, settings.KECE_EXAM_ACTIVE_MAX),
                        retry_after=settings.KECE_THROTTLE_RETRY_S)
    return rank


def _take_rate(scope: str, rate, *, now) -> rates.Taken:
    taken = rates.take(scope, rate=rate, now=now)
    if isinstance(taken, rates.Refusal):
        raise Throttled(own_rate_sentence(taken), retry_after=taken.retry_after)
    return taken


def pool_throttling(pool: str, *, now) -> bool:
    """Whether `pool` is beyond its thresholds now (the bulk-rejudge step, the pool figures)."""
    _active, queued, head_wait = _read(pool, now=now, user_id=None, fresh=True)
    return throttling(backlog=queued, head_wait_s=head_wait, pool=pool)


def _pool_has_a_ready_judge(pool: str, *, now) -> bool:
    # Read on the refusal path only: which of two sentences the student reads.
    from judging.selectors import ready_nodes

    return ready_nodes(now=now).filter(pool=pool).exists()


def busy_sentence(runtime_label: str, *, judged: bool = True) -> str:
    """What the student reads when a practice submit is refused (the page keeps the code):
    the pool's judges are behind, or (`judged` false) it has none, and work already waits
    for one, so a new submission would only join it."""
    if not judged:
        return gettext("No %(runtime)s judge is available, and work already waits for one: new practice "
                       "submissions are refused until a judge is back. Your code is kept here; try again later.") % {
            "runtime": runtime_label}
    return gettext("The %(runtime)s judges are busy; your code is kept here; try again in %(seconds)d s.") % {
        "runtime": runtime_label, "seconds": settings.KECE_THROTTLE_RETRY_S}


def own_active_sentence(runtime_label: str, count: int) -> str:
    """What a user reads when their own active jobs are at their cap (not the pool's pressure)."""
    return gettext("You already have %(count)d submissions waiting for the %(runtime)s judges, the most one person "
                   "may have at a time; this limit is yours alone, not the judges'. Your code is kept here; try again "
                   "in %(seconds)d s.") % {"count": count, "runtime": runtime_label,
                                           "seconds": settings.KECE_THROTTLE_RETRY_S}


def own_rate_sentence(refusal) -> str:
    """What a user reads when they submit faster than their own rate allows."""
    return gettext("You have sent %(count)d submissions within %(period)d s, the most one person may; this limit is "
                   "yours alone, not the judges'. Your code is kept here; try again in %(seconds)d s.") % {
        "count": refusal.count, "period": refusal.period, "seconds": refusal.retry_after}
