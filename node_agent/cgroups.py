"""A cgroup v2 ``memory.max`` per sandbox run, where the host lets the agent manage one.

The kernel then enforces the memory limit itself: at once, not at the watchdog's next
sample, and over everything the run holds — resident memory of every process, the pages of
files it writes into its tmpfs, SysV shared memory, kernel memory for its inodes.

The agent may manage cgroups when the unified hierarchy is mounted writable, its own cgroup
offers the ``memory`` controller, and it can hand that controller to child groups. cgroup v2
lets a group with processes in it enable controllers for its children only at the root, so
the agent first moves itself into a leaf of its own group (``kece-agent``); that fails when
other processes share the group, as in a container started without a private cgroup
namespace. :func:`discover` says why not, in a sentence for the health checks and the
self-check, and the watchdog is then the only memory bound.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
from pathlib import Path

from . import log

logger = log.get("cgroups")

AGENT_LEAF = "kece-agent"
RUN_PREFIX = "kece-run-"


class MemoryCgroups:
    def __init__(self, parent: Path):
        self.parent = parent

    def create(self, limit_bytes: int) -> Path:
        path = self.parent / f"{RUN_PREFIX}{secrets.token_hex(6)}"
        path.mkdir()
        try:
            _write(path / "memory.max", str(limit_bytes))
            if (path / "memory.swap.max").exists():
                _write(path / "memory.swap.max", "0")
            # One OOM kill takes the whole run down, as the watchdog would.
            _write(path / "memory.oom.group", "1")
        except OSError:
            remove(path)
            raise
        return path

    def sweep(self) -> None:
        """Remove run groups a previous agent left (their processes died with it)."""
        for entry in self.parent.glob(f"{RUN_PREFIX}*"):
            remove(entry)


def attach(group: Path, pid: int) -> None:
    _write(group / "cgroup.procs", str(pid))


def oom_killed(group: Path) -> bool:
    try:
        for line in (group / "memory.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and int(value) > 0:
                return True
    except (OSError, ValueError):
        pass
    return False


def peak_kb(group: Path) -> int:
    """The run's peak charge (``memory.peak``, Linux ≥ 5.19); 0 where the kernel has none."""
    try:
        return int((group / "memory.peak").read_text()) // 1024
    except (OSError, ValueError):
        return 0


def remove(group: Path) -> None:
    try:
        group.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.event(logger, logging.WARNING, "cannot remove a run cgroup", cgroup=str(group), error=exc.strerror)


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _unified_mount() -> tuple[Path, str] | None:
    """(mount point, root of the hierarchy it shows) of the cgroup2 filesystem."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields, _, tail = line.partition(" - ")
        if tail.split(" ", 1)[0] == "cgroup2":
            parts = fields.split()
            if "rw" not in parts[5].split(","):
                continue
            return Path(parts[4]), parts[3]
    return None


def discover() -> tuple[MemoryCgroups | None, str]:
    """The agent's cgroups for runs, or None and why there are none."""
    own = next((line[3:] for line in _read("/proc/self/cgroup").splitlines() if line.startswith("0::")), None)
    mount = _unified_mount()
    if own is None or mount is None:
        return None, "no writable cgroup v2 hierarchy (cgroup v1 or a read-only /sys/fs/cgroup)"
    point, root = mount
    relative = os.path.relpath(own, root) if own.startswith(root) else None
    if relative is None or relative.startswith(".."):
        return None, f"this agent's cgroup {own} is outside the mounted cgroup2 hierarchy"
    group = (point / relative).resolve() if relative != "." else point
    if "memory" not in _read(group / "cgroup.controllers").split():
        return None, f"the memory controller is not available to this agent's cgroup {own}"
    if "memory" not in _read(group / "cgroup.subtree_control").split():
        reason = _delegate(group)
        if reason:
            return None, reason
    cgroups = MemoryCgroups(group)
    try:
        cgroups.sweep()
        remove(cgroups.create(64 << 20))
    except OSError as exc:
        return None, f"cannot create a cgroup with memory.max under {group}: {exc.strerror}"
    return cgroups, f"memory.max per run under {group}"


def _delegate(group: Path) -> str | None:
    leaf = group / AGENT_LEAF
    try:
        leaf.mkdir(exist_ok=True)
        attach(leaf, os.getpid())
    except OSError as exc:
        return f"cannot move the agent into {leaf}: {exc.strerror}"
    try:
        _write(group / "cgroup.subtree_control", "+memory")
    except OSError as exc:
        try:
            attach(group, os.getpid())
            leaf.rmdir()
        except OSError:
            pass
        why = "other processes share it" if exc.errno == errno.EBUSY else exc.strerror
        return f"cannot enable the memory controller for runs under {group}: {why}"
    return None


def _read(path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
