"""Bring the lab up and down: MariaDB and the Redis primary on `db`, the Redis replica and
three Sentinels on `db2`, `python -m kece.serve` (one worker) on `web1` and `web2`, nginx with
the Compose proxy configuration on `lb`, the Celery worker with beat on `worker`, simulated
agents (or fault proxies) on `a1`…`a4`, and this process on `users`, where the students'
clients and the checker run.

The lab's MariaDB and Redis are its own, on data directories in its temporary folder; its
timings are short (a lease of LEASE_S, renewals every 2 s, the reaper every second) so that a
scenario is seconds, not minutes. Everything is torn down on the way out, whatever the way
out: `with Lab() as lab`, signals turned into exits, atexit, and `python -m bench.lab clean`
for a lab whose process was killed outright.
"""

import atexit
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.lab import net
from bench.lab.net import LabError, address

ROOT = Path(__file__).resolve().parents[2]
STATE = Path("/run/kece-lab.json")  # the running lab's temporary folder, for `clean`
NGINX_CONF = ROOT / "deploy" / "compose" / "nginx.conf"
LEASE_S = 8
DATABASE = "kece_lab"
SENTINEL_MASTER = "kece"


def python() -> str:
    return sys.executable


SENTINEL_PORTS = (26379, 26380, 26381)


def server_env(tmp: Path, sentinels: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KECE_", "DATABASE_URL", "REDIS_"))}
    env.update({
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": f"mysql://root:@{address('db')}:3306/{DATABASE}",
        "REDIS_URL": f"redis://{address('db')}:6379/0",
        "ALLOWED_HOSTS": "*",
        "KECE_LOCK_ORDER_CHECK": "0",
        "KECE_LOG_LEVEL": "WARNING",
        "KECE_IN_PROCESS_SCHEDULER": "0",
        "KECE_ARTIFACT_ROOT": str(tmp / "artifacts"),  # one volume both web hosts share
        "KECE_LEASE_TTL_MS": str(LEASE_S * 1000),
        "KECE_RENEW_INTERVAL_MS": "2000",
        "KECE_REAP_INTERVAL_MS": "1000",
        "KECE_CLAIM_WAIT_MS": "5000",
        "KECE_CLAIM_FALLBACK_MS": "1000",
        "KECE_DB_THREADS": "2", "KECE_WEB_THREADS": "2", "KECE_ADMIN_THREADS": "1",
        # The database bounds scaled with the lease as the other timings are (10 s beside 60 s).
        "KECE_DB_CONNECT_TIMEOUT_S": "2", "KECE_DB_READ_TIMEOUT_S": "2", "KECE_DB_WRITE_TIMEOUT_S": "2",
        # The lab's students submit as fast as a burst asks: fair use's per-user limits off.
        "KECE_USER_ACTIVE_MAX": "0", "KECE_USER_SUBMIT_RATE": "0",
        "KECE_EXAM_SUBMIT_RATE": "0", "KECE_EXAM_ACTIVE_MAX": "1000000",
    })
    if sentinels:
        # Every Redis user of the web hosts, the worker and this process asks the Sentinels
        # on db2 which server is the primary (REDIS_URL then names only the database).
        env.update({"REDIS_URL": "redis://primary/0", "REDIS_SENTINEL_MASTER": SENTINEL_MASTER,
                    "REDIS_SENTINELS": ",".join(f"{address('db2')}:{port}" for port in SENTINEL_PORTS)})
    return env


def nginx_conf(tmp: Path) -> str:
    """deploy/compose/nginx.conf with what only Compose has replaced: the upstreams' Docker
    names by the two web hosts, Docker's resolver dropped, the secrets, pid and logs in the
    lab's folder. Every replacement must match once, so a change there fails here loudly."""
    text = NGINX_CONF.read_text()
    upstream = f"server {address('web1')}:8000 max_fails=1 fail_timeout=5s;\n" \
               f"        server {address('web2')}:8000 max_fails=1 fail_timeout=5s;"
    for pattern, replacement in (
        (r"worker_processes auto;", "worker_processes 1;"),
        (r"pid /var/run/nginx\.pid;", f"pid {tmp}/nginx.pid;"),
        (r"error_log /var/log/nginx/error\.log warn;", f"error_log {tmp}/logs/nginx-error.log warn;"),
        (r"access_log /var/log/nginx/access\.log timed;", f"access_log {tmp}/logs/nginx-access.log timed;"),
        (r"\n\s*resolver 127\.0\.0\.11[^;]*;", ""),
        (r"server kece-web:8000 resolve;", upstream),
        # The node API's own processes: the lab's two web hosts serve it too, so that killing
        # one (a scenario) moves the nodes to the other as it moves the users.
        (r"server node-api:8000 resolve;", upstream),
        (r"/run/secrets/", f"{tmp}/secrets/"),
        (r"alias /srv/static/;", f"alias {ROOT}/static/;"),
    ):
        text, count = re.subn(pattern, lambda _m: replacement, text)
        if count == 0:
            raise LabError(f"{NGINX_CONF}: no `{pattern}` to adapt; the lab's template needs updating")
    return text


class Lab:
    def __init__(self, *, log=print, sentinels: bool = True):
        self.log = log
        # The Sentinels on db2, and every process connecting through them (`--no-sentinels`:
        # one Redis address, the primary's, as a single-host deployment has it).
        self.sentinels = sentinels
        self.tmp: Path | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self._seq = itertools.count(1)
        self.agents: dict[str, dict] = {}  # name -> {host, node, proc, history}
        self.problem = None
        self.env: dict = {}
        self.netem = False  # whether this kernel has tc netem; else the relay and nft stand in
        self.degraded: dict[str, tuple] = {}  # host -> (delay ms, jitter ms, loss %)

    # --- life cycle ------------------------------------------------------------------------

    def __enter__(self) -> "Lab":
        net.refuse_leftovers()
        if os.geteuid() != 0:
            raise LabError("the lab makes network namespaces: run it as root")
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _exit_on_signal)
        atexit.register(self.close)
        self.tmp = Path(tempfile.mkdtemp(prefix="kece-lab-"))
        os.chmod(self.tmp, 0o755)
        (self.tmp / "logs").mkdir()
        (self.tmp / "history").mkdir()
        STATE.write_text(json.dumps({"tmp": str(self.tmp), "pid": os.getpid()}))
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self.tmp is None:
            return
        for name, proc in reversed(list(self.procs.items())):
            stop(proc)
        self.procs.clear()
        problems = net.teardown()
        if problems:
            self.log(f"lab: could not remove {problems}; run {net.CLEAN_COMMAND}")
        if os.environ.get("KECE_LAB_KEEP_LOGS"):
            self.log(f"lab: logs kept in {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        STATE.unlink(missing_ok=True)
        self.tmp = None

    def spawn(self, name: str, host: str, argv: list[str], env: dict | None = None, cwd=None) -> subprocess.Popen:
        log = open(self.tmp / "logs" / f"{name}.log", "ab")
        proc = subprocess.Popen(net.exec_argv(host, argv), stdout=log, stderr=subprocess.STDOUT,
                                env=env or self.env, cwd=cwd or ROOT, start_new_session=True)
        log.close()
        self.procs[name] = proc
        return proc

    def logs(self, name: str) -> str:
        path = self.tmp / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_marks(self) -> dict[str, int]:
        """How far each process's log has been written: where a scenario's lines begin."""
        return {path.stem: path.stat().st_size for path in (self.tmp / "logs").glob("*.log")}

    def complaints_since(self, marks: dict[str, int], names=("web1", "web2", "worker"), count: int = 12) -> list[str]:
        """The last `count` warnings and errors each of `names` logged after `marks`, one
        short line each: what a failed scenario prints, so that its cause is in the output."""
        lines = []
        for name in names:
            path = self.tmp / "logs" / f"{name}.log"
            if not path.exists():
                continue
            with open(path, "rb") as log:
                log.seek(marks.get(name, 0))
                written = log.read().decode(errors="replace").splitlines()
            found = []
            for line in written:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("level") in ("WARNING", "ERROR", "CRITICAL") and record.get("logger") != "py.warnings":
                    found.append(f"{name} {record.get('time', '')} {record['level']} {record.get('logger')}: "
                                 f"{str(record.get('message', '')).splitlines()[0][:160]}")
            lines += found[-count:]
        return lines

    # --- bring-up --------------------------------------------------------------------------

    def start(self) -> None:
        started = time.monotonic()
        net.build()
        self.netem = net.netem_available()
        self.env = server_env(self.tmp, self.sentinels)
        self._mariadb()
        self._redis()
        net.enter("users")  # this process: the students' clients and the checker
        self._django()
        self._secrets()
        for host in ("web1", "web2"):
            self.start_web(host)
        self.spawn("worker", "worker", [python(), "-m", "celery", "-A", "kece", "worker", "--beat",
                                        "--concurrency", "1", "--loglevel", "WARNING",
                                        "-s", str(self.tmp / "beat-schedule")])
        (self.tmp / "nginx.conf").write_text(nginx_conf(self.tmp))
        self.spawn("lb", "lb", ["nginx", "-c", str(self.tmp / "nginx.conf"), "-g", "daemon off;"])
        for host in ("web1", "web2"):
            self.wait_http(f"http://{address(host)}:8000/api/v1/system/judgers/summary", host)
        self.wait_http(f"https://{address('lb')}/api/v1/system/judgers/summary", "lb")
        self.log(f"lab: up in {time.monotonic() - started:.1f} s ({len(net.HOSTS)} hosts + the bridge)")

    def _mariadb(self) -> None:
        data = self.tmp / "mariadb"
        data.mkdir()
        run_ok(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                "--auth-root-authentication-method=normal", "--skip-test-db"], "mariadb-install-db")
        self.spawn("mariadb", "db", [
            "mariadbd", "--no-defaults", f"--datadir={data}", "--user=root", f"--socket={data}/sock",
            f"--pid-file={data}/pid", f"--bind-address={address('db')}", "--port=3306",
            "--skip-grant-tables", "--skip-log-bin", "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=64M", "--max-connections=300", "--innodb-flush-log-at-trx-commit=2",
            "--character-set-server=utf8mb4", "--collation-server=utf8mb4_unicode_ci"])
        self.wait(lambda: self._sql(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}` CHARACTER SET utf8mb4"),
                  "mariadb", 60)

    def _sql(self, statement: str) -> bool:
        done = subprocess.run(net.exec_argv("db", ["mariadb", "--no-defaults", f"--socket={self.tmp}/mariadb/sock",
                                                   "-uroot", "-e", statement]), capture_output=True)
        return done.returncode == 0

    def _redis(self) -> None:
        primary, replica = address("db"), address("db2")
        self.spawn("redis", "db", ["redis-server", "--bind", primary, "--port", "6379", "--save", "",
                                   "--appendonly", "no", "--dir", str(self.tmp), "--protected-mode", "no"])
        self.spawn("redis-replica", "db2", ["redis-server", "--bind", replica, "--port", "6379", "--save", "",
                                            "--appendonly", "no", "--dir", str(self.tmp), "--protected-mode", "no",
                                            "--replicaof", primary, "6379"])
        for n, port in enumerate(SENTINEL_PORTS if self.sentinels else ()):
            conf = self.tmp / f"sentinel-{n}.conf"
            conf.write_text(f"bind {replica}\nport {port}\nprotected-mode no\n"
                            f"sentinel monitor {SENTINEL_MASTER} {primary} 6379 2\n"
                            f"sentinel down-after-milliseconds {SENTINEL_MASTER} 2000\n"
                            f"sentinel failover-timeout {SENTINEL_MASTER} 10000\n")
            self.spawn(f"sentinel-{n}", "db2", ["redis-sentinel", str(conf)])

    def _django(self) -> None:
        for name, value in self.env.items():
            if name.startswith(("KECE_", "DATABASE_URL", "REDIS_", "DJANGO_", "ALLOWED_HOSTS")):
                os.environ[name] = value
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command
        from django.db import connection

        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
        call_command("migrate", verbosity=0)
        from tests.factories import make_problem

        self.problem = make_problem(languages=("python",), cases=2)
        connection.close()

    def _secrets(self) -> None:
        secrets = self.tmp / "secrets"
        secrets.mkdir()
        for name in ("public", "internal"):
            run_ok(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=kece-lab",
                    "-keyout", str(secrets / f"{name}_tls_key"), "-out", str(secrets / f"{name}_tls_cert")],
                   "openssl")

    def start_web(self, host: str) -> subprocess.Popen:
        # Behind lb as Compose runs it: the scheme from lb's X-Forwarded-Proto (the console's
        # WebSocket is checked against its https origin).
        return self.spawn(host, host, [python(), "-m", "kece.serve", "--workers", "1", "--host", address(host),
                                       "--port", "8000", "--log-level", "warning", "--proxy-headers",
                                       f"--forwarded-allow-ips={address('lb')}"])

    def wait_http(self, url: str, name: str, timeout: float = 90) -> None:
        import requests

        def up():
            try:
                return requests.get(url, timeout=2, verify=False).status_code == 200
            except requests.RequestException:
                return False

        self.wait(up, name, timeout)

    def wait(self, predicate, name: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.2)
        raise LabError(f"{name} did not come up in {timeout:.0f} s:\n{self.logs(name)[-3000:]}")

    # --- agents ----------------------------------------------------------------------------

    def nodes(self, count: int, slots: int):
        from django.db import connection

        from bench.dispatch import make_nodes

        try:
            return make_nodes(count, slots)
        finally:
            connection.close()

    def start_agent(self, host: str, node, *, slots: int, judge_s: float, via_proxy: bool = False,
                    env: dict | None = None, jobs: int = 0) -> str:
        name = f"agent-{host}-{next(self._seq)}"
        history = self.tmp / "history" / f"{name}.jsonl"
        url = f"https://{address('lb')}:8443"
        if via_proxy:
            url = self.start_proxy(host)
        elif host in self.degraded and not self.netem:
            url = self.start_relay(host)
        self.spawn(name, host, [python(), "-m", "bench.lab.agent", "--url", url, "--secret", node.secret,
                                "--session", str(node.session_epoch), "--node", str(node.pk), "--slots", str(slots),
                                "--judge-s", str(judge_s), "--jobs", str(jobs), "--history", str(history)], env=env)
        self.agents[name] = {"host": host, "node": node.pk, "history": history}
        self.wait(lambda: history.exists() and history.stat().st_size > 0, name, 30)
        return name

    def start_proxy(self, host: str) -> str:
        listen = f"{address(host)}:9000"
        self.spawn(f"proxy-{host}", host, [python(), "-m", "bench.lab.proxy", "--listen", listen, "--upstream",
                                           f"https://{address('lb')}:8443",
                                           "--history", str(self.tmp / "history" / f"proxy-{host}.jsonl")])
        self.wait(lambda: _port_open(address(host), 9000), f"proxy-{host}", 30)
        return f"http://{listen}"

    def degrade(self, host: str, *, delay_ms: int, jitter_ms: int, loss: int) -> str:
        """Delay with jitter and loss on the host's link, both ways: tc netem where the kernel
        has it; else nft's random drops on the link and a delaying relay for the agent's
        connections (`start_agent` points the agent at it). Says which."""
        self.degraded[host] = (delay_ms, jitter_ms, loss)
        if self.netem:
            net.netem(host, f"delay {delay_ms}ms {jitter_ms}ms distribution normal loss {loss}%")
            return "tc netem"
        net.drop_randomly(host, loss)
        return "nft random drops + a delaying TCP relay (no netem in this kernel)"

    def heal(self, host: str) -> None:
        self.degraded.pop(host, None)
        net.clear_faults(host)

    def start_relay(self, host: str) -> str:
        delay_ms, jitter_ms, _loss = self.degraded[host]
        listen = f"{address(host)}:9443"
        self.spawn(f"relay-{host}", host, [python(), "-m", "bench.lab.relay", "--listen", listen, "--upstream",
                                           f"{address('lb')}:8443", "--delay-ms", str(delay_ms),
                                           "--jitter-ms", str(jitter_ms)])
        self.wait(lambda: _port_open(address(host), 9443), f"relay-{host}", 30)
        return f"https://{listen}"

    def proxy_drop(self, host: str, path: str, count: int = 1) -> None:
        import requests

        requests.post(f"http://{address(host)}:9000/__lab__/drop", json={"path": path, "count": count},
                      timeout=5).raise_for_status()

    def stop_agents(self) -> None:
        for name in list(self.agents):
            proc = self.procs.pop(name, None)
            if proc is not None:
                stop(proc)
        for name in [n for n in self.procs if n.startswith(("proxy-", "relay-"))]:
            stop(self.procs.pop(name))
        self.agents.clear()

    def history_files(self) -> list[Path]:
        return sorted((self.tmp / "history").glob("*.jsonl"))

    def agent_ops(self, name: str) -> list[dict]:
        from bench.lab.history import read

        return read([self.agents[name]["history"]])


def run_ok(argv: list[str], name: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise LabError(f"{name}: {done.stderr[-2000:]}")


def stop(proc: subprocess.Popen, grace_s: float = 5) -> None:
    """SIGTERM to the process group (resumed first: a paused one would not act on it), then
    SIGKILL after `grace_s`."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass


def _port_open(host: str, port: int) -> bool:
    import socket

    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def _exit_on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def new_key() -> str:
    return uuid.uuid4().hex


def clean() -> int:
    """Tear down what a lab left (its process killed outright): namespaces and their
    processes, and its temporary folder."""
    if STATE.exists():
        state = json.loads(STATE.read_text())
        try:
            os.kill(state["pid"], 0)
            print(f"lab: the lab of process {state['pid']} is still running; it is torn down now")
        except ProcessLookupError:
            pass
    problems = net.teardown()
    if STATE.exists():
        shutil.rmtree(json.loads(STATE.read_text())["tmp"], ignore_errors=True)
        STATE.unlink()
    for problem in problems:
        print(f"lab: {problem}")
    print("lab: clean" if not problems else "lab: not everything could be removed")
    return 1 if problems else 0
