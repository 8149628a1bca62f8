"""Node checks run where they cannot hold up the periodic work, and within a time limit."""

import threading

from django.conf import settings

from kece.celery import app
from kece.scheduler import PERIODIC_TASKS, InProcessScheduler


def _queue_of(task_name: str) -> str:
    return app.amqp.router.route({}, task_name, (), {})["queue"].name


def test_node_checks_have_a_queue_of_their_own_and_a_plain_worker_serves_both():
    app.loader.import_default_modules()
    assert _queue_of("nodes.run_check") == "probes"
    assert {_queue_of(name) for name, _ in PERIODIC_TASKS()} == {app.conf.task_default_queue}
    # `celery -A kece worker` without --queues consumes every declared queue.
    assert {"probes", app.conf.task_default_queue} <= set(app.amqp.queues)


def test_a_node_check_task_is_limited_to_just_above_the_probe_deadline():
    from nodes.tasks import run_check

    deadline = settings.KECE_PROBE_TIMEOUT_MS / 1000
    assert deadline < run_check.soft_time_limit < run_check.time_limit <= deadline + 60


def test_in_process_a_stuck_check_does_not_hold_up_the_periodic_steps(settings, monkeypatch):
    """The embedded scheduler starts a check as a user would; the check blocks until the
    scheduler's other step has run again, which it can only if the check runs elsewhere."""
    from kece import background

    settings.KECE_IN_PROCESS_SCHEDULER = True
    ticks, check_started, released = [], threading.Event(), threading.Event()

    def stuck_check(check_id):
        check_started.set()
        released.wait(10)

    monkeypatch.setattr(background, "_function", lambda task_name: stuck_check)

    def reap():
        ticks.append(1)
        if check_started.is_set() and len(ticks) >= 3:
            released.set()

    started = []

    def start_check():
        if not started:
            started.append(1)
            background.run_now("nodes.run_check", 1)

    scheduler = InProcessScheduler(steps=[(start_check, 0.01), (reap, 0.01)])
    scheduler.start()
    try:
        assert released.wait(5), "the periodic steps stopped while a check was stuck"
    finally:
        released.set()
        scheduler.stop()
