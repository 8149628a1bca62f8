"""The lab's scenarios, each a function that prints its own figures and ends with a drain and
the history checker (bench/lab/history.py). `python -m bench.lab --help` lists them."""

import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.lab import net
from bench.lab.history import Figures, check, read, settlements
from bench.lab.lab import LEASE_S, SENTINEL_MASTER, SENTINEL_PORTS, Lab, LabError, _port_open, address, clean, \
    new_key

SUBMIT = "/api/v1/submissions"


@dataclass
class Outcome:
    name: str
    figures: Figures
    notes: dict

    @property
    def ok(self) -> bool:
        return self.figures.ok and not self.notes.get("failed")


class Users:
    """Students submitting through the public listener of `lb`, each attempt on record; a
    submission whose attempt got no answer or a 5xx is sent again with its Idempotency-Key."""

    def __init__(self, lab: Lab, count: int = 8):
        from django.db import connection
        from rest_framework.authtoken.models import Token

        from tests.factories import UserFactory

        try:
            self.tokens = [Token.objects.create(user=user).key for user in UserFactory.create_batch(count)]
        finally:
            connection.close()
        self.lab = lab
        self.url = f"https://{address('lb')}"
        self.out = open(lab.tmp / "history" / f"users-{new_key()[:8]}.jsonl", "a", buffering=1)
        self.lock = threading.Lock()
        self.local = threading.local()
        self.errors = 0

    def record(self, **op) -> None:
        with self.lock:
            self.out.write(json.dumps({"t": time.time(), "kind": "submit", **op}) + "\n")

    def submit(self, n: int, retries: int = 20, problem=None, language: str = "python") -> int | None:
        import requests

        session = getattr(self.local, "session", None)
        if session is None:
            session = self.local.session = requests.Session()
        key, token = new_key(), self.tokens[n % len(self.tokens)]
        body = {"problemId": (problem or self.lab.problem).pk, "language": language, "code": f"print(1)  # {key}\n"}
        for _ in range(retries):
            sent = time.time()
            try:
                answer = session.post(self.url + SUBMIT, json=body, timeout=20, verify=False,
                                      headers={"Authorization": f"Token {token}", "Idempotency-Key": key})
            except requests.RequestException as error:
                self.record(key=key, status=None, error=type(error).__name__, sent=sent)
                self.errors += 1
                time.sleep(0.5)
                continue
            data = answer.json() if answer.headers.get("Content-Type", "").startswith("application/json") else {}
            self.record(key=key, status=answer.status_code, submission=data.get("submissionId"),
                        retry_after=answer.headers.get("Retry-After"), error=data.get("error"),
                        sent=sent, seconds=round(time.time() - sent, 3))
            if answer.status_code in (200, 202):
                return data["submissionId"]
            self.errors += 1
            if answer.status_code < 500 and answer.status_code != 429:
                return None
            time.sleep(float(answer.headers.get("Retry-After", 0.5)))
        return None

    def stream(self, seconds: float, clients: int = 2, pause_s: float = 0.2) -> list[int]:
        """Submissions from `clients` students, one after another, for `seconds`."""
        accepted, end = [], time.monotonic() + seconds

        def client(n):
            while time.monotonic() < end:
                submission = self.submit(n)
                if submission is not None:
                    accepted.append(submission)
                time.sleep(pause_s)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return accepted

    def burst(self, count: int, clients: int = 8, on_accepted=None) -> list[int]:
        accepted = []

        def one(n):
            submission = self.submit(n)
            if submission is not None:
                accepted.append(submission)
                if on_accepted:
                    on_accepted(len(accepted))

        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(one, range(count)))
        return accepted


def last_submission_id() -> int:
    from django.db import connection

    from judging.models import Submission

    try:
        return Submission.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    finally:
        connection.close()


def drain(submission_ids, timeout: float) -> float:
    """Wait until every one of the submissions has its verdict; returns when the last came."""
    from django.db import connection
    from django.db.models import Max

    from judging.models import Submission

    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            rows = Submission.objects.filter(pk__in=submission_ids)
            if rows.filter(verdict__isnull=True).count() == 0:
                return rows.aggregate(last=Max("judged_at"))["last"].timestamp()
            time.sleep(0.5)
        return float("nan")
    finally:
        connection.close()


def retire(node_ids) -> None:
    from bench.dispatch import retire_nodes

    retire_nodes(node_ids)


# The console's publish step's interval (`KECE_CONSOLE_PUBLISH_MS`: the lab's hosts run the default).
PUBLISH_S = 1.0


def wait_for(predicate, what: str, timeout: float, notes: dict | None = None):
    """The predicate's first true value. On timeout: with `notes`, the scenario is marked failed
    and goes on to its drain and check (a protection removed shows there); else an error."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    if notes is None:
        raise LabError(f"timed out after {timeout:.0f} s waiting for {what}")
    notes.setdefault("timed out waiting for", []).append(what)
    notes["failed"] = True
    return None


def ops_of(lab: Lab, agent: str, kind: str, job=None) -> list[dict]:
    return [op for op in lab.agent_ops(agent) if op["kind"] == kind and (job is None or op.get("job") == job)]


def finish(lab: Lab, name: str, since: int, notes: dict, timeout: float = 90) -> Outcome:
    """Drain the scenario's submissions, stop its agents, and check its history."""
    from django.db import connection

    from judging.models import Submission

    try:
        ids = list(Submission.objects.filter(pk__gt=since).values_list("pk", flat=True))
    finally:
        connection.close()
    drained = drain(ids, timeout)
    node_ids = [agent["node"] for agent in lab.agents.values()]
    retire(node_ids)
    lab.stop_agents()
    history = read(lab.history_files())
    try:
        history += settlements(ids)
    finally:
        connection.close()
    for path in lab.history_files():  # the next scenario's history starts empty
        path.rename(path.with_name(f"{name}-{path.name}.done"))
    figures = check(history)
    print(f"  [{name}] history: {figures.line()} -> {'OK' if figures.ok else 'FAILED'}")
    if drained != drained:  # NaN: not drained in time
        print(f"  [{name}] not drained within {timeout:.0f} s")
    for problem in figures.problems[:10]:
        print(f"    {problem}")
    return Outcome(name, figures, notes)


# --- (a) and (b): an agent host cut off, an agent paused ------------------------------------

def _silenced(lab: Lab, name: str, silence, speak, short_s: float, long_s: float) -> Outcome:
    """The holder judges for a lease's time and is silenced meanwhile: briefly (its renewals
    resume, it settles), then past its lease (the standby takes the job while the holder's
    result is still to come, and still judges when that late result arrives: refused)."""
    since = last_submission_id()
    users = Users(lab, 2)
    [holder_node], [standby_node] = lab.nodes(1, 1), lab.nodes(1, 1)
    holder = lab.start_agent("a1", holder_node, slots=1, judge_s=LEASE_S)
    notes, seen, standby = {}, set(), None
    for case, seconds in (("short", short_s), ("long", long_s)):
        users.submit(0)
        claim = wait_for(lambda: [op for op in ops_of(lab, holder, "claim") if op["epoch"] == 1
                                  and op["job"] not in seen], "the holder's claim", 30)[-1]
        job = claim["job"]
        seen.add(job)
        if case == "long":  # the standby node waits for work only now: the first claim was the holder's
            standby = lab.start_agent("a2", standby_node, slots=1, judge_s=LEASE_S * 1.5)
        silenced_at = time.time()
        silence()
        time.sleep(seconds)
        speak()
        late = wait_for(lambda: ops_of(lab, holder, "result", job), f"the holder's result for job {job}",
                        LEASE_S * 4, notes)
        answer = (late[-1].get("status") or late[-1].get("error")) if late else "none"
        notes[f"{case}: silent s"] = seconds
        notes[f"{case}: holder's result"] = answer
        if case == "long":
            taken = ops_of(lab, standby, "claim", job)
            notes["long: taken by the standby after s"] = round(taken[0]["t"] - silenced_at, 1) if taken else None
            if not taken or answer != "lease_lost":
                notes["failed"] = True
        elif answer != "settled":
            notes["failed"] = True
    outcome = finish(lab, name, since, notes)
    print(f"  [{name}] " + "; ".join(f"{k}: {v}" for k, v in notes.items() if k != "failed"))
    return outcome


def scenario_a(lab: Lab, quick: bool) -> Outcome:
    """An agent host cut off (link down) for less than the lease, then for more."""
    print(f"(a) agent host cut off: {LEASE_S // 2} s, then {LEASE_S * 2} s (lease {LEASE_S} s)")
    return _silenced(lab, "a", lambda: net.cut("a1"), lambda: net.restore("a1"), LEASE_S / 2, LEASE_S * 2)


def scenario_b(lab: Lab, quick: bool) -> Outcome:
    """An agent paused (SIGSTOP) for less than the lease, then for more, then resumed."""
    print(f"(b) agent paused (SIGSTOP): {LEASE_S // 2} s, then {LEASE_S * 2} s (lease {LEASE_S} s)")
    def pid():
        name = next(n for n, a in lab.agents.items() if a["host"] == "a1")
        return lab.procs[name].pid

    return _silenced(lab, "b", lambda: os.killpg(pid(), signal.SIGSTOP), lambda: os.killpg(pid(), signal.SIGCONT),
                     LEASE_S / 2, LEASE_S * 2)


# --- (c) answers lost after the server committed --------------------------------------------

def scenario_c(lab: Lab, quick: bool) -> Outcome:
    """A claim's answer and a result's answer lost after the server committed (fault proxy)."""
    print("(c) a claim answer and a result answer dropped after the commit (fault proxy on a3)")
    since = last_submission_id()
    users = Users(lab, 1)
    [node] = lab.nodes(1, 1)
    agent = lab.start_agent("a3", node, slots=1, judge_s=0.5, via_proxy=True)
    lab.proxy_drop("a3", "jobs/claim")
    lab.proxy_drop("a3", "/result")
    submitted = time.time()
    users.submit(0)
    notes = {}
    claim = (wait_for(lambda: ops_of(lab, agent, "claim"), "the re-lease", LEASE_S * 4, notes) or [{}])[0]
    result = (wait_for(lambda: ops_of(lab, agent, "result"), "the result answer", 30, notes) or [{}])[0]
    dropped = read([lab.tmp / "history" / "proxy-a3.jsonl"])
    notes.update({"answers dropped": [op["path"].rsplit("/", 1)[-1] for op in dropped],
                  "re-leased with epoch": claim.get("epoch"),
                  "after s": round(claim["t"] - submitted, 1) if claim else None,
                  "result retry answered": result.get("status") or result.get("error")})
    if len(dropped) != 2 or claim.get("epoch") != 2 or result.get("status") != "duplicate":
        notes["failed"] = True
    outcome = finish(lab, "c", since, notes)
    print("  [c] " + "; ".join(f"{k}: {v}" for k, v in notes.items() if k != "failed"))
    return outcome


# --- (d) a lossy, slow network on every agent link ------------------------------------------

def _burst(lab: Lab, name: str, jobs: int, *, during=None) -> dict:
    """`jobs` submissions from 8 clients while 4 agents × 4 slots judge (200 ms each)."""
    users = Users(lab, 8)
    nodes = lab.nodes(4, 4)
    for host, node in zip(("a1", "a2", "a3", "a4"), nodes):
        lab.start_agent(host, node, slots=4, judge_s=0.2)
    time.sleep(1)
    started = time.time()
    accepted = users.burst(jobs, 8, on_accepted=during)
    accepted_by = time.time()
    last = drain(accepted, 180)
    return {"started": started, "accepted": len(accepted), "accepting s": round(accepted_by - started, 2),
            "makespan s": round(last - started, 2), "ideal s": round(jobs * 0.2 / 16, 2),
            "user errors": users.errors}


def _figures(run: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in run.items() if k != "started")


def scenario_d(lab: Lab, quick: bool) -> Outcome:
    jobs = 100 if quick else 300
    print(f"(d) {jobs}-submission burst, clean, then 5 % loss and 50±20 ms on every agent link")
    since = last_submission_id()
    clean_run = _burst(lab, "d-clean", jobs)
    print(f"  [d-clean] {_figures(clean_run)}")
    clean_outcome = finish(lab, "d-clean", since, clean_run)
    since = last_submission_id()
    for host in ("a1", "a2", "a3", "a4"):
        how = lab.degrade(host, delay_ms=50, jitter_ms=20, loss=5)
    print(f"  [d] the agents' links degraded by {how}")
    try:
        lossy = _burst(lab, "d", jobs)
        outcome = finish(lab, "d", since, lossy)
    finally:
        for host in ("a1", "a2", "a3", "a4"):
            lab.heal(host)
    clean_ratio = clean_run["makespan s"] / clean_run["ideal s"]
    lossy_ratio = lossy["makespan s"] / lossy["ideal s"]
    print(f"  [d] makespan ÷ ideal: clean {clean_ratio:.2f} ({clean_run['makespan s']} s),"
          f" lossy {lossy_ratio:.2f} ({lossy['makespan s']} s); ideal {lossy['ideal s']} s")
    print(f"  [d] {_figures(lossy)}")
    outcome.notes.update({"clean ratio": round(clean_ratio, 2), "lossy ratio": round(lossy_ratio, 2)})
    outcome.notes["failed"] = not clean_outcome.ok
    return outcome


# --- (e) a web host killed mid-burst --------------------------------------------------------

def scenario_e(lab: Lab, quick: bool) -> Outcome:
    jobs = 100 if quick else 300
    print(f"(e) web1 SIGKILLed mid-burst ({jobs} submissions) behind lb")
    since = last_submission_id()
    killed = {}

    def kill_web1(accepted: int):
        if accepted >= jobs // 3 and not killed:
            killed["at"] = time.time()
            os.killpg(lab.procs["web1"].pid, signal.SIGKILL)

    run = _burst(lab, "e", jobs, during=kill_web1)
    outcome = finish(lab, "e", since, run)
    print(f"  [e] web1 killed after {jobs // 3} accepted; users' non-202 answers or errors: {run['user errors']};"
          f" accepted {run['accepted']}; makespan {run['makespan s']} s (ideal {run['ideal s']} s)")
    lab.start_web("web1")  # back for the next scenario
    lab.wait_http(f"http://{address('web1')}:8000/api/v1/system/judgers/summary", "web1")
    return outcome


# --- (f) the Redis primary killed: Sentinel fails over --------------------------------------

def _sentinel(port: int = 26379):
    import redis

    return redis.Redis(host=address("db2"), port=port, socket_timeout=1, socket_connect_timeout=1,
                       decode_responses=True)


def _primary_named() -> str | None:
    try:
        return _sentinel().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_MASTER)[0]
    except Exception:
        return None


def _sentinels_ready() -> bool:
    """Every Sentinel knows the other two and the replica: a failover can be agreed on."""
    for port in SENTINEL_PORTS:
        try:
            pairs = _sentinel(port).execute_command("SENTINEL", "MASTER", SENTINEL_MASTER)
        except Exception:
            return False
        view = dict(zip(pairs[::2], pairs[1::2]))
        if view.get("num-other-sentinels") != "2" or view.get("num-slaves") != "1":
            return False
    return True


def _wake_up_subscribers(host: str) -> int:
    """The wake-up subscriptions on the Redis at `host` (one per web process)."""
    import redis

    try:
        return redis.Redis(host=address(host), socket_timeout=1, socket_connect_timeout=1).execute_command(
            "PUBSUB", "NUMPAT")
    except Exception:
        return 0


def _worker_consuming(host: str) -> bool:
    """The Celery worker waits for tasks (BRPOP) on the Redis at `host`."""
    import redis

    try:
        clients = redis.Redis(host=address(host), socket_timeout=1, socket_connect_timeout=1).client_list()
    except Exception:
        return False
    return any(c.get("cmd") == "brpop" and c.get("addr", "").startswith(address("worker") + ":") for c in clients)


def _console_links(host: str) -> str:
    """What the console's chain holds on the Redis at `host`, for a failure's report: the
    keys of the watch mark, the step's digests and the console group (with their time to
    live or members), and which hosts wait there for channel messages (BZPOPMIN)."""
    import redis

    try:
        server = redis.Redis(host=address(host), socket_timeout=1, socket_connect_timeout=1)
        found = []
        for db in server.info("keyspace"):
            data = redis.Redis(host=address(host), db=int(db[2:]), socket_timeout=1, socket_connect_timeout=1)
            for key in data.scan_iter(match="*console*", count=1000):
                kind = data.type(key).decode()
                size = data.zcard(key) if kind == "zset" else None
                found.append(f"{db}/{key.decode()} ({kind}, ttl {data.ttl(key)}"
                             f"{'' if size is None else f', {size} members'})")
        waiting = sorted({c.get("addr", "").rsplit(":", 1)[0] for c in server.client_list()
                          if c.get("cmd") == "bzpopmin"})
        return f"keys: {', '.join(found) or 'none'}; waiting for channel messages: {', '.join(waiting) or 'none'}"
    except Exception as error:
        return f"unreadable ({type(error).__name__}: {error})"


class ConsoleWatcher:
    """An admin's console page: its live WebSocket through `lb`, reconnecting when the socket
    closes or stays silent past `silentAfterMs` as the page does (`static/kece/console.js`),
    though at once rather than after the page's backoff; every message's time written down."""

    def __init__(self, lab: Lab):
        from django.conf import settings
        from django.db import connection
        from django.test import Client

        from tests.api.helpers import make_admin

        try:
            browser = Client()
            browser.force_login(make_admin(f"lab-admin-{new_key()[:8]}"))
            self.cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
        finally:
            connection.close()
        self.messages: list[tuple[float, str]] = []
        self.connects: list[float] = []
        self.error = None
        self.refusals: dict[str, int] = {}
        self.attempts = 0
        self.deaf = 0  # sockets given up for silence
        self.abandoned, self.abandoned_at = 0, []  # attempts left behind, and where the last one was
        self.current = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    # The client's own open timeout. An attempt in CI once neither returned nor raised for half
    # a minute past it: a little later it is left behind and another begins.
    OPEN_S = 5

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.attempts += 1
            settled = threading.Event()  # the socket opened, or the attempt failed
            attempt = threading.Thread(target=self._attempt, args=(self.attempts, settled), daemon=True)
            self.current = attempt
            attempt.start()
            if settled.wait(self.OPEN_S + 3):
                attempt.join()
            else:
                self.abandoned += 1
                self.abandoned_at = self.where()

    def _attempt(self, number: int, settled: threading.Event) -> None:
        import ssl

        from websockets.sync.client import connect

        origin = f"https://{address('lb')}"
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with connect(origin.replace("https://", "wss://") + "/ws/admin/judgers", ssl=context, origin=origin,
                         additional_headers={"Cookie": self.cookie}, open_timeout=self.OPEN_S) as socket_:
                if number != self.attempts:
                    return  # left behind meanwhile
                self.connects.append(time.time())
                settled.set()
                silent_after, heard = None, time.monotonic()
                while not self.stopping.is_set():
                    try:
                        message = json.loads(socket_.recv(timeout=0.5))
                    except TimeoutError:
                        if silent_after and time.monotonic() - heard > silent_after:
                            self.deaf += 1
                            break
                        continue
                    heard = time.monotonic()
                    if message.get("type") == "live":
                        silent_after = message.get("silentAfterMs", 0) / 1000
                    self.messages.append((time.time(), message.get("type")))
        except Exception as error:
            self.error = f"{type(error).__name__}: {error}"
            self.refusals[self.error] = self.refusals.get(self.error, 0) + 1
            self.stopping.wait(0.5)
        finally:
            settled.set()

    def where(self) -> list[str]:
        """Where the page's current attempt is now: the lines of its stack nearest the top."""
        frame = sys._current_frames().get(self.current.ident)
        return [line.rstrip() for line in traceback.format_stack(frame)[-8:]] if frame else []

    def first_change_after(self, moment: float) -> float | None:
        return next((t for t, kind in self.messages if kind == "changed" and t > moment), None)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)


def scenario_f(lab: Lab, quick: bool) -> Outcome:
    jobs = 100 if quick else 300
    print(f"(f) the Redis primary SIGKILLed mid-burst ({jobs} submissions); the Sentinels promote the replica")
    if not lab.sentinels:
        raise LabError("(f) needs the Sentinels: run without --no-sentinels")
    wait_for(_sentinels_ready, "the Sentinels to know each other and the replica", 30)
    since = last_submission_id()
    console = ConsoleWatcher(lab)
    marks: dict = {}

    def follow_failover():
        marks["promoted"] = wait_for(lambda: _primary_named() == address("db2") and time.time(),
                                     "the Sentinels' promotion", 60, notes)
        # Each back on the new primary, timed as it is first seen.
        back = {"wake-ups": lambda: _wake_up_subscribers("db2") >= 2, "worker": lambda: _worker_consuming("db2")}

        def both_back():
            for name, seen in back.items():
                if name not in marks and seen():
                    marks[name] = time.time()
            return all(name in marks for name in back)

        wait_for(both_back, "both web hosts' wake-up subscriptions and the worker on the new primary", 60, notes)

    notes: dict = {}
    watcher = threading.Thread(target=follow_failover)

    def kill_primary(accepted: int):
        if accepted >= jobs // 3 and "killed" not in marks:
            marks["killed"] = time.time()
            os.killpg(lab.procs["redis"].pid, signal.SIGKILL)
            watcher.start()

    fallback_before = _fallback_polls(lab)
    run = _burst(lab, "f", jobs, during=kill_primary)
    watcher.join()
    # The console page reconnects on its own, refused (403) until its channel layer follows
    # the new primary; once it is back, more submissions, whose judging it must show again.
    # (Submissions judged while it is away leave nothing to show: the console shows the
    # present, not a history it missed.)
    back_after = marks.get("promoted") or marks["killed"]
    wait_for(lambda: any(t > back_after for t in console.connects)
             or any(t > back_after for t, _kind in console.messages), "the console connected again", 60, notes)
    after = time.time()
    # In waves: the console shows the present, sampled each publish interval, and a wave judged
    # between two samples leaves nothing to show (its jobs take 0.2 s: often so); the next wave
    # comes once one was not seen, up to a dozen, so that the sampling's luck is not the verdict.
    late, users = [], Users(lab, 2)
    for _wave in range(12):
        if console.first_change_after(after):
            break
        late += users.burst(5, 2)
        seen_by = time.monotonic() + 2.5 * PUBLISH_S
        while not console.first_change_after(after) and time.monotonic() < seen_by:
            time.sleep(0.1)
    drain(late, 60)
    shown = wait_for(lambda: console.first_change_after(after), "a console update after the failover", 15, notes)
    resumed = console.first_change_after(marks.get("promoted") or marks["killed"])
    outcome = finish(lab, "f", since, run)
    # A watcher that heard nothing: where its thread is, before it is stopped, what it heard
    # when, and what the console's chain holds on the new primary.
    stuck = console.where() if shown is None else []
    if shown is None:
        notes["console heard (s after the kill)"] = [(round(t - marks["killed"], 1), kind)
                                                     for t, kind in console.messages]
        notes["console connected (s after the kill)"] = [round(t - marks["killed"], 1) for t in console.connects]
        notes["console on the new primary"] = _console_links("db2")
    console.stop()
    killed = marks["killed"]
    notes.update({
        "promoted after s": round(marks["promoted"] - killed, 1) if marks.get("promoted") else None,
        "wake-up subscriptions back after s": round(marks["wake-ups"] - killed, 1) if marks.get("wake-ups") else None,
        "worker consuming again after s": round(marks["worker"] - killed, 1) if marks.get("worker") else None,
        "first console update after the promotion, after s": round(resumed - killed, 1) if resumed else None,
        "console refusals": console.refusals,
        "console (re)connects": f"{len(console.connects)} of {console.attempts}", "console messages": len(console.messages),
        "console sockets given up as silent": console.deaf, "console attempts left behind": console.abandoned,
        "fallback polls during the burst": _fallback_polls(lab) - fallback_before,
        "makespan s": run["makespan s"], "ideal s": run["ideal s"], "accepted": run["accepted"],
        "user errors": run["user errors"]})
    if shown is None or not (marks.get("wake-ups") and marks.get("worker")):
        notes["failed"] = True
        notes["console's last error"] = console.error
    outcome.notes.update(notes)
    print("  [f] " + "; ".join(f"{k}: {v}" for k, v in notes.items() if k != "failed"))
    for line in stuck:
        print("  [f] console watcher at: " + line.replace("\n", " | "))
    for line in console.abandoned_at:
        print("  [f] console attempt left behind at: " + line.replace("\n", " | "))
    # A standby again for the scenarios after: the old primary's server back, as a replica.
    lab.spawn("redis", "db", ["redis-server", "--bind", address("db"), "--port", "6379", "--save", "",
                              "--appendonly", "no", "--dir", str(lab.tmp), "--protected-mode", "no",
                              "--replicaof", address("db2"), "6379"])
    return outcome


def _fallback_polls(lab: Lab) -> float:
    """The web processes' fallback looks so far (`kece_wakeup_fallback_polls_total`; the web
    hosts keep their metrics in one folder, so one scrape counts both)."""
    import requests

    try:
        text = requests.get(f"http://{address('web1')}:8000/metrics", timeout=5).text
    except requests.RequestException:
        return float("nan")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kece_wakeup_fallback_polls_total"))


# --- (g) the database host cut off ---------------------------------------------------------

def reconcile_findings() -> dict:
    """The design's gates checked against the tables (`manage.py reconcile`): what is found."""
    from django.db import connection
    from django.utils import timezone

    from judging.services.reconcile import reconcile_check

    try:
        return {name: found["count"] for name, found in reconcile_check(now=timezone.now()).items() if found["count"]}
    finally:
        connection.close()


def scenario_g(lab: Lab, quick: bool) -> Outcome:
    cut_s = 10
    print(f"(g) the db host (MariaDB and the Redis primary) cut off for {cut_s} s during a stream of submissions")
    since = last_submission_id()
    users = Users(lab, 2)
    nodes = lab.nodes(2, 2)
    agents = [lab.start_agent(host, node, slots=2, judge_s=0.3) for host, node in zip(("a1", "a2"), nodes)]
    marks = {}

    def cut_db():
        time.sleep(6)
        marks["cut"] = time.time()
        net.cut("db")
        time.sleep(cut_s)
        net.restore("db")
        marks["restored"] = time.time()

    fault = threading.Thread(target=cut_db)
    fault.start()
    users.stream(6 + cut_s + 8)
    fault.join()
    during = [op for op in read(lab.history_files()) if op["kind"] == "submit"
              and marks["cut"] <= op["sent"] <= marks["restored"]]
    statuses: dict = {}
    for op in during:
        label = f"{op['status']}" + (" with Retry-After" if op.get("retry_after") else "") if op["status"] else             f"no answer ({op.get('error')})"
        statuses[label] = statuses.get(label, 0) + 1
    settled_after = [op["t"] for name in agents for op in lab.agent_ops(name)
                     if op["kind"] == "result" and op.get("status") == "settled" and op["t"] > marks["restored"]]
    accepted_after = [op["t"] for op in read(lab.history_files()) if op["kind"] == "submit"
                      and op.get("status") == 202 and op["sent"] > marks["restored"]]
    results_during = {}
    for name in agents:
        for op in lab.agent_ops(name):
            if op["kind"] in ("result", "result_try") and marks["cut"] <= op["t"] <= marks["restored"] + 2:
                label = str(op.get("status") or op.get("error") or "no answer")
                results_during[label] = results_during.get(label, 0) + 1
    notes = {"answers during the cut": statuses,
             "slowest answer s": max((op.get("seconds") or 0 for op in during), default=None),
             "agents' result answers during the cut": results_during,
             "first submission accepted after the restore s":
                 round(min(accepted_after) - marks["restored"], 1) if accepted_after else None,
             "first settlement after the restore s":
                 round(min(settled_after) - marks["restored"], 1) if settled_after else None}
    outcome = finish(lab, "g", since, notes)
    findings = reconcile_findings()
    notes["reconcile findings (half-written rows)"] = findings or "none"
    # The promise: clear 503s with Retry-After while the database is away, never another 5xx.
    notes["failed"] = bool(findings) or not settled_after or "503 with Retry-After" not in statuses or any(
        label.startswith("5") and label != "503 with Retry-After" for label in statuses)
    print("  [g] " + "; ".join(f"{k}: {v}" for k, v in notes.items() if k != "failed"))
    return outcome


# --- (h) agents' clocks skewed, and a second beat with a skewed clock -----------------------

FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def skewed(env: dict, offset: str) -> dict:
    """The wall clock `offset` off (libfaketime), the monotonic clock left alone."""
    shim = os.path.join(os.path.dirname(__file__), "skew")
    return {**env, "LD_PRELOAD": FAKETIME, "FAKETIME": offset, "DONT_FAKE_MONOTONIC": "1",
            "PYTHONPATH": f"{shim}:{env['PYTHONPATH']}"}


def scenario_h(lab: Lab, quick: bool) -> Outcome:
    print("(h) agents' wall clocks 5 minutes ahead and behind; a second beat, 5 minutes ahead, started by mistake")
    if not os.path.exists(FAKETIME):
        raise LabError("faketime (Debian's package) is needed: scripts/setup.sh installs it")
    since = last_submission_id()
    users = Users(lab, 4)
    notes = {}
    ahead, behind, others = lab.nodes(1, 1), lab.nodes(1, 1), lab.nodes(2, 2)
    # Two holders judge for longer than the lease: only their renewals keep their leases. The
    # one 5 minutes ahead keeps answering; the one 5 minutes behind is paused past its lease.
    keeper = lab.start_agent("a1", ahead[0], slots=1, judge_s=LEASE_S * 1.5, env=skewed(lab.env, "+5m"), jobs=1)
    paused = lab.start_agent("a4", behind[0], slots=1, judge_s=LEASE_S * 1.5, env=skewed(lab.env, "-5m"), jobs=1)
    users.submit(0)
    users.submit(1)
    kept = wait_for(lambda: ops_of(lab, keeper, "claim"), "the keeper's claim", 30)[0]
    held = wait_for(lambda: ops_of(lab, paused, "claim"), "the paused holder's claim", 30)[0]
    lab.spawn("beat-skewed", "web2", [sys.executable, "-m", "celery", "-A", "kece", "worker", "--beat",
                                      "--concurrency", "1", "--loglevel", "INFO",
                                      "-s", str(lab.tmp / "beat-skewed")], env=skewed(lab.env, "+5m"))
    paused_at = time.monotonic()
    pid = lab.procs[paused].pid
    os.killpg(pid, signal.SIGSTOP)
    try:
        for host, node in (("a2", others[0]), ("a3", others[1])):
            lab.start_agent(host, node, slots=2, judge_s=0.2)
        accepted = users.burst(20 if quick else 40, 4)
        taken = wait_for(lambda: [op for name in lab.agents for op in lab.agent_ops(name)
                                  if op["kind"] == "claim" and op["job"] == held["job"] and op["epoch"] > 1],
                         "the paused holder's job taken over", LEASE_S * 4, notes)
    finally:
        os.killpg(pid, signal.SIGCONT)
    kept_result = (wait_for(lambda: ops_of(lab, keeper, "result"), "the keeper's result", LEASE_S * 4, notes)
                   or [{}])[0]
    late = (wait_for(lambda: ops_of(lab, paused, "result"), "the paused holder's late result", LEASE_S * 4, notes)
            or [{}])[0]
    beat_log = lab.logs("beat-skewed")
    from bench.lab.lab import stop

    stop(lab.procs.pop("beat-skewed"))
    notes.update({
        "keeper (+5 min) under the skewed beat": f"{kept_result.get('status') or kept_result.get('error')} under"
                                                 f" lease {kept_result.get('epoch')} (claimed {kept['epoch']})",
        "skewed worker's reaper passes that stood back": beat_log.count("reaper paused"),
        "paused holder's (-5 min) job taken after s": round(taken[0]["mono"] - paused_at, 1) if taken else None,
        "its late result": late.get("status") or late.get("error"),
        "accepted during the skewed beat": len(accepted)})
    if kept_result.get("status") != "settled" or kept_result.get("epoch") != 1 or late.get("error") != "lease_lost" \
            or "reaper paused" not in beat_log:
        notes["failed"] = True
    outcome = finish(lab, "h", since, notes)
    print("  [h] " + "; ".join(f"{k}: {v}" for k, v in notes.items() if k != "failed"))
    return outcome


# --- (i) the mysql pool's judge database stalled ------------------------------------------

JUDGE_POOLS = {"python": "a1", "cpp": "a2", "java": "a3", "arkts": "a1", "mysql": "a4"}  # pool -> agent host
JUDGE_DB_PORT = 6390


def _pool_figures(started) -> dict:
    """Per pool, from the database: makespan (first submission to last settlement), queue
    wait (submission to its last lease) p50 and max, and SYSTEM_ERRORs."""
    from django.db import connection

    from judging.models import JobState, JudgeJob

    try:
        rows = list(JudgeJob.objects.filter(created_at__gte=started, kind="JUDGE").values_list(
            "pool", "created_at", "started_at", "finished_at", "state"))
    finally:
        connection.close()
    figures = {}
    for pool in JUDGE_POOLS:
        jobs = [r for r in rows if r[0] == pool]
        if not jobs:
            continue
        waits = sorted((r[2] - r[1]).total_seconds() for r in jobs if r[2])
        ends = [r[3] for r in jobs if r[3]]
        figures[pool] = {
            "jobs": len(jobs), "makespan s": round((max(ends) - min(r[1] for r in jobs)).total_seconds(), 1) if ends
            else None, "queue wait p50 s": round(waits[len(waits) // 2], 2) if waits else None,
            "queue wait max s": round(waits[-1], 2) if waits else None,
            "SYSTEM_ERROR": sum(r[4] == JobState.FAILED for r in jobs)}
    return figures


def _sql_settled(accepted: list[int], timeout: float) -> dict:
    """The SQL submissions (their own type, which the history checker's ids do not tell apart
    from the others): wait for every verdict, then count each one's settled jobs."""
    from django.db import connection
    from django.db.models import Count

    from judging.models import DbSubmission, JobState, JudgeJob, SubmissionType

    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end and DbSubmission.objects.filter(pk__in=accepted, verdict__isnull=True).exists():
            time.sleep(0.5)
        settled = dict(JudgeJob.objects.filter(
            submission_type=SubmissionType.SQL, submission_id__in=accepted, kind="JUDGE",
            state__in=(JobState.COMPLETED, JobState.FAILED)).values("submission_id").annotate(
            n=Count("id")).values_list("submission_id", "n"))
    finally:
        connection.close()
    return {"accepted": len(accepted), "settled once": sum(settled.get(pk) == 1 for pk in accepted),
            "lost": sum(pk not in settled for pk in accepted), "duplicated": sum(n > 1 for n in settled.values())}


def _mixed_run(lab: Lab, label: str, per_pool: int, stall_s: float) -> tuple[Outcome, dict, dict]:
    """A burst mixed over the five pools, one node of 2 slots each; with `stall_s`, the mysql
    agents' judge database (on their own host) paused by SIGSTOP as the burst starts."""
    from django.db import connection
    from django.utils import timezone

    from bench.acceptance import LANGUAGE
    from bench.dispatch import make_nodes
    from tests.factories import make_problem

    since, started = last_submission_id(), timezone.now()
    try:
        problems = {pool: make_problem(kind="SQL" if pool == "mysql" else "ALGO", languages=(LANGUAGE[pool],),
                                       cases=2) for pool in JUDGE_POOLS}
        nodes = {pool: make_nodes(1, 2, pool=pool)[0] for pool in JUDGE_POOLS}
    finally:
        connection.close()
    judge_db = f"judge-db-{label}"
    lab.spawn(judge_db, JUDGE_POOLS["mysql"], ["redis-server", "--bind", address(JUDGE_POOLS["mysql"]), "--port",
                                                str(JUDGE_DB_PORT), "--save", "", "--appendonly", "no"])
    lab.wait(lambda: _port_open(address(JUDGE_POOLS["mysql"]), JUDGE_DB_PORT), judge_db, 20)
    agents = {}
    for pool, host in JUDGE_POOLS.items():
        env = {**lab.env, "LAB_JUDGE_DB": f"{address(host)}:{JUDGE_DB_PORT}"} if pool == "mysql" else None
        agents[pool] = lab.start_agent(host, nodes[pool], slots=2, judge_s=0.3, env=env)
    users, sql_users = Users(lab, 8), Users(lab, 2)
    plan = [pool for _ in range(per_pool) for pool in JUDGE_POOLS]
    sql_accepted: list[int] = []

    def one(n):
        pool = plan[n]
        submission = (sql_users if pool == "mysql" else users).submit(n, problem=problems[pool],
                                                                       language=LANGUAGE[pool])
        if pool == "mysql" and submission is not None:
            sql_accepted.append(submission)

    def stall():
        pid = lab.procs[judge_db].pid
        os.killpg(pid, signal.SIGSTOP)
        time.sleep(stall_s)
        os.killpg(pid, signal.SIGCONT)

    fault = threading.Thread(target=stall) if stall_s else None
    if fault:
        fault.start()
    with ThreadPoolExecutor(8) as clients:
        list(clients.map(one, range(len(plan))))
    if fault:
        fault.join()
    sql = _sql_settled(sql_accepted, 120)
    # The SQL submissions' histories out of the checker's way: their ids are of another
    # submission type, which it does not tell apart (counted above instead).
    sql_users.out.close()
    for path in (Path(sql_users.out.name), lab.agents[agents["mysql"]]["history"]):
        path.rename(path.with_name(f"i-{label}-sql-{path.name}.done"))
    lab.agents[agents["mysql"]]["history"] = path.with_name(f"i-{label}-sql-{path.name}.done")
    sql["results answered settled"] = sum(op.get("status") == "settled" for op in lab.agent_ops(agents["mysql"]))
    outcome = finish(lab, f"i-{label}", since, {}, timeout=120)
    judge_db_process = lab.procs.pop(judge_db)
    judge_db_process.kill()
    judge_db_process.wait()
    return outcome, _pool_figures(started), sql


def scenario_i(lab: Lab, quick: bool) -> Outcome:
    stall_s = LEASE_S * 2
    per_pool = 10 if quick else 30
    print(f"(i) the mysql pool's judge database paused for {stall_s} s (lease {LEASE_S} s) during a burst of "
          f"{per_pool * len(JUDGE_POOLS)} over the five pools, beside a clean run")
    clean_outcome, clean_run, clean_sql = _mixed_run(lab, "clean", per_pool, 0)
    outcome, stalled, stalled_sql = _mixed_run(lab, "stalled", per_pool, stall_s)
    for pool in JUDGE_POOLS:
        print(f"  [i] {pool:6} clean: {clean_run.get(pool)}\n  [i] {'':6} stalled: {stalled.get(pool)}")
    notes = {"clean run checker": "OK" if clean_outcome.figures.ok else "FAILED",
             "mysql (SQL submissions) clean": clean_sql, "mysql stalled": stalled_sql,
             "mysql SYSTEM_ERROR": stalled.get("mysql", {}).get("SYSTEM_ERROR")}

    def makespan(run, pool):
        return (run.get(pool) or {}).get("makespan s") or float("inf")

    # Slower: by more than a second (three judging rounds of 0.3 s) and 25 % of the clean run.
    slower = [pool for pool in JUDGE_POOLS if pool != "mysql" and makespan(stalled, pool)
              > max(makespan(clean_run, pool) * 1.25, makespan(clean_run, pool) + 1)]
    notes["other pools slowed"] = slower or "none"
    notes["failed"] = bool(slower) or not clean_outcome.figures.ok or any(
        run["lost"] or run["duplicated"] or run["settled once"] != run["accepted"]
        or run["results answered settled"] != run["accepted"] for run in (clean_sql, stalled_sql))
    print("  [i] " + "; ".join(f"{k}: {v}" for k, v in notes.items() if k != "failed"))
    outcome.notes.update(notes)
    return outcome


SCENARIOS = {"a": scenario_a, "b": scenario_b, "c": scenario_c, "d": scenario_d, "e": scenario_e,
             "f": scenario_f, "g": scenario_g, "h": scenario_h, "i": scenario_i}


def main(argv: list[str]) -> int:
    if argv[:1] == ["clean"]:
        return clean()
    parser = argparse.ArgumentParser(prog="python -m bench.lab", description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", default=list(SCENARIOS),
                        help=f"which to run ({' '.join(SCENARIOS)}; default all); `clean` tears a left lab down")
    parser.add_argument("--quick", action="store_true", help="shorter bursts (the CI variant)")
    parser.add_argument("--no-sentinels", action="store_true",
                        help="no Sentinels on db2: every process uses the primary's one address (not with f)")
    args = parser.parse_args(argv)
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"no scenario {unknown}")
    import warnings

    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    outcomes = []
    try:
        with Lab(sentinels=not args.no_sentinels) as lab:
            for key in args.scenarios:
                started, marks = time.monotonic(), lab.log_marks()
                outcome = SCENARIOS[key](lab, args.quick)
                if not outcome.ok:
                    for line in lab.complaints_since(marks):
                        print(f"  [{key}] log: {line}")
                print(f"  [{key}] {time.monotonic() - started:.0f} s", flush=True)
                outcomes.append(outcome)
    except LabError as error:
        print(f"lab: {error}")
        return 2
    print("lab summary:")
    for outcome in outcomes:
        print(f"  ({outcome.name}) {outcome.figures.line()} -> {'OK' if outcome.ok else 'FAILED'}")
    return 0 if all(o.ok for o in outcomes) else 1
