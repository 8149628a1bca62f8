"""The judge MySQL's leftovers: every temporary name carries its node and its expiry, and a
running agent drops the expired ones (the start-up sweep drops all of the node's)."""

from __future__ import annotations

import time

import MySQLdb
import pytest

from node_agent import sqljudge
from node_agent.config import MysqlTarget

from .conftest import mariadb_available, need

# A node id no agent of the suite registers: its prefix is this file's alone.
NODE = 990002


@pytest.fixture
def judge_db():
    need(mariadb_available(), "MariaDB/MySQL at 127.0.0.1:3306 (root, no password)")
    db = sqljudge.JudgeDb(MysqlTarget(host="127.0.0.1", port=3306, user="root", password=""), lifetime_s=600)
    db.node_id = NODE
    yield db
    db.sweep()
    assert db.leftovers() == ([], [])


def _names(db) -> set[str]:
    dbs, users = db.leftovers()
    return set(dbs) | set(users)


def test_a_running_agent_sweeps_only_what_has_expired(judge_db):
    now = time.time()
    stale = judge_db.create_env("j1_e1_aa", now=now - 3600)  # a cleanup cut short an hour ago
    live = judge_db.create_env("j2_e1_bb", now=now)  # a job running now
    admin = judge_db.admin()
    try:  # made before names carried an expiry: only the start-up sweep may take it
        admin.cursor().execute(f"CREATE DATABASE `{judge_db.prefix}j0_e1_old`")
    finally:
        admin.close()
    assert judge_db.expiry_of(stale.db) == int(now - 3600 + 600)
    assert judge_db.expiry_of(live.user) == int(now + 600)

    dropped_dbs, dropped_users = judge_db.sweep_expired(now=now)
    assert (dropped_dbs, dropped_users) == ([stale.db], [stale.user])
    assert _names(judge_db) == {live.db, live.user, f"{judge_db.prefix}j0_e1_old"}
    connection = MySQLdb.connect(host="127.0.0.1", port=3306, user=live.user, passwd=live.password, db=live.db)
    connection.close()  # the running job's database and user still work

    assert judge_db.sweep_expired(now=now + 601)[0] == [live.db]
    assert judge_db.sweep() == ([f"{judge_db.prefix}j0_e1_old"], [])


def test_a_short_mysql_user_name_keeps_the_node_and_the_expiry(judge_db, monkeypatch):
    monkeypatch.setattr(judge_db, "flavor", lambda: "mysql")
    tag = f"x{sqljudge._base36(1_900_000_000)}_j123456789_e42_abcdef"
    name = judge_db.user_name(tag)
    assert len(name) <= 32 and name.startswith(judge_db.prefix)
    assert judge_db.expiry_of(name) == 1_900_000_000


def test_a_prepared_xa_transaction_left_by_a_submission_does_not_keep_its_database(judge_db):
    """`XA PREPARE` outlives the session that made it (MariaDB 10.5+, MySQL 8), holding its
    row locks with no one attached: the job's database could never be dropped, and every
    sweep after it stopped at that name. The cleanup rolls it back and drops all."""
    env = judge_db.create_env("j3_e1_cc")
    judge_db.run_admin_script(env.db, "CREATE TABLE emp (id INT PRIMARY KEY, salary INT); "
                                      "INSERT INTO emp VALUES (1, 10), (2, 20)")
    student = MySQLdb.connect(host="127.0.0.1", port=3306, user=env.user, passwd=env.password, db=env.db)
    cursor = student.cursor()
    for statement in ("XA START 'kece-sweep-test'", "UPDATE emp SET salary = salary + 1",
                      "XA END 'kece-sweep-test'", "XA PREPARE 'kece-sweep-test'"):
        cursor.execute(statement)
    student.close()

    judge_db.drop_env(env)
    assert judge_db.leftovers() == ([], [])
    admin = judge_db.admin()
    try:
        cursor = admin.cursor()
        cursor.execute("XA RECOVER")
        assert not [row for row in cursor.fetchall() if b"kece-sweep-test" in bytes(row[3])]
    finally:
        admin.close()


def test_a_server_that_lets_a_session_raise_its_in_memory_tables_is_told_apart(judge_db):
    """The suite's MariaDB runs without --maximum-max_heap_table_size: a session may raise its
    in-memory tables to 4 GiB, which the agent names at start (a temporary MEMORY table is in
    no memory its watchdog sees)."""
    assert judge_db.heap_tables_unbounded() == 4 << 30
