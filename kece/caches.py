"""A small in-process cache: bounded, thread-safe, entries optionally expiring.

For facts a request can check cheaply if they turn out stale (who a credential belongs
to, what a job row points at): never the truth, only a saved read.
"""

import logging
import threading
import time
from collections import OrderedDict

from django.core.cache import cache

from kece.redis_clients import already_reported

logger = logging.getLogger("kece.caches")


class BoundedCache:
    def __init__(self, max_entries: int, ttl_seconds: float | None = None):
        self.max_entries = max_entries
        self.ttl_seconds = ttl_seconds
        self._lock = threading.Lock()
        self._entries: "OrderedDict[object, tuple[float, object]]" = OrderedDict()

    def get(self, key):
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] < time.monotonic():
                return None
            return entry[1]

    def put(self, key, value) -> None:
        expires = time.monotonic() + self.ttl_seconds if self.ttl_seconds is not None else float("inf")
        with self._lock:
            self._entries[key] = (expires, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def drop(self, key) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def drop_where(self, predicate) -> None:
        """Drop every entry whose value satisfies `predicate`."""
        with self._lock:
            for key in [k for k, (_, value) in self._entries.items() if predicate(value)]:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# While one request computes a figure that has gone stale, the others are served the
# previous one: kept this many times the figure's own life. A class opening its lesson at
# the start of a lab would otherwise compute the same statistics once per student.
STALE_KEPT_FOR = 10


def shared_or_computed(key: str, compute, *, timeout: float):
    """`compute()`'s value through the shared (Redis) cache while it is fresh there, for
    figures that many pages read and any one may compute. Once it is stale, one request
    computes it again while the others read the previous value (when there is one: else
    each computes). While the cache is away, each read computes: the page is slower, never
    broken."""
    previous_key, computing_key = f"{key}:previous", f"{key}:computing"
    try:
        found = cache.get_many([key, previous_key])
        if key in found:
            return found[key]
        if previous_key in found and not cache.add(computing_key, 1, timeout=timeout):
            return found[previous_key]
    except Exception as exc:  # noqa: BLE001 - any cache failure: computed instead
        if not already_reported(exc):
            logger.warning("shared cache unreadable", extra={"key": key, "error": str(exc)})
        return compute()
    try:
        value = compute()
    except Exception:
        _forget(computing_key)  # the next request tries again
        raise
    try:
        cache.set(key, value, timeout=timeout)
        cache.set(previous_key, value, timeout=timeout * STALE_KEPT_FOR)
        cache.delete(computing_key)
    except Exception as exc:  # noqa: BLE001
        if not already_reported(exc):
            logger.warning("shared cache unwritable", extra={"key": key, "error": str(exc)})
    return value


def _forget(key: str) -> None:
    try:
        cache.delete(key)
    except Exception as exc:  # noqa: BLE001
        if not already_reported(exc):
            logger.warning("shared cache unwritable", extra={"key": key, "error": str(exc)})
