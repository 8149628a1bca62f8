"""Running untrusted programs: bubblewrap + rlimits + a watchdog.

Layers, from the outside in:

* ``bwrap`` gives the program fresh user, PID, network, IPC, UTS and mount namespaces
  (``--unshare-all``: no network at all), a read-only view of the system folders, a private
  ``/box`` holding only what the run needs, a small private ``/tmp``, no capabilities,
  a new session (no terminal tricks) and ``--die-with-parent``.
* When the agent runs as root, bwrap itself is started as an unprivileged sandbox uid
  (65534 by default). This matters: the kernel never enforces ``RLIMIT_NPROC`` for real
  uid 0, so a fork bomb is contained only because the real uid is not root.
* ``prlimit`` runs inside the sandbox and sets CPU time, address space, stack, file size,
  process and open-file limits on the program just before it starts.
* The watchdog in :meth:`Sandbox.run` enforces the wall clock, samples the resident memory
  of the whole process tree (runtimes such as the JVM and V8 cannot live under an
  address-space limit, see ``runtimes``), and honours cancellation. Killing the sandbox's
  PID 1 makes the kernel kill everything else in its PID namespace.

Output goes to files the agent opened, passed in as descriptors: ``RLIMIT_FSIZE`` caps
them, so a program that floods stdout is stopped by the kernel at the limit.

Run folders live in ``<workspace>/runs`` and are named ``j<job>-e<lease>-<random>``, so a
leftover can always be traced to the attempt that made it; they are swept at start and
after each job.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from . import log

logger = log.get("sandbox")

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only the parts of /etc that toolchains read; /etc/passwd, /etc/shadow, host configs stay out.
ETC_BINDS = (
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
    "/etc/localtime", "/etc/java-17-openjdk",
)
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


PR_SET_CHILD_SUBREAPER = 36


class SandboxUnavailable(Exception):
    pass


def become_subreaper() -> None:
    """Adopt orphaned descendants.

    An unprivileged bwrap exits as soon as its PID 1 reports the program's exit status,
    without waiting for that PID 1. As a subreaper the agent inherits PID 1 and reaps it
    itself, and ``wait4`` then returns the CPU time and peak memory of everything that ran
    in the sandbox; it also guarantees the whole PID namespace is gone when a run returns.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


@dataclass(frozen=True)
class Limits:
    cpu_ms: int
    wall_ms: int
    memory_kb: int | None  # watchdog: kill when the tree's resident memory exceeds this
    address_space_bytes: int | None
    stack_bytes: int | None
    file_size_bytes: int
    processes: int
    open_files: int = 64
    tmp_bytes: int = 64 << 20


@dataclass
class RunResult:
    exit_code: int | None = None
    signal: int | None = None
    cpu_ms: int = 0
    wall_ms: int = 0
    memory_kb: int = 0
    wall_timeout: bool = False
    memory_exceeded: bool = False
    cancelled: bool = False
    setup_error: str | None = None
    stderr_offset: int = 0  # bytes of the sandbox's start mark before the program's stderr

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not (self.wall_timeout or self.memory_exceeded or self.cancelled)


@dataclass
class _Watch:
    proc: subprocess.Popen
    root_pid: int  # the sandbox's PID 1 (bwrap) or the program itself (weak mode)
    root_pidfd: int | None
    killed: bool = False
    peak_kb: int = 0
    tree: set = field(default_factory=set)


class Sandbox:
    def __init__(self, *, bwrap: str | None, uid: int | None, gid: int | None,
                 extra_binds: Sequence[str] = ()):
        self.bwrap = bwrap
        self.uid = uid
        self.gid = gid
        self.extra_binds = tuple(extra_binds)
        self.prlimit = shutil.which("prlimit", path=SANDBOX_PATH) or "prlimit"
        if bwrap:
            become_subreaper()

    @property
    def isolated(self) -> bool:
        return self.bwrap is not None

    # -- folders -----------------------------------------------------------------------

    def prepare_box(self, box: Path) -> None:
        """An empty folder the sandbox user owns; nothing else of the agent is inside."""
        box.mkdir(mode=0o700)
        if self.uid is not None:
            os.chown(box, self.uid, self.gid if self.gid is not None else -1)

    def place_file(self, box: Path, name: str, data: bytes, mode: int = 0o644) -> Path:
        path = box / name
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, mode)
        if self.uid is not None:
            os.chown(path, self.uid, self.gid if self.gid is not None else -1)
        return path

    # -- command line ------------------------------------------------------------------

    def _rlimit_args(self, limits: Limits) -> list[str]:
        cpu_s = max(1, math.ceil(limits.cpu_ms / 1000))
        args = [
            self.prlimit,
            # SIGXCPU at the soft limit, SIGKILL one second later if it is ignored.
            f"--cpu={cpu_s}:{cpu_s + 1}",
            f"--fsize={limits.file_size_bytes}",
            f"--nproc={limits.processes}",
            f"--nofile={limits.open_files}",
            "--core=0",
        ]
        if limits.address_space_bytes:
            args.append(f"--as={limits.address_space_bytes}")
        if limits.stack_bytes:
            args.append(f"--stack={limits.stack_bytes}")
        return args + ["--"]

    def _bwrap_args(self, box: Path, box_writable: bool, limits: Limits, env: dict[str, str],
                    info_fd: int) -> list[str]:
        args = [
            self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox",
        ]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for path in ETC_BINDS + self.extra_binds:
            args += ["--ro-bind-try", path, path]
        args += ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
        args += ["--bind" if box_writable else "--ro-bind", str(box), "/box"]
        # bwrap builds the root on an unbounded tmpfs: freeze it, so only /box (when
        # compiling) and the size-capped /tmp take writes.
        args += ["--remount-ro", "/", "--chdir", "/box"]
        args += ["--clearenv"]
        for key, value in env.items():
            args += ["--setenv", key, value]
        args += ["--info-fd", str(info_fd), "--"]
        return args

    @staticmethod
    def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        env.update(extra or {})
        return env

    # -- running -----------------------------------------------------------------------

    def run(self, argv: Sequence[str], *, box: Path, box_writable: bool, stdin: Path | None,
            stdout: Path, stderr: Path, limits: Limits, env: dict[str, str] | None = None,
            cancel: threading.Event | None = None) -> RunResult:
        env = self.base_env(env)
        inner = self._rlimit_args(limits) + list(argv)
        read_fd = write_fd = None
        mark = None
        if self.bwrap:
            read_fd, write_fd = os.pipe()
            # Once the sandbox is set up, a shell writes a one-line mark to stderr and execs
            # the program. Without the mark, an exit status of 1 came from bwrap failing to set
            # up (an INFRA_ERROR), not from the program (a verdict).
            mark = f"kece-sandbox-started {secrets.token_hex(8)}\n".encode()
            inner = ["/bin/sh", "-c", 'printf "%s\\n" "$0" >&2; exec "$@"', mark.decode().strip()] + inner
            cmd = self._bwrap_args(box, box_writable, limits, env, write_fd) + inner
            popen_env = {"PATH": SANDBOX_PATH}
            cwd = "/"
        else:
            cmd = inner
            popen_env = dict(env, HOME=str(box), TMPDIR=str(box))
            cwd = str(box)
        user_kwargs = {}
        if self.uid is not None:
            user_kwargs = {"user": self.uid, "group": self.gid, "extra_groups": []}

        result = RunResult()
        start = time.monotonic()
        with open(stdin or os.devnull, "rb") as fin, open(stdout, "wb") as fout, open(stderr, "wb") as ferr:
            try:
                proc = subprocess.Popen(
                    cmd, stdin=fin, stdout=fout, stderr=ferr, cwd=cwd, env=popen_env, close_fds=True,
                    pass_fds=(write_fd,) if write_fd is not None else (), start_new_session=True,
                    **user_kwargs,
                )
            except OSError as exc:
                for fd in (read_fd, write_fd):
                    if fd is not None:
                        os.close(fd)
                result.setup_error = f"cannot start sandbox: {exc}"
                return result
        if write_fd is not None:
            os.close(write_fd)
        return self._supervise(proc, read_fd, mark, limits, cancel, result, start, stderr)

    def _supervise(self, proc: subprocess.Popen, read_fd: int | None, mark: bytes | None, limits: Limits,
                   cancel: threading.Event | None, result: RunResult, start: float, stderr: Path) -> RunResult:
        root_pid = proc.pid
        if read_fd is not None:
            root_pid = self._read_child_pid(read_fd) or 0
            if not root_pid:
                # bwrap failed before starting the program (bad bind, no user namespaces, …).
                _reap(proc)
                result.setup_error = "bwrap could not set up the sandbox: " + _tail(stderr)
                return result
        try:
            root_pidfd = os.pidfd_open(root_pid)
        except OSError:
            root_pidfd = None
        watch = _Watch(proc=proc, root_pid=root_pid, root_pidfd=root_pidfd)
        try:
            self._watch(watch, limits, cancel, result, start)
            status, ru = _reap(proc)
            cpu_s, maxrss = ru.ru_utime + ru.ru_stime, ru.ru_maxrss
            if root_pid != proc.pid:
                # The sandbox's PID 1 is ours now (subreaper): its rusage covers the program.
                # If bwrap reaped it itself, its own rusage above already does.
                if not self._wait_root(watch):
                    self._kill(watch)
                    self._wait_root(watch)
                try:
                    _root_status, root_ru = _wait4(root_pid)
                    cpu_s += root_ru.ru_utime + root_ru.ru_stime
                    maxrss = max(maxrss, root_ru.ru_maxrss)
                except ChildProcessError:
                    pass
        finally:
            if root_pidfd is not None:
                os.close(root_pidfd)
        result.wall_ms = int((time.monotonic() - start) * 1000)
        result.cpu_ms = int(cpu_s * 1000)
        result.memory_kb = max(watch.peak_kb, maxrss)
        if mark is not None:
            if read_head(stderr, len(mark)) == mark:
                result.stderr_offset = len(mark)
            elif not watch.killed:
                result.setup_error = "bwrap could not set up the sandbox: " + _tail(stderr)
                return result
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            result.signal = -code
        elif self.bwrap and 128 < code <= 128 + 64:
            # bwrap reports a program killed by signal N as exit status 128+N.
            result.signal = code - 128
        else:
            result.exit_code = code
        return result

    @staticmethod
    def _read_child_pid(fd: int) -> int | None:
        data = b""
        try:
            while True:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError, TypeError):
            match = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
            return int(match.group(1)) if match else None

    def _watch(self, w: _Watch, limits: Limits, cancel: threading.Event | None, result: RunResult,
               start: float) -> None:
        waiter = select.poll()
        pidfd = os.pidfd_open(w.proc.pid)
        try:
            waiter.register(pidfd, select.POLLIN)
            next_sample = 0.0
            while not waiter.poll(20):
                now = time.monotonic()
                if w.killed:
                    continue
                if (now - start) * 1000 > limits.wall_ms:
                    result.wall_timeout = True
                    self._kill(w)
                elif cancel is not None and cancel.is_set():
                    result.cancelled = True
                    self._kill(w)
                elif now >= next_sample:
                    next_sample = now + 0.05
                    rss = _tree_rss_kb(w.root_pid)
                    w.peak_kb = max(w.peak_kb, rss)
                    if limits.memory_kb is not None and rss > limits.memory_kb:
                        result.memory_exceeded = True
                        self._kill(w)
        finally:
            os.close(pidfd)

    @staticmethod
    def _wait_root(w: _Watch) -> bool:
        """Wait (bounded) for the sandbox's PID 1 to finish reaping what is left inside."""
        if w.root_pidfd is None:
            return True
        waiter = select.poll()
        waiter.register(w.root_pidfd, select.POLLIN)
        return bool(waiter.poll(5000))

    def _kill(self, w: _Watch) -> None:
        w.killed = True
        # Killing PID 1 of the sandbox's PID namespace takes every process in it down.
        if w.root_pidfd is not None:
            try:
                signal.pidfd_send_signal(w.root_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def read_head(path: Path, limit: int, offset: int = 0) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(limit)
    except FileNotFoundError:
        return b""


def read_tail(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read()
    except FileNotFoundError:
        return b""


def _wait4(pid: int):
    while True:
        try:
            _pid, status, ru = os.wait4(pid, 0)
            return status, ru
        except InterruptedError:
            continue


def _reap(proc: subprocess.Popen):
    status, ru = _wait4(proc.pid)
    proc.returncode = os.waitstatus_to_exitcode(status)  # keeps Popen from waiting again
    return status, ru


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    kids.extend(int(x) for x in fh.read().split())
            except (FileNotFoundError, ProcessLookupError):
                continue
    except (FileNotFoundError, ProcessLookupError):
        pass
    return kids


def _tree_rss_kb(root: int) -> int:
    total = 0
    stack = [root]
    seen = set()
    while stack and len(seen) < 4096:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * PAGE_KB
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        stack.extend(_children(pid))
    return total


def _tail(path: Path, limit: int = 400) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


# -- run folders ---------------------------------------------------------------------------

RUN_NAME_RE = re.compile(r"^j(\d+)-e(\d+)-[0-9a-f]+$")


def new_run_dir(runs_root: Path, job_id: int, lease_epoch: int) -> Path:
    path = runs_root / f"j{job_id}-e{lease_epoch}-{secrets.token_hex(4)}"
    # 0711: the unprivileged sandbox user must traverse it to reach box/, nothing more.
    path.mkdir(mode=0o711)
    os.chmod(path, 0o711)
    return path


def remove_tree(path: Path) -> None:
    def _retry(func, p, _exc):
        # User code may have left folders without write permission; fix and retry.
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=_retry)


def sweep_runs(runs_root: Path, keep: set[str] = frozenset()) -> list[str]:
    """Remove every run folder not in ``keep``; return the names removed."""
    removed = []
    if not runs_root.is_dir():
        return removed
    for entry in runs_root.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            remove_tree(entry)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry.name)
    return removed


def probe(sandbox: Sandbox, runs_root: Path) -> str | None:
    """Start one trivial program in a real box; return an error text or None."""
    run_dir = runs_root / f"probe-{secrets.token_hex(4)}"
    run_dir.mkdir(mode=0o711)
    try:
        box = run_dir / "box"
        sandbox.prepare_box(box)
        limits = Limits(cpu_ms=5000, wall_ms=15000, memory_kb=None, address_space_bytes=None,
                        stack_bytes=None, file_size_bytes=1 << 20, processes=16)
        res = sandbox.run(["/bin/sh", "-c", "echo ok > /box/probe && cat /box/probe"], box=box,
                          box_writable=True, stdin=None, stdout=run_dir / "out", stderr=run_dir / "err",
                          limits=limits)
        if res.setup_error:
            return res.setup_error
        if res.exit_code != 0 or (run_dir / "out").read_bytes().strip() != b"ok":
            err = read_head(run_dir / "err", 400, res.stderr_offset).decode("utf-8", "replace")
            return f"probe program failed (exit {res.exit_code}, signal {res.signal}): {err}"
        return None
    finally:
        remove_tree(run_dir)
