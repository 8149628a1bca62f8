"""DIAGNOSTIC jobs: this node's self-check (ARCHITECTURE §5, step 4), item by item.

Compiled runtimes compile and run a tiny program; python also must be stopped by its CPU
and memory limits; mysql checks SELECT, DML, that the restricted user cannot reach other
databases (nor create one its grant's pattern would admit), that no connection reads the
agent's files through ``LOAD DATA LOCAL INFILE``, that the time and memory limits hold when
a submission lifts its session's own, and that the job's databases, user and sessions are
gone afterwards.

The server grades a node by the canary programs it sends as DIAGNOSTIC jobs, which the
agent judges like any other job; these items are the extra the first of them asks for
(`ownChecks`), attached to its result as `checks`. A DIAGNOSTIC job without a program (a
server that sends no canaries) gets these items alone: AC when every one passed, WA otherwise.
"""

from __future__ import annotations

import dataclasses
import secrets
import time

import MySQLdb

from . import judge, verdicts
from .jobs import InfraError, JobContext
from .runtimes import RuntimeSpec, arkts, cpp, java, python
from .sandbox import Limits, Sandbox, make_run_folder, read_head, unbounded_writable_mounts

CHECK_SOURCES = {"cpp": cpp.CHECK_SOURCE, "java": java.CHECK_SOURCE, "python": python.CHECK_SOURCE,
                 "arkts": arkts.CHECK_SOURCE}
LIMITS = {"timeLimitMs": 2000, "memoryLimitMb": 256, "outputLimitKb": 1024}
PROBE_MEMORY_KB = 16 * 1024
# Fills both tmpfs far past the probe's memory limit, with files well under the file size one.
FILE_HOARD = ("for d in /tmp /dev/shm; do i=0; while [ $i -lt 8 ]; do "
              "head -c 8000000 /dev/zero > $d/hoard$i || exit 3; i=$((i+1)); done; done")


def item(name: str, ok: bool, detail: str = "") -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail}


def _program_case(ctx: JobContext, spec: RuntimeSpec, sandbox: Sandbox, box, name: str, stdin: bytes,
                  expected: bytes, limits: dict) -> dict:
    inp, exp = ctx.run_dir / f"{name}.in", ctx.run_dir / f"{name}.ans"
    inp.write_bytes(stdin)
    exp.write_bytes(expected)
    return judge.run_case(ctx, spec, sandbox, box, {"ordinal": 1, "weight": 100}, inp, exp, limits)


def _shell(ctx: JobContext, sandbox: Sandbox, box, name: str, script: str, memory_kb: int):
    out, err = ctx.run_dir / f"{name}.out", ctx.run_dir / f"{name}.err"
    limits = Limits(cpu_ms=5000, wall_ms=10000, memory_kb=memory_kb, address_space_bytes=None, stack_bytes=None,
                    file_size_bytes=64 << 20, processes=8)
    res = ctx.checked(sandbox.run(["/bin/sh", "-c", script], box=box, box_writable=False, stdin=None, stdout=out,
                                  stderr=err, limits=limits, cancel=ctx.cancel))
    return res, read_head(out, 256 * 1024).decode("utf-8", "replace")


def isolation_items(ctx: JobContext, sandbox: Sandbox, box) -> list[dict]:
    """What the program cannot escape: the sandbox, its writable filesystems, its memory."""
    if not sandbox.isolated:
        # Reported as it is; the server decides whether it accepts such a node.
        return [item("sandbox_isolated", False, "WEAK: rlimit-only sandbox (JUDGE_ALLOW_WEAK_SANDBOX=1): user code "
                     "can use the network, read the machine's files, fill its disks and leave processes behind")]
    items = [item("sandbox_isolated", True, "bubblewrap: no network, private filesystem and PID namespace")]
    res, mountinfo = _shell(ctx, sandbox, box, "mounts", "cat /proc/self/mountinfo", PROBE_MEMORY_KB * 4)
    loose = unbounded_writable_mounts(mountinfo) if res.ok else ["(mount table unreadable)"]
    items.append(item("filesystems_bounded", not loose, "writable: only size-capped tmpfs" if not loose
                      else f"writable without a bound: {', '.join(loose)[:300]}"))
    res, _ = _shell(ctx, sandbox, box, "hoard", FILE_HOARD, PROBE_MEMORY_KB)
    counted = res.memory_exceeded
    how = ("cgroup v2 " + sandbox.cgroups_note if sandbox.cgroups is not None
           else f"no memory cgroup ({sandbox.cgroups_note}): the watchdog samples the tmpfs every 50 ms")
    items.append(item("memory_files_counted", counted, f"files in the tmpfs count as memory; {how}" if counted
                      else f"NOT counted: files past a {PROBE_MEMORY_KB // 1024} MiB limit went unnoticed; {how}"))
    return items


def check_program(ctx: JobContext, spec: RuntimeSpec, sandbox: Sandbox) -> list[dict]:
    box = judge.prepare_box(ctx, spec, sandbox, CHECK_SOURCES[spec.pool])
    items = isolation_items(ctx, sandbox, box)
    if spec.compile:
        ok, output = judge.compile_in(ctx, spec, sandbox, box, LIMITS["memoryLimitMb"])
        items.append(item("compile", ok, output[:500] if not ok else f"{spec.compile[0]} compiled the probe"))
        if not ok:
            return items
    case = _program_case(ctx, spec, sandbox, box, "sum", b"2 40\n", b"42\n", LIMITS)
    items.append(item("run", case["verdict"] == "AC", f"sum probe: {case['verdict']} in {case['timeMs']} ms"))
    if spec.pool == "python":
        for name, source, want, limits in (
            ("cpu_limit", python.CHECK_CPU_HOG, "TLE", dict(LIMITS, timeLimitMs=500)),
            ("memory_limit", python.CHECK_MEMORY_HOG, "MLE", dict(LIMITS, memoryLimitMb=64)),
        ):
            hog = f"{name}.py"
            sandbox.place_file(box, hog, source)
            hog_spec = _with_run(spec, ("python3", hog))
            res = _program_case(ctx, hog_spec, sandbox, box, name, b"", b"", limits)
            items.append(item(name, res["verdict"] == want, f"expected {want}, got {res['verdict']}"))
    return items


def _with_run(spec: RuntimeSpec, run: tuple[str, ...]) -> RuntimeSpec:
    return dataclasses.replace(spec, run=run)


def check_mysql(ctx: JobContext, judge_db) -> list[dict]:
    items = []
    try:
        ok = judge_db.run_admin_script("information_schema", "SELECT 1") == [(1,)]
        items.append(item("select", ok, "admin SELECT 1"))
    except (MySQLdb.Error, InfraError) as exc:
        return [item("select", False, f"judge MySQL unreachable: {exc}")]
    tag = f"j{ctx.job_id}_e{ctx.lease_epoch}_{secrets.token_hex(3)}"
    env = judge_db.create_env(tag)
    other = f"{env.db}_other"
    # Every "_" of the job's name turned into a character the grant's pattern would admit.
    lookalike = env.db.replace("_", "x")
    parked = None
    try:
        env.extra_dbs.append(other)
        judge_db.create_database(other)
        judge_db.run_admin_script(other, "CREATE TABLE secret (v INT); INSERT INTO secret VALUES (7);")
        judge_db.run_admin_script(env.db, "CREATE TABLE n (i INT); INSERT INTO n WITH RECURSIVE r(i) AS "
                                          "(SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 300) SELECT i FROM r;")

        def as_user(script: str, time_limit_ms: int = 5000, memory_limit_mb: int = 256):
            return judge_db.run_as_user(env, script, time_limit_ms=time_limit_ms, output_limit_bytes=4096,
                                        cancel=ctx.cancel, memory_limit_mb=memory_limit_mb)

        dml = as_user("CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 10), (2, 20);"
                      " UPDATE t SET v = v + 1 WHERE id = 2; DELETE FROM t WHERE id = 1; SELECT id, v FROM t;")
        items.append(item("dml", dml.verdict is None and dml.rows == [(2, 21)],
                          f"restricted user DML: {dml.verdict or dml.rows}"))
        for name, script in (
            ("no_other_database", f"SELECT v FROM `{other}`.secret"),
            ("no_system_tables", "SELECT User FROM mysql.user"),
            ("no_create_database", f"CREATE DATABASE `{judge_db.prefix}escape`"),
            ("no_wildcard_database", f"CREATE DATABASE `{lookalike}`"),
        ):
            items.append(_refused(name, as_user(script)))
        items.append(_local_infile_refused(ctx, judge_db, env, as_user))
        slow = as_user("SELECT SUM(a.i * b.i + c.i * d.i) FROM n a, n b, n c, n d", time_limit_ms=300)
        items.append(item("statement_time_limit", slow.verdict == "TLE", f"slow query: {slow.verdict}"))
        items.extend(_limits_hold(judge_db, as_user))
        # A session still open at cleanup, as a submission's would be if it outlived its run.
        parked = judge_db.connect(user=env.user, password=env.password, db=env.db)
    finally:
        judge_db.drop_env(env)
    items.append(_cleanup_complete(judge_db, tag, env, lookalike, parked))
    return items


def _refused(name: str, res) -> dict:
    return item(name, res.verdict == "RE", f"refused: {res.message[:200]}" if res.verdict == "RE"
                else f"NOT refused: {res.verdict or res.rows}")


def _local_infile_refused(ctx: JobContext, judge_db, env, as_user) -> dict:
    """LOAD DATA LOCAL makes the server read a file of the client — the agent — by name."""
    probe = ctx.run_dir / "local_infile.txt"
    probe.write_text("agent-side file\n")
    load = f"LOAD DATA LOCAL INFILE {MySQLdb.string_literal(str(probe).encode()).decode()} INTO TABLE"
    user = as_user(f"CREATE TABLE li (s TEXT); {load} li; SELECT s FROM li")
    try:
        judge_db.run_admin_script(env.db, f"CREATE TABLE lia (s TEXT); {load} lia;")
        admin_refused = False
    except MySQLdb.Error:
        admin_refused = True
    ok = user.verdict == "RE" and admin_refused
    return item("no_local_infile", ok, "LOAD DATA LOCAL INFILE refused to the restricted and the admin connection"
                if ok else f"NOT refused: restricted {user.verdict or user.rows}, admin refused={admin_refused}")


def _limits_hold(judge_db, as_user) -> list[dict]:
    """The limits hold when a submission lifts the session's own."""
    lift = ("SET SESSION max_statement_time = 0" if judge_db.flavor() == "mariadb"
            else "SET SESSION max_execution_time = 0")
    start = time.monotonic()
    slept = as_user(f"{lift}; SELECT SLEEP(10)", time_limit_ms=300)
    waited = int((time.monotonic() - start) * 1000)
    items = [item("time_limit_not_liftable", slept.verdict == "TLE" and waited < 5000,
                  f"SLEEP(10) after lifting max_statement_time: {slept.verdict or slept.rows} after {waited} ms")]
    parked = as_user("SET SESSION max_heap_table_size = 1073741824, tmp_table_size = 1073741824;"
                     " CREATE TABLE m (s VARCHAR(1000)) ENGINE=MEMORY;"
                     " INSERT INTO m SELECT REPEAT('x', 1000) FROM n a, n b LIMIT 2000; SELECT SLEEP(3)",
                     time_limit_ms=2000, memory_limit_mb=1)
    items.append(item("memory_limit_not_liftable", parked.verdict == "MLE",
                      f"8 MB MEMORY table after lifting max_heap_table_size, 1 MB limit: {parked.verdict or parked.rows}"))
    return items


def _cleanup_complete(judge_db, tag: str, env, lookalike: str, parked) -> dict:
    dbs, users = judge_db.leftovers()
    leftover = [n for n in dbs + users if tag in n]
    conn = judge_db.admin()
    try:
        cur = conn.cursor()
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (lookalike,))
        leftover += [r[0] for r in cur.fetchall()]
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = %s", (env.user,))
        sessions = cur.fetchone()[0]
    finally:
        conn.close()
    if parked is not None:
        try:
            parked.close()
        except MySQLdb.Error:
            pass
    if sessions:
        leftover.append(f"{sessions} session(s) of {env.user}")
    return item("cleanup", not leftover, "temporary databases, user and sessions gone" if not leftover
                else f"left behind: {', '.join(leftover)}")


def own_checks(ctx: JobContext, *, spec: RuntimeSpec, sandbox: Sandbox, judge_db) -> list[dict]:
    """This node's own items, in a run folder of their own (the job's is the canary's)."""
    ctx = dataclasses.replace(ctx, run_dir=make_run_folder(ctx.run_dir / "own-checks"))
    try:
        items = check_mysql(ctx, judge_db) if spec.pool == "mysql" else check_program(ctx, spec, sandbox)
    except InfraError as exc:
        items = [item("own_checks", False, f"{exc.code}: {str(exc)[:500]}")]
    ctx.log.info("own checks done", passed=all(i["ok"] for i in items),
                 failed=",".join(i["name"] for i in items if not i["ok"]) or None)
    return items


def run(ctx: JobContext, *, spec: RuntimeSpec, sandbox: Sandbox, judge_db) -> dict:
    """A DIAGNOSTIC job without a program (a server that sends no canaries): the node's own
    items alone, AC when every one passed, WA otherwise."""
    start = time.monotonic()
    ctx.progress("JUDGING", None)
    items = own_checks(ctx, spec=spec, sandbox=sandbox, judge_db=judge_db)
    passed = all(i["ok"] for i in items)
    body = verdicts.judged(ctx.lease_epoch, [])
    body.update(verdict="AC" if passed else "WA", score=100 if passed else 0,
                timeMs=int((time.monotonic() - start) * 1000), checks=items)
    return body
