"""The mysql pool's self-check against the judge MariaDB, in process: every protection has an
item, and the item fails on a node where that protection is missing."""

from __future__ import annotations

import logging
import threading

import MySQLdb
import pytest

from node_agent import diagnostics, sqljudge
from node_agent.config import MysqlTarget
from node_agent.jobs import JobContext
from node_agent.log import JobLog

from .conftest import mariadb_available, need
from .test_mysql_attacks_e2e import _state

# A node id no agent of the suite registers: its prefix is this file's alone.
NODE = 990001


@pytest.fixture
def judge_db():
    need(mariadb_available(), "MariaDB/MySQL at 127.0.0.1:3306 (root, no password)")
    db = sqljudge.JudgeDb(MysqlTarget(host="127.0.0.1", port=3306, user="root", password=""))
    db.node_id = NODE
    before = _state()
    yield db
    db.sweep()  # also kills what a test's missing protection left running
    after = _state()
    assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}


def self_check(judge_db, tmp_path) -> dict[str, dict]:
    ctx = JobContext(job={"jobId": 7, "leaseEpoch": 1}, run_dir=tmp_path, cancel=threading.Event(),
                     log=JobLog(logging.getLogger("test"), 7, 1), artifact=lambda entry: None)
    return {i["name"]: i for i in diagnostics.check_mysql(ctx, judge_db)}


def failed(items: dict[str, dict]) -> set[str]:
    return {name for name, i in items.items() if not i["ok"]}


def test_every_item_passes_on_a_protected_node(judge_db, tmp_path):
    items = self_check(judge_db, tmp_path)
    assert not failed(items), items
    assert {"no_local_infile", "no_wildcard_database", "time_limit_not_liftable", "memory_limit_not_liftable",
            "cleanup"} <= set(items)


def test_a_connection_that_allows_load_data_local_fails_the_check(judge_db, tmp_path, monkeypatch):
    connect = MySQLdb.connect
    monkeypatch.setattr(sqljudge.MySQLdb, "connect", lambda **kwargs: connect(**dict(kwargs, local_infile=1)))
    assert failed(self_check(judge_db, tmp_path)) == {"no_local_infile"}


def test_a_grant_with_wildcards_fails_the_check(judge_db, tmp_path, monkeypatch):
    monkeypatch.setattr(sqljudge, "grant_pattern", lambda name: name)
    assert failed(self_check(judge_db, tmp_path)) == {"no_wildcard_database"}


def test_a_liftable_time_limit_fails_the_check(judge_db, tmp_path, monkeypatch):
    reason = sqljudge.Watchdog._reason
    monkeypatch.setattr(sqljudge.Watchdog, "_reason",
                        lambda self, cur, deadline: reason(self, cur, float("inf")))
    assert failed(self_check(judge_db, tmp_path)) == {"time_limit_not_liftable"}


def test_a_liftable_memory_limit_fails_the_check(judge_db, tmp_path, monkeypatch):
    monkeypatch.setattr(sqljudge.Watchdog, "_footprint", lambda self, cur: 0)
    assert failed(self_check(judge_db, tmp_path)) == {"memory_limit_not_liftable"}


def test_a_cleanup_that_leaves_sessions_fails_the_check(judge_db, tmp_path, monkeypatch):
    monkeypatch.setattr(sqljudge.JudgeDb, "_kill_sessions", staticmethod(lambda cur, databases, users: None))
    items = self_check(judge_db, tmp_path)
    assert failed(items) == {"cleanup"}
    assert "session" in items["cleanup"]["detail"]
