"""Running untrusted programs: bubblewrap + rlimits + a watchdog.

Layers, from the outside in:

* ``bwrap`` gives the program fresh user, PID, network, IPC, UTS and mount namespaces
  (``--unshare-all``: no network at all), a read-only view of the system folders, a private
  ``/box`` holding only what the run needs, a small private ``/tmp``, no capabilities,
  a new session (no terminal tricks) and ``--die-with-parent``.
* When the agent runs as root, bwrap itself is started as an unprivileged sandbox uid
  (65534 by default). This matters: the kernel never enforces ``RLIMIT_NPROC`` for real
  uid 0, so a fork bomb is contained only because the real uid is not root.
* A seccomp filter (libseccomp's, compiled once at start) refuses ``memfd_create``,
  ``shmget`` and ``msgget`` with EPERM: what a program keeps in an unmapped memfd, a detached
  SysV segment or a message queue is memory no process's resident set and no mounted tmpfs
  shows, so without a memory cgroup nothing would count it against the limit; so are TCP
  buffers, and IP sockets are refused (EAFNOSUPPORT). ``fallocate`` answers "not supported":
  it would reserve disk under an output file without growing it, past the file size limit.
  Any other architecture's system calls (a 64-bit program's ``int 0x80``) kill the program.
* ``prlimit`` runs inside the sandbox and sets CPU time, address space, stack, file size,
  process and open-file limits on the program just before it starts.
* Every filesystem the program can write is a tmpfs of a fixed size (``/tmp`` and
  ``/dev/shm``); the root and bwrap's own ``/dev`` are remounted read-only. What the program
  keeps in those tmpfs is memory, so it counts against the memory limit: in the run's
  cgroup v2 ``memory.max`` where the host lets the agent manage one (tmpfs pages are
  charged to the cgroup of the process that wrote them), and in the watchdog's samples
  everywhere.
* The watchdog in :meth:`Sandbox.run` enforces the wall clock, samples the resident memory
  of the whole process tree plus the sandbox's tmpfs usage (runtimes such as the JVM and V8
  cannot live under an address-space limit, see ``runtimes``), and honours cancellation.
  Killing the sandbox's PID 1 makes the kernel kill everything else in its PID namespace.

Start-up is reported on bwrap's ``--json-status-fd``, a pipe only bwrap's monitor process
outside the sandbox holds: it carries the sandbox's PID 1 and, only when the program was
actually started, its exit code. Nothing the program does to its own output can make a
verdict look like a sandbox failure. bwrap waits on ``--block-fd`` until the agent has
moved that PID 1 into the run's cgroup and opened the tmpfs it will measure.

Output goes to files the agent opened, passed in as descriptors: ``RLIMIT_FSIZE`` caps
them, so a program that floods stdout is stopped by the kernel at the limit.

Run folders live in ``<workspace>/runs`` and are named ``j<job>-e<lease>-<random>``, so a
leftover can always be traced to the attempt that made it; they are swept at start and
after each job.
"""

from __future__ import annotations

import ctypes
import errno
import json
import math
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from . import cgroups, log
from .cgroups import MemoryCgroups

logger = log.get("sandbox")

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only the parts of /etc that toolchains read; /etc/passwd, /etc/shadow, host configs stay out.
ETC_BINDS = (
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
    "/etc/localtime", "/etc/java-17-openjdk",
)
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
PAGE_KB = PAGE_BYTES // 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SETUP_WAIT_S = 10  # bwrap builds a sandbox in milliseconds; this bound is for a stuck one
# The only places a program may write (besides /box while compiling), each a bounded tmpfs.
WRITABLE_TMPFS = ("/tmp", "/dev/shm")
# What an inode and its dentry cost the kernel, charged for each file in the sandbox's
# tmpfs: the size= limit caps data, not the number of empty files.
INODE_KB = 1


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
    tmpfs_fds: list = field(default_factory=list)  # keep the sandbox's tmpfs measurable after it ends
    cpu_ticks: dict = field(default_factory=dict)  # every process of the run seen: its CPU time
    cpu_parents: dict = field(default_factory=dict)  # each of them: its parent's key
    cgroup: "Path | None" = None


# Memory these allocate shows in no resident set and no mounted tmpfs (see the module's notes):
# an unmapped memfd, a detached SysV segment, SysV message queues. io_uring opens sockets (and
# files) without the socket call the filter below looks at: an IP socket's buffers, counted
# nowhere, came back through it. No judged runtime needs it (libuv falls back without it).
REFUSED_SYSCALLS = ("memfd_create", "shmget", "msgget", "io_uring_setup", "io_uring_enter", "io_uring_register")
# The run's network namespace has only its own loopback, but a TCP connection over it keeps
# its buffers in kernel memory counted host-wide, in no process: IP sockets are refused.
REFUSED_SOCKET_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def syscall_filter() -> bytes:
    """The runs' seccomp filter as BPF, compiled by libseccomp (through pyseccomp): every system
    call allowed but REFUSED_SYSCALLS (EPERM); another architecture's calls kill."""
    try:
        import pyseccomp

        compiled = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    except (ImportError, OSError, AttributeError) as exc:  # the package, or libseccomp.so.2, missing
        raise RuntimeError(f"the runs' system call filter needs libseccomp (Debian: apt-get install libseccomp2) "
                           f"and the pyseccomp package: {exc}") from exc
    for name in REFUSED_SYSCALLS:
        compiled.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    for family in REFUSED_SOCKET_FAMILIES:
        compiled.add_rule(pyseccomp.ERRNO(errno.EAFNOSUPPORT), "socket", pyseccomp.Arg(0, pyseccomp.EQ, family))
    # fallocate reserves disk without growing the file (FALLOC_FL_KEEP_SIZE): past the file
    # size limit, on the agent's disk, under stdout. "Not supported" sends posix_fallocate to
    # its fallback, plain writes, which that limit stops.
    compiled.add_rule(pyseccomp.ERRNO(errno.EOPNOTSUPP), "fallocate")
    with tempfile.TemporaryFile() as fh:
        compiled.export_bpf(fh)
        fh.seek(0)
        return fh.read()


class Sandbox:
    def __init__(self, *, bwrap: str | None, uid: int | None, gid: int | None,
                 extra_binds: Sequence[str] = (), cgroups: MemoryCgroups | None = None,
                 cgroups_note: str = "not looked for"):
        self.bwrap = bwrap
        self.uid = uid
        self.gid = gid
        self.extra_binds = tuple(extra_binds)
        self.cgroups = cgroups if bwrap else None
        # Why runs do (or do not) get a memory cgroup, for the health checks and the self-check.
        self.cgroups_note = cgroups_note if bwrap else "the weak sandbox puts runs in no cgroup"
        self.prlimit = shutil.which("prlimit", path=SANDBOX_PATH) or "prlimit"
        self.seccomp = syscall_filter() if bwrap else None
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
                    status_fd: int, block_fd: int, seccomp_fd: int) -> list[str]:
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
        # bwrap's /dev is a tmpfs without a size (and /dev/shm a folder in it): freeze it and
        # give shared memory a bounded tmpfs of its own.
        args += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
        for path in WRITABLE_TMPFS:
            args += ["--size", str(limits.tmp_bytes), "--tmpfs", path]
        args += ["--bind" if box_writable else "--ro-bind", str(box), "/box"]
        # bwrap builds the root on an unbounded tmpfs: freeze it, so only /box (when
        # compiling) and the size-capped tmpfs take writes.
        args += ["--remount-ro", "/", "--chdir", "/box"]
        args += ["--clearenv"]
        for key, value in env.items():
            args += ["--setenv", key, value]
        args += ["--seccomp", str(seccomp_fd)]
        args += ["--json-status-fd", str(status_fd), "--block-fd", str(block_fd), "--"]
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
        cmd = self._rlimit_args(limits) + list(argv)
        ours: list[int] = []  # our ends of the status and block pipes
        theirs: list[int] = []
        if self.bwrap:
            status_r, status_w = os.pipe()
            block_r, block_w = os.pipe()
            ours, theirs = [status_r, block_w], [status_w, block_r, _pipe_holding(self.seccomp)]
            cmd = self._bwrap_args(box, box_writable, limits, env, status_w, block_r, theirs[-1]) + cmd
            popen_env = {"PATH": SANDBOX_PATH}
            cwd = "/"
        else:
            popen_env = dict(env, HOME=str(box), TMPDIR=str(box))
            cwd = str(box)
        user_kwargs = {}
        if self.uid is not None:
            user_kwargs = {"user": self.uid, "group": self.gid, "extra_groups": []}

        result = RunResult()
        start = time.monotonic()
        try:
            with open(stdin or os.devnull, "rb") as fin, open(stdout, "wb") as fout, open(stderr, "wb") as ferr:
                proc = subprocess.Popen(
                    cmd, stdin=fin, stdout=fout, stderr=ferr, cwd=cwd, env=popen_env, close_fds=True,
                    pass_fds=tuple(theirs), start_new_session=True, **user_kwargs,
                )
        except OSError as exc:
            result.setup_error = f"cannot start sandbox: {exc}"
            return result
        finally:
            for fd in theirs + (ours if result.setup_error else []):
                os.close(fd)
        if not self.bwrap:
            return self._supervise(_Watch(proc=proc, root_pid=proc.pid, root_pidfd=None), limits, cancel,
                                   result, start)
        status_r, block_w = ours
        try:
            watch = self._enter(proc, status_r, block_w, limits, result, stderr)
            if watch is None:
                return result
            try:
                self._supervise(watch, limits, cancel, result, start)
            finally:
                for fd in watch.tmpfs_fds:
                    os.close(fd)
                if watch.cgroup is not None:
                    cgroups.remove(watch.cgroup)
            # bwrap reports an exit code only for a program it actually started.
            if "exit-code" not in _status(status_r) and not watch.killed:
                result.setup_error = "bwrap could not set up the sandbox: " + _tail(stderr)
            return result
        finally:
            os.close(status_r)

    def _enter(self, proc: subprocess.Popen, status_r: int, block_w: int, limits: Limits, result: RunResult,
               stderr: Path) -> _Watch | None:
        """Hold the set-up sandbox at its start line, put it in its cgroup, then let it go."""
        try:
            root_pid = _status(status_r, until_line=True).get("child-pid")
            watch = None
            if isinstance(root_pid, int) and root_pid > 0:
                watch = _Watch(proc=proc, root_pid=root_pid, root_pidfd=_pidfd(root_pid))
                try:
                    self._contain(watch, limits)
                except OSError as exc:
                    # The program has not started: whatever went wrong is the sandbox's.
                    result.setup_error = f"bwrap could not set up the sandbox ({exc.strerror}): {_tail(stderr)}"
                    self._kill(watch)
            else:
                result.setup_error = "bwrap could not set up the sandbox: " + _tail(stderr)
        finally:
            os.close(block_w)
        if result.setup_error:
            # bwrap failed before starting the program (bad bind, no user namespaces, …).
            _reap(proc)
            if watch is not None:
                self._close(watch)
            return None
        return watch

    def _contain(self, w: _Watch, limits: Limits) -> None:
        # PID 1 has not forked yet (it forks the program only after the block): what it
        # starts is born in the group.
        if self.cgroups is not None and limits.memory_kb is not None:
            w.cgroup = self.cgroups.create(limits.memory_kb * 1024)
            cgroups.attach(w.cgroup, w.root_pid)
        # bwrap reports PID 1 while it is still building the root, and blocks once the root
        # is in place; the tmpfs are opened in between, before the program can run.
        size = -(-limits.tmp_bytes // PAGE_BYTES) * PAGE_BYTES
        deadline = time.monotonic() + SETUP_WAIT_S
        for path in WRITABLE_TMPFS:
            while True:
                fd = _open_tmpfs(f"/proc/{w.root_pid}/root{path}", size)
                if fd is not None:
                    w.tmpfs_fds.append(fd)
                    break
                if time.monotonic() > deadline or _exited(w.root_pidfd):
                    raise OSError(errno.ESRCH, f"the sandbox's {path} never appeared")
                time.sleep(0.001)

    def _close(self, w: _Watch) -> None:
        for fd in w.tmpfs_fds:
            os.close(fd)
        if w.root_pidfd is not None:
            self._wait_root(w)
            try:
                _wait4(w.root_pid)
            except ChildProcessError:
                pass
            os.close(w.root_pidfd)
        if w.cgroup is not None:
            cgroups.remove(w.cgroup)

    def _supervise(self, watch: _Watch, limits: Limits, cancel: threading.Event | None, result: RunResult,
                   start: float) -> RunResult:
        proc, root_pid = watch.proc, watch.root_pid
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
            if watch.root_pidfd is not None:
                os.close(watch.root_pidfd)
        result.wall_ms = int((time.monotonic() - start) * 1000)
        # The rusage counts what was waited for; the samples also what the end killed.
        result.cpu_ms = max(int(cpu_s * 1000), _tree_cpu_ms(watch.cpu_ticks))
        # Files still in the sandbox's tmpfs when it ended were held at the program's peak too.
        result.memory_kb = max(watch.peak_kb, maxrss + _tmpfs_kb(watch.tmpfs_fds))
        if watch.cgroup is not None:
            result.memory_kb = max(result.memory_kb, cgroups.peak_kb(watch.cgroup))
            result.memory_exceeded = result.memory_exceeded or cgroups.oom_killed(watch.cgroup)
        if limits.memory_kb is not None and result.memory_kb > limits.memory_kb:
            result.memory_exceeded = True
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            result.signal = -code
        elif self.bwrap and 128 < code <= 128 + 64:
            # bwrap reports a program killed by signal N as exit status 128+N.
            result.signal = code - 128
        else:
            result.exit_code = code
        return result

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
                    rss = _tree_sample(w.root_pid, w.cpu_ticks, count_root=w.root_pid == w.proc.pid,
                                       parents=w.cpu_parents) \
                        + _tmpfs_kb(w.tmpfs_fds)
                    w.peak_kb = max(w.peak_kb, rss)
                    if limits.memory_kb is not None and rss > limits.memory_kb:
                        result.memory_exceeded = True
                        self._kill(w)
                    elif _tree_cpu_ms(w.cpu_ticks) > limits.cpu_ms:
                        # Every process's CPU counts, each under its own rlimit: children that
                        # share the work would otherwise each stay below it.
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


def _pipe_holding(data: bytes) -> int:
    """The read end of a pipe that holds `data` and is closed for writing (bwrap reads the
    filter to its end); it fits a pipe's buffer (a few hundred bytes against 64 KiB)."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
    finally:
        os.close(write_end)
    return read_end


def _open_tmpfs(path: str, size: int) -> int | None:
    """The sandbox's tmpfs at ``path`` once it is mounted there (its size tells it apart)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    st = os.fstatvfs(fd)
    if st.f_blocks * st.f_frsize == size:
        return fd
    os.close(fd)
    return None


def _exited(pidfd: int | None) -> bool:
    if pidfd is None:
        return False
    waiter = select.poll()
    waiter.register(pidfd, select.POLLIN)
    return bool(waiter.poll(0))


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _status(fd: int, until_line: bool = False) -> dict:
    """Read bwrap's JSON status lines: up to the first (``child-pid``) or all written so far."""
    data = b""
    if not until_line:
        os.set_blocking(fd, False)
    while not (until_line and data.endswith(b"\n")):
        try:
            chunk = os.read(fd, 1 if until_line else 4096)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    merged: dict = {}
    for line in data.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            merged.update(item)
    return merged


def _tmpfs_kb(fds: list[int]) -> int:
    """Data and files the program keeps in the sandbox's tmpfs: memory it holds."""
    total = 0
    for fd in fds:
        try:
            st = os.fstatvfs(fd)
        except OSError:
            continue
        total += (st.f_blocks - st.f_bfree) * st.f_frsize // 1024 + (st.f_files - st.f_ffree) * INODE_KB
    return total


def unbounded_writable_mounts(mountinfo: str) -> list[str]:
    """Mount points in ``/proc/self/mountinfo`` text that a program could fill without bound.

    Read-only mounts, size-capped tmpfs, proc and devpts (kernel interfaces, not storage)
    and single device nodes bound from devtmpfs (``/dev/null`` …) are bounded.
    """
    found = []
    for line in mountinfo.splitlines():
        fields, _, tail = line.partition(" - ")
        parts, extra = fields.split(), tail.split()
        if len(parts) < 6 or len(extra) < 3:
            continue
        root, point, options = parts[3], parts[4], parts[5].split(",")
        fstype, super_options = extra[0], extra[2].split(",")
        if "ro" in options or fstype in ("proc", "devpts"):
            continue
        if fstype == "tmpfs" and any(o.startswith("size=") for o in super_options):
            continue
        if fstype == "devtmpfs" and root != "/":
            continue
        found.append(point)
    return found


def read_head(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as fh:
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


def _tree_sample(root: int, cpu_ticks: dict, *, count_root: bool, parents: dict) -> int:
    """The tree's resident memory (KiB), and each process's CPU time so far into `cpu_ticks`
    ((pid, start time) → clock ticks): a process that the sandbox's end kills is reaped by
    the kernel, and no rusage ever counts it, so what it used is known only from here.

    A process's time includes the children it has reaped (cutime, cstime): work done in
    short-lived children that a process still alive at the end waited for is counted nowhere
    else. A process seen before and gone now, whose parent is still here, was reaped by it:
    its time is in the parent's from now on, and its own entry goes (`parents`: each entry's
    parent, kept between samples). Not the sandbox's own PID 1 (bwrap, unless `count_root`),
    but what it reaped."""
    total = 0
    stack: list[tuple[int, tuple | None]] = [(root, None)]
    seen, here = set(), set()
    while stack and len(seen) < 4096:
        pid, parent = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        try:
            # After the command name: state is field 3, so utime (14) is [11], stime (15)
            # [12], cutime (16) [13], cstime (17) [14], starttime (22) [19] and rss (24,
            # pages) [21].
            total += int(fields[21]) * PAGE_KB
            key = (pid, fields[19])
            own, reaped = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
            cpu_ticks[key] = own + reaped if count_root or pid != root else reaped
            parents[key] = parent
            here.add(key)
        except (IndexError, ValueError):
            continue
        stack.extend((child, key) for child in _children(pid))
    for key in [key for key in cpu_ticks if key not in here and parents.get(key) in here]:
        del cpu_ticks[key]
    return total


def _tree_cpu_ms(cpu_ticks: dict) -> int:
    return sum(cpu_ticks.values()) * 1000 // CLOCK_TICKS


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


def make_run_folder(path: Path) -> Path:
    """A folder a box goes in: 0711, whatever the agent's umask (systemd's unit gives it
    0077), since the unprivileged sandbox user must traverse it to reach box/, nothing more."""
    path.mkdir(mode=0o711)
    os.chmod(path, 0o711)
    return path


def new_run_dir(runs_root: Path, job_id: int, lease_epoch: int) -> Path:
    if not runs_root.is_dir():  # removed under the agent (a cleanup): made again, as at start
        runs_root.mkdir(mode=0o711, exist_ok=True)
        os.chmod(runs_root, 0o711)
    return make_run_folder(runs_root / f"j{job_id}-e{lease_epoch}-{secrets.token_hex(4)}")


def remove_tree(path: Path) -> None:
    """Remove a run folder and whatever user code left in it. Another removal of the same
    folder may run at once (a job's own end and a sweep after another job's): what is gone
    already is no error, and nothing above the folder is touched. (Made writable to retry,
    the runs folder lost the sandbox user's way through it, and every later job failed with
    `sandbox_error` until the agent restarted.)"""
    root = os.path.abspath(path)

    def _retry(func, p, exc_info):
        if isinstance(exc_info[1], FileNotFoundError):
            return
        # User code may have left folders without write permission; fix and retry.
        try:
            if os.path.abspath(p) != root:
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
    run_dir = make_run_folder(runs_root / f"probe-{secrets.token_hex(4)}")
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
            err = read_head(run_dir / "err", 400).decode("utf-8", "replace")
            return f"probe program failed (exit {res.exit_code}, signal {res.signal}): {err}"
        return None
    finally:
        remove_tree(run_dir)
