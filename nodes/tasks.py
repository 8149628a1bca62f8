from celery import shared_task
from django.conf import settings

# Backstops behind the probe's own deadline: the soft limit raises in a check stuck anywhere
# else, the hard one replaces the worker process; the check's expiry then fails the check.
_PROBE_SECONDS = settings.KECE_PROBE_TIMEOUT_MS / 1000


@shared_task(name="nodes.run_check", ignore_result=True, soft_time_limit=_PROBE_SECONDS + 20,
             time_limit=_PROBE_SECONDS + 30)
def run_check(check_id: int):
    from nodes.checks import node_check_run

    node_check_run(check_id)
