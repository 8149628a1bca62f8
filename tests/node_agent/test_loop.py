"""The loop's small pieces: deadlines, renew answers, the job state machine."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from node_agent import log, loop
from node_agent.loop import JobRun, safety_margin_s, total_budget_s
from node_agent.metrics import AgentMetrics


def job(job_id=1, lease=1, remaining=60000, **extra) -> dict:
    return {"jobId": job_id, "leaseEpoch": lease, "leaseRemainingMs": remaining, "kind": "JUDGE",
            "limits": {"timeLimitMs": 1000}, "cases": [{}, {}], **extra}


def test_the_safety_margin_is_ten_percent_and_up_to_five_seconds():
    assert safety_margin_s(60000) == 6.0
    assert safety_margin_s(20000) == 5.0
    assert safety_margin_s(3000) == 0.75


def test_a_lease_deadline_is_receipt_time_plus_remaining_minus_margin():
    jr = JobRun(job(remaining=60000), session_epoch=3, received=100.0, job_max_s=900)
    assert jr.deadline == 100.0 + 60 - 6
    assert jr.total_deadline == 100.0 + total_budget_s(job())


class _Quiet:
    """Just enough of an Agent for the renew and watchdog steps."""

    apply_renew = loop.Agent.apply_renew
    watchdog_step = loop.Agent.watchdog_step

    def __init__(self, jobs):
        self.jobs = {jr.job_id: jr for jr in jobs}
        self.metrics = AgentMetrics()
        self.renew_failures = log.Repeated(loop.logger, "renew")

    def _jobs(self):
        return list(self.jobs.values())


def test_renew_answers_move_deadlines_or_end_jobs():
    a = JobRun(job(1), 1, received=0.0, job_max_s=900)
    b = JobRun(job(2), 1, received=0.0, job_max_s=900)
    c = JobRun(job(3), 1, received=0.0, job_max_s=900)
    agent = _Quiet([a, b, c])
    agent.apply_renew([a, b, c], {"leases": [
        {"jobId": 1, "ok": True, "leaseRemainingMs": 60000},
        {"jobId": 2, "ok": False, "error": "cancelled"},
        {"jobId": 3, "ok": False, "error": "lease_lost"},
    ]}, sent_at=50.0)
    assert a.deadline == 50.0 + 54 and not a.cancel.is_set()
    assert b.cancel.is_set() and b.drop_reason == "cancelled"
    assert c.cancel.is_set() and c.drop_reason == "lease_lost"


class _Poster(_Quiet):
    """Just enough of an Agent to post a result; its client loses the first answer, and a
    renew that crossed the post is answered before the post is tried again. It is its own
    client: `post_result` below is the client's call, not the Agent's."""

    def __init__(self, jr):
        super().__init__([jr])
        self.session = SimpleNamespace(epoch=1, desired_state="ENABLED")
        self.client = self
        self.posts, self.started = 0, []

    def _with_next_claim(self, body, session):
        return {**body, "claim": {"freeSlots": 1}}

    def _start_carried(self, answer, session):
        self.started += [j["jobId"] for j in answer.get("jobs") or []]

    def post_result(self, *, session_epoch, job_id, body):  # the client's call
        self.posts += 1
        if self.posts == 1:
            # The server settled the result, leased job 9 in its answer, and that answer
            # was lost; a renew sent meanwhile finds the lease settled.
            self.apply_renew(list(self.jobs.values()), {"leases": [
                {"jobId": job_id, "ok": False, "error": "lease_lost"}]}, sent_at=0.0)
            raise loop.TransportError("connection reset")
        return {"status": "duplicate", "jobs": [job(9)]}


def test_a_renew_that_crosses_the_result_post_leaves_the_post_to_decide():
    posting = JobRun(job(1), 1, received=time.monotonic(), job_max_s=900)
    assert posting.begin_post()
    agent = _Poster(posting)
    loop.Agent.post_result(agent, posting, {"outcome": "JUDGED", "leaseEpoch": 1})
    # Posted again rather than dropped: the repeat is answered with the job the lost
    # answer held, which the node starts instead of leaving it to wait out its lease.
    assert agent.posts == 2 and agent.started == [9]
    assert posting.drop_reason is None
    # The claim the post carried brought a job; the lost attempt counts as no claim at all.
    claims = agent.metrics.registry.get_sample_value
    assert claims("kece_agent_claims_total", {"result": "jobs"}) == 1
    assert claims("kece_agent_claims_total", {"result": "empty"}) == 0


def test_the_watchdog_kills_at_the_lease_deadline_and_at_the_total_time_limit():
    late = JobRun(job(1, remaining=10000), 1, received=0.0, job_max_s=900)
    stuck = JobRun(job(2, remaining=10 ** 9), 1, received=0.0, job_max_s=30)
    fine = JobRun(job(3), 1, received=0.0, job_max_s=900)
    _Quiet([late, stuck, fine]).watchdog_step(now=31.0)
    assert late.drop_reason == "lease_deadline" and late.cancel.is_set()
    assert stuck.drop_reason == "job_timeout" and stuck.begin_post_after_timeout()
    assert fine.drop_reason is None and not fine.cancel.is_set()


def test_a_result_being_posted_is_not_released_under_it():
    jr = JobRun(job(), 1, received=0.0, job_max_s=900)
    assert jr.begin_post()
    assert jr.abort("stopping") is False, "already posting: the stop path must not release it"
    other = JobRun(job(2), 1, received=0.0, job_max_s=900)
    assert other.abort("stopping") is True and not other.begin_post()


@pytest.mark.parametrize("phase, testcase, expected", [("COMPILING", None, 0), ("JUDGING", 2, 2)])
def test_renew_items_carry_progress(phase, testcase, expected):
    jr = JobRun(job(7, lease=4), 1, received=0.0, job_max_s=900)
    jr.set_progress(phase, testcase)
    assert jr.renew_item() == {"jobId": 7, "leaseEpoch": 4, "progress": {"phase": phase, "testcase": expected}}


class _Renewing(_Quiet):
    """An Agent's renew loop, against a client that records what each renewal carried."""

    renew_loop, renew_step, until_next_renew = loop.Agent.renew_loop, loop.Agent.renew_step, \
        loop.Agent.until_next_renew

    def __init__(self, jobs):
        super().__init__(jobs)
        self.session = SimpleNamespace(epoch=1, renew_ms=3_600_000)  # a round an hour
        self.stop_requested, self.progress_moved = threading.Event(), threading.Event()
        self.sent, self.renewed = [], threading.Condition()
        self.client = SimpleNamespace(renew=self._renew)

    def _renew(self, *, session_epoch, leases):
        with self.renewed:
            self.sent.append([item["progress"] for item in leases])
            self.renewed.notify_all()
        return {"leases": [{"jobId": item["jobId"], "ok": True, "leaseRemainingMs": 60000} for item in leases]}

    def wait_for(self, count: int) -> list:
        with self.renewed:
            assert self.renewed.wait_for(lambda: len(self.sent) >= count, timeout=30), self.sent
            return self.sent[count - 1]


@pytest.mark.parametrize("retry_after, expected", [(None, 1.0), (10.0, 10.0), (600.0, 15.0)])
def test_a_renewal_refused_for_now_is_tried_again_when_the_server_says_within_a_round(retry_after, expected):
    """503 with Retry-After: not a renewal a second while the server asks for ten, nor a wait
    past the round (the leases would run late)."""
    from node_agent.client import ApiError

    jr = JobRun(job(7, lease=4), 1, received=time.monotonic(), job_max_s=900)
    agent = _Renewing([jr])
    agent.session.renew_ms = 15_000

    def refused(**_call):
        raise ApiError(503, "unavailable", "the database is away", retry_after)

    agent.client = SimpleNamespace(renew=refused)
    agent._handle_api_error = lambda exc, epoch: None
    assert agent.renew_step() == expected


def test_a_jobs_progress_is_renewed_soon_not_at_the_next_round(monkeypatch):
    """A student's page follows a long job case by case: a judged case is reported within
    PROGRESS_REPORT_S, not at the next round (here an hour away)."""
    monkeypatch.setattr(loop, "PROGRESS_REPORT_S", 0.05)
    jr = JobRun(job(7, lease=4), 1, received=time.monotonic(), job_max_s=900)
    agent = _Renewing([jr])
    jr.on_progress = agent.progress_moved.set
    thread = threading.Thread(target=agent.renew_loop, daemon=True)
    thread.start()
    assert agent.wait_for(1) == [{"phase": "COMPILING", "testcase": 0}]
    jr.set_progress("JUDGING", 1)
    assert agent.wait_for(2) == [{"phase": "JUDGING", "testcase": 1}]
    jr.set_progress("JUDGING", 2)
    assert agent.wait_for(3) == [{"phase": "JUDGING", "testcase": 2}]
    agent.jobs.clear()
    agent.stop_requested.set()
    agent.progress_moved.set()
    thread.join(30)
    assert not thread.is_alive() and len(agent.sent) == 3


class _Starter:
    """Just enough of an Agent to start jobs; its workers only record that they ran."""

    start_job = loop.Agent.start_job

    def __init__(self):
        self.lock = threading.Lock()
        self.jobs = {}
        self.config = SimpleNamespace(job_max_ms=900_000)
        self.cache = SimpleNamespace(pins=lambda: None)
        self.session = SimpleNamespace(epoch=1)
        self.stopping = False
        self.stop_requested = threading.Event()
        self.progress_moved = threading.Event()
        self.ran = []
        self.released = []

    def worker(self, jr):
        self.ran.append((jr.job_id, jr.lease_epoch))

    def release(self, jr):
        self.released.append((jr.job_id, jr.lease_epoch))

    def _forget(self, jr):
        with self.lock:
            if self.jobs.get(jr.job_id) is jr:
                del self.jobs[jr.job_id]


def test_a_lease_sent_again_is_not_run_twice():
    agent = _Starter()
    agent.start_job(job(7, lease=2), agent.session, received=0.0)
    # A repeated result post brings back a lease this node already runs: its first answer
    # did arrive after all.
    agent.start_job(job(7, lease=2), agent.session, received=1.0)
    for jr in agent.jobs.values():
        jr.thread.join(5)
    assert agent.ran == [(7, 2)]


def test_a_job_that_gets_no_thread_is_given_back_and_frees_its_slot(monkeypatch):
    def no_thread(self):
        raise RuntimeError("can't start new thread")

    agent = _Starter()
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    agent.start_job(job(7, lease=2), agent.session, received=0.0)
    assert agent.released == [(7, 2)] and agent.jobs == {} and agent.ran == []


def test_a_stop_gives_back_only_the_jobs_it_ended():
    running, timed_out, posting = (JobRun(job(n), 1, 0.0, 900) for n in (1, 2, 3))
    timed_out.abort("job_timeout")  # the watchdog: its worker posts INFRA_ERROR job_timeout
    assert posting.begin_post()
    assert loop.stopped_to_release([running, timed_out, posting]) == [running]
    assert timed_out.drop_reason == "job_timeout" and posting.state == "posting"


class _Recorder:
    def __init__(self):
        self.waits = []

    def wait(self, seconds):
        self.waits.append(seconds)
        return False


def test_after_an_empty_long_poll_the_next_claim_waits_a_random_moment(monkeypatch):
    """The design's jitter: nodes that started together do not poll in lockstep."""
    clock = iter([0.0, 15.0])  # the claim waited its whole wait and came back empty
    monkeypatch.setattr(loop, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr(loop, "random", SimpleNamespace(uniform=lambda low, high: (low + high) / 4))
    client = SimpleNamespace(claim=lambda **kw: {"jobs": [], "desiredState": "ENABLED"})
    agent = SimpleNamespace(
        session=SimpleNamespace(epoch=1, claim_wait_ms=15000), lock=threading.Lock(), free_slots=lambda: 2,
        client=client, _note_desired=lambda desired: None, start_jobs=lambda *a: None,
        stop_requested=_Recorder(), config=SimpleNamespace(claim_jitter_ms=800), takes_work=lambda: True,
        metrics=AgentMetrics(), claim_failures=log.Repeated(loop.logger, "claim"))
    loop.Agent.claim_step(agent, SimpleNamespace(reset=lambda: None))
    assert agent.stop_requested.waits == [0.2]  # uniform(0, 0.8 s), here its quarter
    assert agent.metrics.registry.get_sample_value("kece_agent_claims_total", {"result": "empty"}) == 1


def test_a_running_mysql_agent_sweeps_expired_leftovers_and_survives_a_failing_sweep():
    calls = []

    def sweep_expired():
        calls.append("sweep")
        if len(calls) == 2:
            raise OSError("judge MySQL gone")
        return ["kece_judge_n1_x0_j1_e1_aa"], []

    agent = SimpleNamespace(judge_db=SimpleNamespace(node_id=1, sweep_expired=sweep_expired))
    loop.Agent.sql_sweep_step(agent)
    loop.Agent.sql_sweep_step(agent)  # logged, not raised
    assert calls == ["sweep", "sweep"]
    agent.judge_db.node_id = None  # before the session: whose names they are is not known yet
    loop.Agent.sql_sweep_step(agent)
    assert calls == ["sweep", "sweep"]


def _claiming_agent(claim, stop_requested):
    agent = SimpleNamespace(
        session=SimpleNamespace(epoch=1, claim_wait_ms=15000), lock=threading.Lock(), free_slots=lambda: 2,
        client=SimpleNamespace(claim=claim, last_answer=0.0), stop_requested=stop_requested,
        takes_work=lambda: True, metrics=AgentMetrics(), _handle_api_error=lambda exc, epoch: None,
        claim_failures=log.Repeated(loop.logger, "claim"))
    agent._wait_until_answered = lambda delay, since: loop.Agent._wait_until_answered(agent, delay, since=since)
    return agent


def test_a_claim_backing_off_from_an_outage_claims_again_once_the_server_answers_a_heartbeat():
    """A backoff grown over an outage (half a minute at most; an hour here) does not keep the
    node idle once the control plane is back: the heartbeat's answer cuts it short."""
    def away(**kw):
        raise loop.TransportError("POST jobs/claim: ConnectionError")

    agent = _claiming_agent(away, threading.Event())
    step = threading.Thread(target=loop.Agent.claim_step, args=(agent, SimpleNamespace(next_delay=lambda: 3600.0)),
                            daemon=True)
    step.start()
    agent.client.last_answer = time.monotonic() + 1  # the heartbeat thread hears from the server
    step.join(10)
    stuck = step.is_alive()
    agent.stop_requested.set()
    assert not stuck, "still waiting out the backoff"


def test_a_server_that_says_when_to_come_back_is_waited_for_whatever_else_it_answers():
    def busy(**kw):
        raise loop.ApiError(503, "unavailable", "try later", retry_after=20.0)

    agent = _claiming_agent(busy, _Recorder())
    agent.client.last_answer = float("inf")  # heartbeats answered all along
    loop.Agent.claim_step(agent, SimpleNamespace(next_delay=lambda retry_after=None: retry_after))
    assert agent.stop_requested.waits == [20.0]


def test_a_claim_that_fails_alone_while_heartbeats_are_answered_waits_for_the_next_answer_not_none(monkeypatch):
    """Answers from before the failure do not cut the wait short: a claim failing on its own
    (a proxy cutting its long-polls short) would otherwise be tried again in a tight loop."""
    now = [100.0]

    class Ticking(_Recorder):  # each wait moves the agent's clock on by what it waited
        def is_set(self):
            return False

        def wait(self, seconds):
            now[0] += seconds
            return super().wait(seconds)

    monkeypatch.setattr(loop, "time", SimpleNamespace(monotonic=lambda: now[0]))

    def cut(**kw):
        now[0] += 15  # the long-poll waited, and the proxy cut it short
        agent.client.last_answer = now[0] - 5  # a heartbeat answered while the claim was out
        raise loop.ApiError(504, "gateway_timeout", "upstream timed out")

    agent = _claiming_agent(cut, Ticking())
    loop.Agent.claim_step(agent, SimpleNamespace(next_delay=lambda retry_after=None: 7.0))
    assert sum(agent.stop_requested.waits) == 7.0  # the whole backoff: no answer came after the failure
