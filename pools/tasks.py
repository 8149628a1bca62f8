from celery import shared_task

from kece.periodic import run_guarded


@shared_task(name="pools.refresh_status_snapshot", ignore_result=True)
def refresh_status_snapshot():
    from pools.snapshot import refresh_step

    run_guarded(refresh_step)
