"""The processes' logs for real: uvicorn, a Celery worker with beat, and an agent, each
writing one JSON object per line; one job's lines found by its id in all three, and the
submit's request id on the web's lines about it."""

import json
import subprocess
import sys

import pytest

from judging.models import EventState, JobState, JudgeJob, SettlementEvent
from tests.e2e.conftest import Agents, api_session, need_pool, start_server, wait_for
from tests.factories import UserFactory, make_problem
from tests.live import ROOT, stop_process_group

pytestmark = [pytest.mark.mariadb, pytest.mark.redis, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def json_lines(path) -> list[dict]:
    """Every line of the log as a JSON object; fails on the first line that is not one."""
    lines = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        event = json.loads(line)
        assert isinstance(event, dict) and {"time", "level", "logger", "message"} <= set(event), (path, number, line)
        lines.append(event)
    return lines


@pytest.fixture
def worker(tmp_path):
    """`start(env)`: a Celery worker with beat, as compose.yaml runs it, logging to a file."""
    started = []

    def start(env):
        log = open(tmp_path / "worker.log", "ab")
        started.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kece", "worker", "--beat", "--queues=celery", "--concurrency=1",
             "--loglevel", "INFO", "--schedule", str(tmp_path / "schedule")],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        return tmp_path / "worker.log"

    yield start
    for process in started:
        stop_process_group(process, 30)


def test_a_jobs_lines_are_json_and_found_by_its_id_in_web_worker_and_agent_logs(tls, tmp_path, settings, worker):
    need_pool("python")
    settings.KECE_PROBE_ALLOWED_PORTS = [(443, 443), (1024, 65535)]
    # The worker, not the web process, runs the periodic work (its settlement events).
    server = start_server(tls, tmp_path, KECE_IN_PROCESS_SCHEDULER=0, KECE_LOG_LEVEL="INFO")
    fleet = Agents(server, tls)
    try:
        worker_log = worker({**server.env, "KECE_LOG_LEVEL": "INFO", "KECE_CONN_MAX_AGE": "60"})
        node = fleet.register("python", slots=1)
        agent = fleet.start(node, slots=1)
        fleet.enable(node)
        problem = make_problem(languages=("python",))
        answer = api_session(UserFactory()).post(server.url + "/api/v1/submissions", timeout=30, json={
            "problemId": problem.pk, "language": "python", "code": "a, b = map(int, input().split())\nprint(a + b)\n"},
            headers={"X-Request-ID": "follow-this-submit-1"})
        assert answer.status_code == 202, answer.text
        assert answer.headers["X-Request-ID"] == "follow-this-submit-1"
        job = JudgeJob.objects.get(submission_id=answer.json()["submissionId"])
        wait_for(lambda: JudgeJob.objects.get(pk=job.pk).state == JobState.COMPLETED, 120, "the job judged", agent)
        wait_for(lambda: not SettlementEvent.objects.filter(job_id=job.pk).exclude(state=EventState.DONE).exists(),
                 120, "the worker applied the job's settlement events")
        agent_lines = [e for e in json_lines(agent.log_path) if e.get("job") == job.pk]
    finally:
        fleet.stop()  # its logs go with it
        server.stop()

    web = [e for e in json_lines(tmp_path / "server.log") if e.get("job") == job.pk]
    worker_lines = [e for e in json_lines_after_banner(worker_log) if e.get("job") == job.pk]
    assert {"submission queued", "job leased", "result accepted"} <= {e["message"] for e in web}, web
    assert {"claimed", "judged"} <= {e["message"] for e in agent_lines}, agent_lines
    assert "settlement event applied" in {e["message"] for e in worker_lines}, worker_lines
    leased = next(e for e in web if e["message"] == "job leased")
    assert (leased["leaseEpoch"], leased["node"], leased["pool"]) == (1, node.pk, "python")
    assert all((e["leaseEpoch"], e["node"], e["pool"]) == (1, node.pk, "python") for e in agent_lines)
    queued = next(e for e in web if e["message"] == "submission queued")
    assert queued["requestId"] == "follow-this-submit-1" and queued["submission"].endswith(
        f":{answer.json()['submissionId']}")
    # One way of naming the submission in both logs, to search them alike.
    claimed = next(e for e in agent_lines if e["message"] == "claimed")
    assert claimed["submission"] == queued["submission"]


def json_lines_after_banner(path) -> list[dict]:
    """The worker's log: Celery prints its start-up banner (not a log line) before it logs."""
    text = path.read_text()
    start = text.index("\n{") + 1 if not text.startswith("{") else 0
    trimmed = path.with_suffix(".json.log")
    trimmed.write_text(text[start:])
    return json_lines(trimmed)
