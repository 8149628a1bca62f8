from __future__ import annotations

import hashlib
import os

import pytest

from node_agent.cache import ArtifactCache, ArtifactError


def entry(data: bytes) -> dict:
    return {"digest": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def fetcher(data: bytes, calls: list):
    def fetch(digest):
        calls.append(digest)
        yield data[:3]
        yield data[3:]
    return fetch


def test_a_verified_file_is_stored_by_digest_and_reused(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    data, calls = b"hello world\n", []
    path = cache.get(entry(data), fetcher(data, calls))
    assert path == tmp_path / "cache" / entry(data)["digest"][:2] / entry(data)["digest"]
    assert path.read_bytes() == data and oct(path.stat().st_mode & 0o777) == "0o600"
    assert cache.get(entry(data), fetcher(data, calls)) == path
    assert len(calls) == 1, "the second use comes from the cache"


@pytest.mark.parametrize("served", [b"hello world!", b"hello", b"HELLO WORLD\n"])
def test_wrong_bytes_never_enter_the_cache(tmp_path, served):
    cache = ArtifactCache(tmp_path / "cache")
    want = entry(b"hello world\n")
    with pytest.raises(ArtifactError) as err:
        cache.get(want, fetcher(served, []))
    assert err.value.code == "artifact_corrupt"
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*")), "no partial or corrupt file left"


def test_a_malformed_manifest_entry_is_refused(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    with pytest.raises(ArtifactError):
        cache.get({"digest": "../../etc/passwd", "bytes": 1}, fetcher(b"x", []))


def test_prune_drops_least_recently_used_files(tmp_path):
    cache = ArtifactCache(tmp_path / "cache", max_bytes=10)
    old = cache.get(entry(b"aaaaaaaa"), fetcher(b"aaaaaaaa", []))
    os.utime(old, (1, 1))
    new = cache.get(entry(b"bbbbbbbb"), fetcher(b"bbbbbbbb", []))
    assert cache.prune() == 1
    assert not old.exists() and new.exists()
