"""A small in-process cache: bounded, thread-safe, entries optionally expiring.

For facts a request can check cheaply if they turn out stale (who a credential belongs
to, what a job row points at): never the truth, only a saved read.
"""

import logging
import threading
import time
from collections import OrderedDict

from django.core.cache import cache

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


def shared_or_computed(key: str, compute, *, timeout: float):
    """`compute()`'s value through the shared (Redis) cache while it is fresh there, for
    figures that many pages read and any one may compute. While the cache is away, each
    read computes: the page is slower, never broken."""
    try:
        found = cache.get(key)
    except Exception as exc:  # noqa: BLE001 - any cache failure: computed instead
        logger.warning("shared cache unreadable", extra={"key": key, "error": str(exc)})
        return compute()
    if found is None:
        found = compute()
        try:
            cache.set(key, found, timeout=timeout)
        except Exception as exc:  # noqa: BLE001
            logger.warning("shared cache unwritable", extra={"key": key, "error": str(exc)})
    return found
