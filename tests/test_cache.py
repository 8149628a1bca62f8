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
