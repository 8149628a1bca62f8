"""Content-addressed cache of test data: ``<workspace>/cache/<aa>/<digest>``.

A file enters the cache only after its size and sha-256 matched the manifest entry: it is
streamed to a temporary name in the same folder and renamed into place, so a reader never
sees a partial file. The cache lives outside every sandbox; user code gets test input as an
already-open file descriptor, never a path into here.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")


class ArtifactError(Exception):
    """Test data could not be obtained intact. Always an INFRA_ERROR, never a verdict."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


Fetch = Callable[[str], Iterable[bytes]]


class ArtifactCache:
    def __init__(self, root: Path, max_bytes: int = 2 << 30):
        self.root = root
        self.max_bytes = max_bytes
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def path_for(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def _lock(self, digest: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(digest, threading.Lock())

    def get(self, entry: dict, fetch: Fetch) -> Path:
        """Return the local path of a verified copy of ``entry`` ({digest, bytes})."""
        digest, size = entry.get("digest"), entry.get("bytes")
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            raise ArtifactError("artifact_corrupt", f"manifest digest is malformed: {digest!r}")
        if not isinstance(size, int) or size < 0:
            raise ArtifactError("artifact_corrupt", f"manifest size is malformed for {digest}")
        path = self.path_for(digest)
        # Two workers needing the same file download it once.
        with self._lock(digest):
            if path.is_file():
                if path.stat().st_size == size:
                    os.utime(path)  # recently used: keep it when pruning
                    return path
                path.unlink()  # damaged on disk: fetch it again
            self._download(digest, size, path, fetch)
            return path

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

    def prune(self, keep: set[str] = frozenset()) -> int:
        """Delete least recently used files until the cache fits ``max_bytes``."""
        files = []
        total = 0
        for sub in self.root.iterdir():
            if not sub.is_dir():
                continue
            for f in sub.iterdir():
                try:
                    st = f.stat()
                except FileNotFoundError:
                    continue
                if f.name.startswith("."):
                    # A temp file older than an hour is a leftover of a killed agent.
                    if st.st_mtime < time.time() - 3600:
                        f.unlink(missing_ok=True)
                    continue
                files.append((st.st_mtime, st.st_size, f))
                total += st.st_size
        removed = 0
        for _mtime, fsize, f in sorted(files):
            if total <= self.max_bytes:
                break
            if f.name in keep:
                continue
            f.unlink(missing_ok=True)
            total -= fsize
            removed += 1
        return removed
