"""One KECE process's Redis users, run as `python -m tests.sentinel_client` by
tests/test_sentinel.py with REDIS_SENTINELS set: the cache, a wake-up hint published and
heard by the waiting claims' subscription, a message through the console's channel layer,
and a task sent over the Celery broker and read back. It does each once, says so on stdout
(a JSON line), waits for a line on stdin (the test fails the primary over meanwhile), and
does each again in the same process, retrying each for as long as the failover may take."""

import asyncio
import json
import sys
import time

import django

django.setup()

from channels.layers import get_channel_layer  # noqa: E402
from django.core.cache import cache  # noqa: E402

from judging import wakeups  # noqa: E402
from judging.waiting import PoolWaiters  # noqa: E402
from kece.celery import app  # noqa: E402

QUEUE = "kece-sentinel-check"
POOL = "sentinel-check"


def use_cache(n: int) -> None:
    cache.set(f"sentinel-check-{n}", n, 60)
    assert cache.get(f"sentinel-check-{n}") == n


def use_broker(n: int) -> None:
    app.send_task("kece.sentinel_check", args=[n], queue=QUEUE)
    with app.connection_for_read() as connection:
        queue = connection.SimpleQueue(QUEUE)
        try:
            message = queue.get(timeout=5)
            message.ack()
        finally:
            queue.close()
    assert message.payload[0] == [n], message.payload


async def main() -> None:
    loop = asyncio.get_running_loop()
    waiters = PoolWaiters(loop)
    heard: asyncio.Queue = asyncio.Queue()
    # Only what comes over Redis: the local notifier keeps the bound method it was given.
    waiters.on_topic = heard.put_nowait
    waiters.keep_listening()
    waiters.listen_until = float("inf")
    layer = get_channel_layer()

    async def hint_heard() -> None:
        await asyncio.to_thread(wakeups.publish_now, POOL)
        while True:
            topic = await asyncio.wait_for(heard.get(), 1)
            if topic == wakeups.WAKE + POOL:
                return

    async def console_message(n: int) -> None:
        channel = await layer.new_channel()
        await layer.group_add("sentinel-check", channel)
        await layer.group_send("sentinel-check", {"type": "check", "n": n})
        message = await asyncio.wait_for(layer.receive(channel), 2)
        assert message["n"] == n

    async def each(n: int) -> dict:
        failures = {}
        deadline = time.monotonic() + 60
        for name, attempt in (("cache", lambda: asyncio.to_thread(use_cache, n)), ("wake-up", hint_heard),
                              ("console", lambda: console_message(n)),
                              ("broker", lambda: asyncio.to_thread(use_broker, n))):
            while True:
                try:
                    await attempt()
                    break
                except Exception as error:
                    failures.setdefault(name, []).append(type(error).__name__)
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
        return failures

    print(json.dumps({"round": 1, "failures": await each(1)}), flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    started = time.monotonic()
    failures = await each(2)
    print(json.dumps({"round": 2, "failures": failures, "seconds": round(time.monotonic() - started, 2)}),
          flush=True)
    waiters.redis_task.cancel()


if __name__ == "__main__":
    asyncio.run(main())
