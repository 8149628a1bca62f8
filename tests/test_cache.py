"""The Redis cache keeps one redis-py client per connection pool (building one costs more
than a round trip) and that client serves many threads at once."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.cache import caches

from kece.cache import SharedClientRedisCache


def test_the_cache_builds_its_redis_client_once_and_shares_it_between_threads():
    cache = caches["default"]
    if not isinstance(cache, SharedClientRedisCache):
        pytest.fail("the test run's cache must be the project's Redis cache (REDIS_URL)")
    backend = cache._cache
    assert backend.get_client() is backend.get_client(write=True)

    def round_trip(number):
        cache.set(f"shared-client:{number}", number)
        return cache.get(f"shared-client:{number}")

    with ThreadPoolExecutor(16) as threads:
        assert list(threads.map(round_trip, range(200))) == list(range(200))
    assert len(backend._clients) == 1


def test_requests_on_a_lane_share_the_process_redis_connections():
    """Django keeps a cache backend per execution context, and each task on a lane runs in a
    fresh copy of its caller's: without the shared client each request built its own pool,
    and so opened its own connection to Redis."""
    import asyncio

    import redis
    from django.conf import settings

    from kece import lanes

    cache = caches["default"]
    if not isinstance(cache, SharedClientRedisCache):
        pytest.fail("the test run's cache must be the project's Redis cache (REDIS_URL)")

    def request(number):
        caches["default"].set(f"lane-request:{number}", number)
        return caches["default"].get(f"lane-request:{number}")

    async def requests():
        return [await lanes.USER.run(request, number) for number in range(50)]

    server = redis.Redis.from_url(settings.REDIS_URL)
    request(-1)  # the process's first connection
    opened = server.info("stats")["total_connections_received"]
    assert asyncio.run(requests()) == list(range(50))
    assert server.info("stats")["total_connections_received"] - opened <= 2


def test_one_request_recomputes_a_stale_figure_while_the_others_read_the_previous_one():
    """A class opening its lesson together once the statistics have gone stale: one request
    computes them again, the others are answered at once with the previous figures."""
    import threading

    from django.core.cache import cache

    from kece.caches import shared_or_computed

    cache.delete_many(["figures", "figures:previous", "figures:computing"])
    assert shared_or_computed("figures", lambda: "monday", timeout=60) == "monday"
    cache.delete("figures")  # gone stale
    started, others_done = threading.Event(), threading.Event()
    computed = []

    def compute():
        computed.append(1)
        started.set()
        assert others_done.wait(30), "the others waited for this computation"
        return "tuesday"

    with ThreadPoolExecutor(8) as threads:
        first = threads.submit(shared_or_computed, "figures", compute, timeout=60)
        assert started.wait(30)  # the first request holds the computation
        others = [threads.submit(shared_or_computed, "figures", compute, timeout=60) for _ in range(7)]
        assert [other.result(timeout=30) for other in others] == ["monday"] * 7
        others_done.set()
        assert first.result(timeout=30) == "tuesday"
    assert len(computed) == 1
    assert shared_or_computed("figures", compute, timeout=60) == "tuesday"


def test_a_failed_recomputation_lets_the_next_request_try_again():
    from django.core.cache import cache

    from kece.caches import shared_or_computed

    cache.delete_many(["sums", "sums:previous", "sums:computing"])
    shared_or_computed("sums", lambda: 1, timeout=60)
    cache.delete("sums")

    def broken():
        raise RuntimeError("database away")

    with pytest.raises(RuntimeError):
        shared_or_computed("sums", broken, timeout=60)
    assert shared_or_computed("sums", lambda: 2, timeout=60) == 2
