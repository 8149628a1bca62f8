"""The real server for tests that cross HTTP: uvicorn serving kece.asgi against the test
database, as a subprocess, stopped with its process group.

The server listens on a socket this process bound (port 0) and handed to it, so whatever
answers on that port is the server this helper started; and it reaches the database as a
MariaDB account of its own, so a test can count that server's connections and statements
while other clients share the database server."""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.db import connection

from tests.concurrency import wait_until

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

def start_redis(port: int) -> subprocess.Popen:
    """A Redis server on `port` that the test starts, stops and is the only user of; it
    answers when this returns."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is required")
    import redis

    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_connect_timeout=1)

    def answers():
        try:
            return client.ping()
        except redis.ConnectionError:
            return False

    wait_until(answers, timeout=20, message="the test's Redis answers")
    return process



def read_answer(sock) -> tuple[int, bytes]:
    """The status and body of one HTTP/1.1 answer with a Content-Length, read from a socket a
    test wrote its request to by hand (to send a body in pieces, or none of what it declared)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection without an answer: {data!r}"
        data += chunk
    header, _, body = data.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the answer was cut short"
        body += chunk
    return int(lines[0].split()[1]), body[:length]


class DatabaseAccount:
    """A MariaDB account with every privilege on the test database and nothing else. Its
    statements go through a connection of their own: a CREATE USER inside a test's
    transaction would commit it, and module fixtures may not use the test's connection."""

    def __init__(self):
        if settings.DATABASE_VENDOR != "mysql":
            raise RuntimeError("live-server tests need MariaDB/MySQL")
        db = connection.settings_dict
        self.host, self.port = db["HOST"] or "127.0.0.1", int(db["PORT"] or 3306)
        self.admin = {"host": self.host, "port": self.port, "user": db["USER"], "passwd": db["PASSWORD"] or ""}
        self.database = db["NAME"]
        self.name = f"kece_live_{secrets.token_hex(4)}"
        self.password = secrets.token_hex(16)

    def _query(self, sql: str, args=None):
        import MySQLdb

        admin = MySQLdb.connect(**self.admin, autocommit=True)
        try:
            cursor = admin.cursor()
            cursor.execute(sql, args)
            return cursor.fetchone()
        finally:
            admin.close()

    def create(self) -> "DatabaseAccount":
        escaped = self.database.replace("_", "\\_")  # `_` is a wildcard in a GRANT's database name
        self._query(f"CREATE USER '{self.name}'@'%' IDENTIFIED BY '{self.password}'")
        self._query(f"GRANT ALL PRIVILEGES ON `{escaped}`.* TO '{self.name}'@'%'")
        self._query("SET GLOBAL userstat = 1")  # per-account statement counts
        return self

    def drop(self) -> None:
        self._query(f"DROP USER IF EXISTS '{self.name}'@'%'")

    def url(self) -> str:
        return f"mysql://{self.name}:{self.password}@{self.host}:{self.port}/{self.database}"

    def connections(self) -> int:
        return self._query("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = %s", [self.name])[0]

    def selects(self) -> int:
        row = self._query("SELECT SELECT_COMMANDS FROM information_schema.USER_STATISTICS WHERE USER = %s",
                          [self.name])
        return int(row[0]) if row else 0


def operator_environment(**values) -> dict[str, str]:
    """os.environ without what this test run set for itself (settings module, test
    environment, database, Redis), plus `values`: what a server started by an operator
    would see."""
    from tests.settings import TEST_ENVIRONMENT

    own = {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "KECE_METRICS_DIR", *TEST_ENVIRONMENT}
    return {**{k: v for k, v in os.environ.items() if k not in own}, **{k: str(v) for k, v in values.items()}}


def stop_process_group(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the process's group (it was started in a session of its own), SIGKILL
    after `grace` seconds."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


class LiveServer:
    def __init__(self, env: dict | None = None, log_path: Path | None = None, database_url: str | None = None,
                 workers: int = 1, prefix=(), args=(), root: Path = ROOT):
        self.workers = workers
        self.root = Path(root)  # the checkout it serves (a benchmark may compare another)
        self.args = list(args)  # more of uvicorn's options
        self.prefix = list(prefix)  # a command the server runs under (a benchmark's profiler)
        self.listener = socket.socket()
        # Accepted connections inherit it: uvicorn sets no TCP_NODELAY on a socket it is
        # handed, and Nagle against the client's delayed ACK would add ~40 ms to every answer.
        self.listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1024)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # Its own account, unless the test chose the database; `database` counts what it does.
        self.database = None if database_url else DatabaseAccount()
        self.metrics_dir = tempfile.mkdtemp(prefix="kece-live-metrics-")  # removed when it stops
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url or "",
            # The product's settings, with the test run's environment (tests/settings.py).
            "DJANGO_SETTINGS_MODULE": "kece.settings",
            "KECE_ARTIFACT_ROOT": str(settings.KECE_ARTIFACT_ROOT),
            "KECE_LOG_LEVEL": os.environ.get("KECE_LOG_LEVEL", "WARNING"),
            "PYTHONPATH": str(self.root),
            # Its own metrics files: it empties them as it starts (`kece.serve`).
            "KECE_METRICS_DIR": self.metrics_dir,
            **{k: str(v) for k, v in (env or {}).items()},
        }
        if "REDIS_URL" in self.env and not self.env["REDIS_URL"]:
            del self.env["REDIS_URL"]
        self.log_path = log_path
        self.process = None

    @classmethod
    def for_database(cls, database_url: str, **kwargs) -> "LiveServer":
        return cls(database_url=database_url, **kwargs)

    def start(self, timeout: float = 30.0) -> "LiveServer":
        if self.database is not None:
            self.env["DATABASE_URL"] = self.database.create().url()
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        fd = self.listener.fileno()
        self.process = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "kece.serve", "--fd", str(fd),
             "--log-level", "warning", "--no-access-log", "--workers", str(self.workers), *self.args],
            cwd=self.root, env=self.env, stdout=log, stderr=log, start_new_session=True, pass_fds=(fd,),
        )
        self.listener.close()  # the server holds it now
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}")
            try:
                requests.get(self.url + "/api/v1/system/judgers/summary", timeout=1)
                return self
            except requests.RequestException:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the server did not start")

    def stop(self):
        self.listener.close()
        if self.process:
            stop_process_group(self.process, 10)
        if self.database is not None:
            self.database.drop()
        shutil.rmtree(self.metrics_dir, ignore_errors=True)  # a server is started once

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# Run in a live server's environment (its own database): a student with an API token, a
# problem, and an enabled python node, as JSON.
_POPULATE = """
import json, django
django.setup()
from rest_framework.authtoken.models import Token
from tests.factories import UserFactory, make_node, make_problem
node, _ = make_node(pool="python", max_slots=2)
print(json.dumps({"token": Token.objects.create(user=UserFactory()).key, "problem": make_problem(languages=("python",)).pk,
                  "credential": node.secret, "session": node.session_epoch}))
"""


def populate(server) -> dict:
    """What a server of its own needs to take a submission and a node's calls: `token`,
    `problem`, `credential`, `session`."""
    done = subprocess.run([sys.executable, "-c", _POPULATE], cwd=ROOT, env=server.env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


class NodeClient:
    """Speaks the node API like an agent would, for tests."""

    PREFIX = "/api/v1/internal/judgers/"

    def __init__(self, base_url: str, *, credential: str | None = None, session: int | None = None):
        self.base = base_url
        self.credential = credential
        self.session_epoch = session
        self.http = requests.Session()

    def _headers(self, extra=None):
        headers = {}
        if self.credential:
            headers["Authorization"] = f"Bearer {self.credential}"
        if self.session_epoch is not None:
            headers["X-Judge-Session"] = str(self.session_epoch)
        return {**headers, **(extra or {})}

    def post(self, path, body=None, *, timeout=30, **headers):
        return self.http.post(self.base + self.PREFIX + path, json=body, headers=self._headers(headers),
                              timeout=timeout)

    def get(self, path, *, timeout=30, **headers):
        return self.http.get(self.base + self.PREFIX + path, headers=self._headers(headers), timeout=timeout)

    def join(self, code, pool="python", slots=2):
        response = self.post("join", {"joinCode": code, "agentVersion": "test", "runtimeSpec": f"{pool}-r1",
                                      "localSlots": slots})
        if response.status_code == 201:
            self.credential = response.json()["credential"]
            self.session_epoch = response.json()["sessionEpoch"]
        return response

    def open_session(self, pool="python", slots=2):
        saved, self.session_epoch = self.session_epoch, None
        response = self.post("session", {"agentVersion": "test", "runtimeSpec": f"{pool}-r1", "localSlots": slots})
        self.session_epoch = response.json()["sessionEpoch"] if response.status_code == 200 else saved
        return response

    def heartbeat(self, pool="python", running=0):
        return self.post("heartbeat", {"agentVersion": "test", "runtimeSpec": f"{pool}-r1", "localSlots": 2,
                                       "running": running, "health": {"ok": True, "checks": {"sandbox": True}}})

    def claim(self, free_slots=1, wait_ms=0, timeout=30, **extra):
        return self.post("jobs/claim", {"freeSlots": free_slots, "waitMs": wait_ms, **extra}, timeout=timeout)

    def renew(self, *leases):
        return self.post("jobs/renew", {"leases": [{"jobId": j, "leaseEpoch": e, "progress": {"phase": "JUDGING",
                                                    "testcase": 1}} for j, e in leases]})

    def artifact(self, job_id, digest, lease_epoch):
        return self.get(f"jobs/{job_id}/artifacts/{digest}", **{"X-Judge-Lease": str(lease_epoch)})

    def result(self, job_id, body):
        return self.post(f"jobs/{job_id}/result", body)
