"""Periodic work: Celery beat in production, a thread in the web process otherwise.

Both run the same steps from `kece.periodic` at the intervals of ARCHITECTURE §4.
"""

import logging
import threading
import time

from django.conf import settings

logger = logging.getLogger("kece.scheduler")


def PERIODIC_TASKS():
    """(celery task name, interval in seconds) for beat."""
    return [
        ("judging.reap_expired_leases", settings.KECE_REAP_INTERVAL_MS / 1000),
        ("judging.dispatch_settlement_events", settings.KECE_EVENT_INTERVAL_MS / 1000),
        ("judging.hand_in_ended_exams", settings.KECE_EXAM_INTERVAL_MS / 1000),
        ("pools.refresh_status_snapshot", settings.KECE_SNAPSHOT_INTERVAL_MS / 1000),
        ("nodes.expire_checks", settings.KECE_REAP_INTERVAL_MS / 1000),
        ("nodes.quarantine_stalled", settings.KECE_REAP_INTERVAL_MS / 1000),
        ("nodes.check_integrity", settings.KECE_REAP_INTERVAL_MS / 1000),
        ("nodes.publish_console", settings.KECE_CONSOLE_PUBLISH_MS / 1000),
        ("judging.advance_rejudges", settings.KECE_REJUDGE_INTERVAL_MS / 1000),
        ("judging.reconcile", settings.KECE_RECONCILE_INTERVAL_MS / 1000),
        ("judging.gc", settings.KECE_GC_INTERVAL_MS / 1000),
    ]


def _steps():
    from kece import periodic
    from nodes.console import live
    from pools import snapshot

    return [
        (periodic.reap_step, settings.KECE_REAP_INTERVAL_MS / 1000),
        (periodic.events_step, settings.KECE_EVENT_INTERVAL_MS / 1000),
        (periodic.exams_step, settings.KECE_EXAM_INTERVAL_MS / 1000),
        (snapshot.refresh_step, settings.KECE_SNAPSHOT_INTERVAL_MS / 1000),
        (periodic.checks_step, settings.KECE_REAP_INTERVAL_MS / 1000),
        (periodic.stall_step, settings.KECE_REAP_INTERVAL_MS / 1000),
        (periodic.integrity_step, settings.KECE_REAP_INTERVAL_MS / 1000),
        (live.publish_step, settings.KECE_CONSOLE_PUBLISH_MS / 1000),
        (periodic.rejudges_step, settings.KECE_REJUDGE_INTERVAL_MS / 1000),
        (periodic.reconcile_step, settings.KECE_RECONCILE_INTERVAL_MS / 1000),
        (periodic.gc_step, settings.KECE_GC_INTERVAL_MS / 1000),
    ]


class InProcessScheduler:
    """One daemon thread that runs each due step in turn; stop() ends it promptly."""

    def __init__(self, steps=None):
        self._steps = steps
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self):
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="kece-scheduler", daemon=True)
        self._thread.start()
        logger.info("in-process scheduler started")

    def stop(self, timeout: float = 5.0):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self):
        from kece import periodic
        from kece.periodic import run_guarded

        steps = self._steps or _steps()
        next_due = [time.monotonic()] * len(steps)
        while not self._stop.is_set():
            now = time.monotonic()
            for index, (step, interval) in enumerate(steps):
                if now >= next_due[index]:
                    result = run_guarded(step)
                    sooner = periodic.reap_again_in(result) if step is periodic.reap_step else None
                    next_due[index] = time.monotonic() + (interval if sooner is None else min(interval, sooner))
            self._stop.wait(max(0.05, min(next_due) - time.monotonic()))
