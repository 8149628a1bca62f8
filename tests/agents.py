"""Real agent processes for tests: `python -m node_agent`, started as an operator would."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class AgentProcess:
    def __init__(self, env: dict[str, str], workdir: Path):
        self.env = env
        self.workdir = workdir
        self.log_path = workdir / "agent.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "AgentProcess":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "node_agent"], cwd=REPO, env=self.env, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        if getattr(self, "_log", None):
            self._log.close()

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_log(self, needle: str, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if needle in self.logs():
                return
            if not self.alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} not in agent log:\n{self.logs()[-4000:]}")


def private_dir(prefix: str, mode: int) -> Path:
    """A folder under /tmp: the sandbox uid must be able to traverse a workspace's parents
    (pytest's own temporary folders are 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(path, mode)
    return path




def sandbox_pids(uid: int = 65534) -> set[str]:
    """Live processes of the sandbox uid (a zombie is already dead, waiting for its reaper)."""
    out = subprocess.run(["ps", "-u", str(uid), "-o", "pid=,stat="], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.split() and not line.split()[1].startswith("Z")}
