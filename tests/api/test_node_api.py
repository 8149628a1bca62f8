"""The node API over real HTTP (uvicorn) against MariaDB: the contract's answers."""

import hashlib
import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import JudgeJob
from nodes.models import JoinCode, JudgeNode
from nodes.services import node_issue_join_code, node_register
from tests.concurrency import run_concurrently
from tests.factories import HostGroupFactory, UserFactory, make_node, make_problem, mark_verified
from tests.judging.helpers import submit
from tests.live import NodeClient

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]


def client_for(server, node) -> NodeClient:
    return NodeClient(server.url, credential=node.secret, session=node.session_epoch)


def registered(pool="python"):
    group = HostGroupFactory()
    node, issued = node_register(name=f"n-{pool}-{time.monotonic_ns()}", pool=pool, base_url="https://127.0.0.1",
                                 host_group_id=group.pk, max_slots=2, actor=None, now=timezone.now())
    return node, issued.code


def test_a_node_joins_claims_downloads_renews_and_settles(server):
    node, code = registered()
    agent = NodeClient(server.url)
    joined = agent.join(code)
    assert joined.status_code == 201
    body = joined.json()
    assert {"nodeId", "pool", "credential", "probeKey", "sessionEpoch", "protocolVersion", "heartbeatIntervalMs",
            "renewIntervalMs", "leaseTtlMs", "claimWaitMs"} <= set(body)
    assert (body["pool"], body["leaseTtlMs"], body["claimWaitMs"]) == ("python", 60000, 15000)
    stored = JudgeNode.objects.get(pk=node.pk)
    assert stored.credential_digest == hashlib.sha256(body["credential"].encode()).hexdigest()
    mark_verified(JudgeNode.objects.get(pk=node.pk))  # as if its self-check had passed
    JudgeNode.objects.filter(pk=node.pk).update(desired_state="ENABLED")

    assert agent.heartbeat().json()["desiredState"] == "ENABLED"
    submission = submit(UserFactory(), make_problem(languages=("python",)), code="print(42)")
    claimed = agent.claim(free_slots=2, wait_ms=2000)
    assert claimed.status_code == 200
    [job] = claimed.json()["jobs"]
    assert (job["submissionType"], job["submissionId"], job["leaseEpoch"], job["kind"]) == (
        "ALGO", submission.pk, 1, "JUDGE")
    assert job["source"]["digest"] == hashlib.sha256(b"print(42)").hexdigest() and job["sql"] is None

    download = agent.artifact(job["jobId"], job["source"]["digest"], job["leaseEpoch"])
    assert download.status_code == 200 and download.content == b"print(42)"
    assert download.headers["X-Content-SHA256"] == job["source"]["digest"]
    assert download.headers["Content-Length"] == "9"
    case = job["cases"][0]["input"]
    assert agent.artifact(job["jobId"], case["digest"], job["leaseEpoch"]).status_code == 200

    renewed = agent.renew((job["jobId"], 1), (999999, 1)).json()["leases"]
    assert renewed[0]["ok"] is True and renewed[0]["leaseRemainingMs"] == 60000
    assert renewed[1] == {"jobId": 999999, "ok": False, "error": "lease_lost"}

    result = {"leaseEpoch": 1, "outcome": "JUDGED", "verdict": "AC", "score": 100, "timeMs": 3, "memoryKb": 800,
              "compileOutput": "", "cases": [{"ordinal": c["ordinal"], "verdict": "AC", "timeMs": 3,
                                              "memoryKb": 800, "score": c["weight"]} for c in job["cases"]]}
    assert agent.result(job["jobId"], result).json() == {"status": "settled"}
    assert agent.result(job["jobId"], result).json() == {"status": "duplicate"}
    conflicting = agent.result(job["jobId"], {**result, "verdict": "WA", "score": 0,
                                              "cases": [{**c, "verdict": "WA", "score": 0} for c in result["cases"]]})
    assert (conflicting.status_code, conflicting.json()["error"]) == (409, "result_conflict")


def test_join_codes_have_one_answer_for_unknown_expired_and_used(server):
    node, code = registered()
    first = NodeClient(server.url).join(code)
    assert first.status_code == 201
    used = NodeClient(server.url).join(code)
    unknown = NodeClient(server.url).join("not-a-code-" + "x" * 30)
    _, expiring = registered()
    JoinCode.objects.filter(code_digest=hashlib.sha256(expiring.encode()).hexdigest()).update(
        expires_at=timezone.now() - timedelta(seconds=1))
    expired = NodeClient(server.url).join(expiring)
    answers = {(r.status_code, r.json()["error"], r.json()["detail"]) for r in (used, unknown, expired)}
    assert answers == {(401, "invalid_join_code", "The join code is unknown, expired or already used.")}
    assert len(code) >= 22  # 192 random bits, URL-safe
    assert not JoinCode.objects.filter(code_digest=code).exists()


def test_a_join_code_is_consumed_once_by_racing_agents(server):
    node, code = registered()
    results = run_concurrently([lambda: NodeClient(server.url).join(code).status_code for _ in range(8)])
    assert sorted(results) == [201] + [401] * 7


def test_a_newer_join_code_makes_the_earlier_one_stop_working(server):
    node, code = registered()
    newer = node_issue_join_code(node_id=node.pk, actor=None, now=timezone.now())
    assert NodeClient(server.url).join(code).status_code == 401
    assert NodeClient(server.url).join(newer.code).status_code == 201


def test_a_second_session_supersedes_the_first_and_frees_its_leases_at_once(server):
    node, _ = make_node(pool="python", max_slots=2)
    first = client_for(server, node)
    submit(UserFactory(), make_problem(languages=("python",)))
    [job] = first.claim(wait_ms=2000).json()["jobs"]

    second = client_for(server, node)
    assert second.open_session().status_code == 200
    assert second.session_epoch == first.session_epoch + 1

    for response in (first.heartbeat(), first.renew((job["jobId"], job["leaseEpoch"])), first.claim(),
                     first.artifact(job["jobId"], job["source"]["digest"], job["leaseEpoch"]),
                     first.result(job["jobId"], {"leaseEpoch": job["leaseEpoch"], "outcome": "RELEASED"})):
        assert (response.status_code, response.json()["error"]) == (409, "session_superseded")
    [again] = second.claim(wait_ms=2000).json()["jobs"]
    assert (again["jobId"], again["leaseEpoch"]) == (job["jobId"], job["leaseEpoch"] + 1)


def test_other_nodes_other_pools_and_lost_leases_are_refused(server):
    node_a, _ = make_node(pool="python")
    node_b, _ = make_node(pool="python")
    foreign, _ = make_node(pool="cpp")
    a, b, f = client_for(server, node_a), client_for(server, node_b), client_for(server, foreign)
    submit(UserFactory(), make_problem(languages=("python",)))
    [job] = a.claim(wait_ms=2000).json()["jobs"]
    digest, lease = job["source"]["digest"], job["leaseEpoch"]
    released = {"leaseEpoch": lease, "outcome": "RELEASED"}

    for intruder in (b, f):
        assert intruder.artifact(job["jobId"], digest, lease).json()["error"] == "lease_lost"
        assert intruder.renew((job["jobId"], lease)).json()["leases"][0] == {
            "jobId": job["jobId"], "ok": False, "error": "lease_lost"}
        assert intruder.result(job["jobId"], released).json()["error"] == "lease_lost"
    assert a.artifact(job["jobId"], digest, lease + 1).json()["error"] == "lease_lost"
    assert (a.artifact(job["jobId"], "0" * 64, lease).status_code, a.artifact(job["jobId"], "0" * 64, lease)
            .json()["error"]) == (404, "not_in_manifest")
    assert a.artifact(job["jobId"], "XYZ", lease).status_code == 400

    # The lease runs out; the reaper gives the job back; the old holder is refused.
    JudgeJob.objects.filter(pk=job["jobId"]).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert a.renew((job["jobId"], lease)).json()["leases"][0]["error"] == "lease_lost"
    assert a.result(job["jobId"], released).json()["error"] == "lease_lost"
    assert a.artifact(job["jobId"], digest, lease).json()["error"] == "lease_lost"


def test_credentials_are_bearer_only_and_revocation_takes_effect_at_once(server):
    node, _ = make_node(pool="python")
    agent = client_for(server, node)
    assert agent.heartbeat().status_code == 200
    anonymous = NodeClient(server.url, session=node.session_epoch)
    assert anonymous.heartbeat().status_code == 401
    wrong_scheme = anonymous.post("heartbeat", {}, Authorization=f"Token {node.secret}")
    assert (wrong_scheme.status_code, wrong_scheme.json()["error"]) == (401, "unauthenticated")
    from nodes.services import node_revoke
    node_revoke(node_id=node.pk, reason="stolen", actor=None, now=timezone.now())
    for response in (agent.heartbeat(), agent.claim(), agent.open_session()):
        assert (response.status_code, response.json()["error"]) == (401, "unauthenticated")


def test_unknown_routes_are_404_before_authentication(server):
    agent = NodeClient(server.url)
    for path in ("nothing", "jobs/1/nothing", "jobs/abc/result", "join/"):
        response = agent.post(path, {})
        assert (response.status_code, response.json()["error"]) == (404, "not_found")


def test_a_second_waiting_claim_of_the_same_node_ends_the_first(server):
    node, _ = make_node(pool="python")
    first, second = client_for(server, node), client_for(server, node)
    answers = {}

    def wait_first():
        started = time.monotonic()
        answers["first"] = (first.claim(wait_ms=10000).json(), time.monotonic() - started)

    thread = threading.Thread(target=wait_first)
    thread.start()
    time.sleep(0.5)
    second_response = {}
    waiting = threading.Thread(target=lambda: second_response.update(r=second.claim(wait_ms=10000)))
    waiting.start()
    thread.join(5)
    assert not thread.is_alive(), "the first claim kept waiting"
    body, elapsed = answers["first"]
    assert body["jobs"] == [] and elapsed < 3
    # The second claim is the one still waiting: the next job goes to it.
    submission = submit(UserFactory(), make_problem(languages=("python",)))
    waiting.join(10)
    assert not waiting.is_alive(), "the second claim did not answer"
    response = second_response["r"]
    assert response.status_code == 200
    [job] = response.json()["jobs"]
    assert job["submissionId"] == submission.pk


def test_waiting_ends_with_no_jobs_and_the_desired_state(server):
    node, _ = make_node(pool="python")
    started = time.monotonic()
    response = client_for(server, node).claim(wait_ms=700)
    elapsed = time.monotonic() - started
    assert response.json() == {"jobs": [], "desiredState": "ENABLED"}
    assert 0.6 <= elapsed < 3


def _judged_body(job, **extra) -> dict:
    cases = [{"ordinal": c["ordinal"], "verdict": "AC", "timeMs": 5, "memoryKb": 512, "score": c["weight"]}
             for c in job["cases"]]
    return {"leaseEpoch": job["leaseEpoch"], "outcome": "JUDGED", "verdict": "AC", "score": 100, "timeMs": 5,
            "memoryKb": 512, "compileOutput": "", "cases": cases, **extra}


def _busy_python_node(server, *, slots: int, queued: int):
    """A python node with `slots` slots, all leased, and more work queued behind them:
    (node, its client, the jobs it holds)."""
    node, _ = make_node(pool="python", max_slots=slots)
    agent = client_for(server, node)
    problem = make_problem(languages=("python",))
    for _ in range(slots + queued):
        submit(UserFactory(), problem)
    return node, agent, agent.claim(free_slots=slots, wait_ms=2000).json()["jobs"]


def test_a_result_can_carry_the_next_claim_within_the_nodes_slots(server):
    node, agent, (first, second) = _busy_python_node(server, slots=2, queued=2)

    # The slot the first job frees is filled by the answer to its result post.
    answer = agent.result(first["jobId"], _judged_body(first, claim={"freeSlots": 2}))
    assert answer.status_code == 200
    body = answer.json()
    assert (body["status"], body["desiredState"]) == ("settled", "ENABLED")
    [carried] = body["jobs"]  # two asked for, one slot free: the node's slots still hold
    stored = JudgeJob.objects.get(pk=carried["jobId"])
    assert (stored.state, stored.node_id, stored.lease_epoch) == ("RUNNING", node.pk, carried["leaseEpoch"])
    assert JudgeJob.objects.get(pk=first["jobId"]).state == "COMPLETED"

    # Without the field the answer is the contract's, unchanged.
    assert agent.result(second["jobId"], _judged_body(second)).json() == {"status": "settled"}

    # A refused result leases nothing: the error answers alone.
    refused = agent.result(first["jobId"], {**_judged_body(first, claim={"freeSlots": 1}), "verdict": "WA"})
    assert (refused.status_code, refused.json()["error"]) == (409, "result_conflict")
    assert JudgeJob.objects.filter(node_id=node.pk, state="RUNNING").count() == 1

    # A repeated post of an accepted result is confirmed, and may still fill the freed slot.
    again = agent.result(second["jobId"], _judged_body(second, claim={"freeSlots": 1})).json()
    assert again["status"] == "duplicate" and len(again["jobs"]) == 1
    assert JudgeJob.objects.filter(node_id=node.pk, state="RUNNING").count() == 2


def test_an_agent_that_sends_every_field_gets_its_results_taken(server):
    """A JUDGED or RELEASED result with an empty or null `error` (an agent written from
    API.md that serialises every field) is accepted, and the same result posted without
    the field is the same result."""
    node, agent, (first, second, third) = _busy_python_node(server, slots=3, queued=0)
    assert agent.result(first["jobId"], _judged_body(first, error="")).json() == {"status": "settled"}
    assert agent.result(first["jobId"], _judged_body(first)).json() == {"status": "duplicate"}
    assert agent.result(second["jobId"], _judged_body(second, error=None)).json() == {"status": "settled"}
    released = {"leaseEpoch": third["leaseEpoch"], "outcome": "RELEASED", "error": "", "message": ""}
    assert agent.result(third["jobId"], released).json() == {"status": "requeued"}
    assert JudgeJob.objects.get(pk=third["jobId"]).state == "QUEUED"


def test_a_result_posted_again_after_its_answer_was_lost_gets_the_same_jobs(server):
    node, agent, [job] = _busy_python_node(server, slots=1, queued=2)
    body = _judged_body(job, claim={"freeSlots": 1})
    lost = agent.result(job["jobId"], body).json()  # never reaches the node
    again = agent.result(job["jobId"], body).json()

    def lease(jobs):
        return [{k: v for k, v in j.items() if k != "leaseRemainingMs"} for j in jobs]

    assert again["status"] == "duplicate"
    assert lease(again["jobs"]) == lease(lost["jobs"]) and len(again["jobs"]) == 1
    assert JudgeJob.objects.filter(node_id=node.pk, state="RUNNING").count() == 1


def test_a_carried_claim_gives_a_draining_node_no_work(server):
    node, _ = make_node(pool="python", max_slots=1)
    agent = client_for(server, node)
    problem = make_problem(languages=("python",))
    submit(UserFactory(), problem)
    submit(UserFactory(), problem)
    [job] = agent.claim(wait_ms=2000).json()["jobs"]
    JudgeNode.objects.filter(pk=node.pk).update(desired_state="DRAINING")
    body = agent.result(job["jobId"], _judged_body(job, claim={"freeSlots": 1})).json()
    assert body == {"status": "settled", "jobs": [], "desiredState": "DRAINING"}


def test_a_claim_may_send_each_jobs_source_along_so_the_node_need_not_download_it(server):
    node, _ = make_node(pool="python", max_slots=2)
    agent = client_for(server, node)
    problem = make_problem(languages=("python",))
    codes = ["print('你好')  # not only ASCII", "print(1)", "print(2)"]
    submitted = {submit(UserFactory(), problem, code=code).pk: code for code in codes}

    # Asked for: the code, whose UTF-8 bytes are the ones the source's digest names.
    [first] = agent.claim(wait_ms=2000, inlineSource=True).json()["jobs"]
    assert first["sourceText"] == submitted[first["submissionId"]]
    assert hashlib.sha256(first["sourceText"].encode()).hexdigest() == first["source"]["digest"]
    # Not asked for: the contract's Job, unchanged.
    [second] = agent.claim(wait_ms=2000).json()["jobs"]
    assert "sourceText" not in second
    # A carried claim may ask for it too, and the same post again (its answer lost) gets the
    # same jobs with their sources.
    body = _judged_body(first, claim={"freeSlots": 1, "inlineSource": True})
    [third] = agent.result(first["jobId"], body).json()["jobs"]
    assert third["sourceText"] == submitted[third["submissionId"]]
    again = agent.result(first["jobId"], body).json()
    assert again["status"] == "duplicate" and [j["sourceText"] for j in again["jobs"]] == [third["sourceText"]]
    # The source may still be downloaded as before.
    assert agent.artifact(third["jobId"], third["source"]["digest"], third["leaseEpoch"]).content == \
        third["sourceText"].encode()

    # Not asked for on a carried claim: none.
    submit(UserFactory(), problem, code="print(4)")
    [fourth] = agent.result(third["jobId"], _judged_body(third, claim={"freeSlots": 1})).json()["jobs"]
    assert "sourceText" not in fourth

    refused = agent.claim(wait_ms=0, inlineSource="sometimes")
    assert (refused.status_code, refused.json()["error"]) == (400, "invalid")
    refused = agent.result(second["jobId"], _judged_body(second, claim={"freeSlots": 1, "inlineSource": "x"}))
    assert refused.status_code == 400 and JudgeJob.objects.get(pk=second["jobId"]).state == "RUNNING"


def test_json_nested_too_deeply_is_malformed_not_a_server_error(server):
    node, _ = make_node(pool="python")
    agent = client_for(server, node)
    deep = "[" * 100_000 + "]" * 100_000
    for path in ("jobs/1/result", "jobs/claim", "heartbeat"):
        answer = agent.http.post(server.url + agent.PREFIX + path, data=deep, timeout=30,
                                 headers=agent._headers({"Content-Type": "application/json"}))
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid"), path


def test_the_hot_calls_answer_other_methods_with_405_and_allow(server):
    node, _ = make_node(pool="python")
    agent = client_for(server, node)
    for path in ("jobs/1/result", "jobs/claim"):
        answer = agent.get(path)
        assert (answer.status_code, answer.json()["error"], answer.headers["Allow"]) == (
            405, "method_not_allowed", "POST"), path


def test_a_body_without_a_content_type_is_read_as_json_on_every_node_call(server):
    """A client that leaves the header out is heard on a heartbeat and a renew as on a claim
    (the bare calls read any body as JSON); another type is still refused."""
    import json

    import requests

    node, agent, [job] = _busy_python_node(server, slots=1, queued=0)
    headers = agent._headers()
    heartbeat = {"agentVersion": "1", "runtimeSpec": "python-r1", "localSlots": 1, "running": 1,
                 "health": {"ok": True, "checks": {}}}
    renew = {"leases": [{"jobId": job["jobId"], "leaseEpoch": job["leaseEpoch"],
                         "progress": {"phase": "JUDGING", "testcase": 1}}]}
    for path, body in (("heartbeat", heartbeat), ("jobs/renew", renew), ("jobs/claim", {"freeSlots": 0})):
        answer = requests.post(f"{server.url}{agent.PREFIX}{path}", data=json.dumps(body), headers=headers, timeout=30)
        assert "Content-Type" not in answer.request.headers and answer.status_code == 200, (path, answer.text)
    refused = requests.post(f"{server.url}{agent.PREFIX}jobs/renew", data=json.dumps(renew),
                            headers={**headers, "Content-Type": "text/plain"}, timeout=30)
    assert (refused.status_code, refused.json()["error"]) == (400, "invalid")
