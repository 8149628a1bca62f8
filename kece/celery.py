import os

from celery import Celery

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
