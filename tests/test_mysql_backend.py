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
