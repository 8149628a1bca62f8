"""README command 1, the embedded default: SQLite, in-process wake-ups and scheduler, a
real local agent that joins, passes its checks and judges every python sample."""

import hashlib
import json
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys

import pytest

from tests.agents import private_dir
from tests.concurrency import wait_until
from kece.demo import HEALTH_PORTS
from tests.live import ROOT, free_port, operator_environment

pytestmark = pytest.mark.slow


@pytest.fixture
def state_dir():
    path = private_dir("kece-demo-", 0o711)  # the sandbox uid must traverse to the agent's workspace
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def env(tmp_path):
    """An operator's environment on a database and artifact store of the test's own."""
    return operator_environment(DEBUG=1, DATABASE_URL=f"sqlite:///{tmp_path / 'kece.sqlite3'}",
                                KECE_ARTIFACT_ROOT=tmp_path / "artifacts", KECE_LOG_LEVEL="WARNING")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """One whole demo on python, every process logging at DEBUG: the run the tests below
    read (its output, logs, state and database), made once for them all."""
    state = private_dir("kece-demo-", 0o711)
    tmp = tmp_path_factory.mktemp("demo")
    env = operator_environment(DEBUG=1, DATABASE_URL=f"sqlite:///{tmp / 'kece.sqlite3'}",
                               KECE_ARTIFACT_ROOT=tmp / "artifacts", KECE_LOG_LEVEL="DEBUG", JUDGE_LOG_LEVEL="DEBUG")
    run = subprocess.run([sys.executable, "manage.py", "demo", "--no-wait", "--pools", "python",
                          "--port", str(free_port()), "--state-dir", str(state)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    yield run.returncode, run.stdout + run.stderr, state, tmp / "kece.sqlite3"
    shutil.rmtree(state, ignore_errors=True)


def test_the_demo_judges_every_python_sample_as_intended_on_sqlite(demo_run):
    returncode, output, state_dir, _ = demo_run
    assert returncode == 0, output[-3000:]
    submitted = int(re.search(r"submitted (\d+) sample solutions", output).group(1))
    judged = re.findall(r"^\[demo\] python .* → (\S+) .*$", output, flags=re.M)
    assert submitted >= 14 and len(judged) == submitted, output[-3000:]
    assert output.count("as intended") == submitted, output[-3000:]
    assert "self-check passed" in output and "node enabled" in output
    # The busy agent asked for its next job on its result posts, and got them.
    agent_log = (state_dir / "python" / "agent.log").read_text()
    assert re.search(r"\"result accepted\" .*next_jobs=1", agent_log), agent_log[-2000:]


def secrets_of_the_run(database, state_dir) -> tuple[set[str], set[str]]:
    """(secrets in clear, digests of join codes) the run made: API tokens, the node's
    credential and probe key; join codes are kept only as digests."""
    with sqlite3.connect(database) as db:
        tokens = {key for (key,) in db.execute("SELECT key FROM authtoken_token")}
        join_digests = {digest for (digest,) in db.execute("SELECT code_digest FROM judge_join_code")}
    stored = json.loads((state_dir / "python" / "credential").read_text())
    clear = tokens | {stored["credential"], stored["probeKey"]}
    assert len(clear) >= 4 and all(len(secret) >= 20 for secret in clear) and join_digests
    return clear, join_digests


def test_no_secret_the_demo_made_reaches_its_output_or_logs(demo_run):
    """A whole demo with every process logging at DEBUG: no API token, node credential,
    probe key or join code appears in its output, the server's log or the agent's, nor the
    users' password in the logs (the demo prints it to its operator on purpose)."""
    returncode, output, state_dir, database = demo_run
    assert returncode == 0, output[-3000:]
    logs = (state_dir / "server.log").read_text() + (state_dir / "python" / "agent.log").read_text()
    assert "DEBUG" in logs and "job leased" in logs, logs[-3000:]
    clear, join_digests = secrets_of_the_run(database, state_dir)
    everything = output + logs
    leaked = [secret[:6] + "…" for secret in clear if secret in everything]
    assert not leaked, f"secrets in the demo's output or logs: {leaked}"
    # A join code leaked in any shape would be a run of URL-safe characters somewhere.
    words = set(re.findall(r"[A-Za-z0-9_-]{20,}", everything))
    assert not {w for w in words if hashlib.sha256(w.encode()).hexdigest() in join_digests}, "a join code leaked"
    password = re.search(r"password (\S+)", output).group(1)
    assert password not in logs


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_a_demo_stopped_by_sigterm_stops_its_server_and_agents_too(env, state_dir):
    port = free_port()
    demo = subprocess.Popen([sys.executable, "manage.py", "demo", "--pools", "python", "--port", str(port),
                             "--state-dir", str(state_dir)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in demo.stdout:
            seen.append(line)
            if "started the python agent" in line:
                break
        assert _listening(port), "".join(seen)
        wait_until(lambda: _listening(HEALTH_PORTS["python"]), timeout=60, message="the agent serves its health port")
        demo.send_signal(signal.SIGTERM)
        rest = demo.communicate(timeout=120)[0]
    finally:
        if demo.poll() is None:  # failed before its stop: stopped as an operator would, its agents with it
            demo.terminate()
            try:
                demo.wait(60)
            except subprocess.TimeoutExpired:
                demo.kill()
    assert "[demo] stopping" in rest, "".join(seen) + rest
    assert not _listening(port), "the control plane outlived the demo"
    assert not _listening(HEALTH_PORTS["python"]), "the python agent outlived the demo"


@pytest.mark.django_db
def test_a_sample_refused_by_the_server_is_said_and_the_others_are_still_submitted(capsys):
    """A database an earlier run left may hold a running exam with the samples' problems:
    the demo says which were refused and why, and goes on, rather than ending in a traceback."""
    from types import SimpleNamespace

    from judging.services.problems import problem_import
    from kece.demo import Demo, sample_solutions

    for package in {package for package, *_ in sample_solutions(["python"])}:
        problem_import(package)
    answers = iter([SimpleNamespace(status_code=409, json=lambda: {"error": "exam_closed", "detail": "In an exam."},
                                    text="")])

    def post(url, json):
        answer = next(answers, None)
        return answer or SimpleNamespace(status_code=202, json=lambda: {"submissionType": "ALGO", "submissionId": 1})

    demo = SimpleNamespace(base="http://127.0.0.1:1", student=SimpleNamespace(post=post))
    submitted = Demo.submit_samples(demo, ["python"])
    output = capsys.readouterr().out
    samples = len(list(sample_solutions(["python"])))
    assert len(submitted) == samples - 1
    assert "refused: 409 exam_closed — In an exam." in output
    assert f"submitted {samples - 1} sample solutions" in output


def test_a_health_port_another_program_holds_is_replaced_by_a_free_one():
    """A second demo (or anything else) on 9443: the python agent could not listen, exited,
    and the demo waited for it; it gets a port of its own."""
    from kece.demo import health_ports

    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the demo's last agent may have just left it
        holder.bind(("127.0.0.1", HEALTH_PORTS["python"]))
        holder.listen(1)
        ports = health_ports()
    assert ports["python"] != HEALTH_PORTS["python"] and len(set(ports.values())) == len(ports)


def test_an_agent_that_stops_during_set_up_is_said_and_not_waited_for(tmp_path, capsys):
    from kece.demo import Demo

    demo = Demo(port=free_port(), state_dir=tmp_path, judge_mysql_url="", pools=["python"])
    (tmp_path / "python").mkdir()
    (tmp_path / "python" / "agent.log").write_text('{"level": "ERROR", "message": "health endpoint cannot start"}\n')
    demo.agents["python"] = subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])
    demo.agents["python"].wait()
    assert demo.verify_and_enable({"python": {"id": 1}}, timeout=30) == []
    said = capsys.readouterr().out
    assert "python: the agent stopped (exit 2) before it was enabled" in said and "health endpoint" in said
