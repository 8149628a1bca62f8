"""Set a benchmark up on its own MariaDB database (never the test or production one)."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup(database: str = "kece_bench"):
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DATABASE_URL", f"mysql://root:@127.0.0.1:3306/{database}")
    os.environ.setdefault("KECE_LOG_LEVEL", "WARNING")
    os.environ.setdefault("KECE_ARTIFACT_ROOT", str(ROOT / "var" / "bench-artifacts"))
    # The test run's settings: a development secret, loopback nodes, the lock-order check.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    # A benchmark submits from a few accounts as fast as it can, as no student does: the
    # per-user limits of fair use would refuse it (the servers it starts inherit these).
    for name, unlimited in (("KECE_USER_ACTIVE_MAX", "0"), ("KECE_USER_SUBMIT_RATE", "0"),
                            ("KECE_EXAM_SUBMIT_RATE", "0"), ("KECE_EXAM_ACTIVE_MAX", "1000000")):
        os.environ.setdefault(name, unlimited)
    url = os.environ["DATABASE_URL"]
    if url.startswith("mysql"):
        import MySQLdb

        name = url.rsplit("/", 1)[1]
        conn = MySQLdb.connect(host="127.0.0.1", user="root", port=3306)
        conn.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        conn.close()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def count_round_trips(on_send) -> None:
    """Call `on_send(what)` for each round trip this thread's database connection makes from
    now on (a statement, or several sent together; a commit or rollback). The connection is
    one to close afterwards: its methods cannot be put back."""
    from django.db import connection

    connection.ensure_connection()
    raw = connection.connection
    for name in ("query", "commit", "rollback"):
        original = getattr(raw, name)

        def counting(*args, _original=original, _name=name.upper().encode()):
            on_send(args[0] if args else _name)
            return _original(*args)

        setattr(raw, name, counting)
