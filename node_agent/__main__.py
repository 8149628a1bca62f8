"""``python -m node_agent``: check configuration and this pool's runtime, then serve.

Exit codes: 0 stopped cleanly (SIGTERM/SIGINT); 1 unexpected failure; 2 bad configuration;
3 sandbox or runtime unusable; 4 join code or credential refused by the server.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import ssl
import sys

from prometheus_client import disable_created_metrics

from . import AGENT_VERSION, cgroups, log
from .client import Client
from .config import Config, ConfigError, load
from .health import Identity, start as start_health
from .judge import compile_limits
from .loop import EXIT_CONFIG, EXIT_RUNTIME, Agent
from .metrics import AgentMetrics
from .sandbox import Sandbox, make_run_folder, probe, read_head, remove_tree, sweep_runs

logger = log.get("main")


def fail(code: int, message: str) -> int:
    print(f"node_agent: {message}", file=sys.stderr)
    return code


def prepare_workspace(config: Config) -> None:
    # 0711: the unprivileged sandbox user may traverse to its own box, list nothing.
    os.chmod(config.workspace, 0o711)
    runs = config.workspace / "runs"
    runs.mkdir(mode=0o711, exist_ok=True)
    os.chmod(runs, 0o711)


def build_sandbox(config: Config) -> Sandbox:
    binds = config.spec.binds
    if config.bwrap_not_found is not None:
        raise RuntimeError(f"JUDGE_BWRAP names {config.bwrap_not_found!r}, which is not an executable here; name "
                           "the bubblewrap binary, or leave JUDGE_BWRAP out to find bwrap on PATH (for development "
                           "only, JUDGE_BWRAP=off with JUDGE_ALLOW_WEAK_SANDBOX=1 runs without it)")
    if config.bwrap is None:
        if not config.allow_weak_sandbox:
            raise RuntimeError("bubblewrap (bwrap) was not found on PATH; install it (Debian: apt-get install "
                               "bubblewrap) or, for development only, set JUDGE_ALLOW_WEAK_SANDBOX=1")
        return Sandbox(bwrap=None, uid=config.sandbox_uid, gid=config.sandbox_gid, extra_binds=binds)
    memory, note = cgroups.discover()
    sandbox = Sandbox(bwrap=config.bwrap, uid=config.sandbox_uid, gid=config.sandbox_gid, extra_binds=binds,
                      cgroups=memory, cgroups_note=note)
    error = probe(sandbox, config.workspace / "runs")
    if error is not None:
        # Never a quiet fall back to the weak sandbox: an operator who installed bwrap meant it.
        raise RuntimeError(f"bubblewrap does not work here: {error} (every folder above JUDGE_WORKSPACE must be "
                           "searchable (o+x) by the sandbox uid, and the kernel must allow unprivileged user "
                           "namespaces; for development only, JUDGE_BWRAP=off with JUDGE_ALLOW_WEAK_SANDBOX=1 "
                           "runs without it)")
    if memory is None:
        log.event(logger, logging.WARNING, "no memory cgroup for runs: the watchdog alone bounds memory, "
                  "sampling every 50 ms", reason=note)
    else:
        log.event(logger, logging.INFO, "memory cgroup per run", where=note)
    return sandbox


def check_runtime(config: Config, sandbox: Sandbox) -> None:
    """Only this pool's runtime is checked: its commands must run inside the sandbox."""
    spec = config.spec
    runs = config.workspace / "runs"
    for argv in spec.check:
        run_dir = make_run_folder(runs / f"check-{secrets.token_hex(4)}")
        try:
            box = run_dir / "box"
            sandbox.prepare_box(box)
            res = sandbox.run(list(argv), box=box, box_writable=True, stdin=None, stdout=run_dir / "out",
                              stderr=run_dir / "err", limits=compile_limits(spec), env=dict(spec.env))
            version = (read_head(run_dir / "out", 4096)
                       + read_head(run_dir / "err", 4096)).decode("utf-8", "replace")
            if res.setup_error or res.exit_code != 0:
                raise RuntimeError(f"runtime check `{' '.join(argv)}` failed for spec {spec.id} "
                                   f"(exit {res.exit_code}, signal {res.signal}): "
                                   f"{(res.setup_error or version).strip()[:300]}")
            log.event(logger, logging.INFO, "runtime ok", command=argv[0],
                      version=(version.strip().splitlines() or [""])[0][:120])
        finally:
            remove_tree(run_dir)


def main() -> int:
    try:
        config = load(dict(os.environ))
    except ConfigError as exc:
        return fail(EXIT_CONFIG, f"configuration error: {exc}")
    log.setup(config.log_level, config.log_format)
    log.bind(pool=config.pool)
    log.event(logger, logging.INFO, "starting", version=AGENT_VERSION, pool=config.pool, spec=config.runtime_spec,
              slots=config.local_slots, control=config.control_url)
    if config.control_url_is_plain_http:
        log.event(logger, logging.WARNING, "JUDGE_CONTROL_URL uses plain http (loopback only): credentials are "
                  "not encrypted; use https in production")
    if config.spec.stand_in:
        log.event(logger, logging.WARNING, "runtime spec is a stand-in", spec=config.runtime_spec,
                  note=config.spec.stand_in)
    if config.sandbox_uid is None:
        log.event(logger, logging.WARNING, "not running as root: user code runs as the agent's own user and can "
                  "write what it owns, cached test data included, which later jobs read; run the agent as root "
                  "(its user code then runs as JUDGE_SANDBOX_UID)", uid=os.geteuid())
    cpus = len(os.sched_getaffinity(0))
    if config.local_slots > cpus:
        # Programs then share cores, and their CPU time (page faults included) grows with
        # the contention: a program may be judged TLE for time the host did not give it.
        log.event(logger, logging.WARNING, "more slots than CPUs: judged programs will compete for cores; size "
                  "JUDGE_LOCAL_SLOTS (and the node's host group) to the CPUs", slots=config.local_slots, cpus=cpus)

    prepare_workspace(config)
    sweep_runs(config.workspace / "runs")
    try:
        sandbox = build_sandbox(config)
    except RuntimeError as exc:
        return fail(EXIT_RUNTIME, str(exc))
    if not sandbox.isolated:
        for _ in range(3):
            log.event(logger, logging.WARNING, "WEAK SANDBOX: bubblewrap is not in use; user code runs with rlimits "
                      "only — it can reach the network and read the host's files. Development only "
                      "(JUDGE_ALLOW_WEAK_SANDBOX=1).")
    judge_db = None
    try:
        if config.pool == "mysql":
            from .sqljudge import CLEANUP_WAIT_S, JudgeDb

            judge_db = JudgeDb(config.mysql, lifetime_s=config.job_max_ms / 1000 + 2 * CLEANUP_WAIT_S)
            if not judge_db.ping():
                raise RuntimeError(f"judge MySQL at {config.mysql.host}:{config.mysql.port} is unreachable "
                                   "with JUDGE_MYSQL_URL")
            log.event(logger, logging.INFO, "judge database ok", flavor=judge_db.flavor(),
                      address=f"{config.mysql.host}:{config.mysql.port}")
            if judge_db.table_files_may_go_anywhere():
                log.event(logger, logging.WARNING, "the judge server follows symbolic links: a submission's "
                          "CREATE TABLE … DATA DIRECTORY can write table files wherever the server may; start it "
                          "with --skip-symbolic-links (MySQL 8 disables them by default)")
            if (reached := judge_db.heap_tables_unbounded()) is not None:
                log.event(logger, logging.WARNING, "the judge server lets a session raise its in-memory table sizes: "
                          "a submission's temporary MEMORY table can hold the server's memory past its limit; start "
                          "it with --maximum-max_heap_table_size and --maximum-tmp_table_size (for instance 64M)",
                          reachedBytes=reached)
            if (path := judge_db.temporary_tables_grow_the_disk()) is not None:
                log.event(logger, logging.WARNING, "the judge server's temporary tablespace has no size bound: a "
                          "submission's temporary InnoDB tables grow it on disk until the server restarts; start it "
                          "with --innodb-temp-data-file-path=ibtmp1:12M:autoextend:max:1G", setting=path)
        else:
            check_runtime(config, sandbox)
    except RuntimeError as exc:
        return fail(EXIT_RUNTIME, str(exc))

    identity = Identity(config.pool, config.runtime_spec)
    # No `_created` series next to each counter: the agent's restarts show in its own
    # counters going back to zero, and the extra series would double what is scraped.
    disable_created_metrics()
    metrics = AgentMetrics()
    if config.health_listen is not None:
        try:
            start_health(config.health_listen, config.tls_cert, config.tls_key, identity, metrics,
                         metrics_token=config.metrics_token)
        except (OSError, ssl.SSLError) as exc:
            return fail(EXIT_CONFIG, f"configuration error: health endpoint on "
                        f"{config.health_listen[0]}:{config.health_listen[1]} cannot start: {exc}")
    else:
        log.event(logger, logging.WARNING, "health endpoint disabled (JUDGE_HEALTH_LISTEN=off): the control "
                  "plane cannot verify this node")

    client = Client(config.control_url, str(config.ca_file) if config.ca_file else None)
    agent = Agent(config, client, sandbox, identity, judge_db=judge_db, metrics=metrics)
    signal.signal(signal.SIGTERM, agent.request_stop)
    signal.signal(signal.SIGINT, agent.request_stop)
    return agent.run()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
