"""Real agents against the real server: verdicts, checks, crashes and bad data."""

import os
import signal
import time
from datetime import timedelta

import pytest

from judging import artifacts
from judging.models import JobState, JudgeJob, SettlementEvent
from judging.services.problems import problem_import
from judging.services.submit import submission_submit
from kece.demo import sample_solutions
from nodes import canaries
from nodes.models import DesiredState
from tests.e2e.conftest import api_session, job_of, judgers_admin, need_pool, terminal, wait_for
from tests.factories import UserFactory, make_problem

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.usefixtures("unlimited_submits")  # one student sends every sample at once
def test_every_sample_solution_gets_the_verdict_it_was_written_for(agents):
    pools = ["cpp", "java", "python", "arkts", "mysql"]
    for pool in pools:
        need_pool(pool)
    # One slot per pool: five programs at a time is already more than two cores. With two
    # each, the pools' memory-hungry samples ran side by side, and the page faults of
    # touching 270 MB took the Python MLE sample past its 1 s CPU limit: TLE, not MLE.
    for pool in pools:
        node = agents.register(pool, slots=1)
        agents.start(node, slots=1)
        agents.enable(node)
    student = UserFactory()
    expected = []
    problems = {}
    for package, slug, language, source, verdict in sample_solutions(pools):
        problem = problems.get(slug) or problems.setdefault(slug, problem_import(package)[0])
        submission = submission_submit(user=student, problem_id=problem.pk, language=language,
                                       code=source.read_text())
        expected.append((f"{slug}/{source.name}", verdict, submission))
    assert len(expected) >= 80
    wait_for(lambda: all(terminal(s) for _, _, s in expected), 600, "every sample judged")
    got = {}
    for name, verdict, submission in expected:
        submission.refresh_from_db()
        got[name] = (verdict, submission.verdict, submission.score)
    wrong = {name: v for name, v in got.items() if v[0] != v[1]}
    # On a mismatch, how each case ran (time and memory) tells a wrong rule from a slow machine.
    cases = {name: submission.cases for name, _, submission in expected if name in wrong}
    assert wrong == {}, cases
    assert all(score == 100 for (verdict, _, score) in got.values() if verdict == "AC")


def test_a_registered_agent_passes_its_checks_and_can_then_be_enabled(agents):
    need_pool("python")
    node = agents.register("python")
    agent = agents.start(node)
    node.refresh_from_db()
    assert node.desired_state == DesiredState.PENDING_VERIFICATION
    admin = api_session(judgers_admin())
    base = f"{agents.server.url}/api/v1/admin/judgers/{node.pk}"
    refused = admin.patch(base, json={"revision": node.revision, "desiredState": "ENABLED"})
    assert (refused.status_code, refused.json()["error"]) == (409, "not_verified")

    started = admin.post(base + "/checks")
    assert started.status_code == 202
    check_url = f"{base}/checks/{started.json()['checkId']}"
    wait_for(lambda: admin.get(check_url).json()["status"] != "RUNNING", 60, "the check finished", agent)
    check = admin.get(check_url).json()
    assert check["status"] == "PASSED", check["items"]
    names = {item["name"] for item in check["items"]}
    assert {"tls", "identity", "pool", "protocol", "runtime"} <= names
    assert {"ac.py", "wa.py", "tle.py", "mle.py", "re.py", "ce.py"} <= names, "the server graded every canary"
    assert {"sandbox_isolated", "cpu_limit", "memory_limit"} <= names, "the agent's own items are recorded"
    revision = admin.get(base).json()["revision"]
    enabled = admin.patch(base, json={"revision": revision, "desiredState": "ENABLED"})
    assert enabled.status_code == 200 and enabled.json()["desiredState"] == "ENABLED"


def test_the_real_agent_judges_every_canary_of_its_pool_as_expected(agents):
    pools = ["cpp", "java", "python", "arkts", "mysql"]
    for pool in pools:
        need_pool(pool)
    admin = api_session(judgers_admin())
    checks = {}
    for pool in pools:
        node = agents.register(pool, slots=1)
        agents.start(node, slots=1)
        base = f"{agents.server.url}/api/v1/admin/judgers/{node.pk}"
        checks[pool] = f"{base}/checks/{admin.post(base + '/checks').json()['checkId']}"
    wait_for(lambda: all(admin.get(url).json()["status"] != "RUNNING" for url in checks.values()), 300,
             "every pool's self-check finished")
    results = {pool: admin.get(url).json() for pool, url in checks.items()}
    failed = {pool: [i for i in r["items"] if not i["ok"]] for pool, r in results.items() if r["status"] != "PASSED"}
    assert failed == {}
    for pool, result in results.items():
        items = {i["name"]: i["detail"] for i in result["items"]}
        programs = canaries.packages(pool)
        assert programs and all(items[name].startswith(f"expected {verdict}, got {verdict} in ")
                                for package in programs for name, verdict in canaries.programs(package).items())


def _slow_problem():
    return make_problem(languages=("python",), cases=1, time_limit_ms=20000)


SLOW_CODE = "import time\ntime.sleep(4)\nprint(0)\n"


def test_kill_9_mid_job_another_agent_completes_it_once(agents):
    need_pool("python")
    first, second = agents.register("python", slots=1), agents.register("python", slots=1)
    doomed = agents.start(first, slots=1)
    agents.enable(first)
    submission = submission_submit(user=UserFactory(), problem_id=_slow_problem().pk, language="python",
                                   code=SLOW_CODE)
    wait_for(lambda: job_of(submission).state == JobState.RUNNING and job_of(submission).node_id == first.pk,
             60, "the first agent runs the job", doomed)
    os.killpg(doomed.pid, signal.SIGKILL)
    agents.start(second, slots=1)
    agents.enable(second)
    wait_for(lambda: terminal(submission), 90, "the second agent finished the job")
    job = job_of(submission)
    assert job.state == JobState.COMPLETED and job.settled_node_id == second.pk and job.lease_epoch == 2
    submission.refresh_from_db()
    assert submission.judged_generation == 1 and submission.verdict == "WA"
    assert JudgeJob.objects.filter(submission_id=submission.pk, state=JobState.COMPLETED).count() == 1
    assert SettlementEvent.objects.filter(job=job).count() == 1


def test_a_paused_agents_job_goes_to_the_idle_agent_at_the_first_reap_after_its_lease(fleet_on):
    """Takeover: a node that went silent (SIGSTOP: hung, not dead) loses its job when the
    lease runs out, and the pool's idle node has it at the next reap, not after a retry
    backoff (set to a minute here, so waiting one out would fail the test)."""
    need_pool("python")
    agents = fleet_on(KECE_RETRY_BACKOFF_MS=60000)
    first, second = agents.register("python", slots=1), agents.register("python", slots=1)
    hung = agents.start(first, slots=1)
    agents.enable(first)
    submission = submission_submit(user=UserFactory(), problem_id=_slow_problem().pk, language="python",
                                   code=SLOW_CODE)
    wait_for(lambda: job_of(submission).state == JobState.RUNNING and job_of(submission).node_id == first.pk,
             60, "the first agent runs the job", hung)
    agents.start(second, slots=1)
    agents.enable(second)
    os.killpg(hung.pid, signal.SIGSTOP)
    held_until = []  # the silent node's deadline as last seen (a renew in flight may still move it)

    def taken_over():
        job = job_of(submission)
        if job.lease_epoch == 1 and job.lease_until is not None:
            held_until.append(job.lease_until)
        return job.lease_epoch == 2

    try:
        wait_for(taken_over, 60, "the idle agent took the job")
        wait_for(lambda: terminal(submission), 60, "the idle agent finished the job")
    finally:
        os.killpg(hung.pid, signal.SIGCONT)
    job = job_of(submission)
    assert job.state == JobState.COMPLETED and job.settled_node_id == second.pk and job.lease_epoch == 2
    # Requeued by a reap (every 0.3 s here) once the lease ran out, due at once: a backoff
    # would have made it due a minute after that.
    assert job.available_at - held_until[-1] < timedelta(seconds=30)
    assert SettlementEvent.objects.filter(job=job).count() == 1


def test_a_restarted_agent_takes_its_job_back_at_once(fleet_on):
    need_pool("python")
    fleet = fleet_on(KECE_LEASE_TTL_MS=60000, KECE_RENEW_INTERVAL_MS=15000)
    node = fleet.register("python", slots=1)
    agent = fleet.start(node, slots=1)
    fleet.enable(node)
    submission = submission_submit(user=UserFactory(), problem_id=_slow_problem().pk, language="python",
                                   code=SLOW_CODE)
    wait_for(lambda: job_of(submission).state == JobState.RUNNING, 60, "the agent runs the job", agent)
    os.killpg(agent.pid, signal.SIGKILL)
    restarted_at = time.monotonic()
    again = fleet.start(node, slots=1)
    wait_for(lambda: job_of(submission).lease_epoch == 2, 30, "the job leased again", again)
    assert time.monotonic() - restarted_at < 20, "not through the 60 s lease expiry"
    wait_for(lambda: terminal(submission), 60, "the job finished", again)
    assert job_of(submission).settled_node_id == node.pk


def test_a_corrupted_artifact_is_retried_and_ends_in_system_error_never_a_verdict(agents):
    need_pool("python")
    node = agents.register("python")
    agent = agents.start(node)
    agents.enable(node)
    problem = make_problem(languages=("python",), cases=1)
    case_input = problem.current_manifest.cases[0]["input"]["digest"]
    path = artifacts.path_for(case_input)
    path.write_bytes(b"corrupted on the server\n")
    submission = submission_submit(user=UserFactory(), problem_id=problem.pk, language="python",
                                   code="print(input())\n")
    wait_for(lambda: terminal(submission), 90, "the job gave up", agent)
    job = job_of(submission)
    assert job.state == JobState.FAILED and job.attempts == 3 and job.error.startswith("artifact")
    submission.refresh_from_db()
    assert submission.verdict is None and submission.judged_generation == 1
