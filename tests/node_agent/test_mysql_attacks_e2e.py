"""Attacks on the mysql pool, each submitted through a real agent against the judge MariaDB.

Every submission would be AC only if its attack worked; each must end in an ordinary
verdict, in bounded time, and leave nothing on the judge server: no database, user or
session of the job, no table anywhere else.
"""

from __future__ import annotations

import time

import pytest

from .conftest import need_pool, verdict_of
from .test_mysql_e2e import ACCT_ANSWER, ACCT_CHECK, ACCT_SCHEMA, ACCT_SEED, ANSWER, LIMITS, SCHEMA, SEED, _admin

QUERY = {"schema": SCHEMA, "seed": SEED, "answer": ANSWER, "check": None, "ordered": True}
DML = {"schema": ACCT_SCHEMA, "seed": ACCT_SEED, "answer": ACCT_ANSWER, "check": ACCT_CHECK, "ordered": True}
# The reference answer of QUERY, reached only through the attack.
EXPECTED = "SELECT name FROM emp WHERE salary > 1000 ORDER BY name"
# The test databases other test runs create, fill and drop meanwhile (not `test` itself).
OTHERS = "test\\_%"


def _state() -> dict:
    conn = _admin()
    try:
        cur = conn.cursor()
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME NOT LIKE %s", (OTHERS,))
        schemas = {r[0] for r in cur.fetchall()}
        cur.execute("SELECT User FROM mysql.user")
        users = {r[0] for r in cur.fetchall()}
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER LIKE 'kece\\_judge\\_%%'")
        sessions = cur.fetchone()[0]
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA NOT LIKE %s",
                    (OTHERS,))
        tables = set(cur.fetchall())
        return {"schemas": schemas, "users": users, "sessions": sessions, "tables": tables}
    finally:
        conn.close()


@pytest.fixture
def judged(plane, launch):
    """``judged(source, sql, limits=LIMITS) -> (result body, seconds)`` on one real agent, then
    the judge server must be as it was."""
    need_pool("mysql")
    before = _state()
    agent, _ = launch(plane, "mysql", slots=1)

    def _judge(source: str, sql: dict, limits: dict = LIMITS) -> tuple[dict, float]:
        start = time.monotonic()
        body = verdict_of(plane, plane.add_job(pool="mysql", source=source, sql=sql, limits=limits), timeout=60)
        return body, time.monotonic() - start

    yield _judge
    assert agent.alive()
    after = _state()
    assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}


def test_load_data_local_cannot_read_the_agents_environment(judged):
    body, _ = judged(
        "CREATE TABLE leak (line TEXT);\n"
        "LOAD DATA LOCAL INFILE '/proc/self/environ' INTO TABLE leak LINES TERMINATED BY '\\0';\n"
        f"{EXPECTED} AND (SELECT COUNT(*) FROM leak WHERE line LIKE 'JUDGE\\_MYSQL\\_URL=%') = 1;", QUERY)
    assert body["verdict"] == "RE", body
    assert "JUDGE_MYSQL_URL" not in body.get("compileOutput", "")


def test_a_checked_table_swapped_for_a_sleeping_view_is_wrong_at_once(judged):
    body, seconds = judged(
        "DROP TABLE acct;\n"
        "CREATE VIEW acct AS SELECT 1 AS id, 100 AS balance FROM DUAL WHERE SLEEP(20) = 0\n"
        "  UNION ALL SELECT 2, 210 UNION ALL SELECT 3, 300;", DML)
    assert body["verdict"] == "WA", body
    assert seconds < 15


def test_a_dropped_checked_table_is_the_submissions_wrong_answer(judged):
    body, _ = judged("DROP TABLE acct;", DML)
    assert body["verdict"] == "WA", body


def test_the_check_runs_under_the_submissions_time_limit(judged):
    """Where the reference itself makes a view, the submission's view is the one checked."""
    sql = dict(DML, answer="CREATE VIEW rich AS SELECT id FROM acct WHERE balance > 150;",
               check="SELECT id FROM rich ORDER BY id;")
    body, seconds = judged("CREATE VIEW rich AS SELECT id FROM acct WHERE balance > 150 AND SLEEP(5) = 0;", sql)
    assert body["verdict"] == "TLE", body
    assert seconds < 10


def test_the_check_result_is_capped_like_the_submissions(judged):
    body, _ = judged(
        "CREATE TABLE n (i INT);\n"
        "INSERT INTO n WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 300) SELECT i FROM r;\n"
        "INSERT INTO acct SELECT 1000 + a.i * 1000 + b.i, 0 FROM n a, n b;", DML)
    assert body["verdict"] == "OLE", body


def test_no_database_the_grant_pattern_admits_outlives_the_job(judged):
    # Every "_" of the job's database name replaced: an unescaped grant pattern admits it,
    # and with the node prefix gone no sweep by name would find it.
    run = "PREPARE st FROM @s; EXECUTE st; DEALLOCATE PREPARE st;"
    body, _ = judged(
        "SET @db = CONCAT('`', REPLACE(DATABASE(), '_', 'x'), '`');\n"
        f"SET @s = CONCAT('CREATE DATABASE ', @db); {run}\n"
        f"SET @s = CONCAT('CREATE TABLE ', @db, '.keep AS SELECT name FROM emp WHERE salary > 1000'); {run}\n"
        f"SET @s = CONCAT('SELECT name FROM ', @db, '.keep ORDER BY name'); {run}", QUERY)
    assert body["verdict"] == "RE", body


def test_a_memory_table_past_the_limit_is_mle_after_lifting_the_session_limit(judged):
    body, _ = judged(
        "SET SESSION max_statement_time = 0, max_heap_table_size = 1073741824, tmp_table_size = 1073741824;\n"
        "CREATE TABLE park (s VARCHAR(1000)) ENGINE=MEMORY;\n"
        "INSERT INTO park SELECT REPEAT('x', 1000) FROM n a, n b LIMIT 2000;\n"
        f"{EXPECTED};", QUERY)
    assert body["verdict"] == "MLE", body


def test_a_lifted_statement_time_limit_still_holds(judged):
    body, seconds = judged(f"SET SESSION max_statement_time = 0; SELECT SLEEP(20); {EXPECTED};", QUERY)
    assert body["verdict"] == "TLE", body
    assert seconds < 10
