"""Fixtures for the node agent: a fake control plane and real agent processes.

Nothing here needs Django or a database: the agent is a standalone program, started with
``python -m node_agent`` exactly as an operator would, against the in-process fake control
plane of ``fake_control.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.agents import AgentProcess, private_dir as _private_dir

from .fake_control import FakeControlPlane

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _agent_metrics_in_memory(monkeypatch):
    # An agent is a process of its own, where prometheus_client keeps values in memory. The
    # server's metrics, loaded by earlier tests of this run, switch the whole process to
    # shared files, where every registry's series of the same name and labels is one value:
    # an agent built here would count on from another test's agent.
    from prometheus_client import values

    monkeypatch.setattr(values, "ValueClass", values.MutexValue)
SUM_CASES = [("1 2\n", "3\n", 50), ("10 20\n", "30\n", 50)]
REQUIRE = os.environ.get("KECE_REQUIRE_SERVICES") == "1"


def need(ok: bool, what: str) -> None:
    """Skip when a tool is missing on a developer machine; fail in CI (KECE_REQUIRE_SERVICES=1)."""
    if ok:
        return
    if REQUIRE:
        pytest.fail(f"{what} is required (KECE_REQUIRE_SERVICES=1)")
    pytest.skip(f"{what} is not available")


def need_pool(pool: str) -> None:
    need(shutil.which("bwrap") is not None, "bubblewrap (bwrap)")
    tools = {"cpp": ["g++"], "java": ["javac", "java"], "python": ["python3"], "arkts": ["tsc", "node"],
             "mysql": []}[pool]
    for tool in tools:
        need(shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin") is not None, tool)
    if pool == "mysql":
        need(mariadb_available(), "MariaDB/MySQL at 127.0.0.1:3306 (root, no password)")


def mariadb_available() -> bool:
    try:
        import MySQLdb

        MySQLdb.connect(host="127.0.0.1", port=3306, user="root", passwd="", connect_timeout=3).close()
        return True
    except Exception:
        return False


@pytest.fixture
def workdir():
    """A folder the sandbox uid may traverse (pytest's tmp_path is 0700)."""
    path = _private_dir("kece-agent-", 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def plane():
    fake = FakeControlPlane().start()
    yield fake
    fake.stop()


@pytest.fixture
def make_plane():
    planes = []

    def _make(**kwargs) -> FakeControlPlane:
        fake = FakeControlPlane(**kwargs).start()
        planes.append(fake)
        return fake

    yield _make
    for fake in planes:
        fake.stop()


@pytest.fixture
def tls_files():
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    folder = _private_dir("kece-tls-", 0o700)
    cert.private_key_and_cert_chain_pem.write_to_path(str(folder / "node.pem"))
    cert.private_key_pem.write_to_path(str(folder / "node.key"))
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    yield folder / "node.pem", folder / "node.key", folder / "ca.pem"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def launch(request):
    """Start a real agent process: ``launch(plane, pool, ...) -> (agent, node_id)``."""
    started: list[AgentProcess] = []
    folders: list[Path] = []

    def _launch(plane: FakeControlPlane, pool: str, *, slots: int = 2, env: dict | None = None,
                node_id: int | None = None, join_code: str | None = None, wait_session: bool = True,
                health: str = "off", workspace: Path | None = None, credential: Path | None = None,
                umask: int = -1):
        if node_id is None:
            node_id, join_code = plane.register_node(pool)
        if workspace is None:
            base = _private_dir("kece-agent-", 0o711)
            folders.append(base)
            workspace = base / "ws"
        if credential is None:
            secret_dir = _private_dir("kece-cred-", 0o700)
            folders.append(secret_dir)
            credential = secret_dir / "credential"
            credential.write_text(join_code + "\n")
            os.chmod(credential, 0o600)
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGE_")}
        full_env.update({
            "PYTHONPATH": str(REPO), "JUDGE_MODE": "pool", "JUDGE_POOL": pool, "JUDGE_CONTROL_URL": plane.url,
            "JUDGE_CREDENTIAL_FILE": str(credential), "JUDGE_LOCAL_SLOTS": str(slots),
            "JUDGE_WORKSPACE": str(workspace), "JUDGE_HEALTH_LISTEN": health, "JUDGE_STOP_GRACE_MS": "5000",
        })
        if pool == "mysql":
            full_env["JUDGE_MYSQL_URL"] = "mysql://root:@127.0.0.1:3306/"
        full_env.update(env or {})
        logdir = _private_dir("kece-agentlog-", 0o700)
        folders.append(logdir)
        agent = AgentProcess(full_env, logdir, umask=umask).start()
        agent.node_id = node_id
        agent.credential = credential
        agent.workspace = workspace
        started.append(agent)
        if wait_session:
            node = plane.nodes[node_id]
            try:
                plane.wait_for(lambda: node.sessions_opened >= 1 and node.heartbeats, timeout=60,
                               what="agent session and first heartbeat")
            except TimeoutError:
                raise AssertionError(f"agent did not open a session:\n{agent.logs()[-4000:]}") from None
        return agent, node_id

    yield _launch
    failed = getattr(request.node, "rep_call", None)
    for agent in started:
        agent.kill()
        if failed is not None and failed.failed:
            print(f"--- agent log ({agent.log_path}) ---\n{agent.logs()[-8000:]}")
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def verdict_of(plane: FakeControlPlane, job_id: int, timeout: float = 90) -> dict:
    job = plane.wait_settled(job_id, timeout=timeout)
    assert job.settled is not None, f"job {job_id} ended {job.state} without a result: {job.results}"
    return job.settled["body"]
