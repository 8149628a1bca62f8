from celery import shared_task


@shared_task(name="nodes.run_check", ignore_result=True)
def run_check(check_id: int):
    from nodes.checks import node_check_run

    node_check_run(check_id)


@shared_task(name="nodes.expire_checks", ignore_result=True)
def expire_checks():
    from kece.periodic import checks_step, run_guarded

    run_guarded(checks_step)


@shared_task(name="nodes.publish_console", ignore_result=True)
def publish_console():
    from kece.periodic import run_guarded
    from nodes.console.live import publish_step

    run_guarded(publish_step)
