"""Work that must not run inside a request: a Celery task when a worker is deployed, a
thread of the web process when the web process does the periodic work itself (the
embedded default, `KECE_IN_PROCESS_SCHEDULER`). Both run the same plain function."""

import importlib
import logging
import threading

from django.conf import settings
from django.db import transaction

logger = logging.getLogger("kece.background")

# Celery task name → the plain function it runs.
TASKS = {
    "nodes.run_check": "nodes.checks.node_check_run",
}


def _function(task_name: str):
    module, _, name = TASKS[task_name].rpartition(".")
    return getattr(importlib.import_module(module), name)


def run_after_commit(task_name: str, *args) -> None:
    transaction.on_commit(lambda: run_now(task_name, *args))


def run_now(task_name: str, *args) -> None:
    function = _function(task_name)
    if not (settings.CELERY_TASK_ALWAYS_EAGER or settings.KECE_IN_PROCESS_SCHEDULER):
        # The project's Celery app (kece.celery, loaded with the kece package); naming it
        # here would import the wiring, which imports the apps, back into them.
        from celery import current_app

        current_app.send_task(task_name, args=args)
        return

    def target():
        from django.db import connection

        try:
            function(*args)
        except Exception:
            logger.exception("background task failed", extra={"task": task_name})
        finally:
            connection.close()

    threading.Thread(target=target, name=f"kece-{task_name}", daemon=True).start()
