"""The real server for tests that cross HTTP: uvicorn serving kece.asgi against the test
database, as a subprocess on a free port, stopped with its process group."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    db = connection.settings_dict
    if settings.DATABASE_VENDOR != "mysql":
        raise RuntimeError("live-server tests need MariaDB/MySQL")
    return f"mysql://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 3306}/{db['NAME']}"


def operator_environment(**values) -> dict[str, str]:
    """os.environ without what this test run set for itself (settings module, test
    environment, database, Redis), plus `values`: what a server started by an operator
    would see."""
    from tests.settings import TEST_ENVIRONMENT

    own = {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", *TEST_ENVIRONMENT}
    return {**{k: v for k, v in os.environ.items() if k not in own}, **{k: str(v) for k, v in values.items()}}


class LiveServer:
    def __init__(self, env: dict | None = None, log_path: Path | None = None, database_url: str | None = None,
                 workers: int = 1):
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url or test_database_url(),
            # The product's settings, with the test run's environment (tests/settings.py).
            "DJANGO_SETTINGS_MODULE": "kece.settings",
            "KECE_ARTIFACT_ROOT": str(settings.KECE_ARTIFACT_ROOT),
            "KECE_LOG_LEVEL": os.environ.get("KECE_LOG_LEVEL", "WARNING"),
            "PYTHONPATH": str(ROOT),
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
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "kece.asgi:application", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning", "--no-access-log", "--workers", str(self.workers)],
            cwd=ROOT, env=self.env, stdout=log, stderr=log, start_new_session=True,
        )
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
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


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

    def claim(self, free_slots=1, wait_ms=0, timeout=30):
        return self.post("jobs/claim", {"freeSlots": free_slots, "waitMs": wait_ms}, timeout=timeout)

    def renew(self, *leases):
        return self.post("jobs/renew", {"leases": [{"jobId": j, "leaseEpoch": e, "progress": {"phase": "JUDGING",
                                                    "testcase": 1}} for j, e in leases]})

    def artifact(self, job_id, digest, lease_epoch):
        return self.get(f"jobs/{job_id}/artifacts/{digest}", **{"X-Judge-Lease": str(lease_epoch)})

    def result(self, job_id, body):
        return self.post(f"jobs/{job_id}/result", body)
