"""A small control plane that speaks the node side of API.md, for driving a real agent.

It keeps jobs, leases and results in memory and follows the contract's rules that an agent
can observe: join codes are single-use, each session raises the epoch and releases the
previous session's leases, claims long-poll, each claim raises the lease epoch by one,
renew answers per item, artifacts are checked against the job's manifest and the lease,
results are idempotent (same lease + same body → ``duplicate``), INFRA_ERROR requeues until
the attempt limit, RELEASED requeues without counting the attempt, and an expired lease is
reaped. Tests reach in through its methods to add jobs, corrupt data or supersede sessions.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PREFIX = "/api/v1/internal/judgers"
MAX_ATTEMPTS = 3


@dataclass
class Node:
    id: int
    pool: str
    runtime_spec: str
    credential: str | None = None
    probe_key: str | None = None
    session_epoch: int = 0
    desired_state: str = "ENABLED"
    max_slots: int = 8
    heartbeats: list = field(default_factory=list)
    sessions_opened: int = 0
    joins: int = 0
    quarantine: dict | None = None  # {since, reason} while the control plane has it quarantined
    agent_version: str | None = None
    claims_asked: list = field(default_factory=list)  # monotonic arrival of each claim, long-poll or carried


@dataclass
class Job:
    id: int
    kind: str
    pool: str
    runtime_spec: str
    limits: dict
    source: dict | None
    cases: list
    sql: dict | None
    manifest: set
    node_id: int | None = None  # DIAGNOSTIC jobs are bound to a node
    state: str = "QUEUED"  # QUEUED RUNNING COMPLETED FAILED CANCELLED
    owner: int | None = None
    session_epoch: int | None = None
    lease_epoch: int = 0
    lease_until: float = 0.0
    attempts: int = 0
    settled: dict | None = None  # {"lease": n, "digest": str, "body": dict}
    results: list = field(default_factory=list)  # every result body accepted (any status)
    claims: list = field(default_factory=list)  # (node, session, lease epoch, time)
    progress: dict | None = None  # last progress reported by a successful renew


TRICKLE_S = 0.2


class FakeControlPlane:
    def __init__(self, *, lease_ttl_ms: int = 20000, renew_ms: int = 1000, heartbeat_ms: int = 1000,
                 claim_wait_ms: int = 2000):
        self.lease_ttl_ms = lease_ttl_ms
        self.renew_ms = renew_ms
        self.heartbeat_ms = heartbeat_ms
        self.claim_wait_ms = claim_wait_ms
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.nodes: dict[int, Node] = {}
        self.join_codes: dict[str, int] = {}
        # A used code -> (node, the join's key and try, the node's heartbeats then): as the
        # server, the same code and key join again on a later try until the node is heard
        # from (`nodes.services.node_join`).
        self.used_join_codes: dict[str, tuple[int, str, int, int]] = {}
        self.join_retries = True  # False: a server that takes no join twice
        self.jobs: dict[int, Job] = {}
        self.blobs: dict[str, bytes] = {}
        self.corrupt: set[str] = set()
        self.wrong_source_text: dict[int, str] = {}  # job id -> the sourceText sent instead of its source
        self.faults: list[dict] = []
        # Routes whose next answers are lost: the call takes effect, the connection closes unanswered.
        self.lost_answers: list[dict] = []
        self.log: list[tuple[str, str, int]] = []
        self.carried_claims = 0  # result posts that carried the next claim
        self.carried_jobs = 0  # jobs leased through them
        self.claims_open = 0  # long polls being waited on
        self.downloads_under_way = 0
        self.most_downloads_at_once = 0
        # When set, a download is answered only once this many are under way together (or,
        # if they never are, after `gate_timeout` seconds: the test then sees fewer at once).
        self.download_gate: int | None = None
        self.gate_timeout = 20.0
        # Digest -> an event its downloads wait for (`hold_download`), with no time limit.
        self.held_downloads: dict[str, threading.Event] = {}
        # Digests whose downloads come a byte at a time, every TRICKLE_S, until the agent hangs up.
        self.trickled: set[str] = set()
        self._ids = itertools.count(1)
        self._job_ids = itertools.count(101)
        self._server: ThreadingHTTPServer | None = None
        self._stop = threading.Event()

    # -- test controls -----------------------------------------------------------------

    def register_node(self, pool: str, runtime_spec: str | None = None, desired_state: str = "ENABLED") -> tuple[int, str]:
        with self.lock:
            node = Node(id=next(self._ids), pool=pool, runtime_spec=runtime_spec or f"{pool}-r1",
                        desired_state=desired_state)
            self.nodes[node.id] = node
            code = "jc_" + secrets.token_hex(12)
            self.join_codes[code] = node.id
            return node.id, code

    def new_join_code(self, node_id: int) -> str:
        with self.lock:
            code = "jc_" + secrets.token_hex(12)
            self.join_codes = {c: n for c, n in self.join_codes.items() if n != node_id}
            self.used_join_codes = {c: used for c, used in self.used_join_codes.items() if used[0] != node_id}
            self.join_codes[code] = node_id
            return code

    def hold_download(self, data: bytes | str) -> threading.Event:
        """Downloads of this content wait until the returned event is set (and when the
        plane stops)."""
        digest = hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()
        with self.lock:
            return self.held_downloads.setdefault(digest, threading.Event())

    def blob(self, data: bytes | str) -> dict:
        if isinstance(data, str):
            data = data.encode()
        digest = hashlib.sha256(data).hexdigest()
        with self.lock:
            self.blobs[digest] = data
        return {"digest": digest, "bytes": len(data)}

    def add_job(self, *, pool: str, source: str | bytes | None, cases=(), limits: dict | None = None,
                kind: str = "JUDGE", sql: dict | None = None, node_id: int | None = None,
                runtime_spec: str | None = None) -> int:
        limits = limits or {"timeLimitMs": 1000, "memoryLimitMb": 128, "outputLimitKb": 64}
        manifest = set()
        src = None
        if source is not None:
            src = dict(self.blob(source), language=pool)
            manifest.add(src["digest"])
        case_list = []
        for ordinal, (inp, out, weight) in enumerate(cases, start=1):
            i, o = self.blob(inp), self.blob(out)
            manifest |= {i["digest"], o["digest"]}
            case_list.append({"ordinal": ordinal, "weight": weight, "input": i, "output": o})
        sql_obj = None
        if sql is not None:
            sql_obj = {"dialect": "mysql", "ordered": bool(sql.get("ordered"))}
            for key in ("schema", "seed", "answer", "check"):
                text = sql.get(key)
                sql_obj[key] = self.blob(text) if text is not None else None
                if text is not None:
                    manifest.add(sql_obj[key]["digest"])
        with self.lock:
            job = Job(id=next(self._job_ids), kind=kind, pool=pool, runtime_spec=runtime_spec or f"{pool}-r1",
                      limits=limits, source=src, cases=case_list, sql=sql_obj, manifest=manifest, node_id=node_id)
            self.jobs[job.id] = job
            self.changed.notify_all()
            return job.id

    def wait_settled(self, job_id: int, timeout: float = 60) -> Job:
        end = time.monotonic() + timeout
        with self.lock:
            while self.jobs[job_id].state not in ("COMPLETED", "FAILED", "CANCELLED"):
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} not settled: {self.jobs[job_id].state}")
                self.changed.wait(min(left, 0.2))
            return self.jobs[job_id]

    def wait_for(self, predicate, timeout: float = 30, what: str = "condition"):
        end = time.monotonic() + timeout
        with self.lock:
            while True:
                value = predicate()
                if value:
                    return value
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"timed out waiting for {what}")
                self.changed.wait(min(left, 0.1))

    def supersede(self, node_id: int) -> None:
        """Another session of this node opened (as if a second agent started): epoch + 1."""
        with self.lock:
            node = self.nodes[node_id]
            node.session_epoch += 1
            self._release_node_leases(node)
            self.changed.notify_all()

    def cancel(self, job_id: int) -> None:
        with self.lock:
            self.jobs[job_id].state = "CANCELLED"
            self.changed.notify_all()

    def inject(self, path_re: str, status: int, code: str, count: int = 1, retry_after: str | None = None):
        with self.lock:
            self.faults.append({"re": re.compile(path_re), "status": status, "code": code, "count": count,
                                "retry_after": retry_after})

    def lose_answers(self, path_re: str, count: int = 1) -> None:
        """The next `count` calls matching `path_re` take effect but get no answer."""
        with self.lock:
            self.lost_answers.append({"re": re.compile(path_re), "count": count})

    def calls(self, needle: str) -> list[tuple[str, str, int]]:
        with self.lock:
            return [entry for entry in self.log if needle in entry[1]]

    # -- server ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeControlPlane":
        handler = type("H", (_Handler,), {"plane": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        threading.Thread(target=self._reaper, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self.lock:
            for held in self.held_downloads.values():
                held.set()
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def _reaper(self) -> None:
        while not self._stop.wait(0.2):
            with self.lock:
                now = time.monotonic()
                for job in self.jobs.values():
                    if job.state == "RUNNING" and job.lease_until < now:
                        self._requeue(job, count_attempt=True)
                        self.changed.notify_all()

    # -- contract logic (all under self.lock) --------------------------------------------

    def _release_node_leases(self, node: Node) -> None:
        for job in self.jobs.values():
            if job.state == "RUNNING" and job.owner == node.id:
                self._requeue(job, count_attempt=False)

    def _requeue(self, job: Job, count_attempt: bool) -> None:
        if count_attempt and job.attempts >= MAX_ATTEMPTS:
            job.state = "FAILED"
        else:
            job.state = "QUEUED"
            if not count_attempt:
                job.attempts -= 1
        job.owner = None

    def _job_json(self, job: Job, inline_source: bool = False) -> dict:
        answer = {
            "jobId": job.id, "kind": job.kind, "submissionType": "DB" if job.sql else "ALGO",
            "submissionId": job.id + 1000, "generation": 1, "pool": job.pool, "leaseEpoch": job.lease_epoch,
            "leaseRemainingMs": self.lease_ttl_ms, "runtimeSpec": job.runtime_spec, "manifestId": job.id + 500,
            "limits": job.limits, "source": job.source, "cases": job.cases, "sql": job.sql,
        }
        if inline_source and job.source is not None:
            # As the server: the source's text along with the job, when the claim asks.
            text = self.blobs[job.source["digest"]].decode("utf-8", "replace")
            answer["sourceText"] = self.wrong_source_text.get(job.id, text)
        return answer

    def _lease(self, node: Node, free: int, inline_source: bool = False) -> list[dict]:
        """Lease up to `free` claimable jobs within the node's slots (lock held)."""
        headroom = min(free, node.max_slots - self._in_flight(node))
        ready = self._claimable(node)[:max(0, headroom)]
        now = time.monotonic()
        for job in ready:
            job.state = "RUNNING"
            job.owner = node.id
            job.session_epoch = node.session_epoch
            job.lease_epoch += 1
            job.attempts += 1
            job.lease_until = now + self.lease_ttl_ms / 1000
            job.claims.append((node.id, node.session_epoch, job.lease_epoch, now))
        if ready:
            self.changed.notify_all()
        return [self._job_json(j, inline_source) for j in ready]

    def _carried(self, node: Node, carried) -> dict:
        """The answer to a claim carried on a result post: no waiting."""
        if carried is None:
            return {}
        node.claims_asked.append(time.monotonic())
        self.carried_claims += 1
        jobs = self._lease(node, int(carried.get("freeSlots", 0)), carried.get("inlineSource") is True)
        self.carried_jobs += len(jobs)
        return {"jobs": jobs, "desiredState": node.desired_state}

    def _claimable(self, node: Node) -> list[Job]:
        out = []
        for job in sorted(self.jobs.values(), key=lambda j: j.id):
            if job.state != "QUEUED" or job.pool != node.pool or job.runtime_spec != node.runtime_spec:
                continue
            if job.kind == "DIAGNOSTIC":
                if job.node_id == node.id:
                    out.append(job)
            elif node.desired_state == "ENABLED":
                out.append(job)
        return out

    def _in_flight(self, node: Node) -> int:
        return sum(1 for j in self.jobs.values() if j.state == "RUNNING" and j.owner == node.id)


class ApiFault(Exception):
    def __init__(self, status: int, code: str, detail: str = "", retry_after: str | None = None):
        super().__init__(code)
        self.status, self.code, self.detail, self.retry_after = status, code, detail, retry_after


class _Handler(BaseHTTPRequestHandler):
    plane: FakeControlPlane
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _reply(self, status: int, body: dict | bytes, headers: dict | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        with self.plane.lock:
            self.plane.log.append((self.command, self.path, status))
            for lost in self.plane.lost_answers:
                if lost["count"] > 0 and lost["re"].search(self.path):
                    lost["count"] -= 1
                    self.close_connection = True
                    return
        self.send_response(status)
        ctype = "application/octet-stream" if isinstance(body, bytes) else "application/json"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _trickle(self, data: bytes) -> None:
        with self.plane.lock:
            self.plane.log.append((self.command, self.path, 200))
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            for index in range(len(data)):
                if self.plane._stop.wait(TRICKLE_S):
                    return
                self.wfile.write(data[index:index + 1])
                self.wfile.flush()
        except OSError:
            pass  # the agent hung up

    def _body(self) -> dict:
        try:
            data = json.loads(self._raw or b"{}")
        except ValueError:
            raise ApiFault(400, "invalid", "malformed JSON") from None
        if not isinstance(data, dict):
            raise ApiFault(400, "invalid", "object expected")
        return data

    def _node(self, session: bool = True) -> Node:
        auth = self.headers.get("Authorization", "")
        plane = self.plane
        node = next((n for n in plane.nodes.values() if n.credential and auth == f"Bearer {n.credential}"), None)
        if node is None:
            raise ApiFault(401, "unauthenticated")
        if session:
            if self.headers.get("X-Judge-Session") != str(node.session_epoch):
                raise ApiFault(409, "session_superseded")
        return node

    def _dispatch(self) -> None:
        path = self.path
        if not path.startswith(PREFIX + "/"):
            raise ApiFault(404, "not_found")
        route = path[len(PREFIX):]
        plane = self.plane
        with plane.lock:
            for fault in plane.faults:
                if fault["count"] > 0 and fault["re"].search(route):
                    fault["count"] -= 1
                    raise ApiFault(fault["status"], fault["code"], "injected", fault["retry_after"])
        if self.command == "POST" and route == "/join":
            return self._join()
        if self.command == "POST" and route == "/session":
            return self._session()
        if self.command == "POST" and route == "/heartbeat":
            return self._heartbeat()
        if self.command == "POST" and route == "/jobs/claim":
            return self._claim()
        if self.command == "POST" and route == "/jobs/renew":
            return self._renew()
        m = re.fullmatch(r"/jobs/(\d+)/artifacts/([^/]+)", route)
        if self.command == "GET" and m:
            return self._artifact(int(m.group(1)), m.group(2))
        m = re.fullmatch(r"/jobs/(\d+)/result", route)
        if self.command == "POST" and m:
            return self._result(int(m.group(1)))
        raise ApiFault(404, "not_found")

    def _handle(self) -> None:
        # Read the whole body first, so an early error never leaves bytes on a kept-alive connection.
        length = int(self.headers.get("Content-Length") or 0)
        self._raw = self.rfile.read(length) if length else b""
        try:
            self._dispatch()
        except ApiFault as exc:
            headers = {"Retry-After": exc.retry_after} if exc.retry_after else None
            self._reply(exc.status, {"error": exc.code, "detail": exc.detail}, headers)

    do_GET = do_POST = _handle

    def _session_answer(self, node: Node) -> dict:
        p = self.plane
        return {"nodeId": node.id, "pool": node.pool, "sessionEpoch": node.session_epoch, "protocolVersion": 1,
                "desiredState": node.desired_state, "heartbeatIntervalMs": p.heartbeat_ms,
                "renewIntervalMs": p.renew_ms, "leaseTtlMs": p.lease_ttl_ms, "claimWaitMs": p.claim_wait_ms}

    def _join(self) -> None:
        body = self._body()
        p = self.plane
        with p.lock:
            code, key, attempt = str(body.get("joinCode")), body.get("joinKey"), body.get("joinAttempt") or 0
            node_id = p.join_codes.pop(code, None)
            if node_id is None and p.join_retries and key and code in p.used_join_codes:
                used_by, used_key, used_attempt, heartbeats = p.used_join_codes[code]
                if used_key == key and attempt > used_attempt and len(p.nodes[used_by].heartbeats) == heartbeats:
                    node_id = used_by  # its first answer was lost
            if node_id is None:
                raise ApiFault(401, "invalid_join_code")
            node = p.nodes[node_id]
            if key:
                p.used_join_codes[code] = (node_id, key, attempt, len(node.heartbeats))
            node.credential = "cred_" + secrets.token_hex(16)
            node.probe_key = "pk_" + secrets.token_hex(16)
            node.session_epoch += 1
            node.joins += 1
            node.sessions_opened += 1
            node.agent_version = body.get("agentVersion")
            node.runtime_spec = body.get("runtimeSpec") or node.runtime_spec
            p._release_node_leases(node)
            answer = self._session_answer(node)
            answer.update(credential=node.credential, probeKey=node.probe_key)
            p.changed.notify_all()
        self._reply(201, answer)

    def _session(self) -> None:
        p = self.plane
        with p.lock:
            if self.headers.get("X-Judge-Session"):
                raise ApiFault(400, "invalid", "session carries no X-Judge-Session")
            node = self._node(session=False)
            body = self._body()
            node.session_epoch += 1
            node.sessions_opened += 1
            node.runtime_spec = body.get("runtimeSpec") or node.runtime_spec
            p._release_node_leases(node)
            answer = self._session_answer(node)
            p.changed.notify_all()
        self._reply(200, answer)

    def _heartbeat(self) -> None:
        p = self.plane
        with p.lock:
            node = self._node()
            body = self._body()
            for key in ("agentVersion", "runtimeSpec", "localSlots", "running", "health"):
                if key not in body:
                    raise ApiFault(400, "invalid", f"{key} missing")
            node.heartbeats.append(body)
            answer = {"desiredState": node.desired_state, "maxSlots": node.max_slots,
                      "serverTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "heartbeatIntervalMs": p.heartbeat_ms, "quarantine": node.quarantine}
            p.changed.notify_all()
        self._reply(200, answer)

    def _claim(self) -> None:
        p = self.plane
        with p.lock:
            node = self._node()
            node.claims_asked.append(time.monotonic())
            body = self._body()
            free = body.get("freeSlots")
            wait_ms = body.get("waitMs", p.claim_wait_ms)
            if not isinstance(free, int) or free < 1 or not isinstance(wait_ms, int) or wait_ms < 0:
                raise ApiFault(400, "invalid", "freeSlots/waitMs")
            epoch = node.session_epoch
            end = time.monotonic() + min(wait_ms, p.claim_wait_ms) / 1000
            p.claims_open += 1
            try:
                while True:
                    if node.session_epoch != epoch:
                        raise ApiFault(409, "session_superseded")
                    ready = p._lease(node, free, body.get("inlineSource") is True)
                    if ready:
                        answer = {"jobs": ready, "desiredState": node.desired_state}
                        break
                    left = end - time.monotonic()
                    if left <= 0:
                        answer = {"jobs": [], "desiredState": node.desired_state}
                        break
                    p.changed.wait(min(left, 0.1))
            finally:
                p.claims_open -= 1
                p.changed.notify_all()
        self._reply(200, answer)

    def _renew(self) -> None:
        p = self.plane
        with p.lock:
            node = self._node()
            items = self._body().get("leases")
            if not isinstance(items, list) or len(items) > 64:
                raise ApiFault(400, "invalid", "leases")
            now = time.monotonic()
            out = []
            for item in items:
                job = p.jobs.get(item.get("jobId"))
                progress = item.get("progress") or {}
                if progress.get("phase") not in ("COMPILING", "JUDGING"):
                    raise ApiFault(400, "invalid", "progress.phase")
                if job is not None and job.state == "CANCELLED" and job.owner == node.id:
                    out.append({"jobId": item.get("jobId"), "ok": False, "error": "cancelled"})
                elif (job is None or job.state != "RUNNING" or job.owner != node.id
                      or job.lease_epoch != item.get("leaseEpoch") or job.lease_until < now):
                    out.append({"jobId": item.get("jobId"), "ok": False, "error": "lease_lost"})
                else:
                    job.lease_until = now + p.lease_ttl_ms / 1000
                    job.progress = progress
                    p.changed.notify_all()
                    out.append({"jobId": job.id, "ok": True, "leaseRemainingMs": p.lease_ttl_ms})
        self._reply(200, {"leases": out})

    def _artifact(self, job_id: int, digest: str) -> None:
        p = self.plane
        with p.lock:
            node = self._node()
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ApiFault(400, "invalid", "bad digest")
            job = p.jobs.get(job_id)
            if (job is None or job.state != "RUNNING" or job.owner != node.id
                    or self.headers.get("X-Judge-Lease") != str(job.lease_epoch)):
                raise ApiFault(409, "lease_lost")
            if digest not in job.manifest or digest not in p.blobs:
                raise ApiFault(404, "not_in_manifest")
            data = p.blobs[digest]
            if digest in p.corrupt:
                data = bytes([data[0] ^ 0x20]) + data[1:] if data else b"x"
            p.downloads_under_way += 1
            p.most_downloads_at_once = max(p.most_downloads_at_once, p.downloads_under_way)
            p.changed.notify_all()
            if p.download_gate is not None:
                p.changed.wait_for(lambda: p.most_downloads_at_once >= p.download_gate, timeout=p.gate_timeout)
            held = p.held_downloads.get(digest)
            trickle = digest in p.trickled
        try:
            if held is not None:
                held.wait()
            if trickle:
                return self._trickle(data)
            self._reply(200, data, {"X-Content-SHA256": digest})
        finally:
            with p.lock:
                p.downloads_under_way -= 1

    def _result(self, job_id: int) -> None:
        p = self.plane
        with p.lock:
            node = self._node()
            body = self._body()
            carried = body.pop("claim", None)  # the optional next claim is not part of the result
            job = p.jobs.get(job_id)
            if job is None:
                raise ApiFault(409, "lease_lost")
            lease = body.get("leaseEpoch")
            outcome = body.get("outcome")
            if outcome not in ("JUDGED", "INFRA_ERROR", "RELEASED"):
                raise ApiFault(400, "invalid", "outcome")
            if outcome == "JUDGED":
                for key in ("verdict", "score", "timeMs", "memoryKb", "compileOutput", "cases"):
                    if key not in body:
                        raise ApiFault(400, "invalid", f"{key} missing")
                if body["verdict"] not in ("AC", "WA", "TLE", "MLE", "RE", "CE", "OLE"):
                    raise ApiFault(400, "invalid", "verdict")
            digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
            if job.settled is not None and job.settled["lease"] == lease and job.owner in (None, node.id):
                if job.settled["digest"] == digest:
                    self._reply_locked(200, {"status": "duplicate", **p._carried(node, carried)})
                    return
                raise ApiFault(409, "result_conflict")
            if job.state == "CANCELLED":
                raise ApiFault(409, "superseded")
            if job.state != "RUNNING" or job.owner != node.id or job.lease_epoch != lease \
                    or job.session_epoch != node.session_epoch:
                raise ApiFault(409, "lease_lost")
            job.results.append(body)
            if outcome == "JUDGED":
                job.state = "COMPLETED"
                status = "settled"
                job.settled = {"lease": lease, "digest": digest, "body": body}
            elif outcome == "RELEASED":
                p._requeue(job, count_attempt=False)
                status = "requeued"
                job.settled = {"lease": lease, "digest": digest, "body": body}
            else:
                p._requeue(job, count_attempt=True)
                status = "failed" if job.state == "FAILED" else "requeued"
                job.settled = {"lease": lease, "digest": digest, "body": body}
            p.changed.notify_all()
            answer = {"status": status, **p._carried(node, carried)}
        self._reply(200, answer)

    def _reply_locked(self, status: int, body: dict) -> None:
        self._reply(status, body)
