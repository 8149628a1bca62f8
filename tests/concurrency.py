"""Real concurrent clients for lock tests: threads, each with its own database connection."""

import threading
import time
import traceback

import MySQLdb
from django.db import connection


def run_concurrently(functions, *, timeout: float = 120.0) -> list:
    """Start every function in its own thread behind a barrier; return results in order.

    An exception in a thread is returned in its slot (tests assert on them). Each thread
    closes its connection when done, or test teardown would hang on it.
    """
    barrier = threading.Barrier(len(functions))
    results: list = [None] * len(functions)

    def runner(index, function):
        try:
            barrier.wait(timeout)
            results[index] = function()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            exc.formatted = traceback.format_exc()
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=runner, args=(i, f), daemon=True) for i, f in enumerate(functions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), "a concurrent client hung"
    return results


def raise_first_error(results):
    for result in results:
        if isinstance(result, BaseException):
            raise AssertionError(getattr(result, "formatted", repr(result))) from result


def wait_until(condition, *, timeout: float, message: str):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {message}")
        time.sleep(0.05)


def raw_connection():
    db = connection.settings_dict
    return MySQLdb.connect(host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 3306), user=db["USER"],
                           password=db["PASSWORD"] or "", database=db["NAME"])


def lock_waits() -> int:
    """Statements of this test database waiting to lock rows. (MariaDB may wait for a row
    lock while still optimising the statement, before INNODB_TRX lists the wait.)"""
    probe = raw_connection()
    try:
        cursor = probe.cursor()
        cursor.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
                       " AND ID != CONNECTION_ID() AND INFO LIKE '%FOR UPDATE%'")
        return cursor.fetchone()[0]
    finally:
        probe.close()
