"""DIAGNOSTIC jobs: this node's self-check (ARCHITECTURE §5, step 4), item by item.

Compiled runtimes compile and run a tiny program; python also must be stopped by its CPU
and memory limits; mysql checks SELECT, DML, that the restricted user cannot reach other
databases, and that temporary resources are gone afterwards. The verdict is AC when every
item passed, WA otherwise.
"""

from __future__ import annotations

import secrets
import time

import MySQLdb

from . import judge, verdicts
from .jobs import InfraError, JobContext
from .runtimes import RuntimeSpec, arkts, cpp, java, python
from .sandbox import Limits, Sandbox, read_head, unbounded_writable_mounts

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
    import dataclasses

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
    try:
        env.extra_dbs.append(other)
        judge_db.create_database(other)
        judge_db.run_admin_script(other, "CREATE TABLE secret (v INT); INSERT INTO secret VALUES (7);")
        dml = judge_db.run_as_user(
            env, "CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 10), (2, 20);"
                 " UPDATE t SET v = v + 1 WHERE id = 2; DELETE FROM t WHERE id = 1; SELECT id, v FROM t;",
            time_limit_ms=5000, output_limit_bytes=4096, cancel=ctx.cancel)
        items.append(item("dml", dml.verdict is None and dml.rows == [(2, 21)],
                          f"restricted user DML: {dml.verdict or dml.rows}"))
        for name, script in (
            ("no_other_database", f"SELECT v FROM `{other}`.secret"),
            ("no_system_tables", "SELECT User FROM mysql.user"),
            ("no_create_database", f"CREATE DATABASE `{judge_db.prefix}escape`"),
        ):
            res = judge_db.run_as_user(env, script, time_limit_ms=5000, output_limit_bytes=4096, cancel=ctx.cancel)
            items.append(item(name, res.verdict == "RE", f"refused: {res.message[:200]}" if res.verdict == "RE"
                              else f"NOT refused: {res.verdict or res.rows}"))
        judge_db.run_admin_script(env.db, "CREATE TABLE n (i INT); INSERT INTO n WITH RECURSIVE r(i) AS "
                                          "(SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 300) SELECT i FROM r;")
        slow = judge_db.run_as_user(
            env, "SELECT SUM(a.i * b.i + c.i * d.i) FROM n a, n b, n c, n d",
            time_limit_ms=300, output_limit_bytes=4096, cancel=ctx.cancel)
        items.append(item("statement_time_limit", slow.verdict == "TLE", f"slow query: {slow.verdict}"))
    finally:
        judge_db.drop_env(env)
    dbs, users = judge_db.leftovers()
    leftover = [n for n in dbs + users if tag in n]
    items.append(item("cleanup", not leftover, "temporary database and user dropped" if not leftover
                      else f"left behind: {', '.join(leftover)}"))
    return items


def run(ctx: JobContext, *, spec: RuntimeSpec, sandbox: Sandbox, judge_db) -> dict:
    start = time.monotonic()
    ctx.progress("JUDGING", None)
    if spec.pool == "mysql":
        items = check_mysql(ctx, judge_db)
    else:
        items = check_program(ctx, spec, sandbox)
    passed = all(i["ok"] for i in items)
    ctx.log.info("self-check done", passed=passed, failed=",".join(i["name"] for i in items if not i["ok"]) or None)
    body = verdicts.judged(ctx.lease_epoch, [])
    body.update(verdict="AC" if passed else "WA", score=100 if passed else 0,
                timeMs=int((time.monotonic() - start) * 1000), checks=items)
    return body
