"""Content-addressed store for test data and sources: one file per sha-256 digest.

Files are written to a temporary name in the target directory, fsynced and renamed, so a
reader sees either nothing or the complete file. Storing the same bytes twice writes nothing
again; it only marks the file as stored now (see `_refreshed`).
"""

import hashlib
import os
import re
import tempfile
from pathlib import Path

from django.conf import settings

DIGEST_RE = re.compile(r"[0-9a-f]{64}")
# A file being written: renamed to its digest once whole (retention sweeps a crashed write's).
INCOMING = ".incoming-"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_digest(value: str) -> bool:
    return bool(DIGEST_RE.fullmatch(value or ""))


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
    if not _refreshed(target, len(data)):
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=INCOMING, dir=target.parent)
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


def _refreshed(target: Path, size: int) -> bool:
    """Whether `target` is already whole in the store; if so its modification time is set to
    now. Retention sweeps a file that nothing names only once it is older than a grace period
    (`judging.services.retention`): storing it again, before the manifest that will name it is
    written, must start that grace again. A file swept meanwhile is simply written anew."""
    try:
        if target.stat().st_size != size:
            return False
        os.utime(target)
    except FileNotFoundError:
        return False
    return True


def store_file(path: Path) -> dict:
    return store_bytes(Path(path).read_bytes())
