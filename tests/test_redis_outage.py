"""A Redis that accepts connections and answers nothing (its host stalled, a link cut on
the way back): each process asks it once, goes on without it, and asks it again from a
thread of its own until it answers; a request never waits for a wake-up hint."""

import logging
import re
import signal
import socket
import threading

import pytest
import redis
import requests
from django.core.cache import cache

import kece.redis_clients as redis_clients
from judging import rates, wakeups
from tests.concurrency import wait_until
from tests.live import LiveServer, free_port, start_redis


# What a client asks of its own accord: its connection's handshake, the asking thread's
# pings, the wake-up subscription. Not what a request asked.
UNASKED = {"CLIENT", "PING", "PSUBSCRIBE"}


class SilentRedis:
    """A listener on loopback that reads every command sent to it and answers its
    connections' handshakes (CLIENT SETINFO) but none of the `held` commands (every other,
    unless named) until `answer()`: then a PUBLISH is answered with its count of receivers,
    anything else with OK."""

    def __init__(self, held: set | None = None):
        self.held = held
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.received = b""
        self.changed = threading.Condition()
        self.answering = threading.Event()
        self.connections = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(connection)
            threading.Thread(target=self._read, args=(connection,), daemon=True).start()

    def _read(self, connection):
        while True:
            try:
                data = connection.recv(65536)
            except OSError:
                return
            if not data:
                return
            with self.changed:
                self.received += data
                self.changed.notify_all()
            for name in _names(data):
                if name in self.held if self.held is not None else name != "CLIENT":
                    self.answering.wait()
                try:
                    connection.sendall(b":1\r\n" if name == "PUBLISH" else b"+OK\r\n")
                except OSError:
                    return

    def commands(self, name: str | None = None) -> int:
        """Commands received so far: named `name`, else any a request asked."""
        with self.changed:
            return sum(1 for each in _names(self.received) if each == name or name is None and each not in UNASKED)

    def until_received(self, name: str, count: int = 1) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.commands(name) >= count, timeout=30), (name, self.received)

    def answer(self):
        self.answering.set()

    def close(self):
        self.listener.close()
        for connection in self.connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)  # its reader and its client see the end
            except OSError:
                pass
            connection.close()
        self.answering.set()


def _names(received: bytes) -> list[str]:
    """The names of the commands in `received`, RESP arrays of bulk strings."""
    return [command.split(b"\r\n")[1].decode().upper()
            for command in re.split(rb"(?:^|\r\n)\*\d+\r\n", received)[1:]]


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []
        self.seen = threading.Condition()

    def emit(self, record):
        with self.seen:
            self.records.append(record)
            self.seen.notify_all()

    def messages(self, logger_name: str) -> list[str]:
        return [r.getMessage() for r in list(self.records) if r.name == logger_name]

    def until(self, message: str) -> None:
        with self.seen:
            assert self.seen.wait_for(lambda: any(r.getMessage() == message for r in self.records), timeout=30), message


@pytest.fixture
def lines():
    handler = Lines()
    loggers = [logging.getLogger(name) for name in ("kece.redis", "kece.rates", "kece.wakeups")]
    levels = [each.level for each in loggers]
    for each in loggers:
        each.addHandler(handler)
        each.setLevel(logging.INFO)
    yield handler
    for each, level in zip(loggers, levels):
        each.removeHandler(handler)
        each.setLevel(level)


@pytest.fixture
def silent_redis(settings):
    silent = SilentRedis()
    settings.REDIS_URL = silent.url
    settings.CACHES = {"default": {"BACKEND": "kece.cache.SharedClientRedisCache", "LOCATION": silent.url,
                                   "OPTIONS": dict(settings.CACHE_LINK_OPTIONS)}}
    wakeups.reset_redis_client()
    yield silent
    silent.close()
    redis_clients.outage.forget()
    wakeups.reset_redis_client()


STALLED = "Redis does not answer: this process goes on without it (submission rates unchecked, shared figures" \
          " computed or shown as unavailable, claims woken by their fallback checks) and asks it again every few seconds"


def test_once_redis_does_not_answer_the_cache_fails_at_once_without_asking_it(silent_redis, lines, settings):
    settings.KECE_REDIS_RETRY_S = 600  # no second try during the test
    with pytest.raises(redis.TimeoutError):
        cache.get("kece:test")  # the first waits out its timeout
    for _ in range(5):
        with pytest.raises(redis_clients.Unreachable):
            cache.get("kece:test")
    assert silent_redis.commands("GET") == 1
    assert lines.messages("kece.redis") == [STALLED]


def test_a_submission_rate_is_not_checked_and_the_outage_is_logged_once(silent_redis, lines, settings):
    from django.utils import timezone

    settings.KECE_REDIS_RETRY_S = 600
    for _ in range(4):
        assert rates.take("practice:1", rate=(30, 60), now=timezone.now()) is rates.NOTHING_TAKEN
    assert silent_redis.commands() == 1  # the first rate's first question
    assert lines.messages("kece.redis") == [STALLED]
    # The first take's own line, with its error; the others went on without a word.
    assert lines.messages("kece.rates") == ["submission rate not checked: the cache is unavailable"]


def test_a_stalled_redis_is_asked_again_and_used_once_it_answers(settings, lines):
    port = free_port()
    server = start_redis(port)
    url = f"redis://127.0.0.1:{port}/0"
    settings.REDIS_URL = url
    settings.CACHES = {"default": {"BACKEND": "kece.cache.SharedClientRedisCache", "LOCATION": url,
                                   "OPTIONS": dict(settings.CACHE_LINK_OPTIONS)}}
    settings.KECE_REDIS_RETRY_S = 1
    probe = redis.Redis(port=port, socket_timeout=5)
    try:
        server.send_signal(signal.SIGSTOP)  # accepts connections, answers nothing
        with pytest.raises(redis.TimeoutError):
            cache.set("kece:test", "before")
        with pytest.raises(redis_clients.Unreachable):
            cache.set("kece:test", "meanwhile")
        server.send_signal(signal.SIGCONT)
        lines.until("Redis answers again")
        cache.set("kece:test", "after")
        assert cache.get("kece:test") == "after"
        assert probe.exists(cache.make_and_validate_key("kece:test")) == 1
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait()
        redis_clients.outage.forget()


def test_a_wake_up_hint_is_published_by_its_own_thread_and_a_burst_of_them_goes_as_one(silent_redis, lines,
                                                                                      monkeypatch):
    silent_redis.held = {"PUBLISH"}
    # A client that waits for the held answer as long as the test may take to give it.
    patient = redis_clients.client(guarded=True, socket_timeout=60)
    monkeypatch.setattr(wakeups, "redis_client", lambda guarded=True: patient)
    wakeups.publish_now("python")  # answered at once: Redis has not even answered it yet
    silent_redis.until_received("PUBLISH")
    assert lines.messages("kece.wakeups") == [] and lines.messages("kece.redis") == []
    for pool in ("python", "cpp", "python", "python", "cpp"):
        wakeups.publish_now(pool)  # while the first is in flight
    silent_redis.answer()
    assert wakeups.publisher.flush(30)
    received = silent_redis.received.decode()
    assert received.count("wake:python") == 2 and received.count("wake:cpp") == 1, received
    assert lines.messages("kece.wakeups") == [] and lines.messages("kece.redis") == []


def test_hints_published_while_redis_does_not_answer_are_dropped_after_one_try(silent_redis, lines, settings):
    settings.KECE_REDIS_RETRY_S = 600
    wakeups.publish_now("python")
    wait_until(lambda: redis_clients.outage.down, timeout=30, message="the unanswered hint was not noticed")
    for _ in range(3):
        wakeups.publish_now("python")
    assert wakeups.publisher.flush(30)
    assert silent_redis.commands("PUBLISH") == 1
    # The first hint's own line, with its error; the others were dropped without a word.
    assert lines.messages("kece.redis") == [STALLED] and lines.messages("kece.wakeups") == ["hint publish failed"]


def test_a_redis_that_refuses_at_once_is_asked_again_by_the_next_request(settings):
    """A failure that cost no wait (a refused connection, a failover's demoted primary, a
    wrong password) is no outage: holding Redis for down would save nothing."""
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    settings.REDIS_URL = url
    settings.CACHES = {"default": {"BACKEND": "kece.cache.SharedClientRedisCache", "LOCATION": url,
                                   "OPTIONS": dict(settings.CACHE_LINK_OPTIONS)}}
    for _ in range(2):
        with pytest.raises(redis.ConnectionError) as refused:
            cache.get("kece:test")
        assert not isinstance(refused.value, redis_clients.Unreachable)
    assert not redis_clients.outage.down


def test_a_node_change_is_told_even_while_redis_is_held_for_down(db, silent_redis, lines, settings,
                                                                django_capture_on_commit_callbacks):
    settings.KECE_REDIS_RETRY_S = 600
    with pytest.raises(redis.TimeoutError):
        cache.get("kece:test")
    assert redis_clients.outage.down
    with django_capture_on_commit_callbacks(execute=True):
        wakeups.node_changed_after_commit(7)
    silent_redis.until_received("PUBLISH")
    assert "node:7" in silent_redis.received.decode()
    # Tried, unanswered, and said so: a revoke that may not have reached every process.
    assert lines.messages("kece.wakeups") == ["hint publish failed"]


def test_only_what_is_asked_during_an_outage_ends_it_and_a_late_failure_begins_none(silent_redis):
    timeout = redis.TimeoutError("Timeout reading from socket")
    before = redis_clients.outage.generation
    redis_clients.outage.failed(timeout, 1.0, before)
    during = redis_clients.outage.generation
    redis_clients.outage.answered(before)  # a command that was in flight when Redis stalled
    assert redis_clients.outage.down
    redis_clients.outage.answered(during)
    assert not redis_clients.outage.down
    redis_clients.outage.failed(timeout, 1.0, during)  # a ping asked during it, timing out after its end
    assert not redis_clients.outage.down


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_a_server_whose_redis_answers_nothing_takes_submissions_and_serves_pages_without_it():
    """Before, each page waited out a cache timeout (1 s) and each submission its rate's and
    its hint's (1.5 s). What the server asks its Redis is counted here, not timed: once it
    has found it silent, nothing more for its requests."""
    from rest_framework.authtoken.models import Token

    from tests.factories import UserFactory, make_problem

    headers = {"Authorization": f"Token {Token.objects.create(user=UserFactory()).key}"}
    problem = make_problem(languages=("python",))
    silent = SilentRedis()
    try:
        with LiveServer(env={"REDIS_URL": silent.url, "KECE_REDIS_RETRY_S": "600"}) as server:
            asked_before = silent.commands()
            for number in range(5):
                answer = requests.post(f"{server.url}/api/v1/submissions", timeout=30, headers=headers,
                                       json={"problemId": problem.pk, "language": "python", "code": f"print({number})"})
                assert answer.status_code == 202, answer.text
            for path in ("/", "/problems", "/api/v1/system/judgers/summary"):
                assert requests.get(server.url + path, timeout=30).status_code == 200, path
            # At most the first command to find it silent, if the server's start had not.
            assert silent.commands() - asked_before <= 1, silent.received
    finally:
        silent.close()
