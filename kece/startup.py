"""Start-up guards, and what a long-lived process does once it is loaded."""

import fcntl
import gc
import logging
import os
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger("kece.startup")

_held_lock = None


def check_single_process_sqlite():
    """SQLite ignores row locks; correctness rests on one server process (ARCHITECTURE §7).

    Each server process takes an exclusive lock on a file beside the database and keeps it
    for its lifetime, so a second process (another worker, a second server) refuses to
    start instead of silently breaking the claim arithmetic.
    """
    global _held_lock
    if settings.DATABASE_VENDOR != "sqlite" or _held_lock is not None:
        return
    database = Path(settings.DATABASES["default"]["NAME"])
    lock_path = database.with_name(database.name + ".server-lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock_path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ImproperlyConfigured(
            "Another server process already serves this SQLite database. SQLite runs with a single "
            "server process; set DATABASE_URL to MySQL/MariaDB to run more."
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    _held_lock = handle


def freeze_loaded_objects():
    """Move what loading allocated (modules, settings, URL patterns, models' metadata) out of
    the cyclic collector's reach. It lives as long as the process, yet every full collection
    would walk it again: over a hundred thousand objects, some 40 ms a time in a server
    process. Called once loading is done, before the first request."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # the views and their modules, which the first request would import
    gc.collect()  # what loading left behind is freed, not frozen
    gc.freeze()


def prepare_metrics():
    """The alerts' counters at zero in this process, for every pool and quarantine rule
    (`kece.metrics.prepare`): called as a server or a Celery pool process starts."""
    from judging.services.conduct import INFRA_ERRORS, RENEW_LOST
    from kece import metrics
    from nodes.canaries_hidden import CANARY_MISMATCH
    from nodes.cross_checks import CROSS_CHECK
    from nodes.quarantine import STALLED
    from pools.registry import POOL_NAMES

    metrics.prepare(pools=POOL_NAMES, quarantine_reasons=(INFRA_ERRORS, RENEW_LOST, STALLED, CROSS_CHECK,
                                                          CANARY_MISMATCH))
