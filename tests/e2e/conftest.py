"""End to end: the real server (uvicorn, MariaDB, Redis) and real agent processes."""

import os
import shutil
import time
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from judging.models import JobState, JudgeJob
from nodes.models import DesiredState, JudgeNode
from nodes.services import node_register
from tests.agents import REPO, AgentProcess, private_dir
from tests.factories import HostGroupFactory, UserFactory, mark_verified
from tests.live import LiveServer, free_port

REQUIRE = os.environ.get("KECE_REQUIRE_SERVICES") == "1"
TOOLS = {"cpp": ["g++"], "java": ["javac", "java"], "python": ["python3"], "arkts": ["tsc", "node"], "mysql": []}


def need_pool(pool: str) -> None:
    missing = [t for t in ["bwrap", *TOOLS[pool]] if not shutil.which(t, path="/usr/local/bin:/usr/bin:/bin")]
    if missing:
        if REQUIRE:
            pytest.fail(f"{pool}: {', '.join(missing)} required (KECE_REQUIRE_SERVICES=1)")
        pytest.skip(f"{pool}: {', '.join(missing)} not installed")


@pytest.fixture(scope="session")
def tls(tmp_path_factory):
    import trustme

    folder = private_dir("kece-e2e-tls-", 0o700)
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    leaf.private_key_and_cert_chain_pem.write_to_path(str(folder / "node.pem"))
    leaf.private_key_pem.write_to_path(str(folder / "node.key"))
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    yield {"cert": folder / "node.pem", "key": folder / "node.key", "ca": folder / "ca.pem"}
    shutil.rmtree(folder, ignore_errors=True)


FAST_TIMINGS = {
    "KECE_LEASE_TTL_MS": 4000, "KECE_RENEW_INTERVAL_MS": 1000, "KECE_HEARTBEAT_INTERVAL_MS": 1000,
    "KECE_REAP_INTERVAL_MS": 300, "KECE_IN_PROCESS_SCHEDULER": 1, "KECE_RETRY_BACKOFF_MS": 200,
    "KECE_CLAIM_WAIT_MS": 3000, "KECE_CLAIM_FALLBACK_MS": 300,
    # No proxy in front: the browser tests load the pages' styles and scripts from the app.
    "KECE_SERVE_STATIC": 1,
}


def start_server(tls, tmp_path, **env) -> LiveServer:
    from tests.conftest import ON_MARIADB

    if not ON_MARIADB:
        pytest.skip("end-to-end tests need MariaDB/MySQL")
    return LiveServer(env={**FAST_TIMINGS, "KECE_PROBE_ALLOWED_PORTS": "443,1024-65535",
                           "KECE_PROBE_CA_FILE": str(tls["ca"]), **env},
                      log_path=tmp_path / "server.log").start()


@pytest.fixture
def server(tls, tmp_path):
    live = start_server(tls, tmp_path)
    yield live
    live.stop()


class Agents:
    """Registers nodes and starts their agents; stops every agent at the end."""

    def __init__(self, server, tls):
        self.server, self.tls = server, tls
        self.started: list[AgentProcess] = []
        self.folders = []
        self.group = HostGroupFactory(total_slots=16)

    def register(self, pool: str, *, slots: int = 2):
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
            wait_for(lambda: JudgeNode.objects.filter(pk=node.pk, session_open=True,
                                                      last_heartbeat_at__isnull=False).exists(),
                     60, f"{node.pool} agent joined", agent)
        return agent

    def enable(self, node) -> None:
        """Test set-up shortcut: mark the node verified and enabled (the check flow has its
        own test)."""
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


@pytest.fixture
def agents(server, tls, settings):
    settings.KECE_PROBE_ALLOWED_PORTS = [(443, 443), (1024, 65535)]
    fleet = Agents(server, tls)
    yield fleet
    fleet.stop()


@pytest.fixture
def fleet_on(tls, tmp_path, settings):
    """`fleet_on(**env)`: a server of its own with `env` over the fast timings, and the
    `Agents` for it; both stopped at the end."""
    settings.KECE_PROBE_ALLOWED_PORTS = [(443, 443), (1024, 65535)]
    started = []

    def start(**env) -> Agents:
        server = start_server(tls, tmp_path, **env)
        started.append(Agents(server, tls))
        return started[-1]

    yield start
    for fleet in started:
        fleet.stop()
        fleet.server.stop()


def judgers_admin():
    """A user with the `manage_judgers` permission (an admin of the node fleet)."""
    from django.contrib.auth.models import Permission

    admin = UserFactory()
    admin.user_permissions.add(Permission.objects.get(codename="manage_judgers"))
    return admin


def api_session(user) -> requests.Session:
    """HTTP as `user`, by the API token a script would use."""
    from rest_framework.authtoken.models import Token

    http = requests.Session()
    http.headers["Authorization"] = f"Token {Token.objects.create(user=user).key}"
    return http


def job_of(submission):
    submission.refresh_from_db()
    return JudgeJob.objects.get(pk=submission.current_judge_job_id)


def terminal(submission) -> bool:
    return job_of(submission).state in JobState.TERMINAL
