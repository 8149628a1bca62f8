"""`/livez` and `/readyz`: what a supervisor or load balancer sees with the database down,
hung, unmigrated, and with Redis stopped."""

import concurrent.futures
import getpass
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import MySQLdb
import pytest
import requests
from django.db import connection

from kece import health
from tests.concurrency import raw_connection, wait_until
from tests.factories import UserFactory, make_node, make_problem
from tests.judging.helpers import submit
from tests.live import ROOT, LiveServer, NodeClient, free_port, populate, start_redis

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_of_our_own(settings):
    from judging import wakeups

    port = free_port()
    process = start_redis(port)
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    health._redis = None
    wakeups.reset_redis_client()  # the wake-up hints' clients
    yield process
    process.kill()
    process.wait()
    health._redis = None
    wakeups.reset_redis_client()  # not left pointing at this one, gone, for the tests after


@pytest.fixture
def database_at(monkeypatch):
    """Point the readiness check's connections at another server or database."""
    def point(**values):
        for key, value in values.items():
            monkeypatch.setitem(connection.settings_dict, key, value)
        health._probe = None  # the check keeps its connection: a new one, to the new place
    yield point
    health._pending = None
    health._probe = None


def readyz(client, verbose=True):
    response = client.get("/readyz?verbose" if verbose else "/readyz")
    return response.status_code, response.json()


def statuses(body):
    return {check["name"]: check["status"] for check in body["checks"]}


def test_a_healthy_process_is_ready_and_lists_each_check_with_its_time(client, redis_of_our_own):
    status, body = readyz(client)
    assert (status, body["status"], body["failed"]) == (200, "ok", []), body
    assert statuses(body) == {"database": "ok", "migrations": "ok", "redis": "ok"}
    assert all(isinstance(check["ms"], float) for check in body["checks"])
    assert "checks" not in readyz(client, verbose=False)[1]
    assert client.get("/readyz").headers["Cache-Control"] == "no-store"


def test_with_redis_stopped_the_process_is_degraded_but_ready(client, redis_of_our_own):
    redis_of_our_own.kill()
    redis_of_our_own.wait()
    status, body = readyz(client)
    assert (status, body["status"], body["failed"]) == (200, "degraded", ["redis"])
    assert statuses(body) == {"database": "ok", "migrations": "ok", "redis": "failed"}
    assert client.get("/livez").status_code == 200


def test_with_the_database_stopped_the_process_is_not_ready(client, database_at):
    database_at(HOST="127.0.0.1", PORT=str(free_port()))  # nothing listens there
    status, body = readyz(client)
    assert (status, body["status"], body["failed"]) == (503, "unavailable", ["database"])
    assert client.get("/livez").status_code == 200


def test_not_ready_is_a_warning_in_the_log_not_a_server_error_per_probe(client, database_at, caplog):
    """A database away (or a rollout draining a process) makes every probe answer 503: one
    WARNING naming what failed, not django.request's ERROR "Service Unavailable" each time."""
    logged = []
    handler = logging.Handler()
    handler.emit = logged.append
    request_log = logging.getLogger("django.request")
    request_log.addHandler(handler)
    try:
        database_at(HOST="127.0.0.1", PORT=str(free_port()))
        with caplog.at_level(logging.WARNING, logger="kece.health"):
            assert readyz(client)[0] == 503
    finally:
        request_log.removeHandler(handler)
    assert [r.getMessage() for r in logged if r.levelno >= logging.ERROR] == []
    [warning] = [r for r in caplog.records if r.name == "kece.health"]
    assert (warning.levelname, warning.getMessage(), warning.failed) == ("WARNING", "not ready", ["database"])


def test_a_database_host_that_answers_nothing_is_not_ready_within_the_deadline(client, database_at):
    """A host that accepts the connection and then says nothing, as one that drops packets
    after the handshake: the check gives up at its deadline and later probes do not queue
    behind the one still waiting."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes handshakes; nobody ever accepts or speaks
        database_at(HOST="127.0.0.1", PORT=str(silent.getsockname()[1]))
        for _ in range(3):
            status, body = readyz(client)
            assert (status, body["failed"]) == (503, ["database"])
            assert body["checks"][0]["error"] == "timeout"


def test_a_database_without_the_migrations_is_not_ready(client, database_at, monkeypatch):
    name = f"{connection.settings_dict['NAME']}_empty"
    admin = raw_connection()
    try:
        admin.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        monkeypatch.setattr(health, "_migrated", False)
        database_at(NAME=name)
        status, body = readyz(client)
        assert (status, body["status"], body["failed"]) == (503, "unavailable", ["migrations"])
        assert (statuses(body)["database"], statuses(body)["migrations"]) == ("ok", "failed")
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


def test_at_the_servers_connection_limit_a_process_serving_on_its_connections_stays_ready(client, database_at):
    """The check keeps its connection: at the connection limit (more replicas than the
    server allows) a probe that needed a new one each time would take every process out of
    service while they all serve. What is refused is named by the driver's number."""
    name = connection.settings_dict["NAME"]
    admin = raw_connection()
    cursor = admin.cursor()
    cursor.execute("DROP USER IF EXISTS 'kece_probe_limit'@'%'")
    cursor.execute("CREATE USER 'kece_probe_limit'@'%' IDENTIFIED BY 'probe-limit-pw' WITH MAX_USER_CONNECTIONS 2")
    cursor.execute(f"GRANT SELECT ON `{name}`.* TO 'kece_probe_limit'@'%'")
    others = []
    try:
        database_at(USER="kece_probe_limit", PASSWORD="probe-limit-pw")
        assert readyz(client)[0] == 200
        others.append(MySQLdb.connect(host="127.0.0.1", port=int(connection.settings_dict["PORT"] or 3306),
                                      user="kece_probe_limit", passwd="probe-limit-pw", db=name))
        assert readyz(client)[0] == 200, "one connection left: the check's own, kept"
        def the_checks_own():
            cursor.execute("SELECT id FROM information_schema.processlist WHERE user = 'kece_probe_limit'")
            [kept] = [row[0] for row in cursor.fetchall() if row[0] != others[0].thread_id()]
            return kept

        cursor.execute(f"KILL {the_checks_own()}")  # closed by the server (an idle timeout): opened again
        assert readyz(client)[0] == 200, "a kept connection the server closed is not the database away"
        cursor.execute(f"KILL {the_checks_own()}")  # the check's connection is gone, and its place taken
        others.append(MySQLdb.connect(host="127.0.0.1", port=int(connection.settings_dict["PORT"] or 3306),
                                      user="kece_probe_limit", passwd="probe-limit-pw", db=name))
        errors = []
        for _ in range(2):
            status, body = readyz(client)
            assert status == 503
            errors.append(body["checks"][0]["error"])
        assert errors[-1] == "OperationalError 1226", errors  # max_user_connections, by its number
    finally:
        for other in others:
            other.close()
        cursor.execute("DROP USER IF EXISTS 'kece_probe_limit'@'%'")
        admin.close()


@pytest.mark.mariadb
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("workers", [1, 2])
def test_on_sigterm_the_server_says_draining_serves_its_long_poll_then_exits(tmp_path, workers):
    """Real uvicorn (one process, or a supervisor that passes SIGTERM on to two): after
    SIGTERM `/readyz` is 503 `draining` at once, the claim that was waiting still gets the
    job submitted meanwhile, and then the server exits."""
    node, _ = make_node(pool="python", max_slots=1)
    problem = make_problem(languages=("python",))
    server = LiveServer(env={"KECE_CLAIM_WAIT_MS": 30000}, log_path=tmp_path / "server.log", workers=workers)
    with server:
        def verbose():
            return requests.get(server.url + "/readyz?verbose", timeout=10)

        agent = NodeClient(server.url, credential=node.secret, session=node.session_epoch)
        waiting = concurrent.futures.ThreadPoolExecutor(1).submit(agent.claim, wait_ms=30000, timeout=60)
        wait_until(lambda: verbose().json()["longPolls"] == 1, timeout=20, message="the claim waits in the server")
        os.kill(server.process.pid, signal.SIGTERM)
        answers = []

        def unready() -> bool:
            try:
                answers.append(verbose())
            except requests.ConnectionError:
                # Of two processes, the one without a long poll stops at once: a request it
                # had accepted as it stopped is reset.
                return False
            return answers[-1].status_code == 503

        wait_until(unready, timeout=20, message="/readyz answers 503")
        assert answers[-1].json()["status"] == "draining"
        assert not waiting.done()
        submission = submit(UserFactory(), problem)
        answer = waiting.result(timeout=60)
        assert answer.status_code == 200
        assert [job["submissionId"] for job in answer.json()["jobs"]] == [submission.pk]
        assert server.process.wait(timeout=60) is not None


# --- a live server on a MariaDB of its own, really stopped -----------------------------------

def _mariadb_program(name: str) -> str:
    # Debian puts mariadbd in /usr/sbin, which is not on every user's PATH.
    found = shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/bin")
    if found is None:
        pytest.fail(f"{name} is required (Debian: mariadb-server-core)")
    return found


class MariaDBOfOurOwn:
    """A MariaDB server on a data directory and a port of its own, which the test kills,
    shuts down, pauses and starts again; never the machine's own server."""

    # Small: the data directory is made for a few tables and removed at the end.
    SIZES = ("--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M")

    def __init__(self, root: Path):
        self.root = root
        self.datadir = root / "data"
        self.port = free_port()
        self.user = getpass.getuser()  # mariadbd refuses to run as root unless told to
        self.process = None

    def install(self) -> None:
        subprocess.run([_mariadb_program("mariadb-install-db"), "--no-defaults", f"--datadir={self.datadir}",
                        f"--user={self.user}", "--auth-root-authentication-method=normal", "--skip-test-db",
                        *self.SIZES], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)

    def start(self) -> None:
        """Start on the same data directory and port; return once it answers."""
        self.process = subprocess.Popen(
            [_mariadb_program("mariadbd"), "--no-defaults", f"--user={self.user}", f"--datadir={self.datadir}",
             f"--socket={self.root / 'mariadb.sock'}", f"--pid-file={self.root / 'mariadb.pid'}",
             f"--port={self.port}", "--bind-address=127.0.0.1", "--skip-name-resolve", "--skip-log-bin",
             f"--log-error={self.root / 'mariadb.log'}", *self.SIZES],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.answers, timeout=60, message="the test's MariaDB answers")

    def answers(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"mariadbd exited with {self.process.returncode}; see {self.root / 'mariadb.log'}")
        try:
            MySQLdb.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=1).close()
            return True
        except MySQLdb.OperationalError:
            return False

    def create_database(self, name: str) -> str:
        admin = MySQLdb.connect(host="127.0.0.1", port=self.port, user="root")
        try:
            admin.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        finally:
            admin.close()
        return f"mysql://root:@127.0.0.1:{self.port}/{name}"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def shut_down(self) -> None:
        self.process.terminate()  # mariadbd's clean shutdown
        self.process.wait(timeout=60)

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def remove(self) -> None:
        if self.running():
            self.resume()
            self.kill()
        shutil.rmtree(self.datadir, ignore_errors=True)


class OverHttp:
    """A test client's `get` against a live server. Every request has a timeout: a probe
    that does not answer in time fails the test rather than hanging it."""

    def __init__(self, url: str, timeout: float = 5.0):
        self.url, self.timeout = url, timeout

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=self.timeout)


class OwnStack:
    """A live server's own MariaDB and Redis, and the server seen over HTTP."""

    def __init__(self, mariadb: MariaDBOfOurOwn):
        self.mariadb, self.redis_port, self.redis, self.http = mariadb, free_port(), None, None
        self.server = None

    def start_redis(self):
        self.redis = start_redis(self.redis_port)

    def kill_redis(self):
        if self.redis is not None:
            self.redis.kill()
            self.redis.wait()

    def until_ready(self) -> dict:
        """The verbose body once `/readyz` answers 200 `ok`: the server got over whatever was
        stopped by itself, once it is back."""
        answers = []

        def ready():
            answers.append(readyz(self.http))
            return answers[-1][0] == 200 and answers[-1][1]["status"] == "ok"

        try:
            wait_until(ready, timeout=30, message="/readyz is 200 ok again")
        except AssertionError as failure:
            raise AssertionError(f"{failure}; its last answer: {answers[-1]}") from None
        return answers[-1][1]


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory):
    """A live server whose MariaDB (migrated here) and Redis are its own, for the module; each
    test finds them running and leaves them so, even when it fails."""
    root = tmp_path_factory.mktemp("readyz-mariadb")
    stack = OwnStack(MariaDBOfOurOwn(root))
    try:
        stack.mariadb.install()
        stack.mariadb.start()
        stack.start_redis()
        # Statements and connects bounded in whole seconds, short for the test (10 s and 5 s
        # by default): a request during the stall fails within a few of them.
        server = LiveServer.for_database(stack.mariadb.create_database("kece"), log_path=root / "server.log",
                                         env={"REDIS_URL": f"redis://127.0.0.1:{stack.redis_port}/0",
                                              "KECE_DB_CONNECT_TIMEOUT_S": 2, "KECE_DB_READ_TIMEOUT_S": 2,
                                              "KECE_DB_WRITE_TIMEOUT_S": 2})
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=server.env,
                       check=True, timeout=300)
        with server:
            stack.server, stack.http = server, OverHttp(server.url)
            yield stack
    finally:
        stack.mariadb.remove()
        stack.kill_redis()


@pytest.fixture
def stack(own_stack):
    yield own_stack
    if own_stack.mariadb.running():
        own_stack.mariadb.resume()  # harmless when it was not paused
    else:
        own_stack.mariadb.start()
    if own_stack.redis.poll() is not None:
        own_stack.start_redis()


@pytest.mark.parametrize("stop", ["kill", "shut_down"])
def test_with_its_mariadb_really_stopped_a_server_is_not_ready_until_it_is_back(stack, stop):
    """mariadbd killed (SIGKILL) or shut down (SIGTERM): `/readyz` says 503 naming the
    database, promptly; once mariadbd is started again on the same data and port the
    process is ready again by itself."""
    assert statuses(stack.until_ready()) == {"database": "ok", "migrations": "ok", "redis": "ok"}
    getattr(stack.mariadb, stop)()
    status, body = readyz(stack.http)
    assert (status, body["status"], body["failed"]) == (503, "unavailable", ["database"]), body
    assert stack.http.get("/livez").status_code == 200
    stack.mariadb.start()
    assert statuses(stack.until_ready()) == {"database": "ok", "migrations": "ok", "redis": "ok"}


def test_with_its_mariadb_paused_a_server_answers_not_ready_instead_of_hanging(stack):
    """mariadbd stopped with SIGSTOP, as a stalled database host: the kernel still accepts
    connections, nothing answers on them. Each probe answers 503 within the client's
    timeout, and after SIGCONT the process is ready again."""
    stack.until_ready()
    stack.mariadb.pause()
    for _ in range(3):
        status, body = readyz(stack.http)
        assert (status, body["failed"]) == (503, ["database"]), body
        assert body["checks"][0]["error"] == "timeout", body
    stack.mariadb.resume()
    stack.until_ready()


def test_with_its_mariadb_and_redis_really_stopped_a_server_is_not_ready_and_names_both(stack):
    stack.until_ready()
    stack.kill_redis()
    status, body = readyz(stack.http)
    assert (status, body["status"], body["failed"]) == (200, "degraded", ["redis"]), body
    stack.mariadb.kill()
    status, body = readyz(stack.http)
    assert (status, body["status"], body["failed"]) == (503, "unavailable", ["database", "redis"]), body
    stack.mariadb.start()
    stack.start_redis()
    stack.until_ready()


def test_with_its_redis_paused_pages_and_metrics_answer_and_the_process_is_degraded(stack):
    """redis-server stopped with SIGSTOP (a stalled Redis host): it accepts connections and
    answers nothing. The cache's commands fail within their timeout, and the pages, the
    public status and /metrics answer without it."""
    stack.until_ready()
    stack.redis.send_signal(signal.SIGSTOP)
    try:
        for path in ("/", "/api/v1/system/judgers/summary", "/metrics", "/problems"):
            assert stack.http.get(path).status_code == 200, path
        status, body = readyz(stack.http)
        assert (status, body["status"], body["failed"]) == (200, "degraded", ["redis"]), body
    finally:
        stack.redis.send_signal(signal.SIGCONT)
    stack.until_ready()


# --- requests while the database stalls --------------------------------------------------------

def _unavailable(answer: requests.Response) -> bool:
    return (answer.status_code == 503 and answer.json()["error"] == "unavailable"
            and int(answer.headers["Retry-After"]) > 0)


def test_with_its_mariadb_paused_requests_answer_503_at_once_and_their_retries_lose_nothing(stack):
    """mariadbd stopped (SIGSTOP) as a stalled database host: a submission and a node's
    result and claim are answered 503 `unavailable` with Retry-After within the database
    bounds, not when the stall ends; once it ends, the submission retried under its
    Idempotency-Key and the result posted again are each taken once."""
    stack.until_ready()
    made = populate(stack.server)
    user = requests.Session()
    user.headers["Authorization"] = f"Token {made['token']}"
    node = NodeClient(stack.server.url, credential=made["credential"], session=made["session"])
    code = {"problemId": made["problem"], "language": "python", "code": "print(1)"}

    def submitted(key):
        return user.post(stack.server.url + "/api/v1/submissions", json=code, headers={"Idempotency-Key": key},
                         timeout=15)

    assert submitted("before").status_code == 202
    assert node.heartbeat().status_code == 200
    [job] = node.claim().json()["jobs"]
    result = {"leaseEpoch": job["leaseEpoch"], "outcome": "JUDGED", "verdict": "AC", "score": 100, "timeMs": 5,
              "memoryKb": 1024, "cases": [{"ordinal": c["ordinal"], "verdict": "AC", "timeMs": 5, "memoryKb": 1024,
                         "score": c["weight"]} for c in job["cases"]]}

    stack.mariadb.pause()
    try:
        # Each twice: the first fails on its thread's connection, the retry on a connect.
        during = [(name, call()) for _ in range(2) for name, call in (
            ("submit", lambda: submitted("during")),
            ("result", lambda: node.post(f"jobs/{job['jobId']}/result", result, timeout=15)),
            ("claim", lambda: node.claim(timeout=15)))]
    finally:
        stack.mariadb.resume()
    assert all(_unavailable(answer) for _, answer in during), \
        [(name, answer.status_code, answer.text) for name, answer in during]

    again = submitted("during")
    assert again.status_code == 202, again.text
    assert submitted("during").json()["submissionId"] == again.json()["submissionId"]
    posted = node.result(job["jobId"], result)
    assert (posted.status_code, posted.json()["status"]) == (200, "settled"), posted.text
    assert node.result(job["jobId"], result).json()["status"] == "duplicate"


def _with_every_user_thread_held(settings, *paths, lane="USER", threads="KECE_WEB_THREADS"):
    """The answers to GETs of `paths` and a HEAD of the first, through the ASGI application,
    while each thread of a lane (the user lane unless named) is held (a stalled database
    holds them up to its read timeout, a burst queues on them)."""
    import asyncio
    import threading

    import httpx

    from kece import lanes
    from kece.asgi import application

    release = threading.Event()

    async def main():
        held = [asyncio.ensure_future(getattr(lanes, lane).run(release.wait)) for _ in range(getattr(settings, threads))]
        try:
            transport = httpx.ASGITransport(app=application)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
                # The bound only ends a test that would otherwise wait for ever.
                answers = [await asyncio.wait_for(client.get(path), 30) for path in paths]
                head = await asyncio.wait_for(client.head(paths[0]), 30)
            assert not any(task.done() for task in held), "the lane was not held throughout"
            return answers, head
        finally:
            release.set()
            await asyncio.gather(*held)

    return asyncio.run(main())


def test_liveness_answers_while_every_user_thread_waits(settings):
    """The liveness probe does not queue behind a busy user lane, or its timeout would make
    the supervisor restart a process that is alive."""
    (answer,), head = _with_every_user_thread_held(settings, "/livez")
    assert (answer.status_code, answer.text, answer.headers["Cache-Control"]) == (200, "ok\n", "no-store")
    assert (head.status_code, head.content) == (200, b"")


def test_the_metrics_answer_while_every_admin_thread_waits(settings, redis_of_our_own):
    """A scrape sends no SQL: a stalled database holding the console's and the admin API's
    requests must not make it time out (the target would look down, and every alert
    reading its figures go blind just when they are needed)."""
    settings.KECE_METRICS_TOKEN = ""
    (scraped,), head = _with_every_user_thread_held(settings, "/metrics", lane="ADMIN", threads="KECE_ADMIN_THREADS")
    assert scraped.status_code == 200 and "# TYPE kece_jobs_queued gauge" in scraped.text
    assert (head.status_code, head.content) == (200, b"")


@pytest.mark.django_db(transaction=True)
def test_readiness_answers_while_every_user_thread_waits(settings, redis_of_our_own):
    """Nor does the readiness probe: timing out behind a burst, it would have the load
    balancer take a process that is only busy out of service and pile its load on the
    others. It answers as the view does, checks and all."""
    (verbose, plain), head = _with_every_user_thread_held(settings, "/readyz?verbose", "/readyz")
    assert (verbose.status_code, verbose.headers["Cache-Control"]) == (200, "no-store")
    body = verbose.json()
    assert (body["status"], body["failed"], body["longPolls"]) == ("ok", [], 0)
    assert {check["name"]: check["status"] for check in body["checks"]} == \
        {"database": "ok", "migrations": "ok", "redis": "ok"}
    assert (plain.status_code, plain.json()) == (200, {"status": "ok", "failed": []})
    assert (head.status_code, head.content) == (200, b"")
