"""`python -m kece.serve`: the web tier's uvicorn with one process per usable core."""

import os
import re
from pathlib import Path

from kece import metrics
from kece.serve import APPLICATION, reset_metrics, usable_cores, uvicorn_argv, web_processes

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
