import os
from pathlib import Path

from celery import Celery
from celery.signals import beat_embedded_init, beat_init, celeryd_init, worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kece.settings")

app = Celery("kece")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _schedule_periodic_work(sender, **kwargs):
    # The same service functions run in-process in the embedded default (kece.scheduler).
    from kece.scheduler import PERIODIC_TASKS

    for task_name, interval_seconds in PERIODIC_TASKS():
        sender.add_periodic_task(interval_seconds, sender.signature(task_name), name=task_name)


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


@worker_process_shutdown.connect
def _process_ended(**kwargs):
    from kece import metrics

    metrics.mark_process_dead()
