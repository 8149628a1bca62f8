from celery import shared_task


@shared_task(name="nodes.run_check", ignore_result=True)
def run_check(check_id: int):
    from nodes.checks import node_check_run

    node_check_run(check_id)
