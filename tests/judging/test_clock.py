"""One clock: a process whose clock disagrees with the database's sets and checks no deadline.

The live test runs a real server under libfaketime, minutes ahead of the database, beside a
node's live lease: it refuses the node's calls with 503 and its reaper takes nothing."""

import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from judging import clock
from judging.models import JobState, JudgeJob
from kece.errors import Unavailable
from tests.api.helpers import INTERNAL, error_of, heartbeat_body, node_client, send
from tests.factories import UserFactory, make_node
from tests.judging.helpers import claim, submit

FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


@pytest.fixture
def skewed(monkeypatch, settings):
    """This process's clock five minutes ahead of the database's, as the guard measures it."""
    settings.KECE_CLOCK_CHECK_MS = 1
    monkeypatch.setattr(clock, "_measure", lambda: 300.0)
    # What the process measured before, back as it was once the test is over.
    for name in ("at", "skew"):
        monkeypatch.setitem(clock._last, name, clock._last[name])


@pytest.mark.django_db
def test_the_clocks_of_this_run_agree():
    status = clock.clock_status()
    assert status.ok and abs(status.skew) < 1.0


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)  # the claim's handler reads on a thread of its own
def test_a_skewed_process_refuses_every_call_that_sets_or_checks_a_deadline(skewed, problem):
    node, identity = make_node(pool="python")
    with pytest.raises(Unavailable, match=r"\+300\.0 s off the database's"):
        clock.require_agreeing_clock()
    answer = send(node_client(node, session=node.session_epoch), "POST", INTERNAL + "jobs/claim",
                  {"freeSlots": 1, "waitMs": 0})
    assert error_of(answer) == (503, "unavailable") and int(answer["Retry-After"]) >= 1
    beat = send(node_client(node, session=node.session_epoch), "POST", INTERNAL + "heartbeat", heartbeat_body())
    assert error_of(beat) == (503, "unavailable")
    # Nor does it open a session or take a join code: both stamp the node's first heartbeat.
    from nodes.services import AgentReport, node_join, node_session_open

    report = AgentReport("test", "python-r1", 2)
    with pytest.raises(Unavailable):
        node_session_open(node_id=node.pk, credential_digest_value=identity.credential_digest, report=report,
                          now=timezone.now())
    with pytest.raises(Unavailable):
        node_join(join_code="any-code", report=report, now=timezone.now())
    with pytest.raises(Unavailable):
        claim(identity)


@pytest.mark.django_db
def test_a_skewed_process_reaps_nothing(skewed, problem, settings, monkeypatch):
    from kece.periodic import reap_step

    _, identity = make_node(pool="python")
    submit(UserFactory(), problem)
    monkeypatch.setattr(clock, "_measure", lambda: 0.0)
    [job] = claim(identity)
    monkeypatch.setattr(clock, "_measure", lambda: 300.0)
    from django.core.cache import cache

    from kece import metrics
    from kece.periodic import StepPaused, reconcile_step, run_recorded
    from judging.services.reconcile import reconcile_run

    with pytest.raises(StepPaused, match="reaper paused"):
        reap_step(now=job.lease_until + timedelta(seconds=1))
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.RUNNING
    # A step that stood back did nothing: no success is noted, so the staleness alert may fire.
    cache.delete(metrics.STEP_SUCCESS_KEY.format("reap"))
    assert run_recorded(reap_step) is None
    assert cache.get(metrics.STEP_SUCCESS_KEY.format("reap")) is None
    with pytest.raises(StepPaused):
        reconcile_step(now=job.lease_until + timedelta(minutes=5))  # nor does its reconciliation
    with pytest.raises(Unavailable):
        reconcile_run(now=job.lease_until + timedelta(minutes=5), repair=True)
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.RUNNING


def _wait_for_line(path: Path, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"the server never logged {text!r}")


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_a_server_minutes_ahead_neither_grants_nor_reaps_a_lease(problem, tmp_path):
    if not FAKETIME.exists() or not shutil.which("faketime"):
        pytest.fail("faketime (Debian's package) is required: scripts/setup.sh installs it")
    from tests.live import LiveServer

    node, identity = make_node(pool="python", name="honest")
    submit(UserFactory(), problem)
    [held] = claim(identity)  # by this process's clock: the lease runs a minute from now
    other, _ = make_node(pool="python", name="asking")
    log = tmp_path / "server.log"
    ahead = LiveServer(log_path=log, env={
        "LD_PRELOAD": str(FAKETIME), "FAKETIME": "+5m", "DONT_FAKE_MONOTONIC": "1",
        "KECE_IN_PROCESS_SCHEDULER": 1, "KECE_REAP_INTERVAL_MS": 200, "KECE_CLOCK_CHECK_MS": 100})
    with ahead:
        headers = {"Authorization": f"Bearer {other.secret}", "X-Judge-Session": str(other.session_epoch)}
        answer = requests.post(ahead.url + INTERNAL + "jobs/claim", json={"freeSlots": 1, "waitMs": 0},
                               headers=headers, timeout=30)
        assert answer.status_code == 503 and answer.json()["error"] == "unavailable"
        assert "off the database's" in answer.json()["detail"]
        # The wait is the clock check's (100 ms, so a second), not a dependency outage's.
        assert answer.headers["Retry-After"] == "1"
        own = {"Authorization": f"Bearer {node.secret}", "X-Judge-Session": str(node.session_epoch)}
        result = requests.post(ahead.url + INTERNAL + f"jobs/{held.pk}/result", headers=own, timeout=30, json={
            "leaseEpoch": held.lease_epoch, "outcome": "RELEASED"})
        assert (result.status_code, result.json()["error"], result.headers["Retry-After"]) == (503, "unavailable", "1")
        _wait_for_line(log, "reaper paused")  # its reaper ran, and stood back
        row = JudgeJob.objects.get(pk=held.pk)
        assert (row.state, row.lease_epoch, row.node_id) == (JobState.RUNNING, held.lease_epoch, node.pk), \
            "five minutes ahead, it would have taken the live lease"


@pytest.mark.django_db
def test_the_console_says_why(skewed):
    from tests.api.helpers import make_admin, session_client

    page = session_client(make_admin()).get("/admin/judgers").content.decode()
    assert "This server's clock is 300.0 s off the database's" in page
