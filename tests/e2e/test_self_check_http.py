"""The self-check over the real HTTP contract, from clients written from API.md alone: one
that answers AC to everything, and one that really judges the python canaries."""

import resource
import subprocess
import sys
import time

import pytest
from django.utils import timezone

from nodes.checks import _queue_self_check, node_check_start
from nodes.models import CheckStatus, JudgeNode, NodeCheck
from nodes.services import node_register
from tests.factories import HostGroupFactory
from tests.live import NodeClient

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _joined_client(server) -> tuple[JudgeNode, NodeClient]:
    node, issued = node_register(name=f"http-{time.monotonic_ns()}", pool="python", base_url="https://127.0.0.1:8443",
                                 host_group_id=HostGroupFactory(total_slots=8).pk, max_slots=8, actor=None,
                                 now=timezone.now())
    client = NodeClient(server.url)
    assert client.join(issued.code, pool="python", slots=8).status_code == 201
    assert client.heartbeat().status_code == 200
    return node, client


def _self_check(server, judge) -> NodeCheck:
    """Queue a self-check (the connectivity probe has its own tests), then answer every
    job the node is given with `judge(client, job)` until the check has a verdict."""
    node, client = _joined_client(server)
    check = node_check_start(node_id=node.pk, actor=None, now=timezone.now())
    _queue_self_check(check, JudgeNode.objects.get(pk=node.pk), items=[], now=timezone.now())
    deadline = time.monotonic() + 120
    while NodeCheck.objects.get(pk=check.pk).status == NodeCheck.Status.RUNNING:
        assert time.monotonic() < deadline, "the self-check did not finish"
        client.heartbeat()
        for job in client.claim(free_slots=1, wait_ms=1000).json()["jobs"]:
            body = {"leaseEpoch": job["leaseEpoch"], "outcome": "JUDGED", **judge(client, job)}
            answer = client.post(f"jobs/{job['jobId']}/result", body)
            assert answer.status_code == 200 and answer.json()["status"] == "settled", (body, answer.json())
    check.refresh_from_db()
    assert JudgeNode.objects.get(pk=node.pk).self_check_status == (
        CheckStatus.PASSED if check.status == NodeCheck.Status.PASSED else CheckStatus.FAILED)
    return check


def _always_ac(_client, _job) -> dict:
    return {"verdict": "AC", "score": 100, "timeMs": 1, "memoryKb": 1000}


def _download(client, job, ref, folder, name):
    response = client.get(f"jobs/{job['jobId']}/artifacts/{ref['digest']}", **{"X-Judge-Lease": str(job["leaseEpoch"])})
    assert response.status_code == 200
    path = folder / name
    path.write_bytes(response.content)
    return path


def _judge_python(tmp_path):
    """A judge as an agent author would write one from API.md: compile, run every case
    under the job's limits, compare the output."""
    def judge(client, job) -> dict:
        folder = tmp_path / str(job["jobId"])
        folder.mkdir()
        source = _download(client, job, job["source"], folder, "main.py")
        limits = job["limits"]
        if subprocess.run([sys.executable, "-m", "py_compile", str(source)], capture_output=True).returncode:
            return {"verdict": "CE", "score": 0, "compileOutput": "syntax error",
                    "cases": [{"ordinal": c["ordinal"], "verdict": "CE", "timeMs": 0, "memoryKb": 0, "score": 0}
                              for c in job["cases"]]}
        memory = limits["memoryLimitMb"] << 20

        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (memory + (32 << 20), memory + (32 << 20)))

        cases = []
        for case in job["cases"]:
            client.renew((job["jobId"], job["leaseEpoch"]))
            given = _download(client, job, case["input"], folder, f"{case['ordinal']}.in").read_bytes()
            wanted = _download(client, job, case["output"], folder, f"{case['ordinal']}.out").read_bytes()
            started = time.monotonic()
            try:
                run = subprocess.run([sys.executable, str(source)], input=given, capture_output=True,
                                     timeout=limits["timeLimitMs"] / 1000, preexec_fn=limit)
                verdict = ("MLE" if b"MemoryError" in run.stderr else "RE") if run.returncode else (
                    "AC" if run.stdout.split() == wanted.split() else "WA")
            except subprocess.TimeoutExpired:
                verdict = "TLE"
            cases.append({"ordinal": case["ordinal"], "verdict": verdict, "score": case["weight"] if verdict == "AC"
                          else 0, "timeMs": int((time.monotonic() - started) * 1000), "memoryKb": 0})
        wrong = [c["verdict"] for c in cases if c["verdict"] != "AC"]
        return {"verdict": wrong[0] if wrong else "AC", "score": sum(c["score"] for c in cases),
                "timeMs": max(c["timeMs"] for c in cases), "memoryKb": 0, "cases": cases}
    return judge


def test_a_client_that_answers_ac_to_everything_fails_with_the_canaries_it_got_wrong(server):
    check = _self_check(server, _always_ac)
    assert check.status == NodeCheck.Status.FAILED
    failed = {i["name"]: i["detail"] for i in check.items if not i["ok"]}
    assert failed == {"wa.py": "expected WA, got AC in 1 ms", "tle.py": "expected TLE, got AC in 1 ms",
                      "mle.py": "expected MLE, got AC in 1 ms", "re.py": "expected RE, got AC in 1 ms",
                      "ce.py": "expected CE, got AC in 1 ms"}


def test_a_client_that_judges_honestly_from_the_contract_alone_passes(server, tmp_path):
    check = _self_check(server, _judge_python(tmp_path))
    assert check.status == NodeCheck.Status.PASSED, check.items
    assert {i["name"] for i in check.items} >= {"ac.py", "wa.py", "tle.py", "mle.py", "re.py", "ce.py"}
