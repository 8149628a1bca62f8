"""The wake-up subscription over a Redis link that goes dead (packets dropped, as on a cut
host, not refused): the server notices within seconds and stays responsive, and wake-ups
come back once the link does. Runs as root, as the suite does in CI (it adds an nft rule for
the test's own Redis port on loopback, and removes it however the test ends)."""

import asyncio
import logging
import os
import subprocess
import threading
from contextlib import contextmanager

import pytest
import redis

from judging import waiting, wakeups
from tests.concurrency import wait_until
from tests.live import free_port, start_redis

POOL = "python"


@contextmanager
def packets_dropped(port: int):
    """Every TCP packet to or from `port` on this host dropped, until the block ends."""
    assert os.geteuid() == 0, "dropping packets needs root: the suite runs as root in CI"
    table = f"kece_test_link_{os.getpid()}"
    rules = [f"add table inet {table}",
             f"add chain inet {table} out {{ type filter hook output priority 0; policy accept; }}",
             f"add rule inet {table} out tcp dport {port} drop",
             f"add rule inet {table} out tcp sport {port} drop"]
    try:
        subprocess.run(["nft", "-f", "-"], input="\n".join(rules) + "\n", text=True, check=True)
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True)


class Lines(logging.Handler):
    def __init__(self, needle: str):
        super().__init__()
        self.needle, self.seen = needle, threading.Event()

    def emit(self, record):
        if self.needle in record.getMessage():
            self.seen.set()


@pytest.fixture
def loop_thread():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_a_dead_redis_link_is_noticed_the_server_stays_responsive_and_wake_ups_come_back(
        settings, monkeypatch, loop_thread):
    port = free_port()
    server = start_redis(port)
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    settings.KECE_CLAIM_FALLBACK_MS = 600_000  # only a wake-up can wake the waiter
    wakeups.reset_redis_client()
    jobs: list = []
    monkeypatch.setattr(waiting, "claimable_in_pool", lambda pool, limit: list(jobs)[:limit])
    lost = Lines("wake-up subscription lost")
    logging.getLogger("kece.waiting").addHandler(lost)
    probe = redis.Redis(port=port, socket_timeout=2)

    def in_loop(function):
        async def call():
            return function()
        return asyncio.run_coroutine_threadsafe(call(), loop_thread).result(timeout=10)

    pools = in_loop(lambda: waiting.PoolWaiters(asyncio.get_running_loop()))
    try:
        waiter = in_loop(lambda: pools.register(POOL, node_id=1))
        in_loop(lambda: pools.requeue(POOL, waiter))  # nothing announced yet: asleep
        wait_until(lambda: probe.pubsub_numpat() == 1, timeout=20, message="the registry subscribes")

        with packets_dropped(port):
            assert lost.seen.wait(30), "a dead link to Redis was never noticed"
            # The process still answers while the link is down (no spinning on the dead socket).
            assert in_loop(lambda: "answered") == "answered"

        jobs.append(waiting.Claimable(None, "python-r1"))  # a job committed while the link was down, its hint lost
        wait_until(waiter.event.is_set, timeout=30,
                   message="the waiter was not woken once the link to Redis came back")
        wait_until(lambda: probe.pubsub_numpat() >= 1, timeout=10, message="the registry subscribed again")
    finally:
        logging.getLogger("kece.waiting").removeHandler(lost)
        for state in pools.pools.values():
            for each in list(state.waiters.values()):
                in_loop(lambda each=each: pools.unregister(POOL, each))
        pools.listen_until = 0
        server.kill()
        server.wait()
        wakeups.reset_redis_client()
