"""The node agent's test-data cache: what checking a file's digest on each job's first use
costs, and how long an eviction round over many files takes.

    .venv/bin/python bench/agent_cache.py [--sizes-mb 1,16,256] [--files 5000]

Prints, per file size, a job's first use of a cached file (sha-256 of the whole file,
`ArtifactCache.get` with the job's pins) against reading the file once; then the time to
index `--files` files at start and to evict half of them in one round. Works in a
temporary folder under /tmp, removed afterwards. Needs no database.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from node_agent.cache import ArtifactCache  # noqa: E402


def _entry(data: bytes) -> dict:
    return {"digest": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _fetch(data: bytes):
    def fetch(_digest):
        for i in range(0, len(data), 1 << 20):
            yield data[i:i + (1 << 20)]
    return fetch


def first_use(root: Path, size_mb: int, rounds: int) -> tuple[float, float]:
    """Median seconds of (a job's first use of a cached file, one plain read of it)."""
    data = os.urandom(size_mb << 20)
    cache = ArtifactCache(root / f"c{size_mb}", high_bytes=1 << 40)
    entry = _entry(data)
    path = cache.get(entry, _fetch(data))
    gets, reads = [], []
    for _ in range(rounds):
        pins = cache.pins()
        started = time.perf_counter()
        pins.get(entry, _fetch(data))
        gets.append(time.perf_counter() - started)
        pins.release()
        started = time.perf_counter()
        with open(path, "rb") as fh:
            while fh.read(1 << 20):
                pass
        reads.append(time.perf_counter() - started)
    return statistics.median(gets), statistics.median(reads)


def eviction(root: Path, files: int) -> tuple[float, float]:
    """Seconds to index `files` small files at start, and to evict half of them."""
    folder = root / "evict"
    first = ArtifactCache(folder, high_bytes=1 << 40)
    for i in range(files):
        data = i.to_bytes(4, "big") * 256  # 1 KiB each
        first.get(_entry(data), _fetch(data))
    started = time.perf_counter()
    cache = ArtifactCache(folder, high_bytes=files * 1024, low_bytes=files * 512)
    indexed = time.perf_counter() - started
    data = b"x" * 1024
    started = time.perf_counter()
    cache.get(_entry(data), _fetch(data))  # one more file: past the budget, one round down to half
    evicted = time.perf_counter() - started
    assert cache.evictions >= files // 2
    return indexed, evicted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", default="1,16,256")
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kece-bench-cache-", dir="/tmp"))
    try:
        print(f"{'file':>8}  {'first use (verified)':>20}  {'plain read':>10}  {'GB/s verified':>13}")
        for size_mb in (int(s) for s in args.sizes_mb.split(",")):
            get, read = first_use(root, size_mb, args.rounds)
            print(f"{size_mb:>5} MB  {get * 1000:>17.1f} ms  {read * 1000:>7.1f} ms  "
                  f"{(size_mb << 20) / get / 1e9:>13.2f}")
        indexed, evicted = eviction(root, args.files)
        print(f"{args.files} cached files: indexed at start in {indexed * 1000:.0f} ms, "
              f"half of them evicted in one round in {evicted * 1000:.0f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
