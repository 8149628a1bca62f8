"""Quarantine against the real server: a node that fails every job, a node that never claims.

Each bad node is a client speaking the node contract over HTTP (`tests.live.NodeClient`);
the healthy judging is done by real agents (`python -m node_agent`)."""

import json
import os
import threading
import time
from datetime import timedelta

import pytest

from judging.models import JobState, JudgeJob
from nodes.models import JudgeNode
from tests.e2e.conftest import api_session, judgers_admin, need_pool, wait_for
from tests.factories import UserFactory, make_problem
from tests.live import NodeClient

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

INFRA_ERRORS = 3  # KECE_QUARANTINE_INFRA_ERRORS of these servers
# Right for make_problem's cases, and slow enough that the healthy node has a backlog longer
# than a claim wait: a job the bad node failed is then due for it again, and again.
SUMS = "import time\ntime.sleep(0.5)\na, b = map(int, input().split())\nprint(a + b)\n"


class ContractNode(threading.Thread):
    """A node that joined with its code and keeps its heartbeat fresh; with `answer`, it also
    takes one job at a time and posts `answer(job)` as the result at once, carrying its next
    claim in the post as the agent does (a long-poll claim when the post brings none).
    Bounded: it stops at `finish()` or after `seconds`, whichever comes first."""

    def __init__(self, server_url: str, node, *, answer=None, seconds: float = 300):
        super().__init__(daemon=True)
        self.client = NodeClient(server_url)
        joined = self.client.join(node.credential_file.read_text().strip(), pool=node.pool)
        assert joined.status_code == 201, joined.text
        self.joined = joined.json()
        self.credential_file = node.credential_file
        self.answer, self.deadline = answer, time.monotonic() + seconds
        self.posted: list[tuple[int, str]] = []  # (jobId, the result's status)
        self.failure: BaseException | None = None
        self._halt = threading.Event()

    def _beat(self) -> None:
        beat = self.client.heartbeat()
        assert beat.status_code == 200, beat.text

    def run(self):
        try:
            jobs, beaten = [], 0.0
            while not self._halt.is_set() and time.monotonic() < self.deadline:
                if time.monotonic() - beaten >= 0.5:
                    self._beat()
                    beaten = time.monotonic()
                if self.answer is None:
                    self._halt.wait(0.5)
                    continue
                if not jobs:
                    claimed = self.client.claim(free_slots=1, wait_ms=500)
                    assert claimed.status_code == 200, claimed.text
                    jobs = claimed.json()["jobs"]
                    continue
                job = jobs.pop(0)
                posted = self.client.result(job["jobId"], {"leaseEpoch": job["leaseEpoch"], **self.answer(job),
                                                           "claim": {"freeSlots": 1}})
                assert posted.status_code == 200, posted.text
                self.posted.append((job["jobId"], posted.json()["status"]))
                jobs += posted.json()["jobs"]
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.failure = exc

    def finish(self) -> None:
        self._halt.set()
        self.join(timeout=30)
        assert not self.is_alive(), "the contract node did not stop"
        if self.failure is not None:
            raise self.failure

    def hand_over(self) -> None:
        """Stop, and leave the node's credential in its credential file, as an agent that
        joined would have: a real agent started on that file takes the node over."""
        self.finish()
        credential = {"nodeId": self.joined["nodeId"], "credential": self.joined["credential"],
                      "probeKey": self.joined["probeKey"]}
        self.credential_file.write_text(json.dumps(credential) + "\n")
        os.chmod(self.credential_file, 0o600)


def black_hole(job) -> dict:
    return {"outcome": "INFRA_ERROR", "error": "sandbox", "message": "black hole: fails every job"}


def submit(student_api, server_url: str, problem, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        answer = student_api.post(f"{server_url}/api/v1/submissions",
                                  json={"problemId": problem.pk, "language": "python", "code": SUMS})
        assert answer.status_code == 202, answer.text
        ids.append(answer.json()["submissionId"])
    return ids


def status_of(student_api, server_url: str, submission_id: int) -> dict:
    return student_api.get(f"{server_url}/api/v1/submissions/ALGO/{submission_id}").json()


def quarantine_of(admin_api, server_url: str, node) -> dict:
    """The node as the admin API shows it, with the system's audit entries for it."""
    detail = admin_api.get(f"{server_url}/api/v1/admin/judgers/{node.pk}").json()
    detail["systemAudit"] = [(a["action"], a["after"]) for a in detail["audit"] if a["actor"] == "system"]
    return detail


def test_a_node_that_fails_every_job_is_quarantined_and_the_healthy_node_judges_them_all(fleet_on):
    need_pool("python")
    # One student sends fifty submissions at once: fair use's per-user limits are out of the way.
    fleet = fleet_on(KECE_QUARANTINE_INFRA_ERRORS=INFRA_ERRORS, KECE_USER_ACTIVE_MAX=0, KECE_USER_SUBMIT_RATE=0)
    url = fleet.server.url
    healthy, bad = fleet.register("python", slots=2), fleet.register("python", slots=1)
    agent = fleet.start(healthy, slots=2)
    fleet.enable(healthy)
    hole = ContractNode(url, bad, answer=black_hole)
    fleet.enable(bad)
    hole.start()
    student_api, admin_api = api_session(UserFactory()), api_session(judgers_admin())
    submissions = submit(student_api, url, make_problem(languages=("python",), cases=2), 50)

    jobs = JudgeJob.objects.filter(submission_type="ALGO", submission_id__in=submissions)
    wait_for(lambda: not jobs.exclude(state__in=JobState.TERMINAL).exists(), 300, "every submission judged", agent)
    hole.finish()

    statuses = {status_of(student_api, url, s)["status"] for s in submissions}
    assert statuses == {"AC"}, "no SYSTEM_ERROR: each submission has the healthy node's verdict"
    assert {(j.state, j.settled_node_id) for j in jobs} == {(JobState.COMPLETED, healthy.pk)}
    # The bad node failed exactly its K different jobs, each sent back to the queue, and
    # then got none: quarantined by its K-th error.
    assert len(hole.posted) == INFRA_ERRORS and len({j for j, _ in hole.posted}) == INFRA_ERRORS, hole.posted
    assert {status for _, status in hole.posted} == {"requeued"}
    node = quarantine_of(admin_api, url, bad)
    assert node["observedState"] == "unhealthy"
    reason = node["quarantine"]["reason"]
    assert reason.startswith("infra_errors:") and f"on job {hole.posted[-1][0]}" in reason, reason
    assert node["quarantine"]["since"]
    [(action, after)] = node["systemAudit"]
    assert action == "quarantine" and after["reason"] == reason


def test_a_node_that_never_claims_is_quarantined_and_returns_after_its_checks_pass(fleet_on):
    need_pool("python")
    stall_ms = 3000
    fleet = fleet_on(KECE_QUARANTINE_STALL_MS=stall_ms)
    url = fleet.server.url
    node = fleet.register("python", slots=2)
    idle = ContractNode(url, node)  # heartbeats, free slots, never a claim
    fleet.enable(node)
    idle.start()
    student_api, admin_api = api_session(UserFactory()), api_session(judgers_admin())
    [submission] = submit(student_api, url, make_problem(languages=("python",), cases=2), 1)

    wait_for(lambda: JudgeNode.objects.get(pk=node.pk).quarantined_at is not None, 30, "the idle node quarantined")
    due = JudgeJob.objects.get(submission_type="ALGO", submission_id=submission).available_at
    assert JudgeNode.objects.get(pk=node.pk).quarantined_at - due >= timedelta(milliseconds=stall_ms)
    quarantined = quarantine_of(admin_api, url, node)
    assert quarantined["observedState"] == "unhealthy"
    assert quarantined["quarantine"]["reason"].startswith("stalled:")
    assert [action for action, _ in quarantined["systemAudit"]] == ["quarantine"]
    assert status_of(student_api, url, submission)["status"] == "PENDING"

    idle.hand_over()
    session = idle.joined["sessionEpoch"]
    agent = fleet.start(node, slots=2, wait_joined=False)
    wait_for(lambda: JudgeNode.objects.get(pk=node.pk).session_epoch > session, 60, "the agent took over", agent)
    assert quarantine_of(admin_api, url, node)["quarantine"] is not None, "a new session is no way back"

    base = f"{url}/api/v1/admin/judgers/{node.pk}"
    started = admin_api.post(f"{base}/checks")
    assert started.status_code == 202, started.text
    check_url = f"{base}/checks/{started.json()['checkId']}"
    wait_for(lambda: admin_api.get(check_url).json()["status"] != "RUNNING", 60, "the check finished", agent)
    check = admin_api.get(check_url).json()
    assert check["status"] == "PASSED", check["items"]

    back = quarantine_of(admin_api, url, node)
    assert back["quarantine"] is None and back["observedState"] in ("ready", "busy")
    assert [action for action, _ in back["systemAudit"]] == ["quarantine_cleared", "quarantine"]
    wait_for(lambda: status_of(student_api, url, submission)["status"] == "AC", 60, "the node judged", agent)
    job = JudgeJob.objects.get(submission_type="ALGO", submission_id=submission)
    assert job.settled_node_id == node.pk
