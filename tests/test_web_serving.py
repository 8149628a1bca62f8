"""The web tier under uvicorn (`kece.asgi`, `kece.lanes`): requests of one kind do not queue
behind another's, and several server processes share one database and Redis correctly."""

import asyncio
import json
import threading
from collections import Counter, defaultdict

import httpx
import pytest
import requests
from django.db import connection

from judging.models import JobState, JudgeJob
from tests.api.helpers import make_admin, person
from tests.concurrency import lock_waits, raw_connection, wait_until
from tests.factories import make_node, make_problem
from tests.judging.helpers import submit as submit_in_process
from tests.live import LiveServer

pytestmark = [pytest.mark.mariadb, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

SUBMIT = "/api/v1/submissions"
CLAIM = "/api/v1/internal/judgers/jobs/claim"


def token_of(user) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.get_or_create(user=user)[0].key


def submit_over_http(server, token, problem) -> requests.Response:
    """One submission on a fresh connection (each may reach any server process)."""
    return requests.post(server.url + SUBMIT, json={"problemId": problem.pk, "language": "python", "code": "print(1)"},
                         headers={"Authorization": f"Token {token}", "Connection": "close"}, timeout=30)


def test_a_submission_is_answered_while_admin_requests_wait_on_a_lock(tmp_path):
    """Administrators' requests stuck behind a row lock (more of them than the server has
    threads for users) hold up neither a submission nor the public status."""
    admin_token = token_of(make_admin())
    student_token = token_of(person("student"))
    problem = make_problem(languages=("python",))
    nodes = [make_node()[0] for _ in range(3)]
    connection.close()
    holder = raw_connection()
    holder.cursor().execute("START TRANSACTION")
    holder.cursor().execute(f"SELECT id FROM judge_node WHERE id IN ({','.join(str(n.pk) for n in nodes)}) FOR UPDATE")
    answers = {}

    def edit(node):
        answers[node.pk] = requests.patch(
            server.url + f"/api/v1/admin/judgers/{node.pk}", json={"revision": node.revision, "maxSlots": 2},
            headers={"Authorization": f"Token {admin_token}"}, timeout=60).status_code

    server = LiveServer(env={"KECE_WEB_THREADS": 2, "KECE_ADMIN_THREADS": 1}, log_path=tmp_path / "server.log")
    with server:
        edits = [threading.Thread(target=edit, args=(node,)) for node in nodes]
        try:
            for thread in edits:
                thread.start()
            wait_until(lambda: lock_waits() >= 1, timeout=20, message="an admin request waits on the node lock")

            accepted = submit_over_http(server, student_token, problem)
            summary = requests.get(server.url + "/api/v1/system/judgers/summary", timeout=30)

            assert accepted.status_code == 202, accepted.text
            assert summary.status_code == 200
            assert not answers, "the admin requests answered before the lock was released"
        finally:
            holder.rollback()
            holder.close()
            for thread in edits:
                thread.join(60)
    assert answers == {node.pk: 200 for node in nodes}


def log_events(path) -> list[dict]:
    """The server's INFO events, one JSON object per line (uvicorn's own lines and any
    other noise are not JSON objects)."""
    events = []
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("level") == "INFO":
            events.append({**event, "msg": event["message"]})
    return events


def test_two_server_processes_share_submissions_claims_and_wake_ups(tmp_path):
    """Two uvicorn processes on one MariaDB and Redis: both accept submissions and lease
    jobs; a job accepted by one process reaches a claim waiting in the other through its
    wake-up (the fallback check is a minute away, longer than any claim waits); and no job
    is leased twice."""
    token = token_of(person("student"))
    problem = make_problem(languages=("python",))
    # At least 16 rounds, more (up to 48) until both processes have accepted a submission:
    # which process accepts a connection is the kernel's choice, and a run of them may go
    # to one.
    nodes = [make_node(pool="python", max_slots=1)[0] for _ in range(48)]
    connection.close()
    log = tmp_path / "server.log"
    server = LiveServer(workers=2, log_path=log,
                        env={"KECE_LOG_LEVEL": "INFO", "KECE_CLAIM_FALLBACK_MS": 60000, "KECE_CLAIM_WAIT_MS": 20000})

    def is_leased(submission_id) -> bool:
        probe = raw_connection()
        try:
            cursor = probe.cursor()
            cursor.execute("SELECT state FROM judge_job WHERE submission_type = 'ALGO' AND submission_id = %s",
                           [submission_id])
            return cursor.fetchone() == (JobState.RUNNING,)
        finally:
            probe.close()

    def submitting_pids():
        return [e["pid"] for e in log_events(log) if e["msg"] == "submission queued"]

    async def claims_while_submitting():
        # A new connection per claim, opened one at a time: each goes to whichever process
        # accepts it first (a burst of connections would mostly go to one).
        limits = httpx.Limits(max_connections=len(nodes), max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as http:
            waiting, accepted = [], []
            for node in nodes:
                if len(accepted) >= 16 and len(set(submitting_pids())) == 2:
                    break
                waiting.append(asyncio.create_task(http.post(CLAIM, json={"freeSlots": 1, "waitMs": 20000}, headers={
                    "Authorization": f"Bearer {node.secret}", "X-Judge-Session": str(node.session_epoch)})))
                answer = await asyncio.to_thread(submit_over_http, server, token, problem)
                assert answer.status_code == 202, answer.text
                accepted.append(answer.json()["submissionId"])
                # Only the newest claim is free: this job is its, whichever process it is in.
                await asyncio.to_thread(wait_until, lambda: is_leased(accepted[-1]), timeout=20,
                                        message="the job is leased")
            return accepted, [a.json() for a in await asyncio.gather(*waiting)]

    with server:
        accepted, claimed = asyncio.run(claims_while_submitting())

    leased = [job["jobId"] for answer in claimed for job in answer["jobs"]]
    jobs = JudgeJob.objects.filter(submission_id__in=accepted, submission_type="ALGO")
    assert sorted(leased) == sorted(j.pk for j in jobs), "every waiting claim got one of the jobs"
    assert all(j.state == JobState.RUNNING and j.attempts == 1 for j in jobs)
    assert len({j.node_id for j in jobs}) == len(accepted)

    events = log_events(log)
    submitted_by = {int(e["job"]): e["pid"] for e in events if e["msg"] == "submission queued"}
    leases = defaultdict(list)
    for e in events:
        if e["msg"] == "job leased":
            leases[int(e["job"])].append(e["pid"])
    assert set(submitted_by) == set(leases) == set(leased)
    assert all(len(pids) == 1 for pids in leases.values()), "no job is leased twice"
    assert len(set(submitted_by.values())) == 2, f"submissions served by {Counter(submitted_by.values())}"
    assert len({pids[0] for pids in leases.values()}) == 2, "claims served by both processes"
    assert any(leases[job][0] != pid for job, pid in submitted_by.items()), "a wake-up crossed processes"


def test_a_lost_database_connection_costs_one_request_not_every_one_after(tmp_path):
    """The database drops the connection a user-lane thread keeps (a restart, a timeout):
    the request that meets it fails, and the next one is served on a new connection."""
    student = person("student")
    token = token_of(student)
    submission = submit_in_process(student, make_problem(languages=("python",)))
    connection.close()
    path = f"/api/v1/submissions/ALGO/{submission.pk}"
    server = LiveServer(env={"KECE_WEB_THREADS": 1}, log_path=tmp_path / "server.log")
    with server:
        def read():
            return requests.get(server.url + path, headers={"Authorization": f"Token {token}"}, timeout=30)

        assert read().status_code == 200  # the lane's one thread now holds a connection
        admin = raw_connection()
        try:
            cursor = admin.cursor()
            cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
                           " AND ID != CONNECTION_ID()")
            for (thread_id,) in cursor.fetchall():
                cursor.execute(f"KILL CONNECTION {thread_id}")
        finally:
            admin.close()
        assert read().status_code != 200
        assert read().status_code == 200
