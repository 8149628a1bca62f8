"""Redis behind Sentinel: the settings that configure it, and a failover a running process
follows by itself — its cache, wake-ups, console channel layer and Celery broker reach the
new primary without a restart, whether the old primary died or was demoted to a read-only
replica that still answers (what once left Celery beat failing "You can't write against a
read only replica")."""

import json
import shutil
import subprocess
import sys
import time

import pytest
import redis

from tests.concurrency import wait_until
from tests.live import ROOT, free_port, operator_environment

MASTER = "kece"


def _settings(**env) -> subprocess.CompletedProcess:
    show = ("import django, json; django.setup(); from django.conf import settings as s; "
            "print(json.dumps({'broker': s.CELERY_BROKER_URL, 'options': getattr(s, 'CELERY_BROKER_TRANSPORT_OPTIONS', None),"
            " 'hosts': s.CHANNEL_LAYERS['default']['CONFIG']['hosts'], 'cache': s.CACHES['default'].get('OPTIONS'),"
            " 'sentinels': s.REDIS_SENTINELS}))")
    return subprocess.run([sys.executable, "-c", show], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=operator_environment(DJANGO_SETTINGS_MODULE="kece.settings", SECRET_KEY="s" * 20, **env))


def test_sentinels_configure_every_redis_user(tmp_path):
    secret = tmp_path / "sentinel-password"
    secret.write_text("s3ntinel\n")
    run = _settings(REDIS_SENTINELS="10.0.0.5:26379, redis-2.example.org:26380", REDIS_SENTINEL_MASTER="kece",
                    REDIS_SENTINEL_PASSWORD_FILE=str(secret), REDIS_URL="redis://:p%40ss@unused/2")
    assert run.returncode == 0, run.stderr
    shown = json.loads(run.stdout)
    assert shown["sentinels"] == [["10.0.0.5", 26379], ["redis-2.example.org", 26380]]
    assert shown["broker"] == "sentinel://:p%40ss@10.0.0.5:26379/2;sentinel://:p%40ss@redis-2.example.org:26380/2"
    assert shown["options"]["master_name"] == "kece" and shown["options"]["sentinel_kwargs"]["password"] == "s3ntinel"
    [host] = shown["hosts"]
    assert (host["master_name"], host["db"], host["password"]) == ("kece", 2, "p@ss")
    assert host["sentinels"] == shown["sentinels"] and host["sentinel_kwargs"]["password"] == "s3ntinel"
    # A Sentinel that does not answer is asked once, then the next one.
    assert host["sentinel_kwargs"]["retry"] is None and shown["options"]["sentinel_kwargs"]["retry"] is None
    # The console's channel layer waits on a primary cut off no longer than the broker does.
    assert host["socket_timeout"] and host["socket_connect_timeout"] and host["socket_keepalive"]
    assert shown["cache"]["sentinels"] is True
    # The cache's commands give up on a stalled Redis within a second (their callers take it as down).
    assert (shown["cache"]["socket_timeout"], shown["cache"]["socket_connect_timeout"]) == (1, 1)


def test_without_sentinels_redis_is_one_address():
    run = _settings(REDIS_URL="redis://10.0.0.5:6379/1")
    assert run.returncode == 0, run.stderr
    shown = json.loads(run.stdout)
    assert shown["broker"] == "redis://10.0.0.5:6379/1" and "master_name" not in shown["options"]
    assert shown["options"]["socket_timeout"] and shown["options"]["socket_connect_timeout"]
    [host] = shown["hosts"]
    assert host["address"] == "redis://10.0.0.5:6379/1" and host["socket_timeout"]
    assert "sentinels" not in shown["cache"] and shown["cache"]["socket_timeout"] == 1


@pytest.mark.parametrize("env, message", [
    ({"REDIS_SENTINELS": "10.0.0.5"}, "REDIS_SENTINELS: '10.0.0.5' is not host:port"),
    ({"REDIS_SENTINELS": "10.0.0.5:0"}, "REDIS_SENTINELS: '10.0.0.5:0' is not host:port"),
    ({"REDIS_SENTINELS": "10.0.0.5:26379"}, "REDIS_SENTINEL_MASTER must name the Sentinels' master"),
    ({"REDIS_SENTINELS": "10.0.0.5:26379", "REDIS_SENTINEL_MASTER": "kece", "REDIS_URL": "http://x/0"},
     "REDIS_URL must be a redis:// URL"),
    ({"REDIS_SENTINEL_MASTER": "kece"}, "REDIS_SENTINEL_MASTER and REDIS_SENTINEL_PASSWORD need REDIS_SENTINELS"),
])
def test_bad_sentinel_settings_stop_the_start(env, message):
    run = _settings(**env)
    assert run.returncode != 0 and "ImproperlyConfigured" in run.stderr and message in run.stderr, run.stderr


# --- a failover, for real -------------------------------------------------------------------

def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is required (scripts/setup.sh installs it)")
    return found


class Topology:
    """A Redis primary, its replica and three Sentinels on loopback, on free ports, with
    Sentinel's timings short (down after 500 ms) so that a failover takes a few seconds."""

    def __init__(self, root):
        self.root = root
        self.processes: dict[str, subprocess.Popen] = {}
        self.primary, self.replica = free_port(), free_port()
        self.sentinels = [free_port() for _ in range(3)]

    def start(self) -> None:
        # Their folder is the test's: a full resynchronisation writes an RDB file even without --save.
        server = [_binary("redis-server"), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                  "--dir", str(self.root)]
        self._spawn("primary", [*server, "--port", str(self.primary)])
        self._spawn("replica", [*server, "--port", str(self.replica), "--replicaof", "127.0.0.1", str(self.primary)])
        # The Sentinels learn the replica from the primary's INFO, which they read every ten
        # seconds: start them once it is attached, so that their first reading has it.
        wait_until(lambda: self._info(self.replica).get("master_link_status") == "up", timeout=30,
                   message="the replica attached to the primary")
        for port in self.sentinels:
            conf = self.root / f"sentinel-{port}.conf"
            conf.write_text(f"bind 127.0.0.1\nport {port}\ndir {self.root}\n"
                            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary} 2\n"
                            f"sentinel down-after-milliseconds {MASTER} 500\n"
                            f"sentinel failover-timeout {MASTER} 3000\n")
            self._spawn(f"sentinel-{port}", [_binary("redis-sentinel"), str(conf)])
        wait_until(self._sentinels_ready, timeout=30, message="the Sentinels see each other and the replica")

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.processes[name] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @staticmethod
    def _info(port: int) -> dict:
        try:
            return redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1).info()
        except redis.RedisError:
            return {}

    def _sentinel_view(self, port: int) -> dict:
        try:
            # redis-py's sentinel_* helpers are for its Sentinel class: ask directly.
            pairs = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1,
                                decode_responses=True).execute_command("SENTINEL", "MASTER", MASTER)
        except redis.RedisError:
            return {}
        return dict(zip(pairs[::2], pairs[1::2]))

    def _sentinels_ready(self) -> bool:
        views = [self._sentinel_view(port) for port in self.sentinels]
        return all(view.get("num-other-sentinels") == "2" and view.get("num-slaves") == "1" for view in views)

    def primary_named(self) -> int | None:
        try:
            return int(redis.Redis(port=self.sentinels[0], socket_timeout=1).execute_command(
                "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)[1])
        except (redis.RedisError, TypeError):
            return None

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait(10)


@pytest.fixture
def topology(tmp_path):
    found = Topology(tmp_path)
    try:
        found.start()
        yield found
    finally:
        found.close()


@pytest.mark.parametrize("failover", ["primary killed", "primary demoted"])
def test_a_running_process_follows_a_sentinel_failover(topology, failover, tmp_path):
    env = operator_environment(
        DJANGO_SETTINGS_MODULE="kece.settings", DEBUG=1, DATABASE_URL=f"sqlite:///{tmp_path}/unused.sqlite3",
        KECE_LOG_LEVEL="ERROR", REDIS_URL="redis://ignored/3", REDIS_SENTINEL_MASTER=MASTER,
        REDIS_SENTINELS=",".join(f"127.0.0.1:{port}" for port in topology.sentinels))
    client = subprocess.Popen([sys.executable, "-m", "tests.sentinel_client"], cwd=ROOT, env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = json.loads(client.stdout.readline() or "null")
        assert first and first["round"] == 1, client.stderr.read() if client.poll() is not None else first
        if failover == "primary killed":
            topology.processes["primary"].kill()
        else:
            # The old primary stays up and answers as a replica of the new one: connections the
            # process holds to it now refuse writes.
            redis.Redis(port=topology.sentinels[0]).execute_command("SENTINEL", "FAILOVER", MASTER)
        wait_until(lambda: topology.primary_named() == topology.replica, timeout=60,
                   message="the Sentinels promoted the replica")
        if failover == "primary demoted":
            wait_until(lambda: topology._info(topology.primary).get("role") == "slave", timeout=30,
                       message="the old primary demoted")
        client.stdin.write("go\n")
        client.stdin.flush()
        second = json.loads(client.stdout.readline() or "null")
        assert second and second["round"] == 2, client.stderr.read() if client.poll() is not None else second
        assert client.wait(30) == 0, client.stderr.read()
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    # What the process wrote after the failover is on the new primary (the cache's key).
    promoted = redis.Redis(port=topology.replica, db=3)
    assert promoted.info()["role"] == "master"
    assert promoted.keys("*sentinel-check-2"), promoted.keys("*")
