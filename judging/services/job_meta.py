"""What a job row points at — its kind and submission — which is fixed for the job's life.

A settle must know the submission before it locks anything (submission before job), so it
reads this first. The claim that leased the job already had the row and leaves it here,
so the result post of a job claimed through this process costs no extra read. An entry is
only a hint: the settle compares it with the locked row and reads again if it differs.
"""

from typing import NamedTuple

from django.db import connection

from kece.caches import BoundedCache


class JobMeta(NamedTuple):
    kind: str
    submission_type: str
    submission_id: int


_cache = BoundedCache(50_000)


def job_meta(job_id: int, *, fresh: bool = False) -> JobMeta | None:
    if not fresh:
        cached = _cache.get(job_id)
        if cached is not None:
            return cached
    with connection.cursor() as cursor:
        cursor.execute("SELECT kind, submission_type, submission_id FROM judge_job WHERE id = %s", [job_id])
        row = cursor.fetchone()
    return None if row is None else JobMeta(*row)


def meta_of(job) -> JobMeta:
    return JobMeta(job.kind, job.submission_type, job.submission_id)


def remember(jobs) -> None:
    for job in jobs:
        _cache.put(job.pk, meta_of(job))


def forget(job_id: int) -> None:
    _cache.drop(job_id)


def forget_all() -> None:
    _cache.clear()
