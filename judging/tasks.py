"""Celery tasks: thin wrappers that call the services (the in-process scheduler calls the
same functions in the embedded default)."""

from celery import shared_task

from kece import periodic


@shared_task(name="judging.reap_expired_leases", ignore_result=True)
def reap_expired_leases():
    periodic.reap_step()


@shared_task(name="judging.dispatch_settlement_events", ignore_result=True)
def dispatch_settlement_events():
    periodic.events_step()
