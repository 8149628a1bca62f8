"""A job's test data fetched in the background, a few files at a time.

One file after another, a cold job waits a round trip to the control plane per file (two per
case), after its compile: over a link of 20 ms, a problem of fifty cases waits two seconds
before its first run. Here the files are fetched by a few threads of the job's own (first
cases first), while the job compiles, and each case runs as soon as its own two files are
there while the later cases' still come: a cold job waits for its first case's files, not
for all of them. A job's threads are its own, so a cold job's hundred files never hold up
another slot's one.

Each file goes through the cache as before (`ArtifactCache.get`, pinned for the job): jobs on
other slots that need the same file wait for its one download.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable


class Downloads:
    """`fetch(entry)` for each of `entries`, by up to `threads` threads, in their order."""

    def __init__(self, fetch: Callable[[dict], Path], entries: list[dict], *, threads: int, name: str = "data"):
        self._futures = []
        if not entries:
            return
        executor = ThreadPoolExecutor(max_workers=max(1, min(threads, len(entries))), thread_name_prefix=name)
        try:
            for entry in entries:
                self._futures.append(executor.submit(fetch, entry))
        except BaseException:  # no thread to be had: what was given is dropped or waited for
            self.stop()
            raise
        finally:
            # Its threads end once the queue is done; nothing more is given to it.
            executor.shutdown(wait=False)

    def path(self, index: int) -> Path:
        """The path of the `index`-th entry, once it is there; the others go on coming. A
        failure is raised only after the downloads under way have ended, and those not begun
        are dropped: nothing is written into the cache for a job that has ended."""
        try:
            return self._futures[index].result()
        except BaseException:
            self.stop()
            raise

    def paths(self) -> list[Path]:
        """The files' paths in the entries' order, once all are there; a failure as `path`
        raises it, the first in that order."""
        return [self.path(index) for index in range(len(self._futures))]

    def stop(self) -> None:
        """Drop the downloads not begun and wait for those under way (a job that ends early:
        a compile error, a cancel). Each of them checks the job's cancel before each try."""
        self.drop_waiting()
        wait(self._futures)

    def drop_waiting(self) -> None:
        """Drop the downloads not begun; those under way go on."""
        for future in self._futures:
            future.cancel()
