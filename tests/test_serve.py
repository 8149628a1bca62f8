"""`python -m kece.serve`: the web tier's uvicorn with one process per usable core."""

import os

from kece.serve import APPLICATION, usable_cores, uvicorn_argv, web_processes


def test_it_runs_one_process_per_core_unless_told_otherwise():
    assert uvicorn_argv(["--port=8000"], cores=6) == ["uvicorn", APPLICATION, "--port=8000", "--workers=6"]
    assert uvicorn_argv(["--workers=auto", "--port=8000"], cores=6)[2] == "--workers=6"
    assert uvicorn_argv(["--workers", "auto"], cores=3)[2:] == ["--workers=3"]
    assert uvicorn_argv(["--workers", "2", "--port=8000"], cores=6)[2:] == ["--workers=2", "--port=8000"]


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
