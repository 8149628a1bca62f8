"""Real agents against the real server: the agent's cache on a full disk, and its metrics."""

import shutil
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from judging import artifacts
from node_agent import credentials
from node_agent.health import proof
from judging.models import JobState
from judging.services.submit import submission_submit
from nodes.models import JudgeNode
from tests.disks import small_disk
from tests.e2e.conftest import job_of, need_pool, terminal, wait_for
from tests.factories import UserFactory, make_problem

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ECHO_FIRST_LINE = "print(input())\n"


def scrape(agents, node) -> dict:
    """The agent's /metrics as Prometheus reads it: {family name: family}."""
    answer = requests.get(f"https://127.0.0.1:{node.port}/metrics", verify=str(agents.tls["ca"]), timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"].startswith("text/plain; version=")
    return {family.name: family for family in text_string_to_metric_families(answer.text)}


def sample(families: dict, family: str, name: str, **labels) -> float:
    values = [s.value for s in families[family].samples if s.name == name and s.labels == labels]
    assert len(values) == 1, (name, labels, families[family].samples)
    return values[0]


def claims(families: dict) -> float:
    return sum(sample(families, "kece_agent_claims", "kece_agent_claims_total", result=r) for r in ("jobs", "empty"))


def problem_with_input(data: bytes, expected: bytes):
    problem = make_problem(languages=("python",), cases=1)
    manifest = problem.current_manifest
    manifest.cases = [{**manifest.cases[0], "input": artifacts.store_bytes(data),
                       "output": artifacts.store_bytes(expected)}]
    manifest.save()
    return problem


def echo_submitted(problem):
    return submission_submit(user=UserFactory(), problem_id=problem.pk, language="python", code=ECHO_FIRST_LINE)


def failed_for_a_full_disk(submission, agent) -> None:
    wait_for(lambda: job_of(submission).error.startswith("disk_full"), 60, "an infrastructure error", agent)


def test_a_full_disk_is_an_infrastructure_error_and_the_agent_claims_again_once_there_is_room(agents):
    need_pool("python")
    node = agents.register("python", slots=1)
    workspace = agents.workspace()
    workspace.mkdir(mode=0o711)
    big_input = b"7\n" + (b"x" * 1023 + b"\n") * 600  # 600 KiB
    problem = problem_with_input(big_input, b"7\n")
    with small_disk(workspace / "cache", size_kb=4096) as cache_disk:
        # Something else fills the cache's disk: 200 KiB stay free, less than the test data.
        filler = cache_disk / "filler"
        filler.write_bytes(b"\0" * (shutil.disk_usage(cache_disk).free - 200 * 1024))
        agent = agents.start(node, slots=1, workspace=workspace)
        try:
            agents.enable(node)
            submission = echo_submitted(problem)
            failed_for_a_full_disk(submission, agent)
            job = job_of(submission)
            assert job.state == JobState.QUEUED and job.attempts == 1 and job.lease_epoch == 1
            submission.refresh_from_db()
            assert submission.verdict is None, "a full disk is never a verdict"
            assert "the cache's disk is full" in agent.logs()
            assert not any(p.name.startswith(".") for p in cache_disk.rglob("*")), "no partial file left"

            # The heartbeat says why the node is not ready, and the agent asks for nothing.
            wait_for(lambda: JudgeNode.objects.get(pk=node.pk).health_checks.get("cache_space") is False, 30,
                     "the heartbeat reports the full disk", agent)
            assert JudgeNode.objects.get(pk=node.pk).health_ok is False
            before = claims(scrape(agents, node))
            beat = JudgeNode.objects.get(pk=node.pk).last_heartbeat_at
            for _ in range(5):  # past a long poll (3 s here) and a claim turn (≤ 2 s); a heartbeat is 1 s
                wait_for(lambda: JudgeNode.objects.get(pk=node.pk).last_heartbeat_at > beat, 30, "a heartbeat", agent)
                beat = JudgeNode.objects.get(pk=node.pk).last_heartbeat_at
            assert claims(scrape(agents, node)) == before, "no claim while the disk is full"
            assert job_of(submission).lease_epoch == 1

            filler.unlink()
            wait_for(lambda: terminal(submission), 60, "the job judged once the disk had room", agent)
            job = job_of(submission)
            assert job.state == JobState.COMPLETED and job.lease_epoch == 2 and job.settled_node_id == node.pk
            submission.refresh_from_db()
            assert submission.verdict == "AC"
            assert "has room again: claiming jobs again" in agent.logs()
            assert claims(scrape(agents, node)) > before
            wait_for(lambda: JudgeNode.objects.get(pk=node.pk).health_ok, 30, "the node healthy again", agent)
        finally:
            agent.kill()  # before the disk goes


def test_a_test_file_larger_than_the_cache_disk_fails_its_job_and_the_node_judges_the_rest(agents):
    need_pool("python")
    node = agents.register("python", slots=1)
    workspace = agents.workspace()
    workspace.mkdir(mode=0o711)
    huge = problem_with_input(b"7\n" + b"x" * (5 << 20), b"7\n")  # 5 MiB on a 4 MiB disk
    small = problem_with_input(b"8\n", b"8\n")
    with small_disk(workspace / "cache", size_kb=4096):
        agent = agents.start(node, slots=1, workspace=workspace)
        try:
            agents.enable(node)
            failed_for_a_full_disk(echo_submitted(huge), agent)
            assert "cannot fit on the cache's disk even when empty" in agent.logs()
            fits = echo_submitted(small)
            wait_for(lambda: terminal(fits), 60, "the next job judged", agent)
            fits.refresh_from_db()
            assert fits.verdict == "AC"
            assert "the cache's disk is full: no more claims" not in agent.logs()
            assert JudgeNode.objects.get(pk=node.pk).health_checks.get("cache_space") is not False
        finally:
            agent.kill()  # before the disk goes


def test_test_data_damaged_in_the_agents_cache_is_fetched_again_never_judged_with(agents):
    need_pool("python")
    node = agents.register("python", slots=1)
    workspace = agents.workspace()
    agent = agents.start(node, slots=1, workspace=workspace)
    agents.enable(node)
    problem = problem_with_input(b"8\n", b"9\n")
    code = "print(int(input()) + 1)\n"
    first = submission_submit(user=UserFactory(), problem_id=problem.pk, language="python", code=code)
    wait_for(lambda: terminal(first), 90, "the first job judged", agent)
    expected = problem.current_manifest.cases[0]["output"]["digest"]
    cached = workspace / "cache" / expected[:2] / expected
    assert cached.read_bytes() == b"9\n"
    cached.write_bytes(b"0\n")  # the disk flipped a bit: same size, other bytes

    second = submission_submit(user=UserFactory(), problem_id=problem.pk, language="python", code=code)
    wait_for(lambda: terminal(second), 90, "the second job judged", agent)
    for submission in (first, second):
        submission.refresh_from_db()
        assert submission.verdict == "AC", "judged with the expected output the manifest names"
    assert cached.read_bytes() == b"9\n", "fetched again"


def test_the_agent_serves_its_metrics_on_the_health_port(agents):
    need_pool("python")
    node = agents.register("python", slots=1)
    agent = agents.start(node, slots=1)
    agents.enable(node)
    idle = scrape(agents, node)
    problem = make_problem(languages=("python",), cases=1)
    submission = submission_submit(user=UserFactory(), problem_id=problem.pk, language="python",
                                   code="a, b = map(int, input().split())\nprint(a + b)\n")
    wait_for(lambda: terminal(submission), 90, "the job judged", agent)
    submission.refresh_from_db()
    assert submission.verdict == "AC"

    families = scrape(agents, node)
    types = {name: family.type for name, family in families.items() if name.startswith("kece_agent_")}
    assert types == {
        "kece_agent_claims": "counter", "kece_agent_renew_failures": "counter", "kece_agent_slots": "gauge",
        "kece_agent_slots_busy": "gauge", "kece_agent_cache_bytes": "gauge",
        "kece_agent_cache_evictions": "counter", "kece_agent_sandbox_phase_seconds": "histogram",
        "kece_agent_server_last_answer_age_seconds": "gauge",
    }
    jobs = ("kece_agent_claims", "kece_agent_claims_total")
    assert sample(families, *jobs, result="jobs") > sample(idle, *jobs, result="jobs")
    count = ("kece_agent_sandbox_phase_seconds", "kece_agent_sandbox_phase_seconds_count")
    for phase in ("prepare", "compile", "data", "run", "compare"):
        assert sample(families, *count, phase=phase) > sample(idle, *count, phase=phase), phase
    assert sample(families, *count, phase="sql") == 0, "every phase is there from the start"
    assert sample(families, "kece_agent_cache_bytes", "kece_agent_cache_bytes") > 0
    assert sample(families, "kece_agent_slots", "kece_agent_slots") == 1
    assert sample(families, "kece_agent_server_last_answer_age_seconds",
                  "kece_agent_server_last_answer_age_seconds") >= 0

    # Nothing secret in it, and the probe's own path answers as before.
    text = requests.get(f"https://127.0.0.1:{node.port}/metrics", verify=str(agents.tls["ca"]), timeout=10).text
    secret = credentials.read(Path(agent.env["JUDGE_CREDENTIAL_FILE"]))
    assert secret.credential not in text and secret.probe_key not in text
    probe = requests.get(f"https://127.0.0.1:{node.port}/healthz?challenge=00ff00ff", verify=str(agents.tls["ca"]),
                         timeout=10)
    assert probe.status_code == 200 and probe.json()["nodeId"] == node.pk
    assert probe.json()["proof"] == proof(secret.probe_key, "00ff00ff")
    posted = requests.post(f"https://127.0.0.1:{node.port}/metrics", verify=str(agents.tls["ca"]), timeout=10)
    assert posted.status_code == 405
