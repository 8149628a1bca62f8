"""Django's Redis cache, with one redis-py client per connection pool kept for the process.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` around the shared pool on
every cache call, and redis-py's constructor fills a table of some eighty response
callbacks each time: about 0.4 ms of CPU per call, more than the round trip itself, on
every page that reads the status snapshot. A `redis.Redis` is safe to share between
threads (each command takes a connection from the pool), so one per pool is enough.

Django's backend knows one address per server and no Sentinel. With the option
`"sentinels": True` (settings: REDIS_SENTINELS) the one client is `kece.redis_clients`'
Sentinel-managed one, which follows the primary through a failover.
"""

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

import kece.redis_clients as redis_clients


class SharedClientRedisCacheClient(RedisCacheClient):
    def __init__(self, servers, sentinels=False, **options):
        super().__init__(servers, **options)
        self._clients = {}
        self._sentinels = sentinels

    def get_client(self, key=None, *, write=False):
        if self._sentinels:
            client = self._clients.get("sentinel")
            if client is None:
                client = self._clients["sentinel"] = redis_clients.client()
            return client
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            # A race here only builds one client too many; the pool stays the one.
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class SharedClientRedisCache(RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = SharedClientRedisCacheClient
