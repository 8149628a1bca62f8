"""The agent as a client of the node API: credentials, sessions, leases, results, health, stop."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time

import pytest
import requests

from tests.agents import sandbox_pids
from tests.disks import small_disk

from .conftest import SUM_CASES, need_pool, verdict_of

PY_AC = "a, b = map(int, input().split())\nprint(a + b)\n"


def sleeper(seconds: float) -> str:
    return f"import time\ntime.sleep({seconds})\na, b = map(int, input().split())\nprint(a + b)\n"


SLOW_LIMITS = {"timeLimitMs": 30000, "memoryLimitMb": 128, "outputLimitKb": 64}


def test_it_joins_once_then_opens_sessions_with_its_credential(plane, launch):
    need_pool("python")
    agent, node_id = launch(plane, "python")
    node = plane.nodes[node_id]
    data = json.loads(agent.credential.read_text())
    assert data == {"nodeId": node_id, "credential": node.credential, "probeKey": node.probe_key}
    assert stat.S_IMODE(os.stat(agent.credential).st_mode) == 0o600
    assert node.joins == 1 and node.agent_version
    agent.signal(signal.SIGTERM)
    assert agent.wait(30) == 0

    again, _ = launch(plane, "python", node_id=node_id, credential=agent.credential)
    plane.wait_for(lambda: node.sessions_opened == 2, what="second session")
    assert node.joins == 1, "a stored credential opens a session, it does not join again"
    assert verdict_of(plane, plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES))["verdict"] == "AC"
    again.signal(signal.SIGTERM)
    assert again.wait(30) == 0

    # The operator rotates the node: a bare join code in the file means "join again".
    agent.credential.write_text(plane.new_join_code(node_id) + "\n")
    third, _ = launch(plane, "python", node_id=node_id, credential=agent.credential)
    def stored() -> dict:
        try:
            return json.loads(agent.credential.read_text())
        except ValueError:  # still the bare join code: the file is replaced atomically, never half-written
            return {}

    plane.wait_for(lambda: node.joins == 2 and stored().get("credential") == node.credential, what="second join")
    assert stored()["nodeId"] == node_id


def test_it_stops_with_a_clear_message_when_the_join_code_is_refused(plane, launch):
    need_pool("python")
    node_id, _code = plane.register_node("python")
    agent, _ = launch(plane, "python", node_id=node_id, join_code="jc_unknown", wait_session=False)
    assert agent.wait(60) == 4
    assert "join code was refused" in agent.logs()
    assert "Traceback" not in agent.logs()


def test_a_join_whose_answer_was_lost_is_made_again_with_its_key(plane, launch):
    """The server used the code and its answer (the credential) never came back: the agent
    joins again with the same code and key, and works on the credential issued then."""
    need_pool("python")
    node_id, code = plane.register_node("python")
    plane.lose_answers(r"/join$")
    agent, _ = launch(plane, "python", node_id=node_id, join_code=code)
    assert plane.nodes[node_id].joins == 2
    job = plane.add_job(pool="python", source="a, b = map(int, input().split())\nprint(a + b)\n", cases=SUM_CASES)
    assert verdict_of(plane, job)["verdict"] == "AC"
    assert json.loads(agent.credential.read_text())["credential"] == plane.nodes[node_id].credential


def test_a_join_whose_answer_was_lost_says_so_when_its_code_is_then_refused(plane, launch):
    """The server used the code, its answer (the credential) never came back, and the retry
    is refused (a server that takes no join twice): the owner is told what happened, not that
    the code was unknown or expired."""
    need_pool("python")
    node_id, code = plane.register_node("python")
    plane.join_retries = False
    plane.lose_answers(r"/join$")
    agent, _ = launch(plane, "python", node_id=node_id, join_code=code, wait_session=False)
    assert agent.wait(60) == 4
    assert "its answer (the node's credential) was lost on the way back" in agent.logs()
    assert plane.nodes[node_id].joins == 1


def test_under_the_systemd_units_umask_the_agent_starts_judges_and_self_checks(plane, launch):
    need_pool("python")
    # deploy/systemd/kece-agent@.service: UMask=0077. The sandbox user must still reach each box.
    node_id, code = plane.register_node("python", desired_state="PENDING_VERIFICATION")
    agent, _ = launch(plane, "python", node_id=node_id, join_code=code, umask=0o077)
    diag = plane.add_job(pool="python", source=None, kind="DIAGNOSTIC", node_id=node_id)
    checks = {c["name"]: c for c in verdict_of(plane, diag, timeout=60)["checks"]}
    assert all(c["ok"] for c in checks.values()), checks
    with plane.lock:
        plane.nodes[node_id].desired_state = "ENABLED"
        plane.changed.notify_all()
    assert verdict_of(plane, plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES))["verdict"] == "AC"
    assert agent.alive()


def test_a_run_folder_that_cannot_be_made_gives_the_job_back_and_stops_claims_until_it_can(plane, launch):
    """The node's fault, not the job's: the job is given back (its attempt not counted) and
    judged once the folder can be made again, the agent claiming nothing meanwhile (it made
    every job fail in a millisecond, the student's with SYSTEM_ERROR, while the node looked
    ready). A removed runs folder is made again."""
    need_pool("python")
    agent, node_id = launch(plane, "python", slots=1)
    runs = agent.workspace / "runs"
    node = plane.nodes[node_id]

    def operator_removes_runs():
        # The agent may be removing the last job's folder at the same moment: until it is gone.
        while runs.exists():
            shutil.rmtree(runs, ignore_errors=True)

    operator_removes_runs()
    assert verdict_of(plane, plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES))["verdict"] == "AC"
    operator_removes_runs()
    runs.write_text("not a folder")
    job_id = plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES)
    job = plane.jobs[job_id]
    plane.wait_for(lambda: job.results, timeout=60, what="the job's first result")
    plane.wait_for(lambda: node.heartbeats[-1]["health"]["checks"]["workspace"] is False, timeout=30,
                   what="a heartbeat saying the workspace cannot take jobs")
    with plane.lock:
        assert [r["outcome"] for r in job.results] == ["RELEASED"] and job.attempts == 0, job.results
        assert job.state == "QUEUED", "claimed nothing while the folder cannot be made"
    assert "the workspace cannot take jobs" in agent.logs()
    assert re.search(r"a health check fails.*workspace", agent.logs()), "the owner reads why no work comes"
    runs.unlink()
    assert verdict_of(plane, job_id)["verdict"] == "AC"
    assert "the workspace takes jobs again" in agent.logs()
    plane.wait_for(lambda: "every health check passes again" in agent.logs(), timeout=30, what="the health back")


def test_a_corrupted_artifact_is_an_infra_error_never_a_verdict(plane, launch):
    need_pool("python")
    launch(plane, "python")
    job_id = plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES)
    plane.corrupt.add(plane.jobs[job_id].cases[1]["output"]["digest"])
    missing = plane.add_job(pool="python", source=PY_AC, cases=[("5 6\n", "11\n", 100)])
    del plane.blobs[plane.jobs[missing].cases[0]["input"]["digest"]]

    job = plane.wait_settled(job_id, timeout=60)
    assert job.state == "FAILED", "retried up to the attempt limit, then failed (SYSTEM_ERROR)"
    assert [r["outcome"] for r in job.results] == ["INFRA_ERROR"] * 3
    assert {r["error"] for r in job.results} == {"artifact_corrupt"}
    assert [r["leaseEpoch"] for r in job.results] == [1, 2, 3]
    other = plane.wait_settled(missing, timeout=60)
    assert other.state == "FAILED" and {r["error"] for r in other.results} == {"artifact_missing"}


def test_the_health_endpoint_proves_the_probe_key_over_https(plane, launch, tls_files):
    need_pool("python")
    cert, key, ca = tls_files
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent, node_id = launch(plane, "python", health=f"127.0.0.1:{port}",
                            env={"JUDGE_TLS_CERT": str(cert), "JUDGE_TLS_KEY": str(key)})
    node = plane.nodes[node_id]
    challenge = os.urandom(16).hex()
    resp = requests.get(f"https://127.0.0.1:{port}/healthz", params={"challenge": challenge}, verify=str(ca),
                        timeout=10)
    assert resp.status_code == 200
    body = resp.json()
    expected = hmac.new(node.probe_key.encode(), challenge.encode(), hashlib.sha256).hexdigest()
    assert body == {"nodeId": node_id, "pool": "python", "protocolVersion": 1, "agentVersion": node.agent_version,
                    "runtimeSpec": "python-r1", "proof": expected}
    assert node.credential not in resp.text and node.probe_key not in resp.text
    for query in ("", "?challenge=", "?challenge=not-hex!", "?challenge=ab&challenge=cd"):
        assert requests.get(f"https://127.0.0.1:{port}/healthz{query}", verify=str(ca), timeout=10).status_code == 400
    assert requests.get(f"https://127.0.0.1:{port}/other", verify=str(ca), timeout=10).status_code == 404


def test_sigterm_finishes_running_work_within_the_grace_and_releases_the_rest(plane, launch):
    need_pool("python")
    agent, _ = launch(plane, "python", slots=2, env={"JUDGE_STOP_GRACE_MS": "4000"})
    long_job = plane.add_job(pool="python", source=sleeper(25), cases=SUM_CASES[:1], limits=SLOW_LIMITS)
    short_job = plane.add_job(pool="python", source=sleeper(1.5), cases=SUM_CASES[:1], limits=SLOW_LIMITS)
    plane.wait_for(lambda: all(plane.jobs[j].state == "RUNNING" for j in (long_job, short_job)), what="both claimed")
    time.sleep(0.5)

    heartbeats = plane.nodes[agent.node_id].heartbeats
    beats_before = len(heartbeats)
    stopped_at = time.monotonic()
    agent.signal(signal.SIGTERM)
    assert agent.wait(30) == 0
    assert time.monotonic() - stopped_at < 15
    assert len(heartbeats) - beats_before <= 2 + (time.monotonic() - stopped_at), "heartbeats keep their pace"
    assert verdict_of(plane, short_job)["verdict"] == "AC", "a job finishing within the grace period is reported"
    released = plane.jobs[long_job]
    assert [r["outcome"] for r in released.results] == ["RELEASED"]
    assert released.state == "QUEUED" and released.attempts == 0, "RELEASED requeues without counting the attempt"
    # Nor did it ask for work while it was stopping: no claim, and no claim carried on the result.
    asked = plane.nodes[agent.node_id].claims_asked
    assert asked and not [t for t in asked if t >= stopped_at], "a stopping agent claims nothing"


def test_a_claim_still_open_when_the_agent_stops_leases_nothing_after_it(make_plane, launch):
    need_pool("python")
    plane = make_plane(claim_wait_ms=20000)
    agent, _ = launch(plane, "python", slots=1, env={"JUDGE_STOP_GRACE_MS": "1000"})
    plane.wait_for(lambda: plane.claims_open == 1, what="a long poll")
    agent.signal(signal.SIGTERM)
    assert agent.wait(30) == 0
    # The poll would have gone on for 20 s on the server, for an agent that is gone.
    after = plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES)
    plane.wait_for(lambda: plane.claims_open == 0, what="no long poll left")
    assert plane.jobs[after].state == "QUEUED" and not plane.jobs[after].claims, "nothing leased to a node gone"


def test_a_superseded_session_kills_its_jobs_and_opens_a_new_session(plane, launch):
    need_pool("python")
    agent, node_id = launch(plane, "python", slots=1)
    node = plane.nodes[node_id]
    job_id = plane.add_job(pool="python", source=sleeper(4), cases=SUM_CASES[:1], limits=SLOW_LIMITS)
    plane.wait_for(lambda: plane.jobs[job_id].state == "RUNNING", what="claim")
    time.sleep(0.5)
    plane.supersede(node_id)  # leases of the old session are released at once, the job is requeued

    body = verdict_of(plane, job_id, timeout=60)
    job = plane.jobs[job_id]
    assert body["verdict"] == "AC" and body["leaseEpoch"] == 2
    assert len(job.results) == 1, "the first lease's sandbox was killed; only the new lease reported"
    assert node.sessions_opened == 2
    assert [c[1] for c in job.claims] == [1, 3], "claimed again through the new session"
    assert "session superseded" in agent.logs()
    assert agent.alive()


def test_a_job_cancelled_while_its_test_data_trickles_in_frees_its_slot(plane, launch):
    need_pool("python")
    slow_input = "1 2\n" + "#" * (1 << 17)  # two receive buffers' worth, a byte at a time: hours
    plane.trickled.add(hashlib.sha256(slow_input.encode()).hexdigest())
    launch(plane, "python", slots=1)
    stuck = plane.add_job(pool="python", source=PY_AC, cases=[(slow_input, "3\n", 100)])
    plane.wait_for(lambda: plane.calls(f"/jobs/{stuck}/artifacts/"), what="the slow download begun")
    plane.cancel(stuck)
    assert verdict_of(plane, plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES[:1]))["verdict"] == "AC", \
        "the one slot is free again"
    assert plane.jobs[stuck].results == []


def test_superseded_again_the_agent_says_another_holds_its_credential_and_waits(plane, launch):
    """A twin (a cloned machine) takes the session twice: the second time the agent does not
    take it straight back, and says why."""
    need_pool("python")
    agent, node_id = launch(plane, "python", slots=1)
    node = plane.nodes[node_id]
    plane.supersede(node_id)
    plane.wait_for(lambda: node.sessions_opened == 2, what="the first supersede: the session taken back at once")
    plane.supersede(node_id)
    agent.wait_log("another agent is using this node's credential")
    assert '"reopen_in_s": 5' in agent.logs()
    assert node.sessions_opened == 2, "not taken back at once"
    plane.wait_for(lambda: node.sessions_opened == 3, timeout=60, what="taken back after the wait")
    assert verdict_of(plane, plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES[:1]))["verdict"] == "AC"


def test_a_cancelled_lease_is_killed_and_dropped_and_frees_its_slot(plane, launch):
    need_pool("python")
    agent, _ = launch(plane, "python", slots=1)
    doomed = plane.add_job(pool="python", source=sleeper(25), cases=SUM_CASES[:1], limits=SLOW_LIMITS)
    plane.wait_for(lambda: (plane.jobs[doomed].progress or {}).get("phase") == "JUDGING", what="judging")
    follower = plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES)
    plane.cancel(doomed)
    start = time.monotonic()
    assert verdict_of(plane, follower, timeout=30)["verdict"] == "AC"
    assert time.monotonic() - start < 10, "the cancelled job's sandbox was killed, not waited for"
    assert plane.jobs[doomed].results == []
    agent.wait_log("lease ended by the server")


def test_without_renewals_the_job_is_killed_before_its_lease_ends(make_plane, launch):
    need_pool("python")
    plane = make_plane(lease_ttl_ms=4000, renew_ms=1000)
    agent, _ = launch(plane, "python", slots=1)
    plane.inject(r"/jobs/renew", 503, "unavailable", count=1000, retry_after="1")
    job_id = plane.add_job(pool="python", source=sleeper(25), cases=SUM_CASES[:1], limits=SLOW_LIMITS)
    plane.wait_for(lambda: plane.jobs[job_id].state == "RUNNING", what="claim")
    claimed_at = plane.jobs[job_id].claims[0][3]
    agent.wait_log("local lease deadline passed", timeout=10)
    killed_within = time.monotonic() - claimed_at
    assert killed_within < 4.0, "dropped before the server's lease could expire"
    assert plane.jobs[job_id].results == []


def test_transient_server_errors_are_retried_with_backoff(plane, launch):
    need_pool("python")
    agent, _ = launch(plane, "python")
    plane.inject(r"/jobs/claim", 503, "unavailable", count=2, retry_after="1")
    plane.inject(r"/result", 503, "unavailable", count=2)
    job_id = plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES)
    assert verdict_of(plane, job_id, timeout=60)["verdict"] == "AC"
    assert len(plane.jobs[job_id].results) == 1
    assert [s for _m, p, s in plane.calls(f"/jobs/{job_id}/result")] == [503, 503, 200]
    agent.wait_log("posting result failed; retrying")


def test_a_busy_agent_asks_for_its_next_job_on_the_result_post(plane, launch):
    need_pool("python")
    agent, _ = launch(plane, "python", slots=1)
    jobs = [plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES) for _ in range(3)]
    assert [verdict_of(plane, j, timeout=60)["verdict"] for j in jobs] == ["AC"] * 3
    # The first job came through the long-poll claim; each result brought the next one.
    assert plane.carried_jobs == 2
    assert all(len(plane.jobs[j].claims) == 1 for j in jobs), "no job was leased twice"
    assert "claim" not in plane.jobs[jobs[0]].results[0], "the carried claim is not part of the result"


def test_the_agent_takes_the_source_sent_with_the_job_and_downloads_it_only_if_it_does_not_match(plane, launch):
    need_pool("python")
    launch(plane, "python", slots=1)
    jobs = [plane.add_job(pool="python", source=PY_AC + f"\n# {n}\n", cases=SUM_CASES) for n in range(4)]
    plane.wrong_source_text[jobs[2]] = "print('not what the digest names')"
    plane.wrong_source_text[jobs[3]] = "print('\ud800')"  # no UTF-8 bytes at all
    assert [verdict_of(plane, j, timeout=60)["verdict"] for j in jobs] == ["AC"] * 4
    # Sent along with the first two (by a long-poll claim, then a carried one); the others'
    # were not the sources their digests name, so those were downloaded.
    downloaded = [re.search(r"/jobs/(\d+)/", path).group(1) for _method, path, _status in plane.calls("/artifacts/")
                  if any(plane.jobs[j].source["digest"] in path for j in jobs)]
    assert downloaded == [str(jobs[2]), str(jobs[3])]


def test_a_pending_node_runs_its_diagnostic_and_no_judge_job(plane, launch):
    need_pool("python")
    node_id, code = plane.register_node("python", desired_state="PENDING_VERIFICATION")
    launch(plane, "python", node_id=node_id, join_code=code)
    judge_job = plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES)
    diag = plane.add_job(pool="python", source=None, kind="DIAGNOSTIC", node_id=node_id)

    body = verdict_of(plane, diag, timeout=60)
    checks = {c["name"]: c for c in body["checks"]}
    assert body["verdict"] == "AC" and body["score"] == 100 and body["cases"] == [], body["checks"]
    assert {"sandbox_isolated", "filesystems_bounded", "memory_files_counted", "compile", "run", "cpu_limit",
            "memory_limit"} <= set(checks)
    assert all(c["ok"] for c in checks.values())
    assert plane.jobs[judge_job].state == "QUEUED"
    heartbeat = plane.nodes[node_id].heartbeats[-1]
    assert heartbeat["health"]["ok"] is True and heartbeat["runtimeSpec"] == "python-r1"


def test_after_kill_9_another_agent_finishes_the_job_with_exactly_one_result(make_plane, launch):
    need_pool("python")
    plane = make_plane(lease_ttl_ms=3000, renew_ms=500)
    earlier = sandbox_pids()  # a previous test's sandboxes may still be dying
    first, node_a = launch(plane, "python", slots=1)
    job_id = plane.add_job(pool="python", source=sleeper(6), cases=SUM_CASES[:1], limits=SLOW_LIMITS)
    plane.wait_for(lambda: (plane.jobs[job_id].progress or {}).get("phase") == "JUDGING", what="judging on A")
    ours = sandbox_pids() - earlier
    assert ours, "the job runs as the sandbox user"
    first.proc.kill()  # SIGKILL: no release, no cleanup
    first.wait(10)
    deadline = time.monotonic() + 3  # the sleeper would live 6 s more
    while ours & sandbox_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not ours & sandbox_pids(), "--die-with-parent took the sandbox down too"

    second, node_b = launch(plane, "python", slots=1)
    body = verdict_of(plane, job_id, timeout=30)
    job = plane.jobs[job_id]
    assert body["verdict"] == "AC" and len(job.results) == 1, "exactly one effective result"
    assert job.claims[-1][0] == node_b and job.claims[0][0] == node_a



def test_a_restarted_agent_takes_its_jobs_back_at_once_through_its_new_session(plane, launch):
    need_pool("python")
    agent, node_id = launch(plane, "python", slots=1)  # leases last 20 s here
    job_id = plane.add_job(pool="python", source=sleeper(30), cases=SUM_CASES[:1], limits=SLOW_LIMITS)
    plane.wait_for(lambda: (plane.jobs[job_id].progress or {}).get("phase") == "JUDGING", what="judging")
    agent.proc.kill()
    agent.wait(10)
    assert any(name.startswith(f"j{job_id}-e1-") for name in os.listdir(agent.workspace / "runs"))
    killed_at = time.monotonic()

    launch(plane, "python", slots=1, node_id=node_id, credential=agent.credential, workspace=agent.workspace)
    plane.wait_for(lambda: len(plane.jobs[job_id].claims) == 2, timeout=15, what="reclaim after the new session")
    assert plane.jobs[job_id].claims[1][3] - killed_at < 10, "released by the new session, not by lease expiry"
    assert plane.jobs[job_id].claims[1][2] == 2
    # The killed run's leftover workspace was swept at start.
    plane.wait_for(lambda: not any(n.startswith(f"j{job_id}-e1-") for n in os.listdir(agent.workspace / "runs")),
                   timeout=5, what="sweep of the leftover workspace")


def test_a_revoked_credential_stops_the_agent(plane, launch):
    need_pool("python")
    agent, node_id = launch(plane, "python")
    plane.nodes[node_id].credential = None  # revoked: every call is 401 now
    assert agent.wait(30) == 4
    assert "credential was refused" in agent.logs()




def test_a_cache_that_refuses_writes_gives_the_job_back_until_it_takes_them_again(plane, launch, own_workspace):
    """A read-only remount of the cache's disk: the node's fault, not the job's (every job
    failed in a millisecond, attempts counted, while the node looked ready)."""
    need_pool("python")
    workspace = own_workspace
    with small_disk(workspace / "cache", size_kb=64 * 1024) as cache:
        agent, node_id = launch(plane, "python", slots=1, workspace=workspace)
        subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True)
        try:
            job_id = plane.add_job(pool="python", source=PY_AC, cases=SUM_CASES)
            job = plane.jobs[job_id]
            plane.wait_for(lambda: job.results, timeout=60, what="the job's first result")
            plane.wait_for(lambda: plane.nodes[node_id].heartbeats[-1]["health"]["checks"]["workspace"] is False,
                           timeout=30, what="a heartbeat saying the workspace cannot take jobs")
            with plane.lock:
                assert [r["outcome"] for r in job.results] == ["RELEASED"] and job.attempts == 0, job.results
                assert job.state == "QUEUED"
            assert "the cache refused a write" in agent.logs()
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(cache)], check=True)
        assert verdict_of(plane, job_id)["verdict"] == "AC"
        agent.kill()  # before the disk goes


def test_a_disk_that_fills_while_a_program_runs_is_no_verdict(make_plane, launch, own_workspace):
    """Another job, or anything else on the machine, fills the run folders' disk while a
    correct program runs: its output cannot be written and it exits with an error. That is
    not posted as its verdict (RE, final): an INFRA_ERROR, and no claim until there is room."""
    need_pool("python")
    plane = make_plane(renew_ms=300)
    workspace = own_workspace
    with small_disk(workspace / "runs", size_kb=300 * 1024) as runs:
        os.chmod(runs, 0o711)  # the sandbox user's way to its run folder
        agent, node_id = launch(plane, "python", slots=1, workspace=workspace)
        job_id = plane.add_job(pool="python", source=sleeper(2), cases=SUM_CASES[:1], limits=SLOW_LIMITS)
        job = plane.jobs[job_id]
        plane.wait_for(lambda: (job.progress or {}).get("phase") == "JUDGING", what="the program running")
        filler = runs / "filler"
        descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        filler.unlink()  # held open, it keeps its space; the agent's sweep of the runs folder cannot free it
        try:  # every byte of the disk, until it refuses
            while os.write(descriptor, b"\0" * (1 << 16)):
                pass
        except OSError:
            pass
        plane.wait_for(lambda: job.results, timeout=60, what="the job's result")
        with plane.lock:
            [first] = job.results
        assert (first["outcome"], first["error"]) == ("INFRA_ERROR", "disk_full"), first
        assert "its verdict is not trusted" in agent.logs()
        plane.wait_for(lambda: plane.nodes[node_id].heartbeats[-1]["health"]["checks"]["workspace"] is False,
                       timeout=30, what="a heartbeat saying the workspace cannot take jobs")
        with plane.lock:
            assert job.state == "QUEUED", "no claim while the disk is full"
        os.close(descriptor)  # the space comes back
        assert verdict_of(plane, job_id, timeout=60)["verdict"] == "AC"
        agent.kill()  # before the disk goes


@pytest.fixture
def own_workspace():
    """A workspace of the test's own (for a disk mounted in it), removed at the end."""
    from tests.agents import private_dir

    base = private_dir("kece-agent-", 0o711)
    yield base / "ws"
    shutil.rmtree(base, ignore_errors=True)


def test_the_owner_reads_once_why_the_node_is_quarantined_and_when_that_ends(plane, launch):
    """A quarantined node gets no judge job: its agent says so, with the control plane's
    reason, once (not at every heartbeat), and says when it is lifted."""
    need_pool("python")
    agent, node_id = launch(plane, "python")
    node = plane.nodes[node_id]
    with plane.lock:
        node.quarantine = {"since": "2026-12-01T09:00:00Z", "reason": "infra_errors: jobs 7, 8, 9"}
        beats = len(node.heartbeats)
    plane.wait_for(lambda: len(node.heartbeats) >= beats + 3, timeout=30, what="three heartbeats")
    said = agent.logs()
    assert said.count("quarantined by the control plane") == 1
    assert "infra_errors: jobs 7, 8, 9" in said
    with plane.lock:
        node.quarantine = None
    plane.wait_for(lambda: "quarantine lifted" in agent.logs(), timeout=30, what="the lift said")
