"""Prometheus counters and histograms of the server, kept where the events happen.

The services record through the functions below (never the views), so every way of
reaching a service counts the same. Every process of a deployment writes its values to
files (prometheus_client's multiprocess mode): the web workers, the Celery worker and its
pool processes, the embedded default's one process. Each process group keeps its own
subfolder of KECE_METRICS_DIR (`web`, or the Celery worker's node name); the group's
starter empties that subfolder before its processes start (`reset_group`), never a worker
on its own, and `/metrics` (`kece.metrics_endpoint`) adds up every subfolder's files. The
gauges are not here: they come from the cached status snapshot at scrape time.

This module imports no app, so the apps may use it. Recording is a dictionary lookup, a
lock and a write into a memory-mapped file: a few microseconds, on the node path too.
"""

import logging
import os
import re
import shutil
import threading
from pathlib import Path

from django.conf import settings
from prometheus_client import Counter, Histogram, values
from prometheus_client import multiprocess

from kece.redis_clients import already_reported

logger = logging.getLogger("kece.metrics")

GROUP_ENV = "KECE_METRICS_GROUP"
DEFAULT_GROUP = "web"

# The vocabulary's bounded label values.
OUTCOME_JUDGED, OUTCOME_SYSTEM_ERROR = "judged", "system_error"
PERIODIC_STEPS = ("reap", "events", "exams", "checks", "stall", "integrity", "rejudges", "reconcile", "snapshot",
                  "gc")
# Where each periodic step's last success is kept, for every process to read alike.
STEP_SUCCESS_KEY = "kece:periodic:ok:{}"

# Seconds: a claim's wait in the queue spans a moment to the class wait limit (600 s) and
# beyond; a job's run from claim to settlement, a second to a lease or two.
WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
JOB_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
HTTP_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20)


def group_name(raw: str) -> str:
    """A folder name for a process group: `celery@host-1` → `celery-host-1`. No `_`: the
    client splits its file names on it."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", raw).strip("-.") or DEFAULT_GROUP


def _group(group: str | None = None) -> str:
    """`group`, else the one the environment names (KECE_METRICS_GROUP), else `web`."""
    return group_name(group or os.environ.get(GROUP_ENV, DEFAULT_GROUP))


def group_dir(group: str | None = None) -> Path:
    return Path(settings.KECE_METRICS_DIR) / _group(group)


def reset_group(group: str | None = None) -> Path:
    """Called once by a process group's starter, before its processes record anything: its
    folder emptied (a restart's counters start again from zero, as Prometheus expects of a
    restarted target), and the group named for the processes it starts (`group`, else the
    one the environment already names)."""
    os.environ[GROUP_ENV] = _group(group)
    folder = group_dir()
    shutil.rmtree(folder, ignore_errors=True)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # the processes keep their metrics in memory then (`_Metrics`)
        logger.error("metrics folder unusable", extra={"folder": str(folder), "error": str(exc)})
    return folder


class _Metrics:
    def __init__(self):
        folder = group_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            # Counting must never fail the work counted: this process keeps its values in
            # memory, and /metrics does not see them.
            logger.error("metrics folder unusable; this process's metrics are not shared",
                         extra={"folder": str(folder), "error": str(exc)})
        else:
            # Read at each file's opening by the client: set before the first value exists.
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
            if not getattr(values.ValueClass, "_multiprocess", False):
                values.ValueClass = values.MultiProcessValue()
        # registry=None: `/metrics` reads the files, not an in-process registry.
        kw = {"registry": None}
        self.queue_wait = Histogram("kece_queue_wait_seconds", "Time a job waited for its claim (claim time − "
                                    "the time it became due).", ["pool", "class"], buckets=WAIT_BUCKETS, **kw)
        self.job_duration = Histogram("kece_job_duration_seconds", "Time from a job's claim to its settlement.",
                                      ["pool", "outcome"], buckets=JOB_BUCKETS, **kw)
        self.http = Histogram("kece_http_request_duration_seconds", "HTTP requests by URL pattern, method and "
                              "status code.", ["route", "method", "code"], buckets=HTTP_BUCKETS, **kw)
        self.claims = Counter("kece_claims_total", "Claim transactions: jobs (leased at least one) or empty.",
                              ["pool", "result"], **kw)
        self.settlements = Counter("kece_settlements_total", "Judge jobs ended: judged (a verdict stored) or "
                                   "system_error (the last attempt failed).", ["pool", "outcome"], **kw)
        self.rejections = Counter("kece_result_rejections_total", "Result posts refused, by contract error code.",
                                  ["reason"], **kw)
        self.lease_expiries = Counter("kece_lease_expiries_total", "Leases the reaper took back.", ["pool"], **kw)
        self.leases_released = Counter("kece_leases_released_total", "Leases given back when their node's session "
                                       "ended: a new session (the agent restarted) or a revoke; each costs its job "
                                       "an attempt.", ["pool", "reason"], **kw)
        self.infra_errors = Counter("kece_node_infra_errors_total", "INFRA_ERROR results recorded, by node.",
                                    ["pool", "node"], **kw)
        self.quarantines = Counter("kece_quarantines_total", "Nodes quarantined, by reason code.",
                                   ["pool", "reason"], **kw)
        self.throttled = Counter("kece_submit_throttled_total", "Submits refused with 429 for the pool's backlog.",
                                 ["pool"], **kw)
        self.fallback_polls = Counter("kece_wakeup_fallback_polls_total", "Waiting claims' fallback looks at the "
                                      "job table (a wake-up hint was missed or none came).", **kw)

    def families(self):
        """(name, type, help) of every metric here (a counter's name without `_total`)."""
        return [(m._name, m._type, m._documentation) for m in vars(self).values()]


_metrics: _Metrics | None = None
_lock = threading.Lock()


def get() -> _Metrics:
    global _metrics
    if _metrics is None:
        with _lock:
            if _metrics is None:
                _metrics = _Metrics()
    return _metrics


def prepare(*, pools, quarantine_reasons) -> None:
    """Every series an alert takes the increase of, at zero from the process's start. A
    labelled series appears at its first `inc()`; one that appears at 1 shows no increase
    (`increase()` needs a sample before it), and its first event would never alert."""
    m = get()
    for pool in pools:
        m.lease_expiries.labels(pool)
        for reason in RELEASE_REASONS:
            m.leases_released.labels(pool, reason)
        for outcome in (OUTCOME_JUDGED, OUTCOME_SYSTEM_ERROR):
            m.settlements.labels(pool, outcome)
        for reason in quarantine_reasons:
            m.quarantines.labels(pool, reason)


def mark_process_dead(pid: int | None = None) -> None:
    """A worker's end: its live gauges' files go (its counters stay, summed in)."""
    if _metrics is not None or pid is not None:
        multiprocess.mark_process_dead(pid or os.getpid(), str(group_dir()))


def _seconds(later, earlier) -> float:
    return max(0.0, (later - earlier).total_seconds())


# --- recording: called by the services ---------------------------------------------------


def claimed(pool: str, jobs: list, *, now) -> None:
    m = get()
    m.claims.labels(pool, "jobs" if jobs else "empty").inc()
    for job in jobs:
        # A student's or a rejudge's wait: not a node's self-check or the server's own
        # canaries and cross-checks, which go ahead of every class.
        if job.kind == "JUDGE" and not job.hidden:
            m.queue_wait.labels(job.pool, job.priority_class).observe(_seconds(now, job.available_at))


def settled(job, outcome: str, *, now) -> None:
    m = get()
    m.settlements.labels(job.pool, outcome).inc()
    if job.started_at is not None:
        m.job_duration.labels(job.pool, outcome).observe(_seconds(now, job.started_at))


def result_refused(code: str) -> None:
    get().rejections.labels(code).inc()


def lease_expired(pool: str) -> None:
    get().lease_expiries.labels(pool).inc()


RELEASE_REASONS = ("session_replaced", "node_revoked")


def leases_released(pool: str, reason: str, count: int) -> None:
    get().leases_released.labels(pool, reason).inc(count)


def infra_error(pool: str, node_name: str) -> None:
    get().infra_errors.labels(pool, node_name).inc()


def quarantined(pool: str, reason: str) -> None:
    get().quarantines.labels(pool, reason).inc()


def submit_throttled(pool: str) -> None:
    get().throttled.labels(pool).inc()


def fallback_poll() -> None:
    get().fallback_polls.inc()


def http_request(route: str, method: str, code: int, seconds: float) -> None:
    get().http.labels(route, method, str(code)).observe(seconds)


def step_succeeded(step: str) -> None:
    """A periodic step's success, in the cache: every process then answers the same time
    (the vocabulary's steps on /metrics). A hint, as everything in the cache is: a cache
    that is away loses the mark, never the step."""
    from django.core.cache import cache
    from django.utils import timezone

    try:
        cache.set(STEP_SUCCESS_KEY.format(step), timezone.now(), None)
    except Exception as exc:
        if not already_reported(exc):
            logger.warning("periodic step's success not recorded", extra={"step": step}, exc_info=True)


RECONCILE_FINDINGS_KEY = "kece:reconcile:findings"


def reconcile_left(left: dict) -> None:
    """What the last reconciliation left out of place, by check (after its repairs), in the
    cache for /metrics: some findings need a person, and only a figure can page one."""
    from django.core.cache import cache

    try:
        cache.set(RECONCILE_FINDINGS_KEY, dict(left), None)
    except Exception as exc:
        if not already_reported(exc):
            logger.warning("reconciliation's findings not recorded", exc_info=True)


def last_step_success(step: str):
    from django.core.cache import cache

    return cache.get(STEP_SUCCESS_KEY.format(step))
