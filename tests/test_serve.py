"""`python -m kece.serve`: the web tier's uvicorn with one process per usable core."""

import json
import os
import re
import signal
from pathlib import Path

import pytest

from kece import metrics
from kece.serve import APPLICATION, reset_metrics, usable_cores, uvicorn_argv, web_processes
from tests.concurrency import wait_until
from tests.live import LiveServer

ROOT = Path(__file__).resolve().parents[1]


def test_it_runs_one_process_per_core_unless_told_otherwise():
    assert uvicorn_argv(["--port=8000"], cores=6)[:4] == ["uvicorn", APPLICATION, "--port=8000", "--workers=6"]
    assert uvicorn_argv(["--workers=auto", "--port=8000"], cores=6)[2] == "--workers=6"
    assert uvicorn_argv(["--workers", "auto"], cores=3)[2] == "--workers=3"
    assert uvicorn_argv(["--workers", "2", "--port=8000"], cores=6)[2:4] == ["--workers=2", "--port=8000"]


def _seconds(text: str) -> int:
    return int(text.rstrip("s"))


def test_idle_connections_outlive_the_proxys_so_it_never_reuses_one_being_closed():
    """nginx keeps idle upstream connections `keepalive_timeout`; were the server to close
    one first, a POST sent down it that instant would be answered 502 (seen in the host lab
    with uvicorn's own 5 s, clients waiting out `Retry-After: 5`)."""
    argv = uvicorn_argv(["--port=8000"], cores=2)
    kept = [_seconds(a.split("=", 1)[1]) for a in argv if a.startswith("--timeout-keep-alive=")]
    assert len(kept) == 1
    for conf in (ROOT / "deploy/compose/nginx.conf", ROOT / "deploy/k8s/base/internal-proxy.conf"):
        upstreams = re.findall(r"upstream\s+(\w+)\s*\{(.*?)\}", conf.read_text(), re.S)
        assert {name for name, _ in upstreams} == {"kece_web", "kece_node_api"}, conf
        for name, upstream in upstreams:
            proxy_keeps = _seconds(re.search(r"keepalive_timeout\s+(\d+s?);", upstream).group(1))
            assert kept[0] > proxy_keeps, (conf, name)
    # An operator's own value stands.
    assert uvicorn_argv(["--timeout-keep-alive", "90"], cores=2).count("--timeout-keep-alive=90") == 1
    assert not any(a == f"--timeout-keep-alive={kept[0]}" for a in uvicorn_argv(["--timeout-keep-alive=90"], 2))


def test_the_node_apis_processes_start_without_emptying_the_web_processes_metrics(tmp_path, monkeypatch, settings):
    """Beside each other on one metrics folder (Compose's volume, a pod's /tmp), the node
    API's processes and the web processes each empty only their own group's files."""
    settings.KECE_METRICS_DIR = tmp_path
    monkeypatch.delenv(metrics.GROUP_ENV, raising=False)
    reset_metrics()
    (tmp_path / "web" / "counter_1.db").write_bytes(b"web")
    monkeypatch.setenv(metrics.GROUP_ENV, "node-api")
    reset_metrics()
    (tmp_path / "node-api" / "counter_2.db").write_bytes(b"node")
    reset_metrics()  # the node API restarted: its counters start again, the web's stay
    assert (tmp_path / "web" / "counter_1.db").read_bytes() == b"web"
    assert not any((tmp_path / "node-api").iterdir())
    assert os.environ[metrics.GROUP_ENV] == "node-api"  # what its workers inherit


def test_a_cpu_quota_caps_the_processes(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("50000 100000\n")  # half a core
    assert usable_cores(cpu_max) == 1
    cpu_max.write_text(f"{affinity * 100000 + 1} 100000\n")  # more than the affinity allows
    assert usable_cores(cpu_max) == affinity
    cpu_max.write_text("max 100000\n")
    assert usable_cores(cpu_max) == affinity
    assert usable_cores(tmp_path / "absent") == affinity


def test_the_embedded_default_runs_one_process_whatever_the_cores():
    assert web_processes({}) == 1
    assert web_processes({"DATABASE_URL": "sqlite:///var/kece.sqlite3"}) == 1
    assert web_processes({"DATABASE_URL": "mysql://kece@db:3306/kece"}) == usable_cores()


@pytest.mark.django_db(transaction=True)
def test_the_supervising_process_logs_as_every_other_one(tmp_path):
    """With several workers, uvicorn's supervisor writes its own lines (a worker started, a
    worker died and was replaced): one JSON object each, as the rest of the stream, so a
    log pipeline that parses every line keeps them. And `--no-access-log` is obeyed."""
    log = tmp_path / "server.log"
    server = LiveServer(workers=2, log_path=log, args=["--log-level", "info"], env={"KECE_LOG_FORMAT": "json"})
    with server:
        def children():  # the workers, not multiprocessing's resource tracker
            pids = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
            return [int(pid) for pid in pids if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]

        wait_until(lambda: len(children()) == 2, timeout=30, message="both workers started")
        victim = children()[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: f"Child process [{victim}] died" in log.read_text(), timeout=30,
                   message="the supervisor saw the worker die")
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(events) == len(lines), [line for line in lines if not line.startswith("{")]
    died = [e for e in events if e["message"] == f"Child process [{victim}] died"]
    assert died and died[0]["logger"] == "uvicorn.error" and died[0]["pid"] == server.process.pid
    assert any(e["message"].startswith("Started parent process") for e in events)
    # `--no-access-log` (the server was asked for its summary while starting) holds in the
    # workers, whose application's settings load after uvicorn configured its loggers.
    assert not [e for e in events if e["logger"] == "uvicorn.access"]
