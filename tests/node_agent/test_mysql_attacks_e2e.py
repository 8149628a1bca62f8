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
# Other runs' databases on the same server: test databases and benchmark databases.
OTHERS = ("test\\_%", "kece\\_bench\\_%")


def _state() -> dict:
    conn = _admin()
    try:
        cur = conn.cursor()
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME NOT LIKE %s"
                    " AND SCHEMA_NAME NOT LIKE %s", OTHERS)
        schemas = {r[0] for r in cur.fetchall()}
        # The job's accounts (other runs on the server make accounts of their own).
        cur.execute("SELECT User FROM mysql.user WHERE User LIKE 'kece\\_judge\\_%%'")
        users = {r[0] for r in cur.fetchall()}
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER LIKE 'kece\\_judge\\_%%'")
        sessions = cur.fetchone()[0]
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA NOT LIKE %s"
                    " AND TABLE_SCHEMA NOT LIKE %s", OTHERS)
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
    assert after == before, {k: ({"gone": before[k] - after[k], "new": after[k] - before[k]}
                                 if isinstance(before[k], set) else (before[k], after[k]))
                             for k in before if before[k] != after[k]}


def test_load_data_local_cannot_read_the_agents_environment(judged):
    body, _ = judged(
        "CREATE TABLE leak (line TEXT);\n"
        "LOAD DATA LOCAL INFILE '/proc/self/environ' INTO TABLE leak LINES TERMINATED BY '\\0';\n"
        f"{EXPECTED} AND (SELECT COUNT(*) FROM leak WHERE line LIKE 'JUDGE\\_MYSQL\\_URL=%') = 1;", QUERY)
    assert body["verdict"] == "RE", body
    assert "JUDGE_MYSQL_URL" not in body.get("compileOutput", "")


# Run a statement the submission built: how to name a database only known at run time.
RUN = "PREPARE st FROM @s; EXECUTE st; DEALLOCATE PREPARE st;"
# The reference makes a view; the check reads the submission's.
VIEW_DML = dict(DML, answer="CREATE VIEW rich AS SELECT id FROM acct WHERE balance > 150;",
                check="SELECT id FROM rich ORDER BY id;")

ATTACKS = {
    # The check would read the view, sleeping in the admin's session.
    "checked_table_swapped_for_a_sleeping_view": (
        "DROP TABLE acct;\n"
        "CREATE VIEW acct AS SELECT 1 AS id, 100 AS balance FROM DUAL WHERE SLEEP(20) = 0\n"
        "  UNION ALL SELECT 2, 210 UNION ALL SELECT 3, 300;", DML, "WA"),
    "checked_table_dropped": ("DROP TABLE acct;", DML, "WA"),
    "slow_view_the_check_reads": (
        "CREATE VIEW rich AS SELECT id FROM acct WHERE balance > 150 AND SLEEP(10) = 0;", VIEW_DML, "TLE"),
    # MariaDB's Sequence engine: 20,000 rows (some 140 KB) for the check; the output limit is 64 KB.
    "huge_checked_table": ("INSERT INTO acct SELECT seq, 0 FROM seq_1000_to_21000;", DML, "OLE"),
    # Every "_" of the job's database name replaced: an unescaped grant pattern admits it, and
    # with the node prefix gone no sweep by name would find it.
    "database_the_grant_pattern_admits": (
        "SET @db = CONCAT('`', REPLACE(DATABASE(), '_', 'x'), '`');\n"
        f"SET @s = CONCAT('CREATE DATABASE ', @db); {RUN}\n"
        f"SET @s = CONCAT('CREATE TABLE ', @db, '.keep AS SELECT name FROM emp WHERE salary > 1000'); {RUN}\n"
        f"SET @s = CONCAT('SELECT name FROM ', @db, '.keep ORDER BY name'); {RUN}", QUERY, "RE"),
    # 8 MB in a MEMORY table, 1 MB memory limit.
    "memory_table_after_lifting_the_heap_limit": (
        "SET SESSION max_statement_time = 0, max_heap_table_size = 1073741824, tmp_table_size = 1073741824;\n"
        "CREATE TABLE park (s VARCHAR(1000)) ENGINE=MEMORY;\n"
        "INSERT INTO park SELECT REPEAT('x', 1000) FROM n a, n b LIMIT 2000;\n"
        f"{EXPECTED};", QUERY, "MLE"),
    # The check logs in again as the job's user: it must still be able to (else every attempt
    # ends as an infrastructure error, and the node is quarantined for it).
    "password_changed_before_the_check": ("SET PASSWORD = PASSWORD('mine now');", DML, "WA"),
    # Rows of 16 MB under a 64 KB output limit: refused at the first, never a batch of them held.
    "rows_far_over_the_output_limit": ("SELECT REPEAT('x', 16000000) FROM seq_1_to_100;", QUERY, "OLE"),
    "sleep_after_lifting_the_time_limit": (
        f"SET SESSION max_statement_time = 0; SELECT SLEEP(20); {EXPECTED};", QUERY, "TLE"),
    # The table being created holds its metadata lock: a watchdog whose look at the tables
    # waited for it would never reach its deadline, and the slot would be held for good.
    "sleep_inside_a_create_table_the_watchdog_would_wait_for": (
        f"SET SESSION max_statement_time = 0; CREATE TABLE x AS SELECT SLEEP(20) AS s; {EXPECTED};", QUERY, "TLE"),
}


def _server_says(variable: str) -> str:
    conn = _admin()
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT {variable}")
        value = cur.fetchone()[0]
        return value.decode() if isinstance(value, bytes) else str(value)
    finally:
        conn.close()


def test_a_judge_server_that_lets_table_files_go_anywhere_is_named_at_start(plane, launch):
    """A submission's CREATE TABLE … DATA DIRECTORY writes where the server may (this test
    server follows symbolic links, as MariaDB does unless told not to): the agent says so."""
    need_pool("mysql")
    conn = _admin()
    try:
        cur = conn.cursor()
        cur.execute("SELECT @@have_symlink")
        follows = cur.fetchone()[0] in ("YES", b"YES")
    finally:
        conn.close()
    agent, _ = launch(plane, "mysql", slots=1)
    assert ("the judge server follows symbolic links" in agent.logs()) == follows
    # Nor does this server cap what a session may raise its in-memory tables to, or its
    # temporary tablespace (Debian's MariaDB: ibtmp1:12M:autoextend).
    assert "the judge server lets a session raise its in-memory table sizes" in agent.logs()
    unbounded = ":max:" not in _server_says("@@innodb_temp_data_file_path") and "MariaDB" in _server_says("@@version")
    assert ("the judge server's temporary tablespace has no size bound" in agent.logs()) == unbounded


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_attack_ends_in_its_ordinary_verdict_at_once(judged, attack):
    source, sql, verdict = ATTACKS[attack]
    body, seconds = judged(source, sql)
    assert body["verdict"] == verdict, body
    assert seconds < 15
