"""The Celery worker after its broker goes away: it keeps trying every few seconds, never
backing off to Kombu's 30 s, so the periodic work (the reaper, the settlement outbox, the
console's live step) resumes within seconds of Redis's return."""

import os
import re
import subprocess
import sys

import pytest
import redis

from kece.celery import PromptReconnectConsumer
from tests.concurrency import wait_until
from tests.live import ROOT, free_port, start_redis, stop_process_group

pytestmark = pytest.mark.redis

RETRY = re.compile(r"Trying again in ([0-9.]+) seconds?")


def _consuming(port: int) -> bool:
    try:
        clients = redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=1).client_list()
    except redis.ConnectionError:
        return False
    return any(client.get("cmd") == "brpop" for client in clients)


def test_the_worker_retries_a_lost_broker_every_few_seconds_and_consumes_again_once_it_is_back(tmp_path):
    port = free_port()
    server = start_redis(port)
    log = tmp_path / "worker.log"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "kece.settings", "PYTHONPATH": str(ROOT),
           "DATABASE_URL": f"sqlite:///{tmp_path / 'unused.sqlite3'}", "REDIS_URL": f"redis://127.0.0.1:{port}/0",
           "KECE_PROCESS_HEARTBEAT_DIR": str(tmp_path)}
    with open(log, "wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "kece", "worker", "--concurrency", "1",
                                   "--loglevel", "WARNING"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        wait_until(lambda: _consuming(port), timeout=120, message="the worker consumes from its broker")
        server.kill()
        server.wait()
        # Six rounds: past the point where Kombu's default (2, 4, 6 … s) would wait longer.
        wait_until(lambda: len(RETRY.findall(log.read_text(errors="replace"))) >= 6, timeout=60,
                   message="six rounds of reconnection attempts")
        waits = [float(seconds) for seconds in RETRY.findall(log.read_text(errors="replace"))]
        assert waits[0] == PromptReconnectConsumer.FIRST_WAIT_S, waits
        assert waits == sorted(waits) and max(waits) == PromptReconnectConsumer.LONGEST_WAIT_S, waits
        server = start_redis(port)
        wait_until(lambda: _consuming(port), timeout=30, message="the worker consumes again")
    finally:
        stop_process_group(worker, 30)
        server.kill()
        server.wait()
