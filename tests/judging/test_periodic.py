"""The periodic work runs the same service functions under Celery beat and in-process."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import EventState, JobState, JudgeJob, SettlementEvent
from kece.celery import app
from kece.scheduler import PERIODIC_TASKS, InProcessScheduler
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = pytest.mark.django_db


def test_beat_schedules_every_periodic_task_and_each_is_registered():
    app.loader.import_default_modules()
    names = [name for name, _ in PERIODIC_TASKS()]
    assert {"judging.reap_expired_leases", "judging.dispatch_settlement_events",
            "pools.refresh_status_snapshot", "nodes.expire_checks",
            "nodes.quarantine_stalled", "nodes.publish_console", "judging.hand_in_ended_exams",
            "judging.advance_rejudges", "nodes.check_integrity", "judging.reconcile", "judging.gc"} == set(names)
    for name in names:
        assert name in app.tasks, name
    scheduled = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert set(names) <= scheduled


def test_beat_sends_the_console_step_only_while_a_console_page_is_open(settings, tmp_path, monkeypatch):
    from django.core.cache import cache

    from kece.celery import HeartbeatScheduler
    from nodes.console import live

    app.loader.import_default_modules()
    app.finalize()
    settings.KECE_PROCESS_HEARTBEAT_DIR = str(tmp_path)
    scheduler = HeartbeatScheduler(app=app, schedule_filename=str(tmp_path / "schedule"))
    sent = []
    monkeypatch.setattr(scheduler, "apply_async", lambda entry, producer=None, **kwargs: sent.append(entry.task))

    def ticks_after(seconds: float) -> list:
        """What beat sends over its ticks once every entry last ran `seconds` ago."""
        sent.clear()
        for entry in scheduler.schedule.values():
            entry.last_run_at = timezone.now() - timedelta(seconds=seconds)
        scheduler._heap = None
        for _ in range(2 * len(scheduler.schedule)):
            scheduler.tick()
        return sent

    try:
        cache.delete(live.WATCHED_KEY)
        unwatched = ticks_after(30)
        assert "nodes.publish_console" not in unwatched  # nobody watching: no message
        assert {"judging.reap_expired_leases", "judging.dispatch_settlement_events"} <= set(unwatched)  # the rest run
        live.mark_watched()  # a page opens
        assert "nodes.publish_console" in ticks_after(30)
    finally:
        scheduler.close()


def test_a_fresh_beat_sends_reconciliation_and_retention_at_once_when_their_last_success_is_old(settings,
                                                                                                 tmp_path, monkeypatch):
    """A beat with no schedule file (a new pod) would first reconcile a day after it starts:
    replaced daily, never. It sends each long step once at its start unless it succeeded
    within its interval."""
    from django.core.cache import cache

    from kece import metrics
    from kece.celery import HeartbeatScheduler

    app.loader.import_default_modules()
    app.finalize()
    settings.KECE_PROCESS_HEARTBEAT_DIR = str(tmp_path)
    cache.delete(metrics.STEP_SUCCESS_KEY.format("reconcile"))  # never, as far as anyone knows
    cache.set(metrics.STEP_SUCCESS_KEY.format("gc"), timezone.now() - timedelta(minutes=10), None)  # recent

    def fresh_beat(name: str) -> list:
        scheduler = HeartbeatScheduler(app=app, schedule_filename=str(tmp_path / name))
        sent = []
        monkeypatch.setattr(scheduler, "apply_async", lambda entry, producer=None, **kwargs: sent.append(entry.task))
        try:
            for _ in range(3 * len(scheduler.schedule)):
                scheduler.tick()
        finally:
            scheduler.close()
        return sent

    first = fresh_beat("first")
    assert first.count("judging.reconcile") == 1, "sent once, not at every tick"
    assert "judging.gc" not in first, "retention succeeded ten minutes ago: its hour is not up"
    cache.set(metrics.STEP_SUCCESS_KEY.format("reconcile"), timezone.now(), None)
    assert "judging.reconcile" not in fresh_beat("second")
    entries = HeartbeatScheduler(app=app, schedule_filename=str(tmp_path / "third")).schedule
    # A stale tick is dropped after a minute (beat's and a worker's clocks may differ by seconds).
    assert entries["judging.reap_expired_leases"].options["expires"] == 60.0
    assert entries["judging.reconcile"].options["expires"] == settings.KECE_RECONCILE_INTERVAL_MS / 1000


def test_beat_keeps_its_schedule_in_the_state_folder_not_the_working_folder(settings, tmp_path):
    from pathlib import Path

    from celery.signals import beat_embedded_init

    schedule = Path(app.conf.beat_schedule_filename)  # what `worker --beat` uses without --schedule
    assert schedule.is_absolute() and schedule.parent == Path(settings.BASE_DIR) / "var"
    settings.CELERY_BEAT_SCHEDULE_FILENAME = str(tmp_path / "fresh" / "var" / "celerybeat-schedule")
    beat_embedded_init.send(sender=None)
    assert (tmp_path / "fresh" / "var").is_dir()


def test_the_celery_tasks_reap_and_dispatch(student, problem, node_a, settings):
    from kece.tasks import dispatch_settlement_events, reap_expired_leases

    _, identity = node_a
    submit(student, problem)
    [job] = claim(identity)
    JudgeJob.objects.filter(pk=job.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    reap_expired_leases()
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.QUEUED

    [again] = claim(identity)  # a silent node's job is claimable at once
    assert (again.pk, again.lease_epoch) == (job.pk, job.lease_epoch + 1)
    settle(identity, judged(again))
    dispatch_settlement_events()
    assert set(SettlementEvent.objects.values_list("state", flat=True)) == {EventState.DONE}


def test_the_reaper_comes_back_at_a_deadline_that_falls_before_its_next_tick(student, problem, node_a, settings,
                                                                            monkeypatch):
    from kece import periodic, tasks

    settings.KECE_REAP_INTERVAL_MS = 5000
    _, identity = node_a
    submit(student, problem)
    [job] = claim(identity)
    now = timezone.now()
    assert periodic.reap_again_in(periodic.reap_step(now=now), now=now) is None, "a live lease far from its end"

    JudgeJob.objects.filter(pk=job.pk).update(lease_until=now + timedelta(seconds=2))
    report = periodic.reap_step(now=now)
    assert report.requeued == [] and report.next_deadline == now + timedelta(seconds=2)
    assert periodic.reap_again_in(report, now=now) == pytest.approx(2 + periodic.REAP_MARGIN_S)

    scheduled = []
    monkeypatch.setattr(tasks.reap_expired_leases, "apply_async", lambda **kw: scheduled.append(kw))
    tasks.reap_expired_leases()
    [extra] = scheduled
    assert extra["kwargs"] == {"follow_up": False} and 0 < extra["countdown"] <= 2 + periodic.REAP_MARGIN_S
    tasks.reap_expired_leases(follow_up=False)
    assert len(scheduled) == 1, "the extra pass schedules nothing itself"


def test_the_in_process_scheduler_runs_each_step_and_stops():
    calls = []
    scheduler = InProcessScheduler(steps=[(lambda: calls.append("a"), 0.05), (lambda: calls.append("b"), 10)])
    scheduler.start()
    import time

    time.sleep(0.3)
    scheduler.stop()
    assert calls.count("a") >= 3 and calls.count("b") == 1
    settled = len(calls)
    time.sleep(0.2)
    assert len(calls) == settled, "it stopped"


def test_one_dispatch_tick_keeps_up_with_a_burst(student, problem, node_a):
    from kece.periodic import events_step
    from tests.factories import UserFactory

    _, identity = node_a
    for i in range(7):
        submit(UserFactory() if i % 2 else student, problem)
        [job] = claim(identity)
        settle(identity, judged(job))
    report = events_step(batch=3)  # more due events than one batch
    assert len(report.applied) == 7
    assert set(SettlementEvent.objects.values_list("state", flat=True)) == {EventState.DONE}


# The clock of the schedule below (`nowfun`: the entries' schedules forget their app once
# stored, and would read the current app's clock), moved only by the test's "sleeps".
_BEAT_CLOCK = []


def _beat_now():
    return _BEAT_CLOCK[-1]


def test_beat_sleeps_until_an_entry_is_due_rather_than_ticking_again_at_once(settings, tmp_path):
    """Celery wakes 10 ms early; inside that margin beat must wait the rest, not tick over
    and over (an idle beat spent 2 % of a core so). On an app of its own and a clock of its
    own."""
    from datetime import datetime, timezone as dt_timezone

    from celery import Celery

    from kece.celery import HeartbeatScheduler

    settings.KECE_PROCESS_HEARTBEAT_DIR = str(tmp_path)
    _BEAT_CLOCK[:] = [datetime(2026, 1, 1, tzinfo=dt_timezone.utc)]
    beat_app = Celery("beat-clock", set_as_current=False)
    beat_app.conf.beat_schedule = {"step": {"task": "step", "schedule": 2.0}}
    scheduler = HeartbeatScheduler(app=beat_app, schedule_filename=str(tmp_path / "schedule"))
    sent = []
    scheduler.apply_async = lambda entry, producer=None, **kwargs: sent.append(entry.task)
    scheduler.producer = None  # nothing is sent anywhere
    try:
        step = scheduler.schedule["step"]
        step.schedule.nowfun = _beat_now
        step.last_run_at = _beat_now() - timedelta(seconds=2.0 - 0.004)  # due in 4 ms
        scheduler.schedule.pop("celery.backend_cleanup", None)
        scheduler._heap = None
        answers = []
        while not sent and len(answers) < 50:
            wait = scheduler.tick()
            answers.append(wait)
            if wait and wait > 0:  # what Celery's beat loop does with the answer
                _BEAT_CLOCK.append(_beat_now() + timedelta(seconds=wait))
        assert sent == ["step"], answers[:10]
        assert answers == [pytest.approx(0.004, abs=1e-4), 0]  # one wait, the rest of it; then sent
    finally:
        scheduler.close()
