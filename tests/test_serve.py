"""`python -m kece.serve`: the web tier's uvicorn with one process per usable core."""

import os
import re
from pathlib import Path

from kece.serve import APPLICATION, usable_cores, uvicorn_argv, web_processes

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
        upstream = re.search(r"upstream\s+\w+\s*\{(.*?)\}", conf.read_text(), re.S).group(1)
        proxy_keeps = _seconds(re.search(r"keepalive_timeout\s+(\d+s?);", upstream).group(1))
        assert kept[0] > proxy_keeps, conf
    # An operator's own value stands.
    assert uvicorn_argv(["--timeout-keep-alive", "90"], cores=2).count("--timeout-keep-alive=90") == 1
    assert not any(a == f"--timeout-keep-alive={kept[0]}" for a in uvicorn_argv(["--timeout-keep-alive=90"], 2))


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
