"""Start-up guards."""

import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def check_single_process_sqlite():
    """SQLite ignores row locks; correctness rests on one server process (ARCHITECTURE §7)."""
    if settings.DATABASE_VENDOR != "sqlite":
        return
    workers = int(os.environ.get("WEB_CONCURRENCY", "1") or 1)
    if workers > 1:
        raise ImproperlyConfigured(
            "SQLite runs with a single server process only; set DATABASE_URL to MySQL/MariaDB to run more."
        )
