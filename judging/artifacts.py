"""Content-addressed store for test data and sources: one file per sha-256 digest.

Files are written to a temporary name in the target directory, fsynced and renamed, so a
reader sees either nothing or the complete file. Storing the same bytes twice is a no-op.
"""

import hashlib
import os
import re
import tempfile
from pathlib import Path

from django.conf import settings

DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_digest(value: str) -> bool:
    return bool(DIGEST_RE.match(value or ""))


def root() -> Path:
    return Path(settings.KECE_ARTIFACT_ROOT)


def path_for(digest: str) -> Path:
    if not is_digest(digest):
        raise ValueError(f"not a sha-256 digest: {digest!r}")
    return root() / digest[:2] / digest[2:4] / digest


def entry_for(data: bytes) -> dict:
    """The manifest entry `{digest, bytes}` of `data`, without storing it."""
    return {"digest": sha256_hex(data), "bytes": len(data)}


def store_bytes(data: bytes) -> dict:
    """Store `data` durably (written, synced, then renamed into place: a file in the store
    is always whole); return its manifest entry `{digest, bytes}`."""
    digest = sha256_hex(data)
    target = path_for(digest)
    if not (target.exists() and target.stat().st_size == len(data)):
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return {"digest": digest, "bytes": len(data)}


def store_file(path: Path) -> dict:
    return store_bytes(Path(path).read_bytes())
