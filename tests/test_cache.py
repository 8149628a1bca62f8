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
