"""The periodic Celery tasks: thin wrappers over `kece.periodic` (the in-process scheduler
runs the same steps in the embedded default). They live with the wiring, which may know
every app, so no app imports the wiring back."""

from celery import shared_task

from kece import periodic


@shared_task(name="judging.reap_expired_leases", ignore_result=True)
def reap_expired_leases(follow_up: bool = True):
    """Beat's tick; when a lease runs out before the next one, one extra pass at its
    deadline (which schedules nothing itself: the next tick looks again)."""
    wait = periodic.reap_again_in(periodic.run_recorded(periodic.reap_step))
    if follow_up and wait is not None:
        reap_expired_leases.apply_async(kwargs={"follow_up": False}, countdown=wait)


@shared_task(name="judging.dispatch_settlement_events", ignore_result=True)
def dispatch_settlement_events():
    periodic.run_recorded(periodic.events_step)


@shared_task(name="judging.hand_in_ended_exams", ignore_result=True)
def hand_in_ended_exams():
    periodic.run_guarded(periodic.exams_step)


@shared_task(name="pools.refresh_status_snapshot", ignore_result=True)
def refresh_status_snapshot():
    from pools.snapshot import refresh_step

    periodic.run_guarded(refresh_step)


@shared_task(name="nodes.expire_checks", ignore_result=True)
def expire_checks():
    periodic.run_guarded(periodic.checks_step)


@shared_task(name="nodes.quarantine_stalled", ignore_result=True)
def quarantine_stalled():
    periodic.run_guarded(periodic.stall_step)


@shared_task(name="nodes.check_integrity", ignore_result=True)
def check_integrity():
    periodic.run_guarded(periodic.integrity_step)


@shared_task(name="judging.advance_rejudges", ignore_result=True)
def advance_rejudges():
    periodic.run_guarded(periodic.rejudges_step)


@shared_task(name="nodes.publish_console", ignore_result=True)
def publish_console():
    from nodes.console.live import publish_step

    periodic.run_guarded(publish_step)


@shared_task(name="judging.reconcile", ignore_result=True)
def reconcile():
    periodic.run_guarded(periodic.reconcile_step)


@shared_task(name="judging.gc", ignore_result=True)
def gc():
    periodic.run_guarded(periodic.gc_step)
