"""Real agent processes for tests and benchmarks: `python -m node_agent`, started as an operator would."""

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = {"cpp": ["g++"], "java": ["javac", "java"], "python": ["python3"], "arkts": ["tsc", "node"], "mysql": []}


def missing_tools(pool: str) -> list[str]:
    """What this machine lacks to run `pool`'s agent: the sandbox and the toolchain."""
    return [t for t in ["bwrap", *TOOLS[pool]] if not shutil.which(t, path="/usr/local/bin:/usr/bin:/bin")]


def make_tls(folder: Path) -> dict:
    """A private CA and a loopback certificate for the agents' health endpoints, in `folder`."""
    import trustme

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    leaf.private_key_and_cert_chain_pem.write_to_path(str(folder / "node.pem"))
    leaf.private_key_pem.write_to_path(str(folder / "node.key"))
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    return {"cert": folder / "node.pem", "key": folder / "node.key", "ca": folder / "ca.pem"}


class AgentProcess:
    def __init__(self, env: dict[str, str], workdir: Path, umask: int = -1):
        self.env = env
        self.workdir = workdir
        self.umask = umask  # -1: this process's
        self.log_path = workdir / "agent.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "AgentProcess":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "node_agent"], cwd=REPO, env=self.env, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True, umask=self.umask,
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

    def stop_with_usage(self, grace: float = 20) -> resource.struct_rusage | None:
        """SIGTERM, SIGKILL after `grace` seconds; the resources the agent used with every
        process it waited for (the sandboxed compilations and runs): CPU seconds, and in
        `ru_maxrss` the largest resident set of any one of them (KiB). None if already reaped."""
        if self.proc is None or self.proc.returncode is not None:
            return None
        os.killpg(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(self.proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(self.proc.pid, 0)
                break
            time.sleep(0.05)
        self.proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if getattr(self, "_log", None):
            self._log.close()
        return usage

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


class Agents:
    """Registers nodes and starts their agents; stops every agent at the end. For the
    end-to-end tests and the benchmark's real-runtime mode; Django is imported only here,
    since the agent's own tests start agents without it."""

    def __init__(self, server, tls):
        from tests.factories import HostGroupFactory

        self.server, self.tls = server, tls
        self.started: list[AgentProcess] = []
        self.folders = []
        self.group = HostGroupFactory(total_slots=16)

    def register(self, pool: str, *, slots: int = 2):
        from django.utils import timezone

        from nodes.services import node_register
        from tests.live import free_port

        port = free_port()
        node, issued = node_register(name=f"e2e-{pool}-{time.monotonic_ns()}", pool=pool,
                                     base_url=f"https://127.0.0.1:{port}", host_group_id=self.group.pk,
                                     max_slots=slots, actor=None, now=timezone.now())
        secrets = private_dir("kece-e2e-cred-", 0o700)
        credential = secrets / "credential"
        credential.write_text(issued.code + "\n")
        os.chmod(credential, 0o600)
        node.port, node.credential_file = port, credential
        self.folders.append(secrets)
        return node

    def workspace(self) -> Path:
        """A workspace folder (not made yet) that a test may prepare before the agent starts."""
        parent = private_dir("kece-e2e-ws-", 0o711)
        self.folders.append(parent)
        return parent / "ws"

    def start(self, node, *, slots: int = 2, wait_joined: bool = True,
              workspace: Path | None = None) -> AgentProcess:
        workspace = workspace or self.workspace()
        logs = private_dir("kece-e2e-log-", 0o700)
        self.folders.append(logs)
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGE_")}
        env.update({
            "PYTHONPATH": str(REPO), "JUDGE_MODE": "pool", "JUDGE_POOL": node.pool,
            "JUDGE_CONTROL_URL": self.server.url, "JUDGE_CREDENTIAL_FILE": str(node.credential_file),
            "JUDGE_LOCAL_SLOTS": str(slots), "JUDGE_WORKSPACE": str(workspace),
            "JUDGE_HEALTH_LISTEN": f"127.0.0.1:{node.port}", "JUDGE_TLS_CERT": str(self.tls["cert"]),
            "JUDGE_TLS_KEY": str(self.tls["key"]), "JUDGE_STOP_GRACE_MS": "3000",
            "JUDGE_MYSQL_URL": "mysql://root:@127.0.0.1:3306/",
        })
        agent = AgentProcess(env, logs).start()
        self.started.append(agent)
        if wait_joined:
            from nodes.models import JudgeNode

            wait_for(lambda: JudgeNode.objects.filter(pk=node.pk, session_open=True,
                                                      last_heartbeat_at__isnull=False).exists(),
                     60, f"{node.pool} agent joined", agent)
        return agent

    def enable(self, node) -> None:
        """Test set-up shortcut: mark the node verified and enabled (the check flow has its
        own test)."""
        from nodes.models import DesiredState, JudgeNode
        from tests.factories import mark_verified

        node.refresh_from_db()
        mark_verified(node)
        JudgeNode.objects.filter(pk=node.pk).update(desired_state=DesiredState.ENABLED)

    def stop(self):
        for agent in self.started:
            agent.kill()
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)


def wait_for(condition, timeout: float, what: str, agent=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    detail = f"\nagent log:\n{agent.logs()[-3000:]}" if agent else ""
    raise AssertionError(f"timed out waiting for: {what}{detail}")
