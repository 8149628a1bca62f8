"""Redis clients for the cache, wake-ups and health checks: one address (REDIS_URL), or the
current primary as the Sentinels name it (REDIS_SENTINELS).

Through Sentinel a client asks the Sentinels for the primary whenever it opens a
connection; a connection to a server that has gone, or that answers as a read-only replica
after a failover ("You can't write against a read only replica"), is dropped with a
ConnectionError, and redis-py's retry opens the next one to whichever server the Sentinels
name now. So a failover costs a failed attempt or two, never a restart.
"""

from django.conf import settings


def _sentinel(module, timeouts: dict):
    return module.Sentinel(settings.REDIS_SENTINELS, sentinel_kwargs=settings.REDIS_SENTINEL_KWARGS,
                           **settings.REDIS_DATA_PARAMS, **timeouts)


def client(**timeouts):
    """A `redis.Redis` for the configured Redis; `timeouts` are redis-py's socket options
    (a dead link is noticed within seconds: settings.REDIS_LINK_OPTIONS)."""
    import redis

    timeouts = {**settings.REDIS_LINK_OPTIONS, **timeouts}

    if settings.REDIS_SENTINELS:
        import redis.sentinel

        return _sentinel(redis.sentinel, timeouts).master_for(settings.REDIS_SENTINEL_MASTER)
    return redis.Redis.from_url(settings.REDIS_URL, **timeouts)


def async_client(**timeouts):
    """The same for asyncio (`redis.asyncio.Redis`)."""
    import redis.asyncio as aioredis

    timeouts = {**settings.REDIS_LINK_OPTIONS, **timeouts}

    if settings.REDIS_SENTINELS:
        import redis.asyncio.sentinel

        return _sentinel(redis.asyncio.sentinel, timeouts).master_for(settings.REDIS_SENTINEL_MASTER)
    return aioredis.Redis.from_url(settings.REDIS_URL, **timeouts)
