"""Long-poll claims through real uvicorn, MariaDB and Redis: fast wake-ups, no lost work,
cheap waiting."""

import asyncio
import shutil
import socket
import subprocess
import threading
import time

import httpx
import pytest
from django.db import connection
from django.utils import timezone

from judging import wakeups
from judging.models import JobState, JudgeJob
from judging.services.claim import job_claim
from nodes.services import node_drain
from tests.concurrency import lock_waits, raw_connection, wait_until
from tests.factories import HostGroupFactory, UserFactory, make_node, make_problem
from tests.judging.helpers import submit
from tests.live import LiveServer, NodeClient, free_port

pytestmark = [pytest.mark.mariadb, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def client_for(server, node) -> NodeClient:
    return NodeClient(server.url, credential=node.secret, session=node.session_epoch)


def claim_in_background(client, **kwargs):
    box = {}

    def run():
        started = time.monotonic()
        response = client.claim(**kwargs)
        box["response"], box["elapsed"], box["done_at"] = response, time.monotonic() - started, time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


@pytest.fixture
def hint_only_server(tmp_path):
    """Fallback checks every 10 s: only a wake-up hint can answer within a second."""
    with LiveServer(env={"KECE_CLAIM_FALLBACK_MS": 10000}, log_path=tmp_path / "server.log") as live:
        yield live


def test_a_waiting_claim_wakes_on_a_submit_in_its_pool_and_no_other(hint_only_server, settings):
    python_node, _ = make_node(pool="python")
    cpp_node, _ = make_node(pool="cpp")
    problem = make_problem(languages=("python",))
    python_wait, python_box = claim_in_background(client_for(hint_only_server, python_node), wait_ms=8000)
    cpp_wait, cpp_box = claim_in_background(client_for(hint_only_server, cpp_node), wait_ms=2500)
    time.sleep(1.0)  # both are waiting

    submitted_at = time.monotonic()
    submit(UserFactory(), problem)  # another process: the hint travels through Redis
    python_wait.join(10)
    cpp_wait.join(10)

    assert len(python_box["response"].json()["jobs"]) == 1
    assert python_box["done_at"] - submitted_at < 1.0
    assert cpp_box["response"].json()["jobs"] == []
    assert cpp_box["elapsed"] >= 2.4  # it waited its full time: nothing woke it


def _empty_claims(server, pool: str) -> float:
    """The server's count of claims that found nothing in `pool` (its /metrics)."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(float(row.rsplit(" ", 1)[1]) for row in text.splitlines()
               if row.startswith(f'kece_claims_total{{pool="{pool}",') and 'result="empty"' in row)


def test_a_waiting_claim_whose_node_is_drained_answers_the_new_state_not_a_lost_session(hint_only_server):
    """The node's row changes while its claim waits: the claim looks at the node again and
    answers as the node now stands. A 409 `session_superseded` there would make the agent
    kill every job it runs, on each drain, disable or edit."""
    node, _ = make_node(pool="cpp")
    before = _empty_claims(hint_only_server, "cpp")
    waiting, box = claim_in_background(client_for(hint_only_server, node), wait_ms=20000)
    wait_until(lambda: _empty_claims(hint_only_server, "cpp") > before, timeout=30,
               message="the claim's first look, then its wait")
    node_drain(node_id=node.pk, actor=None, now=timezone.now())
    waiting.join(30)
    assert box["response"].status_code == 200, box["response"].text
    assert box["response"].json() == {"jobs": [], "desiredState": "DRAINING"}


@pytest.fixture
def private_redis():
    """A Redis of our own that the test may stop."""
    if not shutil.which("redis-server"):
        pytest.fail("redis-server is not installed")
    port = free_port()
    process = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no"], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(50):
        try:
            import redis
            redis.Redis.from_url(url).ping()
            break
        except Exception:
            time.sleep(0.1)
    yield process, url
    process.kill()
    process.wait()


def test_with_redis_stopped_jobs_are_still_claimed_and_none_is_lost(private_redis, settings, tmp_path):
    redis_process, redis_url = private_redis
    settings.REDIS_URL = redis_url
    wakeups.reset_redis_client()
    node, _ = make_node(pool="python", max_slots=8, host_group=HostGroupFactory(total_slots=8))
    problem = make_problem(languages=("python",))
    agent = None
    try:
        with LiveServer(env={"REDIS_URL": redis_url, "KECE_CLAIM_FALLBACK_MS": 1000},
                        log_path=tmp_path / "server.log") as server:
            agent = client_for(server, node)
            thread, box = claim_in_background(agent, wait_ms=8000)
            time.sleep(0.8)
            submit(UserFactory(), problem)
            thread.join(10)
            assert len(box["response"].json()["jobs"]) == 1  # through Redis

            redis_process.kill()
            redis_process.wait()
            submitted = [submit(UserFactory(), problem).pk for _ in range(5)]
            claimed, started = [], time.monotonic()
            while len(claimed) < 5 and time.monotonic() - started < 20:
                claimed += [j["submissionId"] for j in agent.claim(free_slots=8, wait_ms=3000).json()["jobs"]]
            assert sorted(claimed) == sorted(submitted)
    finally:
        wakeups.reset_redis_client()


@pytest.mark.usefixtures("unlimited_submits")
def test_two_hundred_waiting_claims_hold_no_connections_and_the_server_keeps_answering(server):
    nodes = [make_node(pool="python", max_slots=1, host_group=HostGroupFactory(total_slots=1))[0]
             for _ in range(200)]
    problem = make_problem(languages=("python",))
    student = UserFactory()

    async def scenario():
        limits = httpx.Limits(max_connections=300, max_keepalive_connections=300)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as http:
            async def wait(node):
                return await http.post("/api/v1/internal/judgers/jobs/claim", json={"freeSlots": 1, "waitMs": 6000},
                                       headers={"Authorization": f"Bearer {node.secret}",
                                                "X-Judge-Session": str(node.session_epoch)})
            waits = [asyncio.create_task(wait(n)) for n in nodes]
            await asyncio.sleep(2.0)
            during = await asyncio.to_thread(server.database.connections)
            started = time.monotonic()
            summary = await http.get("/api/v1/system/judgers/summary")
            summary_seconds = time.monotonic() - started
            await asyncio.to_thread(lambda: [submit(student, problem) for _ in range(50)])
            responses = await asyncio.gather(*waits)
            return during, summary, summary_seconds, responses

    during, summary, summary_seconds, responses = asyncio.run(scenario())
    connection.close()
    assert summary.status_code == 200 and summary_seconds < 5
    assert during <= 12, f"the server held {during} connections for 200 waiting claims"
    assert all(r.status_code == 200 for r in responses)
    jobs = [job for r in responses for job in r.json()["jobs"]]
    assert len(jobs) == 50 and len({j["jobId"] for j in jobs}) == 50
    assert JudgeJob.objects.filter(state=JobState.RUNNING).count() == 50


def test_nodes_that_come_back_after_a_pause_are_not_read_again_one_by_one(server):
    """A hundred nodes wait out a short claim together, pause, and wait again (as after a
    network blip): the server still knows who they are. Only the pool's own checks reach
    the database, not one identity read per node."""
    nodes = [make_node(pool="cpp")[0] for _ in range(100)]

    async def wait_all():
        limits = httpx.Limits(max_connections=150, max_keepalive_connections=150)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as http:
            answers = await asyncio.gather(*[
                http.post("/api/v1/internal/judgers/jobs/claim", json={"freeSlots": 1, "waitMs": 1000},
                          headers={"Authorization": f"Bearer {n.secret}", "X-Judge-Session": str(n.session_epoch)})
                for n in nodes])
        assert [a.status_code for a in answers] == [200] * len(nodes)

    async def scenario():
        for _ in range(2):  # first sight (and the process's first subscription)
            await wait_all()
            await asyncio.sleep(2.5)  # nobody waits
        before = await asyncio.to_thread(server.database.selects)
        await wait_all()
        return await asyncio.to_thread(server.database.selects) - before

    selects = asyncio.run(scenario())
    connection.close()
    assert selects < 25, f"{selects} SELECTs for 100 returning nodes waiting one second"


def test_a_lost_claim_response_comes_back_through_the_lease_within_the_slots(tmp_path):
    server = LiveServer(env={"KECE_LEASE_TTL_MS": 2500, "KECE_RENEW_INTERVAL_MS": 1000,
                             "KECE_REAP_INTERVAL_MS": 200, "KECE_IN_PROCESS_SCHEDULER": 1,
                             "KECE_RETRY_BACKOFF_MS": 100, "KECE_CLAIM_FALLBACK_MS": 200},
                        log_path=tmp_path / "server.log")
    with server:
        node, identity = make_node(pool="python", max_slots=1)
        submit(UserFactory(), make_problem(languages=("python",)))
        from django.conf import settings
        from django.utils import timezone
        settings.KECE_LEASE_TTL_MS = 2500
        # The server leased a job to the node, but the answer never reached it.
        [lost] = job_claim(identity=identity, free_slots=1, now=timezone.now()).jobs
        agent = client_for(server, node)
        started = time.monotonic()
        first = agent.claim(free_slots=1, wait_ms=1500).json()["jobs"]
        assert first == [], "the unacknowledged lease still takes the node's only slot"
        jobs = []
        while not jobs and time.monotonic() - started < 15:
            jobs = agent.claim(free_slots=1, wait_ms=3000).json()["jobs"]
        [job] = jobs
        assert (job["jobId"], job["leaseEpoch"]) == (lost.pk, lost.lease_epoch + 1)
        assert JudgeJob.objects.filter(state=JobState.RUNNING).count() == 1


def _server_side_open(server_port: int, client_port: int) -> bool:
    """Whether the server still holds its end of a loopback connection (established, or
    half-closed by the client and not yet closed by the server)."""
    wanted = (f"{server_port:04X}", f"{client_port:04X}")
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1].split(":")[1], fields[2].split(":")[1], fields[3]
        if (local, remote) == wanted and state in ("01", "08"):  # ESTABLISHED, CLOSE_WAIT
            return True
    return False


def test_a_claim_whose_node_hung_up_gives_back_what_it_leased(hint_only_server):
    """The node hangs up while its claim's transaction is under way: what that transaction
    leases cannot be delivered, so it is released at once, and another node takes the job
    within its wait instead of after the lease runs out."""
    server = hint_only_server
    gone, _ = make_node(pool="python", max_slots=1, host_group=HostGroupFactory())
    live, _ = make_node(pool="python", max_slots=1, host_group=HostGroupFactory())
    problem = make_problem(languages=("python",))
    connection.close()
    holder = raw_connection()
    lock_group = f"SELECT id FROM judge_host_group WHERE id = {gone.host_group_id} FOR UPDATE"
    holder.cursor().execute("START TRANSACTION")
    holder.cursor().execute(lock_group)
    body = b'{"freeSlots": 1, "waitMs": 15000}'
    hanging = socket.create_connection(("127.0.0.1", server.port))
    try:
        hanging.sendall(b"POST /api/v1/internal/judgers/jobs/claim HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        + f"Authorization: Bearer {gone.secret}\r\nX-Judge-Session: {gone.session_epoch}\r\n".encode()
                        + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        # Its first look finds nothing; once that transaction is over (the group is ours
        # again), the claim waits for a wake-up.
        wait_until(lambda: lock_waits() >= 1, timeout=20, message="the claim's first look waits on its host group")
        holder.rollback()
        holder.cursor().execute("START TRANSACTION")
        holder.cursor().execute(lock_group)
        [job_id] = [submit(UserFactory(), problem).current_judge_job_id]
        connection.close()
        wait_until(lambda: lock_waits() >= 1, timeout=20, message="the woken claim waits on its host group")
        client_port = hanging.getsockname()[1]
        hanging.close()
        wait_until(lambda: not _server_side_open(server.port, client_port), timeout=20,
                   message="the server closes its end of the connection")
    finally:
        holder.rollback()
        holder.close()

    answer = client_for(server, live).claim(free_slots=1, wait_ms=8000).json()
    assert [(j["jobId"], j["leaseEpoch"]) for j in answer["jobs"]] == [(job_id, 2)]
    job = JudgeJob.objects.get(pk=job_id)
    assert (job.node_id, job.attempts) == (live.pk, 1)  # the undelivered lease is not an attempt


def test_the_django_entry_point_answers_the_same(client, node_a):
    node, _ = node_a
    response = client.post("/api/v1/internal/judgers/jobs/claim", {"freeSlots": 1, "waitMs": 0},
                           content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {node.secret}", HTTP_X_JUDGE_SESSION=str(node.session_epoch))
    assert response.status_code == 200 and response.json() == {"jobs": [], "desiredState": "ENABLED"}
    stale = client.post("/api/v1/internal/judgers/jobs/claim", {"freeSlots": 1}, content_type="application/json",
                        HTTP_AUTHORIZATION=f"Bearer {node.secret}", HTTP_X_JUDGE_SESSION="99")
    assert (stale.status_code, stale.json()["error"]) == (409, "session_superseded")
