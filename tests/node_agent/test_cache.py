from __future__ import annotations

import hashlib
import os
import threading

import pytest

from node_agent.cache import ArtifactCache, ArtifactError, DiskFull
from tests.disks import small_disk


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


def test_past_the_high_watermark_least_recently_used_files_go_down_to_the_low_one_but_never_a_pinned_one(tmp_path):
    evicted = []
    cache = ArtifactCache(tmp_path / "cache", high_bytes=40, low_bytes=20, on_evict=evicted.append)
    files = [bytes([65 + i]) * 10 for i in range(5)]  # ten bytes each
    running = cache.pins()
    held = running.get(entry(files[0]), fetcher(files[0], []))  # the oldest, but a running job uses it
    finished = cache.pins()
    paths = [held] + [finished.get(entry(data), fetcher(data, [])) for data in files[1:4]]
    finished.release()
    assert cache.total_bytes == 40 and evicted == [], "at the high watermark, not past it"

    newest = cache.get(entry(files[4]), fetcher(files[4], []))
    assert held.exists(), "pinned by a running job"
    assert not any(p.exists() for p in paths[1:]), "the least recently used went, down to the low watermark"
    assert newest.exists()
    assert cache.total_bytes == 20 and sum(evicted) == 3
    on_disk = sum(p.stat().st_size for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert on_disk == cache.total_bytes

    # Once the job ends its file is an ordinary old one; the next round takes it first.
    running.release()
    for data in files[1:4]:
        cache.get(entry(data), fetcher(data, []))
    assert not held.exists() and not newest.exists() and cache.total_bytes == 20


def test_a_pin_is_counted_per_job(tmp_path):
    cache = ArtifactCache(tmp_path / "cache", high_bytes=10, low_bytes=0)
    data = b"x" * 10
    first, second = cache.pins(), cache.pins()
    path = first.get(entry(data), fetcher(data, []))
    first.get(entry(data), fetcher(data, []))  # used twice by one job: still one pin
    second.get(entry(data), fetcher(data, []))
    first.release()
    other = cache.pins().get(entry(b"y" * 10), fetcher(b"y" * 10, []))  # a third job, still running
    assert path.exists(), "the second job still holds it"
    second.release()
    assert not path.exists() and other.exists(), "past the budget and held by no one"


def test_pins_from_many_threads_keep_the_count(tmp_path):
    cache = ArtifactCache(tmp_path / "cache", high_bytes=10, low_bytes=0)
    data = b"z" * 10
    start = threading.Barrier(8)

    def job():
        pins = cache.pins()
        start.wait()
        for _ in range(50):
            pins.get(entry(data), fetcher(data, []))
            pins.release()

    threads = [threading.Thread(target=job) for _ in range(8)]
    keeper = cache.pins()
    path = keeper.get(entry(data), fetcher(data, []))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cache.pins().get(entry(b"w" * 10), fetcher(b"w" * 10, []))
    assert path.exists(), "the one pin left keeps it"
    keeper.release()
    assert not path.exists()


def test_a_file_a_job_pinned_is_never_taken_by_evictions_running_beside_it(tmp_path):
    cache = ArtifactCache(tmp_path / "cache", high_bytes=30, low_bytes=0)
    shared = b"s" * 10
    done = threading.Event()
    missing = []

    def reader():
        while not done.is_set():
            pins = cache.pins()
            path = pins.get(entry(shared), fetcher(shared, []))
            for _ in range(20):
                if not path.is_file() or path.read_bytes() != shared:
                    missing.append(path)
            pins.release()

    def filler(n):
        for i in range(300):
            data = f"{n}-{i:06d}".encode().ljust(10, b".")
            cache.get(entry(data), fetcher(data, []))

    readers = [threading.Thread(target=reader) for _ in range(2)]
    fillers = [threading.Thread(target=filler, args=(n,)) for n in range(2)]
    for t in readers + fillers:
        t.start()
    for t in fillers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert missing == []
    assert cache.evictions > 0, "evictions did run"
    on_disk = sum(p.stat().st_size for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert on_disk == cache.total_bytes, "the index and the disk agree"


def test_a_job_that_pins_a_file_while_an_eviction_has_picked_it_keeps_it(tmp_path):
    """The eviction deletes outside the index lock: a job may pin and check the file it
    picked between the two steps, and must then keep it."""
    cache = ArtifactCache(tmp_path / "cache", high_bytes=10, low_bytes=0)
    old, new = b"o" * 10, b"n" * 10
    path = cache.get(entry(old), fetcher(old, []))
    job, got, came = cache.pins(), [], []
    file_lock = cache._lock

    def job_first(digest):
        if digest == entry(old)["digest"] and not came:
            came.append(True)
            got.append(job.get(entry(old), fetcher(old, [])))  # the job comes in between
        return file_lock(digest)

    cache._lock = job_first
    cache.get(entry(new), fetcher(new, []))  # past the budget: the old file is picked
    assert got == [path] and path.read_bytes() == old, "the job's file stayed"
    assert cache.total_bytes == 10 and cache.evictions == 1, "the new one, unpinned, went instead"
    job.release()
    cache.get(entry(b"m" * 10), fetcher(b"m" * 10, []))
    assert not path.exists(), "released, it goes like any other"


def test_a_file_damaged_on_disk_is_dropped_fetched_again_and_said(tmp_path, caplog):
    cache = ArtifactCache(tmp_path / "cache")
    data, calls = b"hello world\n", []
    path = cache.get(entry(data), fetcher(data, calls))
    path.write_bytes(b"HELLO WORLD\n")  # same size, other bytes
    with caplog.at_level("WARNING", logger="node_agent.cache"):
        assert cache.get(entry(data), fetcher(data, calls)).read_bytes() == data
    assert len(calls) == 2, "fetched again, not used"
    [said] = [r for r in caplog.records if r.name == "node_agent.cache"]
    assert "damaged on disk" in said.getMessage() and said.kv["digest"] == entry(data)["digest"]


def test_the_cache_remembers_what_an_earlier_run_left(tmp_path):
    first = ArtifactCache(tmp_path / "cache")
    old = first.get(entry(b"a" * 10), fetcher(b"a" * 10, []))
    os.utime(old, (1, 1))
    new = first.get(entry(b"b" * 10), fetcher(b"b" * 10, []))
    (old.parent / ".leftover.part").write_bytes(b"partial")
    again = ArtifactCache(tmp_path / "cache", high_bytes=15, low_bytes=10)
    assert again.total_bytes == 10 and not old.exists() and new.exists()
    assert not (old.parent / ".leftover.part").exists()


KiB = 1024


def test_a_full_disk_evicts_what_no_job_holds_and_tries_once_more(tmp_path):
    with small_disk(tmp_path / "cache", size_kb=4096) as disk:
        evicted = []
        cache = ArtifactCache(disk, high_bytes=1 << 30, on_evict=evicted.append)  # the disk, not the budget, is full
        old = [cache.get(entry(data), fetcher(data, [])) for data in (bytes([i]) * 700 * KiB for i in range(4))]
        running = cache.pins()
        held = running.get(entry(b"h" * 100 * KiB), fetcher(b"h" * 100 * KiB, []))
        data, calls = b"n" * 1500 * KiB, []
        path = cache.pins().get(entry(data), fetcher(data, calls))
        assert path.read_bytes() == data and len(calls) == 2, "fetched again after the first try hit ENOSPC"
        assert evicted == [2] and not old[0].exists() and not old[1].exists(), "the least recently used went"
        assert old[2].exists() and old[3].exists() and held.exists()
        assert not any(p.name.startswith(".") for p in disk.rglob("*")), "no partial file left"


def test_a_disk_full_of_files_in_use_is_an_infrastructure_error(tmp_path):
    with small_disk(tmp_path / "cache", size_kb=4096) as disk:
        cache = ArtifactCache(disk)
        held = cache.pins().get(entry(b"h" * 3000 * KiB), fetcher(b"h" * 3000 * KiB, []))
        with pytest.raises(DiskFull) as err:
            cache.pins().get(entry(b"n" * 1500 * KiB), fetcher(b"n" * 1500 * KiB, []))
        assert err.value.code == "disk_full" and err.value.needed == 1500 * KiB
        assert held.exists() and cache.total_bytes == 3000 * KiB
        assert not any(p.name.startswith(".") for p in disk.rglob("*")), "no partial file left"


def test_a_file_larger_than_the_whole_disk_is_refused_before_a_byte_and_the_cache_is_kept(tmp_path):
    with small_disk(tmp_path / "cache", size_kb=4096) as disk:
        evicted = []
        cache = ArtifactCache(disk, high_bytes=1 << 30, on_evict=evicted.append)
        kept = cache.get(entry(b"k" * 700 * KiB), fetcher(b"k" * 700 * KiB, []))
        huge, calls = b"h" * 5000 * KiB, []
        with pytest.raises(DiskFull) as err:
            cache.pins().get(entry(huge), fetcher(huge, calls))
        assert err.value.needed == 5000 * KiB and "can never fit" in str(err.value)
        assert calls == [] and evicted == [] and kept.exists(), "nothing fetched, nothing evicted for it"
