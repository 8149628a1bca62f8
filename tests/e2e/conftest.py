"""End to end: the real server (uvicorn, MariaDB, Redis) and real agent processes."""

import os
import shutil

import pytest
import requests

from judging.models import JobState, JudgeJob
from tests.agents import Agents, make_tls, missing_tools, private_dir, wait_for  # noqa: F401 (re-exported)
from tests.factories import UserFactory
from tests.live import LiveServer

REQUIRE = os.environ.get("KECE_REQUIRE_SERVICES") == "1"


def need_pool(pool: str) -> None:
    missing = missing_tools(pool)
    if missing:
        if REQUIRE:
            pytest.fail(f"{pool}: {', '.join(missing)} required (KECE_REQUIRE_SERVICES=1)")
        pytest.skip(f"{pool}: {', '.join(missing)} not installed")


@pytest.fixture(scope="session")
def tls(tmp_path_factory):
    folder = private_dir("kece-e2e-tls-", 0o700)
    yield make_tls(folder)
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
