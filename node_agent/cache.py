"""Content-addressed cache of test data: ``<workspace>/cache/<aa>/<digest>``.

A file enters the cache only after its size and sha-256 matched the manifest entry: it is
streamed to a temporary name in the same folder and renamed into place, so a reader never
sees a partial file. It is checked again on every job's first use, so a file damaged on disk
is dropped and fetched again, never judged with. The cache lives outside every sandbox; user
code gets test input as an already-open file descriptor, never a path into here.

Size: ``high_bytes`` is the budget. Once the files pass it, the least recently used ones go
until they fit ``low_bytes`` (a gap, so one more file does not trigger another round), but
never a file a running job holds: each job pins what it uses until it ends (reference
counted, as jobs on other slots may use the same file). A disk that fills up while a file is
written makes room the same way and tries once more; if that fails too the job gets
:class:`DiskFull`, an infrastructure error, never a verdict.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterable

from . import log

logger = logging.getLogger(__name__)

DIGEST_RE = re.compile(r"[0-9a-f]{64}")
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# Room for the file system's own bookkeeping beyond a file's bytes.
DISK_HEADROOM = 1 << 20


class ArtifactError(Exception):
    """Test data could not be obtained intact. Always an INFRA_ERROR, never a verdict."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class CacheUnwritable(ArtifactError):
    """The cache's own folder refused a write for another reason than a full disk (a
    read-only remount, permissions, an I/O error): the node's fault, not the job's."""

    def __init__(self, message: str):
        super().__init__("cache_unwritable", message)


class DiskFull(ArtifactError):
    """No room on the cache's disk, even after evicting what no job holds."""

    def __init__(self, message: str, needed: int):
        super().__init__("disk_full", message)
        self.needed = needed


Fetch = Callable[[str], Iterable[bytes]]


class Pins:
    """The files one job has used; they stay in the cache until :meth:`release`."""

    def __init__(self, cache: "ArtifactCache"):
        self.cache = cache
        self.digests: set[str] = set()
        self.verified: set[str] = set()

    def get(self, entry: dict, fetch: Fetch) -> Path:
        return self.cache.get(entry, fetch, pins=self)

    def release(self) -> None:
        self.cache.release(self)


class ArtifactCache:
    def __init__(self, root: Path, high_bytes: int = 2 << 30, low_bytes: int | None = None,
                 on_evict: Callable[[int], None] = lambda count: None):
        self.root = root
        self.high_bytes = high_bytes
        self.low_bytes = min(high_bytes, low_bytes if low_bytes is not None else high_bytes * 3 // 4)
        self.on_evict = on_evict
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self._locks: dict[str, threading.Lock] = {}
        # Guards the index, the pins and the total; never held while a file is read or fetched.
        self._guard = threading.Lock()
        self._index: OrderedDict[str, int] = OrderedDict()  # digest → bytes, least recently used first
        self._pinned: dict[str, int] = {}
        self._bytes = 0
        self.evictions = 0
        self._scan()
        self.evict_over_budget()

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def path_for(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def pins(self) -> Pins:
        return Pins(self)

    def _lock(self, digest: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(digest, threading.Lock())

    def _scan(self) -> None:
        """Index what an earlier run left, oldest use first; drop a killed run's temporary files."""
        found = []
        for sub in self.root.iterdir():
            if not sub.is_dir():
                continue
            for f in sub.iterdir():
                try:
                    st = f.stat()
                except FileNotFoundError:
                    continue
                if f.name.startswith(".") or not DIGEST_RE.fullmatch(f.name):
                    f.unlink(missing_ok=True)
                    continue
                found.append((st.st_mtime, f.name, st.st_size))
        for _mtime, digest, size in sorted(found):
            self._index[digest] = size
            self._bytes += size

    def get(self, entry: dict, fetch: Fetch, pins: Pins | None = None) -> Path:
        """Return the local path of a verified copy of ``entry`` ({digest, bytes}), pinned
        for ``pins``' job until it releases them."""
        digest, size = entry.get("digest"), entry.get("bytes")
        if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
            raise ArtifactError("artifact_corrupt", f"manifest digest is malformed: {digest!r}")
        if not isinstance(size, int) or size < 0:
            raise ArtifactError("artifact_corrupt", f"manifest size is malformed for {digest}")
        path = self.path_for(digest)
        # Pinned before it is looked at, so no other job's eviction can take it from now on.
        if pins is not None:
            self._pin(pins, digest)
        # Two workers needing the same file download it once.
        with self._lock(digest):
            if pins is not None and digest in pins.verified and path.is_file():
                self._touch(digest, size)
                return path
            if path.is_file():
                if _intact(path, digest, size):
                    _mark_used(path)  # the order of use outlives a restart
                    self._touch(digest, size)
                    if pins is not None:
                        pins.verified.add(digest)
                    return path
                # Damaged on disk: never used, fetched again; said, as a disk that changes
                # files under the cache may do the same to a run's.
                log.event(logger, logging.WARNING, "a cached test-data file was damaged on disk: fetched again",
                          digest=digest, path=str(path))
                self._forget(digest)
                path.unlink(missing_ok=True)
            self._fetch(digest, size, path, fetch)
            self._touch(digest, size)
            if pins is not None:
                pins.verified.add(digest)
        self.evict_over_budget()
        return path

    def _fetch(self, digest: str, size: int, path: Path, fetch: Fetch) -> None:
        if not self.fits_disk(size):
            # Refused before a byte is written: downloading it until the disk filled would
            # evict the whole cache and fail other slots' writes, for nothing.
            raise DiskFull(f"{digest}: {size} bytes can never fit on the cache's disk", size)
        try:
            self._download(digest, size, path, fetch)
            return
        except OSError as exc:
            if exc.errno not in FULL_ERRNOS:
                raise CacheUnwritable(f"{path.parent}: {exc.strerror or exc}") from None
        self.evict_for(size)
        free = self.free_disk()
        if free < size + DISK_HEADROOM:
            raise DiskFull(f"{digest}: {size} bytes do not fit on the cache's disk ({free} bytes free, "
                           "nothing more to evict)", size)
        try:
            self._download(digest, size, path, fetch)
        except OSError as exc:
            if exc.errno not in FULL_ERRNOS:
                raise CacheUnwritable(f"{path.parent}: {exc.strerror or exc}") from None
            raise DiskFull(f"{digest}: the cache's disk is full ({exc.strerror})", size) from None

    def _download(self, digest: str, size: int, path: Path, fetch: Fetch) -> None:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = path.parent / f".{digest}.{os.getpid()}.{threading.get_ident()}.part"
        hasher = hashlib.sha256()
        received = 0
        try:
            with open(tmp, "wb") as out:
                for chunk in fetch(digest):
                    received += len(chunk)
                    if received > size:
                        raise ArtifactError("artifact_corrupt", f"{digest}: more than the {size} bytes of the manifest")
                    hasher.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if received != size:
                raise ArtifactError("artifact_corrupt", f"{digest}: got {received} bytes, manifest says {size}")
            if hasher.hexdigest() != digest:
                raise ArtifactError("artifact_corrupt", f"{digest}: sha-256 of the bytes received does not match")
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        finally:
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass

    def free_disk(self) -> int:
        try:
            return shutil.disk_usage(self.root).free
        except OSError:
            return 0

    def fits_disk(self, size: int) -> bool:
        """Whether a file of `size` bytes (with the headroom) could ever be on the cache's disk:
        within what its files may use of it when empty (what is used and what is free, not the
        blocks kept for root); an unreadable disk: assumed so, as a download will find out."""
        try:
            usage = shutil.disk_usage(self.root)
        except OSError:
            return True
        return size + DISK_HEADROOM <= usage.used + usage.free

    # -- pins and the index -------------------------------------------------------------

    def _pin(self, pins: Pins, digest: str) -> None:
        with self._guard:
            if digest not in pins.digests:
                pins.digests.add(digest)
                self._pinned[digest] = self._pinned.get(digest, 0) + 1

    def release(self, pins: Pins) -> None:
        with self._guard:
            for digest in pins.digests:
                left = self._pinned.get(digest, 0) - 1
                if left > 0:
                    self._pinned[digest] = left
                else:
                    self._pinned.pop(digest, None)
            pins.digests.clear()
            pins.verified.clear()
        self.evict_over_budget()

    def _touch(self, digest: str, size: int) -> None:
        with self._guard:
            self._bytes += size - self._index.pop(digest, 0)
            self._index[digest] = size

    def _forget(self, digest: str) -> None:
        with self._guard:
            self._bytes -= self._index.pop(digest, 0)

    # -- eviction -----------------------------------------------------------------------

    def evict_over_budget(self) -> int:
        """Past the high watermark, evict least recently used files down to the low one."""
        with self._guard:
            if self._bytes <= self.high_bytes:
                return 0
        return self._evict(lambda: self._bytes <= self.low_bytes)

    def evict_for(self, size: int) -> int:
        """A full disk: evict until ``size`` bytes (and some headroom) are free on it."""
        return self._evict(lambda: self.free_disk() >= size + DISK_HEADROOM)

    def _evict(self, enough: Callable[[], bool]) -> int:
        removed = 0
        while True:
            with self._guard:
                if enough():
                    break
                victim = next((d for d in self._index if d not in self._pinned), None)
                if victim is None:
                    break  # what is left is in use: it stays, over budget or not
                self._bytes -= self._index.pop(victim)
            # Deleting is slow on a busy disk: done outside the guard, so jobs using other
            # files are not held up. Under the file's own lock, a job that pinned it
            # meanwhile has it back in the index (or will fetch it again after this).
            with self._lock(victim):
                with self._guard:
                    if victim in self._pinned or victim in self._index:
                        continue
                try:
                    self.path_for(victim).unlink(missing_ok=True)
                except OSError:
                    continue  # out of the index all the same; the next start's scan finds it again
            removed += 1
        if removed:
            self.evictions += removed
            self.on_evict(removed)
        return removed


def _mark_used(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _intact(path: Path, digest: str, size: int) -> bool:
    try:
        if path.stat().st_size != size:
            return False
        hasher = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                hasher.update(chunk)
    except OSError:
        return False
    return hasher.hexdigest() == digest
