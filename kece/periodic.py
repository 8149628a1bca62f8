"""The periodic work of the control plane, each a small `step()` that can be tested alone."""

import logging
import time

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from kece import metrics

logger = logging.getLogger("kece.periodic")


class StepPaused(Exception):
    """A step stood back (this host's clock disagrees with the database's): it did nothing,
    so its success is not recorded, and an alert on its staleness may fire."""


def _require_agreeing_clock(what: str) -> None:
    from judging.clock import clock_status

    if not clock_status().ok:
        raise StepPaused(f"{what} paused: this host's clock disagrees with the database's")


def reap_step(now=None, *, batch: int = 100):
    """Reap expired leases in batches until none is left: after a mass expiry (a host group
    lost, a partition) one batch per tick would keep the tail waiting tick after tick. Each
    batch reads the clock again, so a lease that runs out meanwhile is taken too; the loop
    ends with the first batch that is not full."""
    from judging.services.leases import ReapReport, jobs_reap_expired, next_lease_deadline

    # A host whose clock runs ahead would reap live leases: it reaps nothing (`judging.clock`).
    _require_agreeing_clock("reaper")
    total = ReapReport()
    while True:
        report = jobs_reap_expired(now=now or timezone.now(), batch=batch)
        total.requeued.extend(report.requeued)
        total.failed.extend(report.failed)
        total.examined += report.examined
        if report.examined < batch or not (report.requeued or report.failed):
            break  # none left, or every one changed under us (the next tick looks again)
    if total.requeued or total.failed:
        logger.info("reaper pass", extra={"requeued": len(total.requeued), "failed": len(total.failed)})
    total.next_deadline = next_lease_deadline()
    return total


def reap_again_in(report, *, now=None) -> float | None:
    """Seconds until the earliest running lease runs out, if that comes before the next tick:
    a scheduler reaps again then, so a silent node's job waits for its lease and not for
    the lease plus up to a whole tick (the design's 65 s is 60 s of lease and 5 s of tick).
    Live leases are renewed long before their deadline, so this is only near a real expiry."""
    if report is None or report.next_deadline is None:
        return None
    wait = (report.next_deadline - (now or timezone.now())).total_seconds() + REAP_MARGIN_S
    return max(wait, 0.0) if wait < settings.KECE_REAP_INTERVAL_MS / 1000 else None


# Past the deadline by this much, so `lease_until <= now` holds when the extra pass runs.
REAP_MARGIN_S = 0.05


def events_step(now=None, *, batch: int = 100):
    """Dispatch due events in batches until none are left or most of the interval is
    used: a tick must keep up with a burst (one batch per tick would cap the outbox at
    `batch` events per interval, fewer than a busy control plane settles)."""
    from judging.services.events import DispatchReport, events_dispatch

    total = DispatchReport()
    budget = time.monotonic() + settings.KECE_EVENT_INTERVAL_MS / 1000 * 0.8
    while True:
        report = events_dispatch(now=now or timezone.now(), batch=batch)
        for name in ("applied", "retried", "dead"):
            getattr(total, name).extend(getattr(report, name))
        handled = len(report.applied) + len(report.retried) + len(report.dead)
        if handled < batch or time.monotonic() >= budget:
            break
    if total.applied or total.retried or total.dead:
        logger.info("event dispatch pass", extra={"applied": len(total.applied), "retried": len(total.retried),
                                                  "dead": len(total.dead)})
    return total


def exams_step(now=None):
    """Hand in ended exams for whoever did not, and drop expired idempotency keys."""
    from judging.services.exams import exams_hand_in_overdue
    from judging.services.idempotency import keys_purge

    _require_agreeing_clock("exam hand-in")
    now = now or timezone.now()
    # Most of the interval: a large exam's end is handed in within a pass or two.
    handed = exams_hand_in_overdue(now=now, until=time.monotonic() + settings.KECE_EXAM_INTERVAL_MS / 1000 * 0.8)
    purged = keys_purge(now=now)
    if handed or purged:
        logger.info("exam pass", extra={"handedIn": handed, "keysPurged": purged})
    return handed


def checks_step(now=None):
    from nodes.checks import checks_expire

    expired = checks_expire(now=now or timezone.now())
    if expired:
        logger.warning("node checks expired", extra={"expired": expired})
    return expired


def stall_step(now=None):
    from nodes.quarantine import nodes_quarantine_stalled

    quarantined = nodes_quarantine_stalled(now=now or timezone.now())
    if quarantined:
        logger.warning("stalled nodes quarantined", extra={"nodes": quarantined})
    return quarantined


def integrity_step(now=None):
    """Grade the hidden canaries and cross-checks that ended (quarantining a node that lied),
    then queue new ones and withdraw those no node will take."""
    from nodes import canaries_hidden, cross_checks

    now = now or timezone.now()
    quarantined = canaries_hidden.canaries_grade(now=now) + cross_checks.cross_checks_grade(now=now)
    queued = cross_checks.cross_checks_queue(now=now)
    planted = canaries_hidden.canaries_plant(now=now)
    withdrawn = canaries_hidden.canaries_withdraw(now=now) + cross_checks.cross_checks_withdraw(now=now)
    if quarantined:
        logger.warning("nodes quarantined for their verdicts", extra={"nodes": quarantined})
    if planted or queued or withdrawn:
        logger.info("integrity pass", extra={"canaries": len(planted), "crossChecks": len(queued),
                                             "withdrawn": withdrawn})
    return quarantined


def rejudges_step(now=None):
    from judging.services.bulk_rejudge import rejudges_advance

    enqueued = rejudges_advance(now=now or timezone.now())
    if enqueued:
        logger.info("bulk rejudge pass", extra={"enqueued": enqueued})
    return enqueued


def step_name(step) -> str:
    """A step's name in the log and in its record of success: `gc` for `gc_step`."""
    return step.__name__.removesuffix("_step")


def last_success(name: str):
    """When the step `name` last ran to its end (any process; None if not since the cache
    was emptied): a hint for operators, as everything in the cache is."""
    return metrics.last_step_success(name)


def run_guarded(step):
    """Run one step the way a scheduler must: fresh connections, errors logged not raised,
    and its success recorded (`last_success`)."""
    close_old_connections()
    try:
        return run_recorded(step)
    except Exception:
        logger.exception("periodic step failed", extra={"step": step_name(step)})
        return None
    finally:
        close_old_connections()


def run_recorded(step):
    """Run `step` and note its success; a step that stood back (`StepPaused`) is logged, noted
    nowhere, and returns None."""
    try:
        result = step()
    except StepPaused as paused:
        logger.error(str(paused), extra={"step": step_name(step)})
        return None
    return succeeded(step, result)


def succeeded(step, result):
    """Note `step`'s success (`last_success`): every process reads the same, /metrics too.
    Returns its result."""
    metrics.step_succeeded(step_name(step))
    return result


def reconcile_step(now=None):
    """The daily reconciliation: check the gates and repair what is safe (`judging.services.reconcile`)."""
    from judging.services.reconcile import reconcile_run

    _require_agreeing_clock("reconciliation")
    return reconcile_run(now=now or timezone.now(), repair=True)


def gc_step(now=None):
    """Retention: prune what has outlived its age (`judging.services.retention`), a bounded
    run (`KECE_GC_BATCHES` batches of each kind); what is left goes in the next runs."""
    from judging.services.retention import Policy, gc_run

    _require_agreeing_clock("retention")
    reports = gc_run(now=now or timezone.now(), policy=Policy.from_settings())
    if any(r.more for r in reports):
        logger.info("retention continues next run", extra={"kinds": [r.kind for r in reports if r.more]})
    return reports
