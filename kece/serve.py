"""`python -m kece.serve [uvicorn options]`: uvicorn serving `kece.asgi:application` with as
many worker processes as the host gives this container cores.

`--workers auto` (the default when no `--workers` is given) is the number of cores the
process may run on (its CPU affinity), capped by a cgroup v2 CPU quota (`cpus:` in Compose,
`--cpus` in Docker), which the affinity does not show — and one process on SQLite (the
embedded default), which allows no second server process. Each process holds at most
KECE_DB_THREADS + KECE_WEB_THREADS + KECE_ADMIN_THREADS database connections.
"""

import math
import os
import sys
from pathlib import Path

APPLICATION = "kece.asgi:application"
# The supervising process's own lines (a worker started, died, restarted) in the format of
# every other line, `KECE_LOG_FORMAT`: it loads no Django settings. The workers' lines
# follow the settings' LOGGING once the application is loaded.
LOG_CONFIG = Path(__file__).with_name("uvicorn_logging.json")
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cores(cpu_max: Path = CPU_MAX) -> int:
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = cpu_max.read_text().split()
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota here: the affinity is the limit
    return cores


# An idle connection is kept longer than any proxy in front keeps it (nginx's upstream
# `keepalive_timeout` 60 s in Compose and Kubernetes). With uvicorn's own 5 s a proxy may send
# a request down a connection the server is closing that instant, and a POST it cannot retry
# elsewhere (a submission, a result) is answered 502: most often just after a pause, such as
# clients waiting out a `Retry-After: 5`.
KEEP_ALIVE_S = 75


def uvicorn_argv(args: list[str], cores: int) -> list[str]:
    """uvicorn's command line for `args`: `auto` workers resolved to `cores`, and the
    defaults this server wants where `args` do not say otherwise."""
    resolved, given, i = [], set(), 0
    while i < len(args):
        arg = args[i]
        if arg in ("--workers", "--timeout-keep-alive", "--log-config") and i + 1 < len(args):
            arg, i = f"{arg}={args[i + 1]}", i + 1
        name = arg.split("=", 1)[0]
        given.add(name)
        if arg == "--workers=auto":
            arg = f"--workers={cores}"
        resolved.append(arg)
        i += 1
    if "--workers" not in given:
        resolved.append(f"--workers={cores}")
    if "--timeout-keep-alive" not in given:
        resolved.append(f"--timeout-keep-alive={KEEP_ALIVE_S}")
    if "--log-config" not in given:
        resolved.append(f"--log-config={LOG_CONFIG}")
    return ["uvicorn", APPLICATION, *resolved]


def web_processes(environ=os.environ) -> int:
    database = environ.get("DATABASE_URL", "")
    if environ.get("DATABASE_URL_FILE"):  # as the settings read it
        database = Path(environ["DATABASE_URL_FILE"]).read_text().strip()
    return usable_cores() if database.startswith(("mysql", "mariadb")) else 1


def reset_metrics() -> None:
    """The process group's metrics folder, emptied once for the whole group before its
    workers start (`kece.metrics`); the workers inherit the group's name. The group is
    KECE_METRICS_GROUP (`web` unless set): the node API's own processes, beside the web
    processes on one metrics folder, name theirs `node-api` so that neither empties the
    other's."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kece.settings")
    from kece import metrics

    metrics.reset_group()


def main() -> None:
    from uvicorn.main import main as uvicorn_main

    reset_metrics()
    argv = uvicorn_argv(sys.argv[1:], web_processes())
    uvicorn_main.main(args=argv[1:], prog_name=argv[0])


if __name__ == "__main__":
    main()
