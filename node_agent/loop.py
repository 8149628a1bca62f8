"""The protocol loop: session, heartbeat, claim, renew, judge, report.

Threads, each a small ``*_step`` called in a loop so it can be tested alone:

* **claim** — opens the session (joining first if the credential file holds a join code),
  then keeps at most ONE long-poll claim in flight, asking for the free local slots;
* **heartbeat** — every ``heartbeatIntervalMs``;
* **renew** — every ``renewIntervalMs``, one batch call (≤ 64 per call) for every held lease;
* **watchdog** — kills a job whose local lease deadline or total time limit passed;
* one **worker** per claimed job, up to ``JUDGE_LOCAL_SLOTS`` at once.

Lease deadlines use ``time.monotonic()``: receipt time + ``leaseRemainingMs`` − a safety
margin, moved by every successful renew. If renewals fail until then, the sandbox is
killed and the job dropped *before* the server could give it to another node, so two nodes
never judge the same lease at once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import AGENT_VERSION, PROTOCOL_VERSION, credentials, diagnostics, judge, log, sqljudge, verdicts
from .cache import DISK_HEADROOM, ArtifactCache, ArtifactError, CacheUnwritable, DiskFull, Pins
from .client import ApiError, Backoff, Client, TransportError
from .config import Config
from .credentials import JoinCode, NodeCredential
from .health import Identity
from .jobs import InfraError, JobCancelled, JobContext
from .metrics import AgentMetrics
from .sandbox import Sandbox, new_run_dir, remove_tree, sweep_runs

logger = log.get("loop")

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_RUNTIME = 3
EXIT_AUTH = 4
# A session superseded twice within the window means another agent holds the credential
# (`Agent._wait_out_a_twin`): wait before taking the session back, longer each time.
TWIN_WINDOW_S = 3600.0
TWIN_BACKOFF_S = 5.0
TWIN_BACKOFF_MAX_S = 300.0
DROP_CODES = frozenset({"lease_lost", "superseded", "result_conflict", "cancelled"})


def _soon_or_when_told(exc: ApiError, interval: float, soon: float = 1.0) -> float:
    """The wait before a call the server refused for now is tried again: `soon`, or as long as
    its Retry-After says, but never past the call's own interval (a heartbeat missed for
    longer would make the node offline, a renewal its leases late)."""
    return max(min(interval, soon), min(exc.retry_after or 0.0, interval))


class Fatal(Exception):
    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code


class LeaseLost(Exception):
    pass


def safety_margin_s(remaining_ms: int) -> float:
    """Stop this long before the server's lease ends: 10 %, and up to 5 s when the lease allows."""
    return max(0.10 * remaining_ms, min(5000.0, 0.25 * remaining_ms)) / 1000


@dataclass
class Session:
    node_id: int
    epoch: int
    heartbeat_ms: int
    renew_ms: int
    lease_ttl_ms: int
    claim_wait_ms: int
    desired_state: str | None = None

    @classmethod
    def from_answer(cls, data: dict) -> "Session":
        try:
            return cls(
                node_id=int(data["nodeId"]), epoch=int(data["sessionEpoch"]),
                heartbeat_ms=int(data["heartbeatIntervalMs"]), renew_ms=int(data["renewIntervalMs"]),
                lease_ttl_ms=int(data["leaseTtlMs"]), claim_wait_ms=int(data["claimWaitMs"]),
                desired_state=data.get("desiredState"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TransportError(f"session answer is missing fields: {exc}") from None


# The shortest time between two renewals sent for a job's progress (`Agent.until_next_renew`).
PROGRESS_REPORT_S = 2.0
# How often a claim waiting out its backoff looks whether the control plane has answered
# another call meanwhile (`_wait_until_answered`).
ANSWER_POLL_S = 0.5


class JobRun:
    """One claimed lease, from claim to result (or drop)."""

    def __init__(self, job: dict, session_epoch: int, received: float, job_max_s: float, pins: Pins | None = None,
                 on_progress=None):
        self.job = job
        self.job_id = int(job["jobId"])
        self.lease_epoch = int(job["leaseEpoch"])
        self.session_epoch = session_epoch
        self.log = log.JobLog(logger, self.job_id, self.lease_epoch)
        self.cancel = threading.Event()
        remaining = int(job.get("leaseRemainingMs") or 0)
        self.deadline = received + remaining / 1000 - safety_margin_s(remaining)
        self.total_deadline = received + min(job_max_s, total_budget_s(job))
        self.phase = "COMPILING"
        self.testcase: int | None = None
        self.state = "running"  # running → posting → finished
        self.drop_reason: str | None = None
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.run_dir: Path | None = None
        self.pins = pins  # the cached files this job uses, kept until it ends
        self.on_progress = on_progress

    def set_progress(self, phase: str, testcase: int | None) -> None:
        if phase != self.phase or testcase != self.testcase:
            self.phase, self.testcase = phase, testcase
            self.log.debug("progress", phase=phase, testcase=testcase)
            if self.on_progress is not None:
                self.on_progress()

    def abort(self, reason: str, *, unless_posting: bool = False) -> bool:
        """Stop judging now. False if the result is already being posted; `unless_posting`:
        then leave the job to its post altogether (no drop reason for its retries)."""
        with self.lock:
            if unless_posting and self.state == "posting":
                return False
            if self.drop_reason is None:
                self.drop_reason = reason
            self.cancel.set()
            return self.state == "running"

    def begin_post(self) -> bool:
        with self.lock:
            if self.drop_reason is not None:
                return False
            self.state = "posting"
            return True

    def begin_post_after_timeout(self) -> bool:
        """A job stopped by its total time limit still holds its lease: report INFRA_ERROR."""
        with self.lock:
            if self.drop_reason != "job_timeout":
                return False
            self.state = "posting"
            return True

    def renew_item(self) -> dict:
        return {"jobId": self.job_id, "leaseEpoch": self.lease_epoch,
                "progress": {"phase": self.phase, "testcase": self.testcase or 0}}


def total_budget_s(job: dict) -> float:
    """Compile, every case, transfers and cleanup: beyond this something is stuck."""
    limits = job.get("limits") or {}
    time_ms = int(limits.get("timeLimitMs") or 1000)
    if job.get("kind") == "DIAGNOSTIC":
        return 300.0
    cases = len(job.get("cases") or []) or 1
    return 120.0 + cases * (time_ms * 2 + 2000) / 1000


def sent_source(job: dict, digest: str) -> bytes | None:
    """The source the claim sent along with the job (`sourceText`), if it is the one `digest`
    names; else None, and the source is downloaded."""
    text = job.get("sourceText")
    if not isinstance(text, str) or digest != (job.get("source") or {}).get("digest"):
        return None
    try:
        inline = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no bytes of the source
        return None
    return inline if hashlib.sha256(inline).hexdigest() == digest else None


class Agent:
    def __init__(self, config: Config, client: Client, sandbox: Sandbox, identity: Identity,
                 judge_db: sqljudge.JudgeDb | None = None, metrics: AgentMetrics | None = None):
        self.config = config
        self.client = client
        self.sandbox = sandbox
        self.identity = identity
        self.judge_db = judge_db
        self.runs_root = config.workspace / "runs"
        self.metrics = metrics or AgentMetrics()
        self.cache = ArtifactCache(config.workspace / "cache", high_bytes=config.cache_max_mb << 20,
                                   low_bytes=config.cache_low_mb << 20, on_evict=self.metrics.cache_evictions.inc)
        # Bytes a download needed when the cache's disk was full; while set, nothing is claimed.
        self.disk_full_need: int | None = None
        # What made the workspace unable to take a job (its run or cache folder refused a
        # write, its disk was full when a job ended); while set, nothing is claimed.
        self.workspace_fault: str | None = None
        self.lock = threading.Lock()
        # Creating a run folder and sweeping the others must not interleave, or a sweep
        # could remove a folder a worker has just made.
        self.runs_lock = threading.Lock()
        self.slot_freed = threading.Condition(self.lock)
        self.jobs: dict[int, JobRun] = {}
        self.session: Session | None = None
        self.superseded_at: list[float] = []  # monotonic times of this agent's sessions superseded
        self.max_slots: int | None = None
        self.quarantine: dict | None = None  # the control plane's, as its last heartbeat answer said
        # While the control plane is away each loop fails every few seconds: said once a minute.
        self.heartbeat_failures = log.Repeated(logger, "heartbeat")
        self.claim_failures = log.Repeated(logger, "claim")
        self.renew_failures = log.Repeated(logger, "renew")
        self.stop_requested = threading.Event()
        # A job's phase or test case moved: the renew loop reports it before its round is due.
        self.progress_moved = threading.Event()
        self.stopping = False
        self.fatal: Fatal | None = None
        self.threads: list[threading.Thread] = []
        self.health_checks: dict[str, bool] = {}
        self._failing_checks: list[str] = []  # as the last heartbeat found them
        self.metrics.watch(slots=self.slot_limit, slots_busy=lambda: len(self.jobs),
                           cache_bytes=lambda: self.cache.total_bytes, last_answer=lambda: client.last_answer)

    # -- lifecycle ---------------------------------------------------------------------

    def request_stop(self, *_args) -> None:
        """Signal handler: only sets a flag, the main thread does the work. Set from a
        thread of its own: the handler runs in the main thread, which may be inside
        `stop_requested.wait` holding the event's lock, and `set` there would wait for
        that lock for ever."""
        threading.Thread(target=self.stop_requested.set, name="stop", daemon=True).start()

    def run(self) -> int:
        try:
            self.session = self.open_session()
        except Fatal as exc:
            log.event(logger, logging.ERROR, str(exc))
            return exc.exit_code
        if self.session is None:  # stopped before the server answered
            return EXIT_OK
        self._after_session()
        loops = [("claim", self.claim_loop), ("heartbeat", self.heartbeat_loop), ("renew", self.renew_loop),
                 ("watchdog", self.watchdog_loop)]
        if self.judge_db is not None:
            loops.append(("sql-sweep", self.sql_sweep_loop))
        for name, target in loops:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self.threads.append(thread)
        self.stop_requested.wait()
        return self.shutdown()

    def _fail(self, fatal: Fatal) -> None:
        if self.fatal is None:
            self.fatal = fatal
        self.stop_requested.set()

    def shutdown(self) -> int:
        self.stopping = True
        if self.fatal is not None:
            log.event(logger, logging.ERROR, "stopping: " + str(self.fatal))
            for jr in self._jobs():
                jr.abort("fatal")
            self._join_workers(self._jobs(), 10)
            return self.fatal.exit_code
        grace = self.config.stop_grace_ms / 1000
        log.event(logger, logging.INFO, "stop requested: no new claims, finishing running jobs",
                  running=len(self.jobs), grace_s=grace)
        end = time.monotonic() + grace
        while self._jobs() and time.monotonic() < end and self.fatal is None:
            time.sleep(0.1)
        to_release = stopped_to_release(self._jobs())
        self._join_workers(to_release, 15)
        for jr in to_release:
            self.release(jr)
        # Results already being posted get a short while to land.
        self._join_workers(self._jobs(), 10)
        claim = next((t for t in self.threads if t.name == "claim"), None)
        if claim is not None:
            # A long-poll claim cannot be interrupted; what it brings after the stop is
            # given back at once (start_job releases it). Wait for it within the grace period.
            claim.join(timeout=max(0.0, end - time.monotonic()) + 0.5)
            if claim.is_alive():
                self._end_open_claim()
        log.event(logger, logging.INFO, "stopped", released=len(to_release))
        return EXIT_OK if self.fatal is None else self.fatal.exit_code

    def _end_open_claim(self) -> None:
        """A long poll still open as the agent leaves would lease jobs to no one, and they would
        wait out their leases. A new session ends it: the server answers the poll
        `session_superseded` and releases at once whatever it had leased."""
        try:
            self.client.open_session(runtime_spec=self.config.runtime_spec, local_slots=self.config.local_slots)
            log.event(logger, logging.INFO, "the claim still open at the stop was ended with a new session")
        except (ApiError, TransportError) as exc:
            log.event(logger, logging.WARNING, "the claim still open at the stop could not be ended",
                      error=str(exc)[:200])

    def _jobs(self) -> list[JobRun]:
        with self.lock:
            return list(self.jobs.values())

    @staticmethod
    def _join_workers(jobs: list[JobRun], timeout: float) -> None:
        end = time.monotonic() + timeout
        for jr in jobs:
            if jr.thread is not None:
                jr.thread.join(max(0.0, end - time.monotonic()))

    # -- session -----------------------------------------------------------------------

    def open_session(self) -> Session | None:
        """Join (when the file holds a join code) or open a session; retry while the server is away."""
        backoff = Backoff()
        joining_unanswered = False  # a join sent whose answer never came: the server may have used the code
        # Kept while this start retries: a join whose answer was lost is made again with it,
        # each try counted (an earlier try arriving late must not replace a later one's answer).
        join_key, join_attempt = secrets.token_urlsafe(24), 0
        while not self.stop_requested.is_set():
            try:
                cred = credentials.read(self.config.credential_file)
            except credentials.CredentialFileError as exc:
                raise Fatal(EXIT_CONFIG, f"JUDGE_CREDENTIAL_FILE: {exc}") from None
            try:
                if isinstance(cred, JoinCode):
                    join_attempt += 1
                    data = self.client.join(join_code=cred.code, join_key=join_key, join_attempt=join_attempt,
                                            runtime_spec=self.config.runtime_spec, local_slots=self.config.local_slots)
                    cred = NodeCredential(node_id=int(data["nodeId"]), credential=str(data["credential"]),
                                          probe_key=str(data["probeKey"]))
                    try:
                        credentials.write(self.config.credential_file, cred)
                    except OSError as exc:
                        # The join code is spent; without the file the next start could not
                        # authenticate, so say so now rather than run on a credential we will lose.
                        raise Fatal(EXIT_CONFIG, f"joined as node {cred.node_id} but cannot write "
                                    f"JUDGE_CREDENTIAL_FILE ({exc}); issue a new join code") from None
                    log.event(logger, logging.INFO, "joined; credential stored", node=cred.node_id)
                else:
                    self.client.credential = cred.credential
                    data = self.client.open_session(runtime_spec=self.config.runtime_spec,
                                                    local_slots=self.config.local_slots)
                self.client.credential = cred.credential
                self.identity.set(cred.node_id, cred.probe_key)
                session = Session.from_answer(data)
                self._check_session(data, session, cred)
                log.bind(node=session.node_id)
                log.event(logger, logging.INFO, "session open", node=session.node_id, session=session.epoch,
                          desired=session.desired_state, heartbeat_ms=session.heartbeat_ms,
                          renew_ms=session.renew_ms, lease_ms=session.lease_ttl_ms, claim_wait_ms=session.claim_wait_ms)
                return session
            except ApiError as exc:
                if exc.code == "invalid_join_code" and joining_unanswered:
                    raise Fatal(EXIT_AUTH, "the join code was refused as used: the first join with it reached the"
                                " server, but its answer (the node's credential) was lost on the way back, and the"
                                " server did not take the join again. Ask for a new join code and write it alone"
                                " into JUDGE_CREDENTIAL_FILE") from None
                if exc.code == "invalid_join_code":
                    raise Fatal(EXIT_AUTH, "the join code was refused (unknown, expired or already used): "
                                "ask for a new join code and write it alone into JUDGE_CREDENTIAL_FILE") from None
                if exc.status == 401:
                    raise Fatal(EXIT_AUTH, "the node credential was refused (revoked or unknown): "
                                "write a new join code into JUDGE_CREDENTIAL_FILE") from None
                if not exc.retryable:
                    raise Fatal(1, f"the server refused to open a session: {exc}") from None
                delay = backoff.next_delay(exc.retry_after)
                log.event(logger, logging.WARNING, "server busy; retrying session", error=exc.code,
                          retry_in_s=round(delay, 1))
            except (TransportError, KeyError, ValueError, TypeError) as exc:
                delay = backoff.next_delay()
                joining_unanswered = joining_unanswered or isinstance(cred, JoinCode)
                if _untrusted_certificate(exc):
                    # Retried (a renewed certificate may mend it), but said as what it is.
                    log.event(logger, logging.ERROR, "the control plane's certificate is not trusted: check"
                              " JUDGE_CA_FILE (the CA that signed it) and the host name in JUDGE_CONTROL_URL",
                              error=str(exc)[:300], retry_in_s=round(delay, 1))
                else:
                    log.event(logger, logging.WARNING, "control plane unreachable; retrying session",
                              error=str(exc)[:300], retry_in_s=round(delay, 1))
            self.stop_requested.wait(delay)
        return None

    def _check_session(self, data: dict, session: Session, cred: NodeCredential) -> None:
        pool = data.get("pool")
        if pool is not None and pool != self.config.pool:
            raise Fatal(EXIT_CONFIG, f"this node is registered for pool {pool!r} but JUDGE_POOL is "
                        f"{self.config.pool!r}")
        protocol = data.get("protocolVersion")
        if protocol is not None and int(protocol) != PROTOCOL_VERSION:
            raise Fatal(EXIT_CONFIG, f"server speaks protocol {protocol}, this agent {PROTOCOL_VERSION}")
        if session.node_id != cred.node_id:
            log.event(logger, logging.WARNING, "server node id differs from the credential file",
                      server=session.node_id, file=cred.node_id)

    def _after_session(self) -> None:
        """Leftovers of earlier runs are ours to remove once we know who we are."""
        removed = self.sweep()
        if removed:
            log.event(logger, logging.INFO, "swept leftover workspaces", count=len(removed))
        if self.judge_db is not None and self.session is not None:
            self.judge_db.node_id = self.session.node_id
            try:
                dbs, users = self.judge_db.sweep()
                if dbs or users:
                    log.event(logger, logging.INFO, "swept leftover judge databases", databases=len(dbs),
                              users=len(users))
            except Exception as exc:  # the judge MySQL being down must not stop the agent
                log.event(logger, logging.WARNING, "judge database sweep failed", error=str(exc)[:300])

    def on_superseded(self, epoch: int) -> None:
        """409 session_superseded: our leases are gone on the server; drop everything."""
        with self.lock:
            if self.session is None or self.session.epoch != epoch:
                return
            self.session = None
            self.superseded_at.append(time.monotonic())
            dropped = list(self.jobs.values())
            for jr in dropped:
                jr.abort("session_superseded")
            self.slot_freed.notify_all()
        log.event(logger, logging.WARNING, "session superseded: killed running sandboxes, dropped leases",
                  session=epoch, dropped=len(dropped))

    def _handle_api_error(self, exc: ApiError, epoch: int) -> None:
        if exc.code == "session_superseded":
            self.on_superseded(epoch)
        elif exc.status == 401:
            self._fail(Fatal(EXIT_AUTH, "the node credential was refused (revoked?): stopping"))

    # -- claim -------------------------------------------------------------------------

    def slot_limit(self) -> int:
        slots = self.config.local_slots
        if self.max_slots is not None:
            slots = min(slots, self.max_slots)
        return slots

    def free_slots(self) -> int:
        return max(0, self.slot_limit() - len(self.jobs))

    def cache_has_room(self) -> bool:
        """False while the cache's disk is full: checked again on each call, and once the
        download that failed would fit (after evicting what no job holds any more), true."""
        need = self.disk_full_need
        if need is None:
            return True
        if self.cache.free_disk() < need + DISK_HEADROOM:
            self.cache.evict_for(need)
            if self.cache.free_disk() < need + DISK_HEADROOM:
                return False
        if self.disk_full_need is not None:
            self.disk_full_need = None
            log.event(logger, logging.INFO, "the cache's disk has room again: claiming jobs again")
        return True

    def _note_disk_full(self, exc: DiskFull) -> None:
        if not self.cache.fits_disk(exc.needed):
            # No eviction or wait makes room for it: that job fails here (and is retried
            # elsewhere), and the node goes on judging everything else.
            log.event(logger, logging.ERROR, "a test file cannot fit on the cache's disk even when empty: its job"
                      " fails here; give the cache a larger disk", needed_bytes=exc.needed)
            return
        if self.disk_full_need is None:
            log.event(logger, logging.ERROR, "the cache's disk is full: no more claims until it has room",
                      needed_bytes=exc.needed, free_bytes=self.cache.free_disk())
        self.disk_full_need = max(exc.needed, self.disk_full_need or 0)

    def takes_work(self) -> bool:
        """Whether jobs claimed now could be judged here: the cache's disk has room, and the
        workspace is not known to refuse them."""
        return self.cache_has_room() and (self.workspace_fault is None or self.workspace_ready())

    def workspace_ready(self) -> bool:
        """Whether the workspace takes a job: its run and cache folders take a write and its
        disk has room (`_workspace_ok`). A fault noted by a job is cleared here, once they do."""
        ok = _workspace_ok(self.config.workspace, runs=self.runs_root, writable=(self.cache.root,))
        if ok and self.workspace_fault is not None:
            log.event(logger, logging.INFO, "the workspace takes jobs again: claiming jobs again",
                      was=self.workspace_fault)
            self.workspace_fault = None
        return ok

    def _note_workspace_fault(self, fault: str) -> None:
        if self.workspace_fault is None:
            log.event(logger, logging.ERROR, "the workspace cannot take jobs: no more claims until it can; look at"
                      " its disk's free space and the folders' permissions and mount", fault=fault[:300],
                      workspace=str(self.config.workspace))
        self.workspace_fault = fault

    def claim_loop(self) -> None:
        backoff = Backoff()
        while not self.stopping and not self.stop_requested.is_set():
            try:
                self.claim_step(backoff)
            except Fatal as exc:
                self._fail(exc)
                return
            except Exception:
                log.event(logger, logging.ERROR, "claim loop error", exc_info=True)
                self.stop_requested.wait(backoff.next_delay())

    def claim_step(self, backoff: Backoff) -> None:
        session = self.session
        if session is None:
            self._reset_for_new_session()
            if not self._wait_out_a_twin():
                return
            session = self.open_session()
            if session is None:
                return
            with self.lock:
                self.session = session
            self._after_session()
            return
        if not self.takes_work():
            # Jobs claimed now would only fail for want of space: wait, look again next turn.
            self.stop_requested.wait(min(2.0, session.heartbeat_ms / 1000))
            return
        with self.lock:
            free = self.free_slots()
            if free <= 0:
                self.slot_freed.wait(1.0)
                return
        started = time.monotonic()
        try:
            answer = self.client.claim(session_epoch=session.epoch, free_slots=free, wait_ms=session.claim_wait_ms)
        except ApiError as exc:
            self._handle_api_error(exc, session.epoch)
            if exc.code != "session_superseded" and exc.status != 401:
                delay = backoff.next_delay(exc.retry_after)
                self.claim_failures.failed(error=exc.code, retry_in_s=round(delay, 1))
                if exc.retry_after is None and exc.status >= 500:
                    self._wait_until_answered(delay, since=time.monotonic())  # a proxy's word for a server away
                else:
                    self.stop_requested.wait(delay)  # the server's own "not now"
            return
        except TransportError as exc:
            delay = backoff.next_delay()
            self.claim_failures.failed(error=str(exc)[:300], retry_in_s=round(delay, 1))
            self._wait_until_answered(delay, since=time.monotonic())
            return
        backoff.reset()
        self.claim_failures.succeeded()
        received = time.monotonic()
        self._note_desired(answer.get("desiredState"))
        jobs = answer.get("jobs") or []
        self.metrics.claimed(len(jobs))
        self.start_jobs(jobs, session, received)
        if not jobs and received - started < 1.0:
            # The server answered at once without work (e.g. disabled node): don't spin.
            self.stop_requested.wait(1.0)
        elif not jobs:
            # A pool's nodes that started together would otherwise poll in lockstep, every
            # claim wait on the same beat: a small random pause spreads them out.
            self.stop_requested.wait(random.uniform(0, self.config.claim_jitter_ms / 1000))

    def _wait_until_answered(self, delay: float, *, since: float) -> None:
        """Wait out a claim's backoff after the control plane was away, but no longer than
        until it answers another call made after the failure (`since`; the heartbeat, every
        few seconds): a backoff grown to half a minute over an outage would otherwise keep
        the node idle that much longer once the server is back. An answer from before the
        failure does not count: a claim that fails alone (a proxy cutting long-polls short)
        is then tried again at most once a heartbeat, not at once. The heartbeats of a
        pool's nodes are spread out, and so are their claims' returns."""
        end = time.monotonic() + delay
        while not self.stop_requested.is_set() and self.client.last_answer <= since:
            left = end - time.monotonic()
            if left <= 0:
                return
            self.stop_requested.wait(min(left, ANSWER_POLL_S))

    def _note_desired(self, desired: str | None) -> None:
        session = self.session
        if desired and session is not None and desired != session.desired_state:
            log.event(logger, logging.INFO, "desired state changed", old=session.desired_state, new=desired)
            session.desired_state = desired

    def _note_quarantine(self, found) -> None:
        """The control plane's word that it took this node out of judging for what it did
        (infrastructure errors, a stall, lost renewals): said when it begins and when it ends,
        since no judge job comes meanwhile and nothing else would tell the node's owner why."""
        quarantine = found if isinstance(found, dict) else None
        if (quarantine is None) == (self.quarantine is None):
            return
        if quarantine is not None:
            log.event(logger, logging.WARNING, "quarantined by the control plane: it sends this node only its own"
                      " checks until an administrator runs them and they pass (the console's node page)",
                      reason=str(quarantine.get("reason", ""))[:300], since=quarantine.get("since"))
        else:
            log.event(logger, logging.INFO, "quarantine lifted: judge jobs may come again")
        self.quarantine = quarantine

    def start_jobs(self, jobs: list, session: Session, received: float) -> None:
        for job in jobs:
            try:
                self.start_job(job, session, received)
            except (KeyError, TypeError, ValueError) as exc:
                # Not the contract's job object: nothing safe to run; its lease will lapse.
                log.event(logger, logging.ERROR, "malformed job in an answer", error=repr(exc)[:200])

    def start_job(self, job: dict, session: Session, received: float) -> None:
        jr = JobRun(job, session.epoch, received, self.config.job_max_ms / 1000, self.cache.pins(),
                    on_progress=self.progress_moved.set)
        with self.lock:
            running = self.jobs.get(jr.job_id)
            if running is not None and running.lease_epoch == jr.lease_epoch:
                # The server sent a lease this node already runs (an answer it thought lost
                # did arrive): one run per lease.
                jr.log.info("already running; not started again")
                return
            self.jobs[jr.job_id] = jr
            current = self.session is not None and self.session.epoch == session.epoch
        # The submission as the server's lines name it (`ALGO:3`), to be found in both logs.
        jr.log.info("claimed", kind=job.get("kind"),
                    submission=f"{job['submissionType']}:{job['submissionId']}" if job.get("submissionType") else None,
                    cases=len(job.get("cases") or []), lease_ms=job.get("leaseRemainingMs"))
        if not current:
            # Leased by a session that was superseded while the claim was in flight: the
            # server already took these leases back.
            jr.abort("session_superseded")
            jr.log.warning("claimed by a superseded session; dropped")
            self._forget(jr)
            return
        if self.stopping or self.stop_requested.is_set():
            jr.abort("stopping")
            self.release(jr)
            self._forget(jr)
            return
        jr.thread = threading.Thread(target=self.worker, args=(jr,), name=f"job-{jr.job_id}", daemon=True)
        try:
            jr.thread.start()
        except RuntimeError as exc:  # no thread to be had (a tasks limit): given back, its slot freed
            jr.log.error("no thread for the job; released", error=str(exc))
            jr.abort("no_thread")
            self.release(jr)
            self._forget(jr)

    def _forget(self, jr: JobRun) -> None:
        with self.lock:
            if self.jobs.get(jr.job_id) is jr:
                del self.jobs[jr.job_id]
            self.slot_freed.notify_all()

    def _wait_out_a_twin(self) -> bool:
        """Before taking the session back: False if the agent is stopping meanwhile.

        A live agent's session is superseded only when another process opened one with its
        credential. Once, that is a restart overlapping the agent it replaces, and the session
        is taken back at once. Again within TWIN_WINDOW_S, it is a twin (a cloned machine, a
        second copy started by hand): the two would take the session from each other without
        pause, each time releasing every job the other held, until those jobs failed. The
        agent then waits longer each time (TWIN_BACKOFF_S doubling, up to TWIN_BACKOFF_MAX_S)
        and says why."""
        now = time.monotonic()
        self.superseded_at = [at for at in self.superseded_at if now - at < TWIN_WINDOW_S]
        again = len(self.superseded_at) - 1
        if again < 1:
            return True
        delay = min(TWIN_BACKOFF_MAX_S, TWIN_BACKOFF_S * 2 ** (again - 1))
        log.event(logger, logging.ERROR, "session superseded again: another agent is using this node's credential;"
                  " stop it (two agents on one credential take the session from each other and release each"
                  " other's jobs)", superseded=len(self.superseded_at), window_s=int(TWIN_WINDOW_S),
                  reopen_in_s=round(delay))
        return not self.stop_requested.wait(delay)

    def _reset_for_new_session(self) -> None:
        """After a superseded session: wait for killed jobs to end, then clean the workspace."""
        old = self._jobs()
        self._join_workers(old, 15)
        with self.lock:
            for jr in old:
                if self.jobs.get(jr.job_id) is jr and (jr.thread is None or not jr.thread.is_alive()):
                    del self.jobs[jr.job_id]
        self.sweep()

    def sweep(self) -> list[str]:
        with self.runs_lock:
            return sweep_runs(self.runs_root, keep={jr.run_dir.name for jr in self._jobs() if jr.run_dir})

    # -- the judge database's leftovers ------------------------------------------------

    def sql_sweep_loop(self) -> None:
        while not self.stop_requested.wait(self.config.sql_sweep_ms / 1000):
            self.sql_sweep_step()

    def sql_sweep_step(self) -> None:
        """Drop what this node's jobs left in the judge MySQL past its expiry (a cleanup cut
        short), while the agent runs: the start-up sweep alone would leave it until the
        next restart."""
        if self.judge_db is None or self.judge_db.node_id is None:
            return
        try:
            dbs, users = self.judge_db.sweep_expired()
        except Exception as exc:  # the judge MySQL being down must not stop the agent
            log.event(logger, logging.WARNING, "judge database sweep failed", error=str(exc)[:300])
            return
        if dbs or users:
            log.event(logger, logging.INFO, "swept expired judge databases", databases=len(dbs), users=len(users))

    # -- heartbeat ---------------------------------------------------------------------

    def heartbeat_loop(self) -> None:
        # Heartbeats go on while a stopping agent still finishes jobs.
        while not self.stop_requested.is_set() or self._jobs():
            interval = self.heartbeat_step()
            if self.stop_requested.is_set():
                time.sleep(interval)
            else:
                self.stop_requested.wait(interval)

    def health(self) -> dict:
        checks = {"workspace": self.workspace_ready(), "sandbox": self.sandbox.isolated
                  or self.config.allow_weak_sandbox}
        if self.judge_db is not None:
            checks["mysql"] = self.judge_db.ping()
        # A node that cannot store test data is not ready: the server then offers it no jobs.
        checks["cache_space"] = self.cache_has_room()
        checks.update(self.health_checks)
        ok = all(checks.values())
        self._log_health_changes(checks)
        # Facts about this node's isolation, reported as they are for the server to judge;
        # a configured weak sandbox or a host without a memory cgroup is no agent failure.
        checks["sandbox_isolated"] = self.sandbox.isolated
        checks["memory_cgroup"] = self.sandbox.cgroups is not None
        return {"ok": ok, "checks": checks}

    def _log_health_changes(self, checks: dict) -> None:
        """A line when one of the node's own checks fails or passes again: the server then
        offers it no work, or offers it again, and the owner reads why here."""
        failing = sorted(name for name, passed in checks.items() if not passed)
        if failing == self._failing_checks:
            return
        if failing:
            log.event(logger, logging.WARNING, "a health check fails: the server offers this node no work until it"
                      " passes", failing=failing, workspace=str(self.config.workspace))
        else:
            log.event(logger, logging.INFO, "every health check passes again", was_failing=self._failing_checks)
        self._failing_checks = failing

    def heartbeat_step(self) -> float:
        session = self.session
        if session is None:
            return 0.5
        body = {"agentVersion": AGENT_VERSION, "runtimeSpec": self.config.runtime_spec,
                "localSlots": self.config.local_slots, "running": len(self.jobs), "health": self.health()}
        try:
            answer = self.client.heartbeat(session_epoch=session.epoch, body=body)
        except ApiError as exc:
            self._handle_api_error(exc, session.epoch)
            delay = _soon_or_when_told(exc, session.heartbeat_ms / 1000, soon=2.0) if exc.retryable \
                else session.heartbeat_ms / 1000
            self.heartbeat_failures.failed(error=exc.code, retry_in_s=round(delay, 1))
            return delay
        except TransportError as exc:
            self.heartbeat_failures.failed(error=str(exc)[:300])
            return min(2.0, session.heartbeat_ms / 1000)
        self.heartbeat_failures.succeeded()
        self._note_desired(answer.get("desiredState"))
        self._note_quarantine(answer.get("quarantine"))
        max_slots = answer.get("maxSlots")
        if isinstance(max_slots, int) and max_slots >= 0 and max_slots != self.max_slots:
            log.event(logger, logging.INFO, "server slot limit", max_slots=max_slots)
            self.max_slots = max_slots
        interval = answer.get("heartbeatIntervalMs")
        if isinstance(interval, int) and interval > 0:
            session.heartbeat_ms = interval
        return session.heartbeat_ms / 1000

    # -- renew and deadlines -----------------------------------------------------------

    def renew_loop(self) -> None:
        while not self.stop_requested.is_set() or self._jobs():
            session = self.session
            wait = self.renew_step() if session is not None else 0.5
            self.until_next_renew(wait)

    def until_next_renew(self, wait: float) -> None:
        """Wait `wait` seconds, or less once a job's progress moves (its compile ended, a case
        was judged), but at least PROGRESS_REPORT_S after this round: the renewal carries the
        progress, and a student's page follows a long job case by case instead of seeing its
        first case until the next round, 15 s later. One call renews every lease."""
        start = time.monotonic()
        moved = self.progress_moved.wait(wait)
        self.progress_moved.clear()  # what moved after this is read by the renewal that follows
        if moved:
            time.sleep(max(0.0, min(wait, PROGRESS_REPORT_S) - (time.monotonic() - start)))

    def renew_step(self) -> float:
        """Renew every held lease of the current session; return seconds until the next round."""
        session = self.session
        if session is None:
            return 0.5
        held = [jr for jr in self._jobs() if jr.session_epoch == session.epoch and jr.drop_reason is None]
        interval = session.renew_ms / 1000
        if not held:
            return min(interval, 0.5)
        ok_all, told = True, None
        for i in range(0, len(held), 64):
            batch = held[i:i + 64]
            sent_at = time.monotonic()
            try:
                answer = self.client.renew(session_epoch=session.epoch, leases=[jr.renew_item() for jr in batch])
            except ApiError as exc:
                self._handle_api_error(exc, session.epoch)
                self.renew_failures.failed(error=exc.code, leases=len(batch))
                self.metrics.renew_failures.inc()
                ok_all, told = False, exc if exc.retry_after is not None else told
                continue
            except TransportError as exc:
                self.renew_failures.failed(error=str(exc)[:300], leases=len(batch))
                self.metrics.renew_failures.inc()
                ok_all = False
                continue
            self.renew_failures.succeeded()
            self.apply_renew(batch, answer, sent_at)
        # After a failure, try again soon (the local deadline keeps us safe meanwhile), or when
        # the server said to, within a round.
        if ok_all:
            return interval
        return _soon_or_when_told(told, interval) if told is not None else min(interval, 1.0)

    def apply_renew(self, batch: list[JobRun], answer: dict, sent_at: float) -> None:
        by_id = {jr.job_id: jr for jr in batch}
        for item in answer.get("leases") or []:
            jr = by_id.get(item.get("jobId"))
            if jr is None:
                continue
            if item.get("ok"):
                remaining = int(item.get("leaseRemainingMs") or 0)
                # Measured from when the request left: the server's clock started no earlier.
                jr.deadline = sent_at + remaining / 1000 - safety_margin_s(remaining)
            else:
                reason = str(item.get("error") or "lease_lost")
                # A result being posted answers for its lease itself. The renew may have
                # crossed it (the server settled the result first), or crossed an attempt
                # whose answer was lost: the retry is answered `duplicate`, with the jobs
                # that answer carried, and must not be dropped for this refusal.
                if jr.abort(reason, unless_posting=True):
                    jr.log.warning("lease ended by the server; sandbox killed, job dropped", reason=reason)
                elif jr.state == "posting":
                    jr.log.info("renew refused while the result is being posted; the post decides", reason=reason)

    def watchdog_loop(self) -> None:
        while not self.stop_requested.is_set() or self._jobs():
            self.watchdog_step(time.monotonic())
            time.sleep(0.2)

    def watchdog_step(self, now: float) -> None:
        for jr in self._jobs():
            if jr.drop_reason is not None:
                continue
            if now >= jr.deadline:
                jr.abort("lease_deadline")
                jr.log.warning("local lease deadline passed without a renewal; sandbox killed, job dropped")
            elif now >= jr.total_deadline:
                if jr.abort("job_timeout"):
                    jr.log.error("job exceeded its total time limit; sandbox killed")

    # -- judging -----------------------------------------------------------------------

    def worker(self, jr: JobRun) -> None:
        try:
            try:
                with self.runs_lock:
                    jr.run_dir = new_run_dir(self.runs_root, jr.job_id, jr.lease_epoch)
            except OSError as exc:
                # The node's fault, not the job's: given back at once (its attempt not
                # counted) for another node, and no more claims until the folder takes writes.
                jr.log.error("no run folder; the job is given back", error=str(exc)[:300])
                self._note_workspace_fault(f"run folder: {exc}")
                body = verdicts.released(jr.lease_epoch)
            else:
                body = self.execute(jr)
            if body is not None and jr.begin_post():
                self.post_result(jr, body)
            elif jr.drop_reason == "job_timeout" and jr.begin_post_after_timeout():
                self.post_result(jr, verdicts.infra_error(jr.lease_epoch, "job_timeout",
                                                          "the job exceeded its total time limit on the node"))
            elif jr.drop_reason not in (None, "stopping"):
                jr.log.info("job dropped", reason=jr.drop_reason)
        except Exception:
            jr.log.error("worker failed", exc_info=True)
        finally:
            if jr.run_dir is not None:
                remove_tree(jr.run_dir)
            with jr.lock:
                jr.state = "finished"
            if jr.pins is not None:
                jr.pins.release()
            self._forget(jr)
            self.sweep()

    def fetch(self, jr: JobRun, entry: dict) -> Path:
        def stream(digest: str):
            inline = sent_source(jr.job, digest)
            if inline is not None:
                yield inline
                return
            session_epoch = jr.session_epoch
            backoff = Backoff(base=0.5, cap=5.0)
            for attempt in range(4):
                if jr.cancel.is_set():
                    raise JobCancelled()
                try:
                    _resp, chunks = self.client.artifact_stream(session_epoch=session_epoch, job_id=jr.job_id,
                                                                lease_epoch=jr.lease_epoch, digest=digest)
                    try:
                        # A job cancelled or out of time stops its downloads between the pieces
                        # of a body (each as the network gives it): a slow one does not hold
                        # the slot.
                        for chunk in chunks:
                            if jr.cancel.is_set():
                                raise JobCancelled()
                            yield chunk
                    finally:
                        chunks.close()
                    return
                except ApiError as exc:
                    if exc.code == "session_superseded":
                        self.on_superseded(session_epoch)
                        raise JobCancelled() from None
                    if exc.code == "lease_lost":
                        jr.abort("lease_lost")
                        raise JobCancelled() from None
                    if exc.status == 404:
                        raise ArtifactError("artifact_missing", f"{digest}: {exc.code}") from None
                    if not exc.retryable or attempt == 3:
                        raise ArtifactError("artifact_unavailable", f"{digest}: {exc}") from None
                    if jr.cancel.wait(backoff.next_delay(exc.retry_after)):
                        raise JobCancelled() from None
                except TransportError as exc:
                    # A broken stream may already have yielded bytes: the cache discards the
                    # partial file, so give up on this download rather than resume it.
                    raise ArtifactError("artifact_unavailable", f"{digest}: {exc}") from None
                except OSError as exc:
                    raise ArtifactError("artifact_unavailable", f"{digest}: {exc}") from None

        try:
            return jr.pins.get(entry, stream)
        except DiskFull as exc:
            self._note_disk_full(exc)
            raise
        except ArtifactError:
            raise
        except (TransportError, OSError) as exc:
            raise ArtifactError("artifact_unavailable", str(exc)) from None

    def execute(self, jr: JobRun) -> dict | None:
        job = jr.job
        ctx = JobContext(job=job, run_dir=jr.run_dir, log=jr.log, cancel=jr.cancel,
                         artifact=lambda entry: self.fetch(jr, entry), progress=jr.set_progress,
                         timed=self.metrics.phase, download_threads=self.config.download_threads)
        started = time.monotonic()
        try:
            if job.get("pool") not in (None, self.config.pool) or \
                    job.get("runtimeSpec") not in (None, self.config.runtime_spec):
                raise InfraError("runtime_mismatch", f"job for {job.get('pool')}/{job.get('runtimeSpec')} "
                                 f"reached a {self.config.pool}/{self.config.runtime_spec} node")
            diagnostic = job.get("kind") == "DIAGNOSTIC"
            if diagnostic and not job.get("source"):
                body = diagnostics.run(ctx, spec=self.config.spec, sandbox=self.sandbox, judge_db=self.judge_db)
            elif self.config.pool == "mysql":
                body = sqljudge.judge_sql(ctx, self.judge_db)
            else:
                body = judge.judge_program(ctx, self.config.spec, self.sandbox)
            # A canary is judged like any job, so the server sees how this node judges;
            # the node's own items ride along where the server asks for them.
            if diagnostic and job.get("source") and job.get("ownChecks"):
                body["checks"] = diagnostics.own_checks(ctx, spec=self.config.spec, sandbox=self.sandbox,
                                                        judge_db=self.judge_db)
        except JobCancelled:
            return None
        except CacheUnwritable as exc:
            jr.log.error("the cache refused a write; the job is given back", detail=str(exc))
            self._note_workspace_fault(f"cache: {exc}")
            return verdicts.released(jr.lease_epoch)
        except ArtifactError as exc:
            jr.log.error("test data unusable", error=exc.code, detail=str(exc))
            body = verdicts.infra_error(jr.lease_epoch, exc.code, str(exc))
        except InfraError as exc:
            jr.log.error("infrastructure error", error=exc.code, detail=str(exc)[:500])
            body = verdicts.infra_error(jr.lease_epoch, exc.code, str(exc))
        except Exception as exc:
            if jr.cancel.is_set():
                return None
            jr.log.error("judging crashed", exc_info=True)
            body = verdicts.infra_error(jr.lease_epoch, "agent_error", f"{exc.__class__.__name__}: {exc}")
        if jr.cancel.is_set():
            return None
        if body.get("outcome") == "JUDGED" and body.get("verdict") != "AC" \
                and _workspace_full(jr.run_dir or self.config.workspace):
            # The program's writes (its output, a compile's) may have failed for want of
            # space, not by its fault: that verdict is not posted. An INFRA_ERROR: it counts
            # the job's attempts, so a program that fills the disk itself cannot go round the
            # nodes for ever.
            jr.log.error("the workspace's disk was full when the job ended: its verdict is not trusted",
                         verdict=body.get("verdict"))
            self._note_workspace_fault("disk full when a job ended")
            body = verdicts.infra_error(jr.lease_epoch, "disk_full", "the workspace's disk was full when the job "
                                        "ended; its verdict was not trusted")
        jr.log.info("judged", outcome=body["outcome"], verdict=body.get("verdict"), score=body.get("score"),
                    error=body.get("error"), elapsed_ms=int((time.monotonic() - started) * 1000))
        return body

    def post_result(self, jr: JobRun, body: dict) -> None:
        backoff = Backoff(base=0.5, cap=10.0)
        fallback_sent = False
        while True:
            session = self.session
            if session is None or session.epoch != jr.session_epoch:
                jr.log.warning("session changed before the result was accepted; result dropped")
                return
            if jr.drop_reason in DROP_CODES or jr.drop_reason in ("lease_deadline", "session_superseded", "fatal"):
                jr.log.warning("lease ended before the result was accepted; result dropped", reason=jr.drop_reason)
                return
            if time.monotonic() >= jr.deadline:
                jr.log.warning("local lease deadline passed before the result was accepted; result dropped")
                return
            try:
                sent = self._with_next_claim(body, session)
                answer = self.client.post_result(session_epoch=jr.session_epoch, job_id=jr.job_id, body=sent)
                jr.log.info("result accepted", status=answer.get("status"), outcome=body["outcome"],
                            verdict=body.get("verdict"), next_jobs=len(answer.get("jobs") or []))
                if "claim" in sent:
                    self.metrics.claimed(len(answer.get("jobs") or []))
                self._start_carried(answer, session)
                return
            except ApiError as exc:
                if exc.code == "session_superseded" or exc.status == 401:
                    self._handle_api_error(exc, jr.session_epoch)
                    jr.log.warning("result refused; dropped", error=exc.code)
                    return
                if exc.code in DROP_CODES:
                    jr.log.warning("result refused; dropped", error=exc.code)
                    return
                if not exc.retryable:
                    jr.log.error("result rejected", status=exc.status, error=exc.code, detail=exc.detail[:300])
                    if fallback_sent or body["outcome"] != "JUDGED":
                        return
                    # Tell the server something rather than leave the lease to expire.
                    fallback_sent = True
                    body = verdicts.infra_error(jr.lease_epoch, "agent_error",
                                                f"result rejected: {exc.status} {exc.code}")
                    continue
                delay = backoff.next_delay(exc.retry_after)
                jr.log.warning("posting result failed; retrying", error=exc.code, retry_in_s=round(delay, 1))
            except TransportError as exc:
                delay = backoff.next_delay()
                jr.log.warning("posting result failed; retrying", error=str(exc)[:200], retry_in_s=round(delay, 1))
            time.sleep(delay)

    def _with_next_claim(self, body: dict, session: Session) -> dict:
        """Carry the next claim on the result post: the slot this job frees is asked for in
        the same request, so a busy node needs one round trip per job, not two. The claim
        loop never counts this slot as free (the job stays in `self.jobs` until its worker
        ends), so the two never ask for the same slot."""
        if self.stopping or self.stop_requested.is_set() or session.desired_state != "ENABLED" \
                or self.disk_full_need is not None or self.workspace_fault is not None:
            return body
        return {**body, "claim": {"freeSlots": 1, "inlineSource": True}}

    def _start_carried(self, answer: dict, session: Session) -> None:
        self._note_desired(answer.get("desiredState"))
        self.start_jobs(answer.get("jobs") or [], session, time.monotonic())

    def release(self, jr: JobRun) -> None:
        """Give a lease back (graceful stop): requeued at once, the attempt is not counted."""
        session = self.session
        if session is None or session.epoch != jr.session_epoch:
            return
        for attempt in range(3):
            try:
                self.client.post_result(session_epoch=jr.session_epoch, job_id=jr.job_id,
                                        body=verdicts.released(jr.lease_epoch))
                jr.log.info("released")
                return
            except ApiError as exc:
                if not exc.retryable:
                    jr.log.warning("release refused", error=exc.code)
                    return
            except TransportError as exc:
                jr.log.warning("release failed", error=str(exc)[:200])
            time.sleep(0.5 * (attempt + 1))


def stopped_to_release(jobs: list[JobRun]) -> list[JobRun]:
    """Stop each running job; those this stop ended are given back (RELEASED). Not one
    already ended otherwise: a job past its time limit posts its own INFRA_ERROR, a lost
    lease has nothing to give back, and a result being posted is left to its post."""
    return [jr for jr in jobs if jr.abort("stopping") and jr.drop_reason == "stopping"]


def _workspace_ok(workspace: Path, runs: Path | None = None, writable=()) -> bool:
    """Writable, with 256 MiB and a thousand inodes free (a file system that counts none,
    as btrfs, has no limit on them), and so the `runs` folder (it may be a disk of its own);
    each folder of `writable` (the cache, whose disk its own check watches) takes a file. A
    read-only remount or a folder's permissions show only there; a folder missing may be
    made again, something else in its place may not."""
    try:
        if not os.access(workspace, os.W_OK) or not _has_room(workspace):
            return False
        for folder in ([runs] if runs is not None else []) + list(writable):
            if folder.is_dir():
                if folder == runs and not _has_room(folder):
                    return False
                written = folder / f".probe.{os.getpid()}.{threading.get_ident()}"
                written.write_bytes(b"")
                written.unlink()
            elif os.path.lexists(folder):
                return False
        return True
    except OSError:
        return False


def _has_room(folder: Path) -> bool:
    room = os.statvfs(folder)
    return room.f_bavail * room.f_frsize > 256 << 20 and (room.f_files == 0 or room.f_favail > 1000)


def _untrusted_certificate(exc: Exception) -> bool:
    text = str(exc)
    return "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text \
        or "doesn't match" in text and "hostname" in text


def _workspace_full(folder: Path) -> bool:
    """Whether the disk of a job's run folder is (about) out of space or inodes: a write of
    the job's may have failed."""
    try:
        room = os.statvfs(folder)
        return room.f_bavail * room.f_frsize < 16 << 20 or (room.f_files != 0 and room.f_favail < 16)
    except OSError:
        return False
