"""The sandbox on its own: limits, measurement, cancellation, setup failures."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from node_agent.sandbox import Limits, Sandbox, new_run_dir, read_head, remove_tree, sweep_runs, \
    unbounded_writable_mounts

from .conftest import need


@pytest.fixture
def box(workdir):
    need(shutil.which("bwrap") is not None, "bubblewrap (bwrap)")
    runs = workdir / "runs"
    runs.mkdir(mode=0o711)
    os.chmod(runs, 0o711)
    uid = 65534 if os.geteuid() == 0 else None
    sandbox = Sandbox(bwrap=shutil.which("bwrap"), uid=uid, gid=uid)
    run_dir = new_run_dir(runs, 1, 1)
    sandbox.prepare_box(run_dir / "box")
    return sandbox, run_dir


def limits(**kw) -> Limits:
    base = dict(cpu_ms=2000, wall_ms=5000, memory_kb=256 * 1024, address_space_bytes=512 << 20,
                stack_bytes=8 << 20, file_size_bytes=1000, processes=16)
    base.update(kw)
    return Limits(**base)


def run(box, script: str, cancel: threading.Event | None = None, **kw):
    sandbox, run_dir = box
    return sandbox.run(["/bin/sh", "-c", script], box=run_dir / "box", box_writable=True, stdin=None,
                       stdout=run_dir / "out", stderr=run_dir / "err", limits=limits(**kw), cancel=cancel)


def test_cpu_time_of_the_program_is_measured(box):
    res = run(box, "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done")
    assert res.exit_code == 0 and res.cpu_ms >= 100 and res.memory_kb > 0
    assert (box[1] / "out").read_bytes() == b"done\n"


def test_cpu_time_of_a_child_the_end_kills_still_counts(box):
    """The work done by a child that outlives the main program: the sandbox's end kills it and
    the kernel reaps it, so no rusage counts it. Sampled, it still counts against the limit
    (else a program could hand its work to a child and be judged within time)."""
    # 0.6 s of CPU: above the 0.3 s limit, below the child's own rlimit (a whole second).
    worker = ("python3 -c 'import time\nwhile time.process_time() < 0.6: pass\nprint(42)'; "
              "echo done > ./signal; sleep 100")
    res = run(box, f"mkfifo ./signal; ( {worker} ) & read x < ./signal; exit 0", cpu_ms=300, wall_ms=60000)
    assert res.cpu_ms > 300, res


def test_output_beyond_the_file_size_limit_stops_the_program(box):
    res = run(box, "yes flood")
    assert (box[1] / "out").stat().st_size == 1000
    assert res.signal is not None or res.exit_code != 0


def test_the_wall_clock_limit_kills_a_sleeper(box):
    res = run(box, "sleep 30", wall_ms=500)
    assert res.wall_timeout and res.wall_ms < 3000


def test_cancellation_kills_at_once(box):
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    start = time.monotonic()
    res = run(box, "sleep 30", cancel=cancel)
    assert res.cancelled and time.monotonic() - start < 3


def test_the_program_stderr_is_the_program_s_own(box):
    res = run(box, "echo oops >&2; exit 7")
    assert res.exit_code == 7 and res.setup_error is None
    assert read_head(box[1] / "err", 100) == b"oops\n"


def test_a_program_that_empties_its_stderr_and_fails_is_a_program_failure(box):
    # The start of a run is signalled out of the program's reach: wiping its own output
    # (where a start mark used to be) cannot make the run look like a broken sandbox.
    res = run(box, "echo noise >&2; truncate -s 0 /proc/self/fd/2; exit 1")
    assert res.setup_error is None and res.exit_code == 1


def test_a_sandbox_that_cannot_be_set_up_is_not_a_program_failure(box):
    sandbox, run_dir = box
    res = sandbox.run(["/bin/true"], box=run_dir / "missing", box_writable=False, stdin=None,
                      stdout=run_dir / "out", stderr=run_dir / "err", limits=limits())
    assert res.setup_error and "bwrap" in res.setup_error


def test_sweep_keeps_only_the_named_run_folders(tmp_path):
    (tmp_path / "j1-e1-aa").mkdir()
    (tmp_path / "j2-e1-bb").mkdir()
    (tmp_path / "stray").write_text("x")
    assert sorted(sweep_runs(tmp_path, keep={"j2-e1-bb"})) == ["j1-e1-aa", "stray"]
    assert [p.name for p in tmp_path.iterdir()] == ["j2-e1-bb"]


def test_a_run_folder_removed_twice_at_once_leaves_the_runs_folder_open_to_the_sandbox(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o711)
    os.chmod(runs, 0o711)
    run = new_run_dir(runs, 7, 1)
    (run / "box").mkdir()
    (run / "box" / "out").write_text("x")
    shutil.rmtree(run)  # the other removal (a sweep) got there first
    remove_tree(run)
    assert os.stat(runs).st_mode & 0o777 == 0o711, "the sandbox user must still get through to the next box"
    # A folder user code left without write permission is still removed.
    locked = new_run_dir(runs, 8, 1)
    (locked / "box" / "deep").mkdir(parents=True)
    (locked / "box" / "deep" / "f").write_text("x")
    os.chmod(locked / "box" / "deep", 0o500)
    os.chmod(locked / "box", 0o500)
    remove_tree(locked)
    assert not locked.exists() and os.stat(runs).st_mode & 0o777 == 0o711


def test_every_filesystem_a_program_can_write_is_bounded(box):
    sandbox, run_dir = box
    res = sandbox.run(["/bin/cat", "/proc/self/mountinfo"], box=run_dir / "box", box_writable=False, stdin=None,
                      stdout=run_dir / "out", stderr=run_dir / "err", limits=limits(file_size_bytes=1 << 20))
    mountinfo = (run_dir / "out").read_text()
    assert res.ok and "/dev/shm" in mountinfo
    assert unbounded_writable_mounts(mountinfo) == []
    # While compiling, /box is the one writable folder on disk, and the rule says so.
    run(box, "cat /proc/self/mountinfo", file_size_bytes=1 << 20)
    assert unbounded_writable_mounts((run_dir / "out").read_text()) == ["/box"]


def test_the_self_check_s_mount_rule_names_an_unsized_writable_dev():
    # /dev as bwrap mounts it by itself: a writable tmpfs without a size.
    line = "70 65 0:42 / /dev rw,nosuid,nodev,relatime - tmpfs tmpfs rw,mode=755\n"
    assert unbounded_writable_mounts(line) == ["/dev"]
