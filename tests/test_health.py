"""`/livez` and `/readyz`: what a supervisor or load balancer sees with the database down,
hung, unmigrated, and with Redis stopped."""

import concurrent.futures
import os
import shutil
import signal
import socket
import subprocess

import pytest
import requests
from django.db import connection

from kece import health
from tests.concurrency import raw_connection, wait_until
from tests.factories import UserFactory, make_node, make_problem
from tests.judging.helpers import submit
from tests.live import LiveServer, NodeClient, free_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_of_our_own(settings):
    """A Redis server this test starts, stops and is the only user of."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is required")
    import redis

    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_connect_timeout=1)

    def answers():
        try:
            return client.ping()
        except redis.ConnectionError:
            return False

    wait_until(answers, timeout=20, message="the test's Redis answers")
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    health._redis = None
    yield process
    process.kill()
    process.wait()
    health._redis = None


@pytest.fixture
def database_at(monkeypatch):
    """Point the readiness check's connections at another server or database."""
    def point(**values):
        for key, value in values.items():
            monkeypatch.setitem(connection.settings_dict, key, value)
    yield point
    health._pending = None


def readyz(client, verbose=True):
    response = client.get("/readyz?verbose" if verbose else "/readyz")
    return response.status_code, response.json()


def statuses(body):
    return {check["name"]: check["status"] for check in body["checks"]}


def test_a_healthy_process_is_ready_and_lists_each_check_with_its_time(client, redis_of_our_own):
    status, body = readyz(client)
    assert (status, body["status"], body["failed"]) == (200, "ok", []), body
    assert statuses(body) == {"database": "ok", "migrations": "ok", "redis": "ok"}
    assert all(isinstance(check["ms"], float) for check in body["checks"])
    assert "checks" not in readyz(client, verbose=False)[1]
    assert client.get("/readyz").headers["Cache-Control"] == "no-store"


def test_with_redis_stopped_the_process_is_degraded_but_ready(client, redis_of_our_own):
    redis_of_our_own.kill()
    redis_of_our_own.wait()
    status, body = readyz(client)
    assert (status, body["status"], body["failed"]) == (200, "degraded", ["redis"])
    assert statuses(body) == {"database": "ok", "migrations": "ok", "redis": "failed"}
    assert client.get("/livez").status_code == 200


def test_with_the_database_stopped_the_process_is_not_ready(client, database_at):
    database_at(HOST="127.0.0.1", PORT=str(free_port()))  # nothing listens there
    status, body = readyz(client)
    assert (status, body["status"], body["failed"]) == (503, "unavailable", ["database"])
    assert client.get("/livez").status_code == 200


def test_a_database_host_that_answers_nothing_is_not_ready_within_the_deadline(client, database_at):
    """A host that accepts the connection and then says nothing, as one that drops packets
    after the handshake: the check gives up at its deadline and later probes do not queue
    behind the one still waiting."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes handshakes; nobody ever accepts or speaks
        database_at(HOST="127.0.0.1", PORT=str(silent.getsockname()[1]))
        for _ in range(3):
            status, body = readyz(client)
            assert (status, body["failed"]) == (503, ["database"])
            assert body["checks"][0]["error"] == "timeout"


def test_a_database_without_the_migrations_is_not_ready(client, database_at, monkeypatch):
    name = f"{connection.settings_dict['NAME']}_empty"
    admin = raw_connection()
    try:
        admin.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        monkeypatch.setattr(health, "_migrated", False)
        database_at(NAME=name)
        status, body = readyz(client)
        assert (status, body["status"], body["failed"]) == (503, "unavailable", ["migrations"])
        assert (statuses(body)["database"], statuses(body)["migrations"]) == ("ok", "failed")
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


@pytest.mark.mariadb
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("workers", [1, 2])
def test_on_sigterm_the_server_says_draining_serves_its_long_poll_then_exits(tmp_path, workers):
    """Real uvicorn (one process, or a supervisor that passes SIGTERM on to two): after
    SIGTERM `/readyz` is 503 `draining` at once, the claim that was waiting still gets the
    job submitted meanwhile, and then the server exits."""
    node, _ = make_node(pool="python", max_slots=1)
    problem = make_problem(languages=("python",))
    server = LiveServer(env={"KECE_CLAIM_WAIT_MS": 30000}, log_path=tmp_path / "server.log", workers=workers)
    with server:
        def verbose():
            return requests.get(server.url + "/readyz?verbose", timeout=10)

        agent = NodeClient(server.url, credential=node.secret, session=node.session_epoch)
        waiting = concurrent.futures.ThreadPoolExecutor(1).submit(agent.claim, wait_ms=30000, timeout=60)
        wait_until(lambda: verbose().json()["longPolls"] == 1, timeout=20, message="the claim waits in the server")
        os.kill(server.process.pid, signal.SIGTERM)
        wait_until(lambda: verbose().status_code == 503, timeout=20, message="/readyz answers 503")
        assert verbose().json()["status"] == "draining"
        assert not waiting.done()
        submission = submit(UserFactory(), problem)
        answer = waiting.result(timeout=60)
        assert answer.status_code == 200
        assert [job["submissionId"] for job in answer.json()["jobs"]] == [submission.pk]
        assert server.process.wait(timeout=60) is not None
