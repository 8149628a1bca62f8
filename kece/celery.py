import functools
import gc
import os
from pathlib import Path

from celery import Celery, bootsteps
from celery.beat import PersistentScheduler
from celery.signals import beat_embedded_init, beat_init, celeryd_init, setup_logging, worker_process_init, \
    worker_process_shutdown, worker_ready
from celery.worker.consumer import Consumer

from kece import probe

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kece.settings")

app = Celery("kece")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _log_as_every_other_process(**kwargs):
    # With a receiver here Celery leaves the root logger alone, instead of putting its own
    # format on it: the worker and beat log JSON lines, redacted, as the web does
    # (settings.LOGGING, `kece.logging`).
    import logging.config

    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Touches this host's worker heartbeat file from the worker's own timer, for
    `python -m kece.probe worker`: a worker whose loop stalls stops touching it."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.timer_entry = None

    def start(self, worker):
        probe.touch("worker")
        self.timer_entry = worker.timer.call_repeatedly(probe.INTERVAL_S["worker"], probe.touch, ("worker",))

    def stop(self, worker):
        if self.timer_entry is not None:
            self.timer_entry.cancel()


app.steps["worker"].add(WorkerHeartbeat)


class PromptReconnectConsumer(Consumer):
    """The worker's consumer, reconnecting to the broker within seconds of its return.

    Kombu's defaults wait 2, 4, 6 … up to 32 s between rounds of attempts, so a Redis
    failover of three seconds kept every periodic task (the reaper, the settlement outbox,
    the console's live step) waiting six, and a longer outage up to 30 s after Redis was
    back. Each round tries every Sentinel once and logs one line for each."""

    FIRST_WAIT_S, WAIT_STEP_S, LONGEST_WAIT_S = 1.0, 0.5, 3.0

    def ensure_connected(self, conn):
        # Kombu waits at most interval_start + interval_max between rounds.
        conn.ensure_connection = functools.partial(
            conn.ensure_connection, interval_start=self.FIRST_WAIT_S, interval_step=self.WAIT_STEP_S,
            interval_max=self.LONGEST_WAIT_S - self.FIRST_WAIT_S)
        return super().ensure_connected(conn)


def _console_watched() -> bool:
    from nodes.console.live import watched

    return watched()


class HeartbeatScheduler(PersistentScheduler):
    """Celery's default scheduler, touching this host's beat heartbeat file on each tick
    (`python -m kece.probe beat`); CELERY_BEAT_MAX_LOOP_INTERVAL bounds the time between
    ticks.

    A task of `CONDITIONS` is sent when due only if its condition holds; otherwise its turn
    passes as if it had run. The console step reads nothing while no console page is open,
    and its message a second through the worker's pool was the largest part of an idle
    worker's CPU."""

    CONDITIONS = {"nodes.publish_console": _console_watched}
    # Steps of long intervals: an interval's first turn comes one interval after beat starts
    # with no schedule file (a new pod or container), so a beat replaced more often than daily
    # would never reconcile. As it starts, beat makes such a step due at once if its last
    # success (kece.periodic.last_success) is older than its interval, or unknown.
    CATCH_UP = {"judging.reconcile": "reconcile", "judging.gc": "gc"}

    def tick(self, *args, **kwargs):
        probe.touch("beat")
        return super().tick(*args, **kwargs)

    def adjust(self, n, drift=-0.010):
        # Celery wakes `drift` early for an entry not yet due; within that margin of its
        # time the wait comes out zero or less, and beat ticks again at once, over and over,
        # until the entry is due: thirty ticks or so for each, about 2 % of a core on an
        # idle system with entries due three times a second. Wait out the rest instead.
        adjusted = super().adjust(n, drift)
        return n if n and n > 0 and adjusted <= 0 else adjusted

    def setup_schedule(self):
        super().setup_schedule()
        for entry in self.schedule.values():
            step = self.CATCH_UP.get(entry.task)
            if step is not None and _overdue(step, entry.schedule):
                entry.last_run_at = entry.default_now() - entry.schedule.run_every  # due now

    def apply_entry(self, entry, producer=None):
        condition = self.CONDITIONS.get(entry.task)
        if condition is not None and not condition():
            return
        return super().apply_entry(entry, producer=producer)


TICK_EXPIRY_FLOOR_S = 60.0


def _overdue(step: str, schedule) -> bool:
    """Whether `step` last succeeded longer ago than its schedule's interval (or never, as far
    as the cache knows); with the cache away, False: the schedule keeps its own time."""
    from django.utils import timezone

    from kece.periodic import last_success

    try:
        last = last_success(step)
    except Exception:  # noqa: BLE001 - a hint only
        return False
    return last is None or (timezone.now() - last).total_seconds() >= schedule.run_every.total_seconds()


@app.on_after_finalize.connect
def _schedule_periodic_work(sender, **kwargs):
    # The same service functions run in-process in the embedded default (kece.scheduler).
    from kece.scheduler import PERIODIC_TASKS

    for task_name, interval_seconds in PERIODIC_TASKS():
        # A tick older than its interval, or than a minute, is dropped, not run: a worker back
        # after a while would otherwise work through every reaper and snapshot tick beat sent
        # meanwhile (about seven thousand an hour) before the current ones. Not sooner: beat
        # stamps the expiry by its clock and a worker reads it by its own, and a few seconds
        # between two hosts' clocks must not drop every reaper tick.
        sender.add_periodic_task(interval_seconds, sender.signature(task_name), name=task_name,
                                 expires=max(TICK_EXPIRY_FLOOR_S, interval_seconds))


@beat_init.connect
@beat_embedded_init.connect
def _schedule_folder(sender=None, **kwargs):
    # The beat schedule lives in var/ (CELERY_BEAT_SCHEDULE_FILENAME), which a fresh checkout
    # does not have yet.
    from django.conf import settings

    Path(settings.CELERY_BEAT_SCHEDULE_FILENAME).parent.mkdir(parents=True, exist_ok=True)


@celeryd_init.connect
def _reset_metrics(sender=None, **kwargs):
    # In the worker's main process, before its pool starts: the worker's metrics folder,
    # named after its node name (`celery@host`, `probes@host`), emptied once for the group.
    from kece import metrics

    metrics.reset_group(str(sender or "celery").split("@")[0])


@worker_ready.connect
def _serve_metrics(**kwargs):
    # In the worker's main process once its pool has started: a thread started earlier would
    # be forked into the pool's children with the listening socket.
    from django.conf import settings

    if settings.KECE_WORKER_METRICS_PORT:
        from kece import metrics_endpoint

        metrics_endpoint.serve_this_hosts_files(settings.KECE_WORKER_METRICS_PORT)


@worker_process_init.connect
def _loaded(**kwargs):
    # In each pool process, before its first task: the alerts' counters at zero (its tasks
    # reap, quarantine and fail jobs), and what the worker loaded before forking it is kept
    # out of the cyclic collector's full walks (`kece.startup.freeze_loaded_objects`).
    # Without a collection first: the child shares its parent's memory until it writes to
    # it, and a collection writes to every object it walks.
    from kece.startup import prepare_metrics

    prepare_metrics()
    gc.freeze()


@worker_process_shutdown.connect
def _process_ended(**kwargs):
    from kece import metrics

    metrics.mark_process_dead()
