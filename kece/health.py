"""Readiness of a web process (`/readyz`) and its draining on SIGTERM.

Critical: the database answers within a second, and every migration on disk is applied.
Redis is not critical: without it claims fall back to polling, so its loss is `degraded`
and the process still takes traffic. Liveness (`/livez`) touches neither.
"""

import concurrent.futures
import logging
import math
import signal
import threading
import time

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

import kece.redis_clients as redis_clients

logger = logging.getLogger("kece.health")

DEADLINE_S = 1.0
# The probe's own socket timeouts only free its thread; the deadline decides what a probe
# reports. Were they equal, the two would race and a silent host would be reported now as
# `timeout`, now as the driver's error.
SOCKET_TIMEOUT_S = max(1, math.ceil(2 * DEADLINE_S))  # whole seconds; 0 would mean none

# One thread runs the database checks. A check that outlives its deadline (a host that
# drops packets) keeps that thread until its own socket timeouts end it; meanwhile later
# probes report the timeout instead of piling up blocked threads.
_database_checks = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="readyz")
_pending: concurrent.futures.Future | None = None
_pending_lock = threading.Lock()
_migrated = False  # once every migration was seen applied, this process never asks again
_draining = threading.Event()


def _probe_connection():
    """A connection of the check's own, with socket timeouts: the request threads' pooled
    connections have none, and would wait as long as TCP does on a silent host."""
    base = connections[DEFAULT_DB_ALIAS]
    options = dict(base.settings_dict.get("OPTIONS", {}))
    if base.vendor == "mysql":
        seconds = SOCKET_TIMEOUT_S
        options.update(connect_timeout=seconds, read_timeout=seconds, write_timeout=seconds)
    elif base.vendor == "sqlite":
        options["timeout"] = DEADLINE_S
    return base.__class__({**base.settings_dict, "OPTIONS": options}, alias=DEFAULT_DB_ALIAS)


_probe = None  # the checks' connection, kept between probes (used by their one thread only)


def _check_database() -> str | None:
    """None when the database answers and is migrated; else what is wrong. The connection
    is kept: a probe that needed a new one each time would fail, and take every process out
    of service, whenever the server is at its connection limit while the processes' own
    connections serve on. It is opened again after a failure."""
    global _probe
    if _probe is None:
        _probe = _probe_connection()
    # A kept connection the server has closed meanwhile (its idle timeout) is not the
    # database away: once more, on a new one, before saying so.
    kept = _probe.connection is not None
    for last in (not kept, True):
        try:
            return _ask(_probe)
        except Exception:
            _probe.close()  # whatever broke, the next try starts on a new connection
            if last:
                raise


def _ask(probe) -> str | None:
    global _migrated
    with probe.cursor() as cursor:
        cursor.execute("SELECT 1")
    if not _migrated:
        from django.db.migrations.executor import MigrationExecutor

        executor = MigrationExecutor(probe)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            return "migrations"
        _migrated = True
    return None


def _database() -> tuple[str, str | None]:
    """(check name, failure) of the database checks, within the deadline."""
    global _pending
    with _pending_lock:
        if _pending is not None and not _pending.done():
            return "database", "timeout"
        _pending = future = _database_checks.submit(_check_database)
    try:
        failure = future.result(timeout=DEADLINE_S)
    except concurrent.futures.TimeoutError:
        return "database", "timeout"
    except Exception as exc:
        return "database", _named(exc)
    return ("migrations", "unapplied") if failure == "migrations" else ("database", None)


def _named(exc: Exception) -> str:
    """The error's class, with the driver's error number when it has one (`OperationalError
    1040`: too many connections, 1045: access denied, 2003: cannot connect)."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    return type(exc).__name__ if code is None else f"{type(exc).__name__} {code}"


_redis = None


def _redis_client():
    global _redis
    if _redis is None:
        _redis = redis_clients.client(socket_connect_timeout=DEADLINE_S, socket_timeout=DEADLINE_S)
    return _redis


def redis_failure() -> str | None:
    """None when Redis answers a ping within the deadline, else the error's name. Asked
    every time, whatever the process holds Redis for (`redis_clients.outage`), and what it
    finds ends an outage or begins one."""
    try:
        redis_clients.asked(_redis_client().ping)
    except Exception as exc:
        return type(exc).__name__
    return None


def readiness() -> tuple[int, dict, list[dict]]:
    """(HTTP status, body, checks): 503 while draining or when a critical check fails, 200
    otherwise (`degraded` when only Redis is down). Never raises."""
    if _draining.is_set():
        return 503, {"status": "draining"}, []
    checks = []
    started = time.monotonic()
    try:
        name, failure = _database()
    except Exception as exc:  # a readiness probe answers; it does not fail
        name, failure = "database", type(exc).__name__
    elapsed = time.monotonic() - started
    if name == "migrations":
        checks.append(_result("database", None, elapsed))
    checks.append(_result(name, failure, elapsed))
    if name == "database" and failure is None:
        checks.append(_result("migrations", None, 0.0))
    if settings.REDIS_URL:
        started = time.monotonic()
        checks.append(_result("redis", redis_failure(), time.monotonic() - started, critical=False))
    failed = [c["name"] for c in checks if c["status"] != "ok"]
    if any(c["critical"] for c in checks if c["status"] != "ok"):
        return 503, {"status": "unavailable", "failed": failed}, checks
    return 200, {"status": "degraded" if failed else "ok", "failed": failed}, checks


# Where the ASGI router answers `/readyz` (`kece.asgi`): threads of its own, so that a probe
# waits behind no request, lane or download (each answer takes at most the deadline twice).
ANSWERING = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="readyz-answer")


def answer(*, verbose: bool) -> tuple[int, dict]:
    """`/readyz`'s status and body; with `verbose`, each check with its status and time, and
    the claims waiting in this process. Not being ready is said at WARNING, naming what
    failed, once a probe (draining was said once, as it began)."""
    status, body, checks = readiness()
    if body["status"] == "unavailable":
        logger.warning("not ready", extra={"failed": body["failed"]})
    if verbose:
        body = {**body, "checks": checks, "longPolls": long_polls()}
    return status, body


def _result(name: str, failure: str | None, seconds: float, critical: bool = True) -> dict:
    return {"name": name, "status": "ok" if failure is None else "failed", "critical": critical,
            "error": failure, "ms": round(seconds * 1000, 1)}


# --- draining -------------------------------------------------------------------------------

_long_polls = 0
_long_polls_changed = threading.Condition()


def long_poll_started() -> None:
    global _long_polls
    with _long_polls_changed:
        _long_polls += 1


def long_poll_ended() -> None:
    global _long_polls
    with _long_polls_changed:
        _long_polls -= 1
        _long_polls_changed.notify_all()


def long_polls() -> int:
    return _long_polls


def drain_on_sigterm() -> bool:
    """Put a drain in front of uvicorn's own SIGTERM handling: the process answers `/readyz`
    503 at once and goes on serving, new claims included, until no long poll is waiting in
    it, for at most KECE_DRAIN_MS (by default the longest claim wait); then it stops as
    uvicorn does.

    Why here: uvicorn (`Server.capture_signals`) installs its handlers with `signal.signal`
    for the whole of `Server.serve`, before the lifespan starts, and puts the previous ones
    back when it ends; its handler only asks the main loop to stop, after which uvicorn
    closes the listening socket, waits for the open requests and runs the lifespan's
    shutdown. Nothing it offers runs before the listener closes, and a server that no longer
    accepts cannot say it is draining. Wrapping its handler from the lifespan's startup
    (which runs on the main thread) works however uvicorn was started (`kece.serve`, plain
    `uvicorn`, one process or `--workers`, whose supervisor passes SIGTERM on to each) and
    leaves the rest of uvicorn's shutdown as it is. A second SIGTERM stops at once; SIGINT
    (Ctrl-C) is uvicorn's alone. Returns whether the drain was installed."""
    try:
        from uvicorn.server import Server
    except ImportError:
        return False
    stop = signal.getsignal(signal.SIGTERM)
    if not isinstance(getattr(stop, "__self__", None), Server):
        return False  # not under uvicorn's handler: leave the signal alone
    limit = settings.KECE_DRAIN_MS / 1000

    def drain_then_stop(sig):
        logger.info("draining", extra={"longPolls": _long_polls, "drainSeconds": limit})
        with _long_polls_changed:
            _long_polls_changed.wait_for(lambda: _long_polls == 0, timeout=limit)
        stop(sig, None)

    def on_sigterm(sig, frame):
        if _draining.is_set() or limit <= 0:
            stop(sig, frame)
            return
        _draining.set()
        # On a thread: a signal handler must not wait, nor take the locks (logging's, the
        # counter's) that the code it interrupted may hold.
        threading.Thread(target=drain_then_stop, args=(sig,), name="drain", daemon=True).start()

    signal.signal(signal.SIGTERM, on_sigterm)
    return True
