"""Django's Redis cache, with one redis-py client per connection pool, and one pool per
server, kept for the whole process.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` around the shared pool on
every cache call, and redis-py's constructor fills a table of some eighty response
callbacks each time: about 0.4 ms of CPU per call, more than the round trip itself, on
every page that reads the status snapshot. A `redis.Redis` is safe to share between
threads (each command takes a connection from the pool), so one per pool is enough.

Django also keeps a cache backend per execution context (`caches` is an asgiref `Local`),
and a task on a lane (`kece.lanes`) runs in a copy of its caller's context: started from a
context that had not used the cache yet, each such task built a backend of its own, with
its own pool and so a new connection to Redis, about 0.7 ms of CPU before its first command.
The served requests happened to share one (a live server opened one connection over thirty
homepage requests); the backends now share one client object per configuration, made once,
whichever context uses the cache first.

Django's backend knows one address per server and no Sentinel. With the option
`"sentinels": True` (settings: REDIS_SENTINELS) the one client is `kece.redis_clients`'
Sentinel-managed one, which follows the primary through a failover.

Either way the client heeds the process's view of Redis (`kece.redis_clients.outage`):
while Redis is held for down a cache call fails at once, as a call to a Redis that is down
does, instead of waiting out its timeout.
"""

import threading
from functools import cached_property

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

import kece.redis_clients as redis_clients

# (servers, options) -> the process's client object for them; pools reset themselves in a
# forked child (redis-py checks the process id).
_shared: dict = {}
_shared_lock = threading.Lock()


class SharedClientRedisCacheClient(RedisCacheClient):
    def __init__(self, servers, sentinels=False, **options):
        super().__init__(servers, **options)
        self._clients = {}
        self._sentinels = sentinels
        self._link_options = options  # the sockets' timeouts, for the Sentinel-managed client too
        self._client = redis_clients.GuardedRedis

    def get_client(self, key=None, *, write=False):
        if self._sentinels:
            client = self._clients.get("sentinel")
            if client is None:
                client = self._clients["sentinel"] = redis_clients.client(guarded=True, **self._link_options)
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

    @cached_property
    def _cache(self):
        key = (tuple(self._servers), repr(sorted(self._options.items())))
        with _shared_lock:
            client = _shared.get(key)
            if client is None:
                client = _shared[key] = self._class(self._servers, **self._options)
        return client
