"""The mysql pool end to end, against the judge MariaDB at 127.0.0.1:3306.

Only databases and users named ``kece_judge_*`` are ever created or dropped.
"""

from __future__ import annotations

import MySQLdb

from .conftest import need_pool, verdict_of

LIMITS = {"timeLimitMs": 1000, "memoryLimitMb": 1, "outputLimitKb": 64}

SCHEMA = """
CREATE TABLE emp (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, dept VARCHAR(10) NOT NULL, salary INT NOT NULL);
CREATE TABLE n (i INT PRIMARY KEY);
"""
SEED = """
INSERT INTO emp VALUES (1, 'ann', 'dev', 1200), (2, 'bob', 'ops', 900), (3, 'cid', 'dev', 1500),
                       (4, 'dan', 'ops', 1100), (5, 'eve', 'qa', 700);
INSERT INTO n WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 300) SELECT i FROM r;
"""
ANSWER = "SELECT name FROM emp WHERE salary > 1000 ORDER BY name;"

QUERY_SUBMISSIONS = {
    "AC": "SELECT name FROM emp WHERE salary > 1000 ORDER BY name;",
    "WA": "SELECT name FROM emp ORDER BY name;",
    "TLE": "SELECT SUM(a.i * b.i + c.i * d.i) FROM n a, n b, n c, n d;",
    "MLE": "CREATE TEMPORARY TABLE big (s VARCHAR(1000)) ENGINE=MEMORY;\n"
           "INSERT INTO big SELECT REPEAT('x', 1000) FROM n a, n b;\nSELECT name FROM emp;",
    "RE": "SELECT no_such_column FROM emp;",
    "CE": "SELEC name FROM emp;",
    "OLE": "SELECT REPEAT('x', 1000) FROM n a, n b;",
}

ACCT_SCHEMA = "CREATE TABLE acct (id INT PRIMARY KEY, balance INT NOT NULL);"
ACCT_SEED = "INSERT INTO acct VALUES (1, 100), (2, 200), (3, 300);"
ACCT_ANSWER = "UPDATE acct SET balance = balance + 10 WHERE id = 2;"
ACCT_CHECK = "SELECT id, balance FROM acct ORDER BY id;"


def _admin():
    return MySQLdb.connect(host="127.0.0.1", port=3306, user="root", passwd="", autocommit=True)


def _leftovers(node_id: int) -> tuple[list, list]:
    like = f"kece\\_judge\\_n{node_id}\\_%"
    conn = _admin()
    try:
        cur = conn.cursor()
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE %s", (like,))
        dbs = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT User FROM mysql.user WHERE User LIKE %s", (like,))
        users = [r[0] for r in cur.fetchall()]
        return dbs, users
    finally:
        conn.close()


def test_sql_submissions_get_their_verdicts_and_nothing_is_left_behind(plane, launch):
    need_pool("mysql")
    node_id, code = plane.register_node("mysql")
    # A leftover of a killed earlier run of this node: swept at start.
    conn = _admin()
    conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS kece_judge_n{node_id}_j1_e1_dead")
    conn.close()

    agent, _ = launch(plane, "mysql", node_id=node_id, join_code=code, slots=2)
    sql = {"schema": SCHEMA, "seed": SEED, "answer": ANSWER, "check": None, "ordered": True}
    jobs = {want: plane.add_job(pool="mysql", source=text, sql=sql, limits=LIMITS)
            for want, text in QUERY_SUBMISSIONS.items()}
    unordered = plane.add_job(
        pool="mysql", source="SELECT name FROM emp WHERE dept = 'dev' ORDER BY name DESC;", limits=LIMITS,
        sql={"schema": SCHEMA, "seed": SEED, "answer": "SELECT name FROM emp WHERE dept = 'dev';", "check": None,
             "ordered": False})
    dml = {"schema": ACCT_SCHEMA, "seed": ACCT_SEED, "answer": ACCT_ANSWER, "check": ACCT_CHECK, "ordered": True}
    dml_ac = plane.add_job(pool="mysql", source="UPDATE acct SET balance = 210 WHERE id = 2;", sql=dml, limits=LIMITS)
    dml_wa = plane.add_job(pool="mysql", source="UPDATE acct SET balance = balance + 10;", sql=dml, limits=LIMITS)
    escape = plane.add_job(pool="mysql", source="SELECT User FROM mysql.user;", sql=sql, limits=LIMITS)
    diag = plane.add_job(pool="mysql", source=None, kind="DIAGNOSTIC", node_id=node_id, limits=LIMITS)

    got = {want: verdict_of(plane, job_id) for want, job_id in jobs.items()}
    assert {want: body["verdict"] for want, body in got.items()} == {want: want for want in got}, \
        {want: body.get("compileOutput") for want, body in got.items()}
    assert got["AC"]["score"] == 100
    assert got["AC"]["cases"] == [{"ordinal": 1, "verdict": "AC", "timeMs": got["AC"]["cases"][0]["timeMs"],
                                   "memoryKb": 0, "score": 100}]
    assert got["WA"]["score"] == 0 and got["WA"]["cases"][0]["score"] == 0
    assert "1064" in got["CE"]["compileOutput"]
    assert verdict_of(plane, unordered)["verdict"] == "AC"
    assert verdict_of(plane, dml_ac)["verdict"] == "AC"
    assert verdict_of(plane, dml_wa)["verdict"] == "WA"
    assert verdict_of(plane, escape)["verdict"] == "RE", "the restricted user cannot read mysql.user"

    body = verdict_of(plane, diag)
    assert body["verdict"] == "AC", body["checks"]
    names = {c["name"] for c in body["checks"]}
    assert {"select", "dml", "no_other_database", "no_system_tables", "cleanup"} <= names

    assert agent.alive()
    assert _leftovers(node_id) == ([], []), "temporary databases and users are dropped"
