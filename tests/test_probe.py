"""`python -m kece.probe worker|beat`: the Celery worker's and beat's loops leave a
heartbeat that the container healthcheck reads."""

import os
import subprocess
import sys
import time

import pytest

from kece import probe
from tests.concurrency import wait_until
from tests.live import ROOT, stop_process_group


def run_probe(kind, env):
    return subprocess.run([sys.executable, "-m", "kece.probe", kind], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def heartbeat_dir(tmp_path, settings):
    settings.KECE_PROCESS_HEARTBEAT_DIR = str(tmp_path)
    return tmp_path


def test_a_missing_or_stale_heartbeat_fails_the_probe_and_a_fresh_one_passes(heartbeat_dir):
    env = {**os.environ, "KECE_PROCESS_HEARTBEAT_DIR": str(heartbeat_dir)}
    assert run_probe("worker", env).returncode == 1
    probe.touch("worker")
    assert run_probe("worker", env).returncode == 0
    long_ago = time.time() - probe.STALE_AFTER_S["worker"] - 5
    os.utime(probe.heartbeat_file("worker"), (long_ago, long_ago))
    failed = run_probe("worker", env)
    assert failed.returncode == 1 and "stale" in failed.stderr
    assert run_probe("nonsense", env).returncode == 2


@pytest.mark.redis
def test_a_running_worker_with_beat_passes_both_probes(heartbeat_dir, tmp_path):
    env = {**os.environ, "KECE_PROCESS_HEARTBEAT_DIR": str(heartbeat_dir), "DJANGO_SETTINGS_MODULE": "kece.settings",
           "DATABASE_URL": f"sqlite:///{tmp_path / 'unused.sqlite3'}", "PYTHONPATH": str(ROOT)}
    assert run_probe("worker", env).returncode == 1
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "kece", "worker", "--beat", "--concurrency", "1",
                               "--loglevel", "WARNING", "-s", str(tmp_path / "schedule")], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: run_probe("worker", env).returncode == 0, timeout=120, message="the worker beats")
        wait_until(lambda: run_probe("beat", env).returncode == 0, timeout=120, message="beat ticks")
        first = probe.heartbeat_file("worker").stat().st_mtime
        wait_until(lambda: probe.heartbeat_file("worker").stat().st_mtime > first, timeout=60,
                   message="the worker touches its heartbeat again")
    finally:
        stop_process_group(worker, 30)
