"""The MariaDB backend (`kece.mysql`): an `atomic` block is opened with START TRANSACTION
and costs one round trip fewer, and is still a transaction in every way that matters."""

import copy

import MySQLdb
import pytest
from django.db import OperationalError, connection, connections, transaction

from nodes.models import JudgeNode
from tests.concurrency import raw_connection, wait_until
from tests.factories import make_node

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]


def _status(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE %s", [name])
        return int(cursor.fetchone()[1])


def _counters() -> tuple[int, int]:
    return _status("Com_begin"), _status("Com_set_option")


def _locked_elsewhere(node_id: int) -> bool:
    """Whether another client finds the node's row locked (it does not wait for it)."""
    other = raw_connection()
    try:
        cursor = other.cursor()
        cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
        try:
            cursor.execute("SELECT id FROM judge_node WHERE id = %s FOR UPDATE NOWAIT", [node_id])
        except MySQLdb.OperationalError:
            return True
        return False
    finally:
        other.close()


def _name_elsewhere(node_id: int) -> str:
    other = raw_connection()
    try:
        cursor = other.cursor()
        cursor.execute("SELECT name FROM judge_node WHERE id = %s", [node_id])
        return cursor.fetchone()[0]
    finally:
        other.close()


def test_a_transaction_is_opened_with_one_statement_and_not_switched_back():
    node, _ = make_node()
    connection.ensure_connection()
    before = _counters()
    with transaction.atomic():
        JudgeNode.objects.filter(pk=node.pk).update(name="renamed")
    begins, switches = (after - first for after, first in zip(_counters(), before))
    # Django's own MySQL backend sends SET autocommit=0 and, after the COMMIT, =1 again.
    assert (begins, switches) == (1, 0)


def test_what_the_block_locks_stays_locked_until_it_commits():
    node, _ = make_node()
    with transaction.atomic():
        JudgeNode.objects.select_for_update().get(pk=node.pk)
        JudgeNode.objects.filter(pk=node.pk).update(name="inside")
        assert _locked_elsewhere(node.pk)
        assert _name_elsewhere(node.pk) == node.name  # not committed yet
    assert not _locked_elsewhere(node.pk)
    assert _name_elsewhere(node.pk) == "inside"


def test_a_block_that_raises_leaves_nothing_and_the_session_back_in_autocommit():
    node, _ = make_node()
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            JudgeNode.objects.filter(pk=node.pk).update(name="lost")
            raise RuntimeError
    assert _name_elsewhere(node.pk) == node.name
    # Outside any block every statement commits by itself, as before.
    JudgeNode.objects.filter(pk=node.pk).update(name="at once")
    assert _name_elsewhere(node.pk) == "at once"
    assert not _locked_elsewhere(node.pk)


def test_a_savepoint_inside_the_block_rolls_back_alone():
    node, _ = make_node()
    with transaction.atomic():
        JudgeNode.objects.filter(pk=node.pk).update(name="kept")
        with pytest.raises(RuntimeError):
            with transaction.atomic():
                JudgeNode.objects.filter(pk=node.pk).update(name="undone")
                raise RuntimeError
    assert _name_elsewhere(node.pk) == "kept"


def test_autocommit_turned_off_by_hand_still_holds_a_transaction_across_commits():
    node, _ = make_node()
    transaction.set_autocommit(False)
    try:
        JudgeNode.objects.filter(pk=node.pk).update(name="first")
        transaction.commit()
        # Still managed by hand: the next statement opens a new transaction.
        JudgeNode.objects.select_for_update().get(pk=node.pk)
        assert _locked_elsewhere(node.pk)
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert _name_elsewhere(node.pk) == "first"


def _session_with_read_timeout(seconds: int):
    """A connection of the project's backend as a server process opens it, with this read
    timeout (the bound it gives the server for a silent transaction too)."""
    settings_dict = copy.deepcopy(connection.settings_dict)
    settings_dict["OPTIONS"]["read_timeout"] = seconds
    return type(connections["default"])(settings_dict, alias="silent")


def test_a_session_that_falls_silent_inside_its_transaction_is_ended_and_its_locks_go_free():
    """A client cut off mid-transaction closes its socket, but the server may never hear of
    it: for the server that session is one idle inside its transaction. After the read timeout
    the server ends it, rolls its work back and frees its rows for claims and the reaper."""
    node, _ = make_node()
    silent = _session_with_read_timeout(1)
    try:
        with silent.cursor() as cursor:
            cursor.execute("START TRANSACTION")
            cursor.execute("SELECT id FROM judge_node WHERE id = %s FOR UPDATE", [node.pk])
            cursor.execute("UPDATE judge_node SET name = 'half-written' WHERE id = %s", [node.pk])
        assert _locked_elsewhere(node.pk)
        # The session now says nothing more, as one whose client is gone.
        wait_until(lambda: not _locked_elsewhere(node.pk), timeout=60,
                   message="the silent session's row lock was never released")
        assert _name_elsewhere(node.pk) == node.name  # its work rolled back
        with pytest.raises(OperationalError):
            with silent.cursor() as cursor:
                cursor.execute("COMMIT")  # too late: the server has ended the session
    finally:
        silent.close()


def test_a_session_without_statement_bounds_may_stay_inside_its_transaction():
    """`unbounded` connections (migrations, reconciliation) run statements that may take long
    and are given no such bound either."""
    node, _ = make_node()
    silent = _session_with_read_timeout(1)
    silent.statement_timeouts = False
    try:
        with silent.cursor() as cursor:
            cursor.execute("START TRANSACTION")
            cursor.execute("SELECT id FROM judge_node WHERE id = %s FOR UPDATE", [node.pk])
            cursor.execute("SELECT @@SESSION.idle_transaction_timeout")
            assert cursor.fetchone()[0] == 0
        assert _locked_elsewhere(node.pk)
    finally:
        silent.close()


def test_a_session_is_strict_and_in_utc_whatever_the_servers_defaults():
    """A value too long is an error, not cut short; times in SQL are UTC (a server kept in
    local time reads an hour off in daylight saving's repeated hour)."""
    from django.db import DataError

    from tests.factories import HostGroupFactory

    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@SESSION.sql_mode, @@SESSION.time_zone")
        mode, zone = cursor.fetchone()
    assert "STRICT_TRANS_TABLES" in mode.split(",") and zone == "+00:00"
    with pytest.raises(DataError):
        HostGroupFactory(name="n" * 300)


def test_migrate_refuses_a_database_that_cannot_hold_chinese_text(tmp_path):
    """On a server left at latin1, the tables `migrate` makes would refuse every Chinese
    name, title and line of code (1366): it stops before making any and says how to fix it."""
    import os
    import subprocess
    import sys

    from tests.live import ROOT

    settings_dict = connection.settings_dict
    name = f"{settings_dict['NAME']}_latin1"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET latin1")
    try:
        url = f"mysql://{settings_dict['USER']}:{settings_dict['PASSWORD']}@{settings_dict['HOST'] or '127.0.0.1'}:" \
              f"{settings_dict['PORT'] or 3306}/{name}"
        env = {**os.environ, "DATABASE_URL": url, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "kece.settings"}
        done = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and "kece.E001" in done.stderr and "utf8mb4" in done.stderr, done.stderr
        with connection.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s", [name])
            assert cursor.fetchone()[0] == 0
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")


def test_migrate_bounds_how_long_a_table_change_waits_for_its_lock():
    """An ALTER waiting for a table's lock holds every later statement on that table: the
    migration's connection waits a bounded time, the site's connections keep theirs."""
    from django.core.management import call_command
    from django.db.models.signals import post_migrate

    seen = []

    def during_migrate(**kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@SESSION.lock_wait_timeout")
            seen.append(int(cursor.fetchone()[0]))

    post_migrate.connect(during_migrate, weak=False)
    try:
        call_command("migrate", "--lock-wait", "7", verbosity=0)
    finally:
        post_migrate.disconnect(during_migrate)
    assert seen and set(seen) == {7}
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@SESSION.lock_wait_timeout")
        assert int(cursor.fetchone()[0]) > 7  # a new connection, the server's own
