"""Acceptance load (the design's plan, §8 "验收与容量"): bursts of 30, 100 and 300
single-language submissions and a 300 burst mixed over the five pools, on light, medium
and heavy problems whose test data is not yet on the nodes, beside the peers.

    python bench/acceptance.py [--quick] [--no-peers] [--no-scale] [--repeats N] [--profile DIR] [--nodes-on-web]
    python bench/acceptance.py --against CHECKOUT [--rounds N]

- Submissions arrive over HTTP from a load generator in its own process (`ingest.py`'s
  clients, 8 of them); simulated nodes (`dispatch.py`'s, 4 slots each) judge over the real
  node API: each downloads the job's source and the test data it does not hold yet (cold
  cache: heavy problems carry megabytes) and sleeps the job's judge time (a distribution per
  problem: light 50–150 ms, medium 150–450 ms, heavy 0.4–1.2 s) in equal parts per case,
  each case once its files are there, as the agent does; then it posts the result with its
  next claim. uvicorn, the Celery worker with beat, MariaDB and Redis as in production:
  the nodes speak to the node API's own process (Compose's and Kubernetes' `node-api`),
  the load generator to the web process; `--nodes-on-web` sends the nodes to the web
  process too, as before the node API had a process of its own.
- The mixed burst: 1 node of 4 slots per pool; a fifth of the work EXAM (an ACM exam's
  participants), a fifth a REJUDGE backlog queued just before, the rest practice.
- The same 300 jobs queued before the nodes claim (no submission in the way), and the peers
  (`peers.py`: Celery + Redis with `acks_late`, `SKIP LOCKED` pollers every 100 ms) on
  exactly those judge times, with 16 slots as KECE has.
- Scale-out: the 300 burst (over HTTP and queued) with one web process and with what
  `python -m kece.serve` starts by default (a process per core, at least two), and two and
  four nodes. The HTTP target is printed for both.

Prints per run and per pool: accepted, accept p95, queue wait p95, judge p95, time to store
a result (result post to its answer) p95, last completion, jobs/s, SYSTEM_ERROR count (jobs
that failed on infrastructure, refused submissions), makespan ÷ ideal (ideal: each pool's
judge seconds ÷ its slots, the longest pool), the CPU of every process (seconds, peak
cores) and its peak memory, the server's CPU per judged job (web + node API + worker), where
a single-pool run's slot time went, and each pool's slot advice. `--profile DIR` runs the
web server, the node API's and the worker under a profiler for the
queued 300 burst (`cpu_profile.py`: cProfile on each thread's CPU clock) and prints their top
entries. Targets: server CPU per job over the queued burst at most 4 ms; its ratio no worse
than the better peer's + 0.02; 300 over HTTP within 1.15. On a machine whose neighbours come
and go, one burst's CPU varies by a fifth, and which jobs come last over HTTP, and so the
tail, varies from one run to the next by up to 0.05 of the ideal: `--repeats N` runs the
queued burst and the 300 over HTTP N times each on the same server, alternating, and the
targets take the medians; `--against CHECKOUT` compares the queued
burst on another commit's server (`git worktree add`), alternating a round at a time.
"""

import argparse
import asyncio
import contextlib
import heapq
import math
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

try:
    from bench._django import percentile, setup
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench._django import percentile, setup

from bench import dispatch, ingest, peers
from node_agent.loop import sent_source  # the agent's own check of a source sent with its job

POOLS = ("python", "cpp", "java", "arkts", "mysql")
LANGUAGE = {"python": "python", "cpp": "cpp", "java": "java", "arkts": "arkts", "mysql": "mysql"}
SLOTS = 4  # a node's
# uvicorn's options as Compose gives them (`deploy/compose/compose.yaml`): the forwarded
# headers are believed from the proxy's network only, here loopback, where the load
# generator and the nodes stand in for the proxy.
WEB_ARGS = ("--proxy-headers", "--forwarded-allow-ips=127.0.0.0/8")


@dataclass(frozen=True)
class Weight:
    """A problem class: the judge time's range, its test data, its share of a burst."""
    name: str
    low: float
    high: float
    cases: int
    case_bytes: int
    share: float

    def judge_seconds(self, job_id: int) -> float:
        return random.Random(job_id).uniform(self.low, self.high)


WEIGHTS = (Weight("light", 0.05, 0.15, 2, 64, 0.5), Weight("medium", 0.15, 0.45, 4, 256 * 1024, 0.35),
           Weight("heavy", 0.4, 1.2, 8, 1024 * 1024, 0.15))


def make_problems(pool: str) -> dict:
    """A problem of each weight for `pool` (its test data in the store, not on any node)."""
    from judging import artifacts
    from judging.models import Manifest
    from tests.factories import make_problem

    made = {}
    for weight in WEIGHTS:
        problem = make_problem(kind="SQL" if pool == "mysql" else "ALGO", languages=(LANGUAGE[pool],), cases=weight.cases)
        manifest = problem.current_manifest
        if pool != "mysql":
            big = os.urandom(weight.case_bytes)
            manifest.cases = [{**case, "input": artifacts.store_bytes(big + str(case["ordinal"]).encode())}
                              for case in manifest.cases]
            Manifest.objects.filter(pk=manifest.pk).update(cases=manifest.cases)
        made[weight.name] = problem
    return made


def plan_of(problems: dict, count: int, seed: int, extra=None) -> list[dict]:
    """`count` submission bodies over the weights, in their shares, shuffled."""
    bodies = []
    for weight in WEIGHTS:
        n = round(count * weight.share)
        bodies += [{"problemId": problems[weight.name].pk, "language": LANGUAGE[problems["pool"]], **(extra or {})}] * n
    bodies = (bodies + bodies[:count])[:count]
    random.Random(seed).shuffle(bodies)
    return bodies


DOWNLOAD_THREADS = 4  # the agent's JUDGE_DOWNLOAD_THREADS default


class Waker(threading.Thread):
    """Wakes the simulated slots at their cases' ends, to within a tenth of a millisecond. An
    event loop's own timers wake a sleeper late: asyncio's by up to a millisecond or two (its
    timeouts go to epoll in whole milliseconds, rounded up), uvloop's early as often as late.
    Either would count as the node's time between jobs, which no agent's thread nor any
    peer's (`time.sleep`) spends; a thread waiting on a condition wakes when it should."""

    def __init__(self, loop):
        super().__init__(daemon=True)
        self.loop = loop
        self.due = []  # (monotonic time, sequence, future), a heap
        self.changed = threading.Condition()
        self.sequence = 0
        self.stopped = False

    async def until(self, when: float) -> None:
        """Sleep until `when` (`time.monotonic()`, the event loop's clock)."""
        future = self.loop.create_future()
        with self.changed:
            self.sequence += 1
            heapq.heappush(self.due, (when, self.sequence, future))
            self.changed.notify()
        await future

    def run(self):
        with self.changed:
            while not self.stopped:
                now = time.monotonic()
                while self.due and self.due[0][0] <= now:
                    self.loop.call_soon_threadsafe(_wake, heapq.heappop(self.due)[2])
                self.changed.wait(self.due[0][0] - now if self.due else None)

    def stop(self):
        with self.changed:
            self.stopped = True
            self.changed.notify()
        self.join()


def _wake(future) -> None:
    if not future.done():
        future.set_result(None)


class ColdNode(dispatch.SimNode):
    """A simulated node whose cache starts empty: a job's test data it does not hold is
    downloaded (`GET jobs/{id}/artifacts/{digest}` under the lease) before it judges, for
    the judge time of the job's problem class."""

    weights: dict = {}  # manifest id -> Weight, set by the run
    waker: Waker  # the run's, on its event loop
    # The run's first job id: a job's judge time follows from its place in the run, so every
    # queued run of a plan (a repeat, the other checkout's) judges the same times in the same
    # order; over HTTP, in the order the jobs were made.
    first_job_id: int = 0
    records: dict = {}  # job id -> (pool, judge seconds, download seconds)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held = {}  # digest -> its download, done or under way
        self.arrived = {}  # digest -> when its download ended (the event loop's clock)

    async def work(self, job):
        headers = {**self.headers, "X-Judge-Lease": str(job["leaseEpoch"])}
        # The source, as the agent does, unless the claim sent it along; then the test data
        # it lacks.
        first = [] if sent_source(job, job["source"]["digest"]) is not None else [job["source"]]
        if job.get("sql"):
            first += [entry for entry in job["sql"].values() if isinstance(entry, dict)]
        cases = [[entry for entry in (case.get("input"), case.get("output")) if entry] for case in job["cases"]]
        # As the agent: a job's files come DOWNLOAD_THREADS at a time, first cases first
        # (`node_agent.downloads`), and slots needing the same file download it once, the
        # others waiting for it.
        threads = asyncio.Semaphore(DOWNLOAD_THREADS)

        async def one(entry):
            async with threads:
                download = self.held.get(entry["digest"])
                if download is None:
                    url = f"{self.http.base_url}{dispatch.PREFIX}jobs/{job['jobId']}/artifacts/{entry['digest']}"
                    download = self.held[entry["digest"]] = asyncio.ensure_future(
                        self.fetch(entry["digest"], url, headers))
                await asyncio.shield(download)

        coming = {id(entry): asyncio.ensure_future(one(entry)) for entry in first + sum(cases, [])}
        loop = asyncio.get_running_loop()
        due = loop.time()  # when the next case may start: when the one before it ends

        async def ready(entries) -> float:
            """The case's files awaited: when it may start (once the case before it has
            ended and its files have come, whenever this slot woke to see it)."""
            await asyncio.gather(*(coming[id(entry)] for entry in entries))
            return max([due, *(self.arrived[entry["digest"]] for entry in entries)])

        weight = self.weights.get(job["manifestId"])
        seconds = weight.judge_seconds(job["jobId"] - self.first_job_id) if weight else self.judge_seconds
        start = await ready(first)
        waited, due = start - due, start
        # As the agent: each case runs once its own files are there, the later cases' still
        # coming; the judge time is the cases' in equal parts, on a schedule of their ends
        # (a slot that wakes late for one does not push the others back).
        for entries in cases or [[]]:
            start = await ready(entries)
            waited, due = waited + start - due, start + seconds / max(1, len(cases))
            await self.waker.until(due)
        self.records[job["jobId"]] = (job["pool"], seconds, waited)

    async def fetch(self, digest: str, url: str, headers: dict) -> None:
        try:
            async with self.http.session.get(url, headers=headers) as response:
                await response.read()
                assert response.status == 200, response.status
            self.arrived[digest] = asyncio.get_running_loop().time()
        except BaseException:
            self.held.pop(digest, None)  # the next job that needs it downloads it again
            raise


# --- processes: CPU and memory ---------------------------------------------------------------

def _children() -> dict:
    tree = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            tree[parent].append(int(entry))
    return tree


def _tree(pid: int, children: dict) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def _cpu_and_rss(pid: int) -> tuple[float, int] | None:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        rss_pages = int(fields[21])
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), rss_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError):
        return None  # gone: what it used since the last sample is not seen


def pid_of(name: str) -> int | None:
    found = subprocess.run(["pgrep", "-o", "-x", name], capture_output=True, text=True).stdout.split()
    return int(found[0]) if found else None


class Monitor(threading.Thread):
    """Samples the CPU and resident memory of named process trees every 0.25 s: each one's
    CPU seconds over the run, its peak (cores, over a sample) and its peak memory. MariaDB
    and Redis serve the rest of the machine too."""

    def __init__(self, roots: dict):
        super().__init__(daemon=True)
        self.roots = {name: pid for name, pid in roots.items() if pid}
        self.stop = threading.Event()
        self.cpu = Counter()
        self.peak_cpu = Counter()
        self.peak_rss = Counter()
        self.seen = {}  # pid -> last cpu seconds
        self.started = False
        self.sampled = threading.Event()  # the first sample is taken: what it counts from

    def sample(self):
        children = _children()
        totals = {}
        for name, root in self.roots.items():
            cpu = rss = 0.0
            for pid in _tree(root, children):
                if (found := _cpu_and_rss(pid)) is None:
                    continue
                seconds, resident = found
                cpu += seconds - self.seen.get(pid, seconds if self.started else 0.0)
                self.seen[pid] = seconds
                rss += resident
            totals[name] = (cpu, rss)
        return totals

    def run(self):
        self.sample()
        self.started = True
        self.sampled.set()
        last = time.monotonic()
        while not self.stop.wait(0.25):
            now = time.monotonic()
            for name, (cpu, rss) in self.sample().items():
                self.cpu[name] += cpu
                self.peak_cpu[name] = max(self.peak_cpu[name], cpu / (now - last))
                self.peak_rss[name] = max(self.peak_rss[name], rss)
            last = now

    def finish(self) -> "Monitor":
        self.stop.set()
        self.join()
        for name, (cpu, rss) in self.sample().items():
            self.cpu[name] += cpu
            self.peak_rss[name] = max(self.peak_rss[name], rss)
        return self

    def line(self) -> str:
        return "; ".join(f"{name} {self.cpu[name]:.2f} CPU-s (peak {self.peak_cpu[name]:.2f} cores,"
                         f" {self.peak_rss[name] / 2**20:.0f} MiB)" for name in self.roots)


# --- one KECE run ---------------------------------------------------------------------------

# The server's processes, whose CPU a judged job costs: the web processes, the node API's
# (unless the nodes speak to the web processes), the Celery worker with beat.
SERVER_PROCESSES = ("web", "node-api", "worker")


class Urls(NamedTuple):
    """Where the load generator submits, and where the nodes speak the node API."""
    submit: str
    nodes: str


@dataclass
class Run:
    name: str
    slots: dict  # pool -> slots
    jobs: list  # job ids
    classes: dict  # job id -> priority class
    start: float
    arrivals: dict  # job id -> seconds after start
    accept: list  # HTTP seconds of each accepted submission
    refused: int
    timeline: dispatch.Timeline
    records: dict  # job id -> (pool, judge s, download s)
    failed: int
    monitor: Monitor
    makespan: float = 0.0
    extra: dict = field(default_factory=dict)

    def ideal(self, pool=None) -> float:
        pools = [pool] if pool else list(self.slots)
        return max(sum(self.records[j][1] for j in self.jobs if self.records[j][0] == p) / self.slots[p] for p in pools)

    @property
    def ratio(self) -> float:
        return self.makespan / self.ideal()

    def server_cpu_per_job(self) -> float:
        return sum(self.monitor.cpu[name] for name in SERVER_PROCESSES) / len(self.jobs)


def _submit_queued(plan, users) -> list[int]:
    """The plan's submissions in-process (a backlog), their job ids in order."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from judging.services.submit import submission_submit

    try:
        users = list(get_user_model().objects.filter(pk__in=[u.pk for u in users]))
        return [submission_submit(user=users[i % len(users)], problem_id=body["problemId"], language=body["language"],
                                  code=ingest.source(), exam_id=body.get("examId")).current_judge_job_id
                for i, body in enumerate(plan)]
    finally:
        connection.close()


def _next_job_id() -> int:
    from django.db import connection
    from django.db.models import Max
    from judging.models import JudgeJob

    try:
        return (JudgeJob.objects.aggregate(last=Max("id"))["last"] or 0) + 1
    finally:
        connection.close()


def _job_facts(job_ids) -> tuple[dict, int]:
    """(job id -> priority class, how many failed)."""
    from django.db import connection
    from judging.models import JobState, JudgeJob

    try:
        rows = list(JudgeJob.objects.filter(pk__in=job_ids).values_list("id", "priority_class", "state"))
        return {pk: cls for pk, cls, _ in rows}, sum(1 for _, _, state in rows if state == JobState.FAILED)
    finally:
        connection.close()


async def kece_run(name, urls: Urls, plan, *, nodes_per_pool: dict, tokens, users, roots, http: bool,
                   backlog=None) -> Run:
    """One burst: `plan` over HTTP (else queued in-process first), judged by cold nodes;
    `backlog()`: queues jobs just before the first submission (a rejudge), their ids."""
    nodes = []
    for pool, count in nodes_per_pool.items():
        nodes += await asyncio.to_thread(dispatch.make_nodes, count, SLOTS, pool)
    slots = {pool: count * SLOTS for pool, count in nodes_per_pool.items()}
    ColdNode.records = {}
    ColdNode.first_job_id = await asyncio.to_thread(_next_job_id)
    context = multiprocessing.get_context("spawn")
    if http:
        go, out = context.Event(), context.Queue()
        submitter = context.Process(target=ingest._submit_when_told,
                                    args=(urls.submit, tokens, plan, len(plan), 8, go, out, False), daemon=True)
        submitter.start()
        assert await asyncio.to_thread(out.get, True, 60) == "ready"
        roots = {**roots, "load": submitter.pid}
        queued = []
    else:
        queued = await asyncio.to_thread(_submit_queued, plan, users)
        ColdNode.first_job_id = queued[0]

    measuring = {}

    async def begin(http=None):
        """Before a queued run's start, as the pollers are before theirs: the nodes connected
        (`http`), the result posts' time so far and the processes' first sample taken (the
        scrape on the node API and the walk over /proc in the nodes' process would hold up
        the first claims)."""
        if http is not None:
            await http.connect(len(nodes))
        measuring["posts"] = await asyncio.to_thread(server_post_seconds, urls.nodes)
        measuring["monitor"] = Monitor({**roots, "nodes": os.getpid()})
        measuring["monitor"].start()
        await asyncio.to_thread(measuring["monitor"].sampled.wait)

    async def scenario(timeline):
        if http:
            await asyncio.sleep(1.5)  # every node is waiting
            await begin()
        posts_before, monitor = measuring["posts"], measuring["monitor"]
        if http:
            backlog_ids = await asyncio.to_thread(backlog) if backlog else []
            queued_at = time.perf_counter()
            go.set()
            start, committed, refused = await asyncio.to_thread(out.get, True, 300)
            submitter.join(10)
            job_ids = backlog_ids + await asyncio.to_thread(ingest.job_ids_of, [s for s, _, _ in committed])
            arrivals = {**{j: queued_at - start for j in backlog_ids},
                        **{j: at - start for j, (_, at, _) in zip(job_ids[len(backlog_ids):], committed)}}
            accept = [seconds for _, _, seconds in committed]
        else:
            start, job_ids, refused, accept = timeline.nodes_started, queued, 0, []
            arrivals = {j: 0.0 for j in job_ids}
        while not all(j in timeline.done for j in job_ids):
            await asyncio.sleep(0.01)
        monitor.finish()
        posts_after = await asyncio.to_thread(server_post_seconds, urls.nodes)
        classes, failed = await asyncio.to_thread(_job_facts, job_ids)
        run = Run(name, slots, job_ids, classes, start, arrivals, accept, refused, timeline, dict(ColdNode.records),
                  failed, monitor)
        run.makespan = max(timeline.done[j] for j in job_ids) - start
        run.extra["server_posts"] = (posts_after[0] - posts_before[0], posts_after[1] - posts_before[1])
        return run

    ColdNode.waker = Waker(asyncio.get_running_loop())
    ColdNode.waker.start()
    try:
        return await dispatch.gather_nodes(urls.nodes, nodes, SLOTS, 0.2, scenario, node_class=ColdNode,
                                           before=None if http else begin)
    finally:
        ColdNode.waker.stop()


RESULT_ROUTE_LABEL = 'route="api/v1/internal/judgers/jobs/<id:job_id>/result"'


def server_post_seconds(nodes_url: str) -> tuple[float, int]:
    """The node API's own time on result posts so far (sum of seconds, count), from its
    request-duration histogram on `/metrics`: read before and after a run, the server's
    share of what the slots spent posting."""
    import requests

    text = requests.get(f"{nodes_url}/metrics", timeout=30).text
    found = {"sum": 0.0, "count": 0}
    for line in text.splitlines():
        if line.startswith("kece_http_request_duration_seconds_") and RESULT_ROUTE_LABEL in line:
            kind = line.split("{", 1)[0].rsplit("_", 1)[1]
            if kind in found:
                found[kind] += float(line.rsplit(" ", 1)[1])
    return found["sum"], int(found["count"])


def _p95(values) -> str:
    return f"{1000 * percentile(values, 95):.0f} ms" if values else "-"


def print_run(run: Run, *, per_pool: bool = True, per_class: bool = False) -> None:
    t = run.timeline
    jobs = run.jobs

    def figures(selected) -> str:
        waits = [t.received[j] - run.start - run.arrivals[j] for j in selected]
        judge = [run.records[j][1] for j in selected]
        store = [t.done[j] - t.posted[j] for j in selected]
        last = max(t.done[j] for j in selected) - run.start
        return (f"queue wait p95 {_p95(waits)}, judge p95 {_p95(judge)}, store p95 {_p95(store)},"
                f" test data wait p95 {_p95([run.records[j][2] for j in selected])}, last completion {last:.2f} s")

    print(f"  {run.name}: {len(jobs)} jobs, accepted {len(run.accept) if run.accept else len(jobs)}"
          f"{' over HTTP' if run.accept else ' (queued)'}"
          f" (accept p95 {_p95(run.accept)}), SYSTEM_ERROR {run.failed + run.refused}"
          f" ({run.refused} refused); makespan {run.makespan:.2f} s, ideal {run.ideal():.2f} s,"
          f" ratio {run.ratio:.3f}; {len(jobs) / run.makespan:.1f} jobs/s;"
          f" server CPU {1000 * run.server_cpu_per_job():.1f} ms a job (web + node API + worker)")
    print(f"    all: {figures(jobs)}")
    if per_pool and len(run.slots) > 1:
        for pool in run.slots:
            selected = [j for j in jobs if run.records[j][0] == pool]
            print(f"    {pool} ({run.slots[pool]} slots, {len(selected)} jobs, ideal {run.ideal(pool):.2f} s):"
                  f" {figures(selected)}")
    if per_class:
        for cls in ("EXAM", "PRACTICE", "REJUDGE"):
            selected = [j for j in jobs if run.classes.get(j) == cls]
            if selected:
                print(f"    {cls}: {len(selected)} jobs, {figures(selected)}")
    if len(run.slots) == 1:
        print(f"    the slots' time, in parts of the ideal (they add up to the ratio): {slot_time(run)}")
    seconds, count = run.extra.get("server_posts", (0.0, 0))
    if count:
        client = [t.done[j] - t.posted[j] for j in jobs]
        print(f"    result posts: mean {1000 * statistics.mean(client):.1f} ms on the nodes, of which"
              f" {1000 * seconds / count:.1f} ms in the node API's handler ({count} posts)")
    print(f"    processes: {run.monitor.line()}")


def slot_time(run: Run) -> str:
    return " + ".join(f"{name} {share:.3f}" for name, share in slot_parts(run).items())


TAIL = "after the last (the tail)"


def tail_of(run: Run) -> float:
    return slot_parts(run)[TAIL]


def slot_parts(run: Run) -> dict:
    """Where a single-pool run's slot-seconds (slots x makespan) went, each part divided by
    slots x ideal: judging is 1, and the other parts are what the ratio has above it. A
    slot's first job is taken as one of the run's first receipts, its last as one of the last
    results: exact when every slot starts before any finishes, as in a queued run. Over HTTP
    a slot may finish a light job before the last slot gets its first; the parts before the
    first job and between jobs then share their sum differently, and the sum holds."""
    t, jobs = run.timeline, run.jobs
    (slots,) = run.slots.values()
    judging = sum(run.records[j][1] for j in jobs)
    downloads = sum(run.records[j][2] for j in jobs)
    in_slot = sum(t.posted[j] - t.received[j] for j in jobs)
    posts = sum(t.done[j] - t.posted[j] for j in jobs)
    before = sum(sorted(t.received[j] - run.start for j in jobs)[:slots])
    after = sum(run.makespan - done for done in sorted(t.done[j] - run.start for j in jobs)[-slots:])
    parts = {"judging": judging, "waiting for test data": downloads,
             "the rest of a job in its slot": in_slot - judging - downloads, "result posts": posts,
             "before the first job": before, TAIL: after,
             "between jobs": slots * run.makespan - in_slot - posts - before - after}
    unit = slots * run.ideal()
    return {name: seconds / unit for name, seconds in parts.items()}


def slot_advice(run: Run, target_seconds: float = 60.0) -> None:
    """Slots each pool needs for a 300 burst of its mix in `target_seconds` (the design's
    rule: slots = jobs x mean judge time / target), with the overhead this run measured."""
    overhead = max(run.ratio, 1.0)
    for pool in run.slots:
        judged = [run.records[j][1] for j in run.jobs if run.records[j][0] == pool]
        mean = sum(judged) / len(judged)
        need = math.ceil(300 * mean * overhead / target_seconds)
        print(f"    {pool}: mean judge {mean * 1000:.0f} ms; 300 in {target_seconds:.0f} s needs {need} slots"
              f" (x {overhead:.2f} for the measured overhead); {run.slots[pool]} slots finish 300 in"
              f" {300 * mean * overhead / run.slots[pool]:.0f} s")


# --- the peers ------------------------------------------------------------------------------

def peer_celery(judge_seconds: list, nodes: int, ideal: float) -> tuple[float, float, Monitor]:
    """(makespan, tail in parts of the ideal, processes)."""
    job_ids = peers.prepare(judge_seconds)
    workers = peers.celery_workers(nodes, SLOTS)
    try:
        monitor = Monitor({**{f"celery{i}": w.pid for i, w in enumerate(workers)},
                           "redis": pid_of("redis-server"), "mariadb": pid_of("mariadbd")})
        peers.celery_ready(workers)
        monitor.start()
        monitor.sampled.wait()  # before the start, as KECE's (`kece_run`)
        start = peers.celery_run(job_ids)
        return (*_until_done(len(job_ids), start, nodes * SLOTS, ideal), monitor.finish())
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            worker.wait(20)


def peer_pollers(judge_seconds: list, nodes: int, ideal: float) -> tuple[float, float, Monitor]:
    """(makespan, tail in parts of the ideal, processes)."""
    job_ids = peers.prepare(judge_seconds)
    context = multiprocessing.get_context("spawn")
    go, stop = context.Event(), context.Event()
    processes = [context.Process(target=peers.poller_process, args=(SLOTS, go, stop), daemon=True)
                 for _ in range(nodes)]
    for process in processes:
        process.start()
    time.sleep(2.0)  # connected and waiting
    monitor = Monitor({**{f"poller{i}": p.pid for i, p in enumerate(processes)}, "mariadb": pid_of("mariadbd")})
    monitor.start()
    monitor.sampled.wait()  # before the start, as KECE's (`kece_run`)
    start = time.perf_counter()
    go.set()
    try:
        return (*_until_done(len(job_ids), start, nodes * SLOTS, ideal), monitor.finish())
    finally:
        stop.set()
        for process in processes:
            process.join(10)


def _until_done(count: int, start: float, slots: int, ideal: float) -> tuple[float, float]:
    """Once every job is judged: (the makespan, the tail in parts of the ideal), the tail
    counted as `slot_time` counts KECE's, from each of the last `slots` results to the end."""
    while True:
        done, last = peers.finished()
        if done == count:
            idle = sum(last - finished for finished in peers.finish_times()[-slots:])
            return last - start, idle / (slots * ideal)
        time.sleep(0.05)


# --- profiling ------------------------------------------------------------------------------

def profiler(directory: Path, name: str) -> list:
    return [sys.executable, str(Path(__file__).with_name("cpu_profile.py")), str(directory / f"{name}.pstats")]


HOT_CODE = ("judging/", "kece/", "nodes/", "django/", "rest_framework/", "uvicorn/", "MySQLdb/", "asyncio/", "celery/")


def profile_top(path: Path, count: int = 20) -> None:
    """The hottest functions of a CPU profile (`cpu_profile.py`): own time and total time
    (with callees), each against all the CPU the process's threads spent."""
    import pstats

    stats = pstats.Stats(str(path)).stats
    total = sum(tt for _cc, _nc, tt, _ct, _callers in stats.values())

    def name(key):
        file, line, function = key
        short = file.split("site-packages/")[-1].split("/accept/")[-1]
        return f"{function} ({short}:{line})"

    print(f"  {path.name}: {total:.2f} CPU-s in all")
    print("    own time:")
    for key, (_cc, calls, tt, _ct, _) in sorted(stats.items(), key=lambda item: -item[1][2])[:count]:
        print(f"      {100 * tt / total:5.1f} %  {calls:7d} calls  {name(key)}")
    print("    total time (with callees), project and library code:")
    hot = [(key, value) for key, value in stats.items() if any(part in key[0] for part in HOT_CODE)]
    for key, (_cc, calls, _tt, ct, _) in sorted(hot, key=lambda item: -item[1][3])[:count + 10]:
        print(f"      {100 * ct / total:5.1f} %  {calls:7d} calls  {name(key)}")


# --- real runtimes: each pool's single-slot baseline --------------------------------------------

RUNTIME_ORDER = ("cpp", "java", "python", "mysql", "arkts")


@dataclass
class Baseline:
    """One pool's samples judged by one real agent with one slot."""
    pool: str
    missing: str = ""  # why the pool was not measured: what the machine lacks, or a run that did not finish
    judge: list = field(default_factory=list)  # seconds, claim -> result, per job
    failed: int = 0  # SYSTEM_ERROR: jobs that failed on infrastructure
    wrong: list = field(default_factory=list)  # (sample, expected, got)
    cpu: float = 0.0  # the agent and every sandboxed run it waited for, seconds
    max_rss: int = 0  # the largest one of them, bytes
    tree_rss: int = 0  # the agent's process tree at its largest, sampled, bytes
    wall: float = 0.0

    @property
    def mean(self) -> float:
        return sum(self.judge) / len(self.judge)


def runtime_baseline(pool: str, *, server, tls, student, problems: dict, repeats: int) -> Baseline:
    """`pool`'s sample solutions, each submitted `repeats` times and queued, then judged by a
    real agent (`python -m node_agent`, one slot) started for them, alone on the machine."""
    from django.db import connection
    from judging.models import JobState, JudgeJob
    from judging.services.submit import submission_submit
    from kece.demo import sample_solutions
    from tests.agents import Agents, missing_tools, wait_for

    if missing := missing_tools(pool):
        return Baseline(pool, missing=f"{', '.join(missing)} not installed")
    fleet = Agents(server, tls)
    try:
        node = fleet.register(pool, slots=1)
        expected = []  # (sample, verdict it was written for, submission)
        for _ in range(repeats):
            for _package, slug, language, source, verdict in sample_solutions([pool]):
                submission = submission_submit(user=student, problem_id=problems[slug].pk, language=language,
                                               code=source.read_text())
                expected.append((f"{slug}/{source.name}", verdict, submission))
        jobs = [submission.current_judge_job_id for _, _, submission in expected]
        started = time.perf_counter()
        agent = fleet.start(node, slots=1)
        monitor = Monitor({"agent": agent.pid})
        monitor.start()
        fleet.enable(node)
        settled = JudgeJob.objects.filter(pk__in=jobs, state__in=JobState.TERMINAL)
        try:
            wait_for(lambda: settled.count() == len(jobs), 120 + 60 * len(jobs), "every sample judged")
        except AssertionError:
            return Baseline(pool, missing=f"{settled.count()} of {len(jobs)} jobs settled in time;"
                                          f" the agent's log ends:\n{agent.logs()[-2000:]}")
        wall = time.perf_counter() - started
        monitor.finish()
        usage = agent.stop_with_usage()
        rows = list(JudgeJob.objects.filter(pk__in=jobs).values_list("state", "started_at", "finished_at"))
        baseline = Baseline(pool, wall=wall, cpu=usage.ru_utime + usage.ru_stime, max_rss=usage.ru_maxrss * 1024,
                            tree_rss=int(monitor.peak_rss["agent"]),
                            failed=sum(1 for state, _, _ in rows if state == JobState.FAILED),
                            judge=[(end - begin).total_seconds() for state, begin, end in rows
                                   if state == JobState.COMPLETED and begin and end])
        for sample, verdict, submission in expected:
            submission.refresh_from_db()
            if submission.verdict != verdict:
                baseline.wrong.append((sample, verdict, submission.verdict))
        return baseline
    finally:
        fleet.stop()
        connection.close()


def print_baselines(baselines: list, repeats: int) -> None:
    print(f"real-runtime baseline: one agent of 1 slot per pool, alone, the pool's sample solutions x {repeats}"
          f" queued before it starts; {os.cpu_count()} cores")
    print(f"  {'pool':7} {'jobs':>4} {'wall':>6} {'mean':>8} {'p95':>8} {'CPU-s':>6} {'CPU/job':>8} {'max RSS':>8}"
          f" {'tree RSS':>8} {'SYSTEM_ERROR':>12}  verdicts")
    for b in baselines:
        if b.missing:
            print(f"  {b.pool:7} not measured: {b.missing}")
            continue
        if not b.judge:
            print(f"  {b.pool:7} no job completed; SYSTEM_ERROR {b.failed}")
            continue
        verdicts = "as written" if not b.wrong else f"{len(b.wrong)} differ: " + ", ".join(
            f"{sample} {want}->{got}" for sample, want, got in b.wrong[:4])
        jobs = len(b.judge) + b.failed
        print(f"  {b.pool:7} {jobs:>4} {b.wall:>4.0f} s {1000 * b.mean:>5.0f} ms {_p95(b.judge):>8} {b.cpu:>6.1f}"
              f" {1000 * b.cpu / jobs:>5.0f} ms {b.max_rss / 2**20:>4.0f} MiB {b.tree_rss / 2**20:>4.0f} MiB"
              f" {b.failed:>12}  {verdicts}")
    print("  wall: the agent's start to the last result; mean, p95: judge time from the job rows (claim -> result); CPU: the agent with every compilation"
          " and run it waited for, start-up and heartbeats included (mysql: the statements run in MariaDB, not"
          " counted); max RSS: the largest single process among them; tree RSS: the agent's process tree at its"
          " largest, sampled every 0.25 s")


def print_runtime_advice(baselines: list, problems: dict, rates: list, participants: int) -> None:
    """Slots from the measured mean judge times, by the console's own arithmetic
    (`judging.capacity`): a steady arrival rate, and a typical exam's burst."""
    from django.conf import settings
    from judging.capacity import PoolLoad, exam_burst, pool_advice, problem_demand

    measured = {b.pool: b.mean for b in baselines if b.judge}
    rho = settings.KECE_CAPACITY_UTILISATION
    print(f"  slots a pool needs for a steady arrival rate (at most {rho:.0%} busy, KECE_CAPACITY_UTILISATION):")
    for pool, seconds in measured.items():
        needs = [pool_advice(pool=pool, arrival_rate=rate, judge_seconds=seconds, ready_slots=0,
                             max_utilisation=rho).add_slots for rate in rates]
        print(f"    {pool:7} " + ", ".join(f"{rate:g} jobs/s: {need}" for rate, need in zip(rates, needs)))
    per_problem, target = settings.KECE_EXAM_SUBMISSIONS_PER_PROBLEM, settings.KECE_EXAM_BURST_TARGET_S
    demands = [demand for problem in problems.values() if (demand := problem_demand(problem))]
    submissions = participants * len(demands) * per_problem
    loads = {pool: PoolLoad(pool=pool, window_s=1, arrivals=0, judged=1, judge_seconds=seconds)
             for pool, seconds in measured.items()}
    print(f"  an exam's burst: {participants} participants x {len(demands)} problems (the samples) x {per_problem:g}"
          f" submissions each = {submissions:.0f}, judged within {target} s (KECE_EXAM_BURST_TARGET_S), each"
          f" problem's share split evenly over its languages:")
    for need in exam_burst(problems=demands, submissions=submissions, target_s=target, loads=loads, ready_slots={}):
        source = "measured" if need.measured else "declared limits"
        print(f"    {need.pool:7} {need.submissions:5.0f} submissions of {1000 * need.judge_seconds:.0f} ms ({source}):"
              f" {need.slots_needed} slots")


def runtime_mode(args) -> None:
    from django.db import connection
    from judging.services.problems import problem_import
    from kece.demo import SAMPLES
    from tests.agents import make_tls, private_dir
    from tests.factories import UserFactory
    from tests.live import LiveServer

    problems = {}
    for package in sorted(p for p in SAMPLES.iterdir() if (p / "problem.json").is_file()):
        problem, _ = problem_import(package)
        problems[problem.slug] = problem
    student = UserFactory()
    folder = private_dir("kece-bench-tls-", 0o700)
    tls = make_tls(folder)
    server = LiveServer(env={"KECE_IN_PROCESS_SCHEDULER": 1, "KECE_PROBE_CA_FILE": str(tls["ca"])})
    connection.close()
    baselines = []
    try:
        with server:
            for pool in args.pools:
                baselines.append(runtime_baseline(pool, server=server, tls=tls, student=student, problems=problems,
                                                  repeats=args.runtime_repeats))
                print(f"  ({pool} done)", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print_baselines(baselines, args.runtime_repeats)
    print_runtime_advice(baselines, problems, args.rates, args.exam_participants)


# --- main -----------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the 300 bursts and the peers only")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--no-scale", action="store_true", help="no runs with more web processes or two nodes")
    parser.add_argument("--repeats", type=int, default=1, metavar="N",
                        help="run the queued 300 burst and the 300 over HTTP N times each on the same server,"
                             " alternating; the targets use the medians")
    parser.add_argument("--against", type=Path, metavar="CHECKOUT",
                        help="only compare: the queued 300 burst on this checkout's server and worker and on"
                             " CHECKOUT's (another commit, the same schema), alternating, --rounds times")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --against (default 5)")
    parser.add_argument("--profile", type=Path, help="profile the queued 300 burst's server into this directory")
    parser.add_argument("--nodes-on-web", action="store_true",
                        help="the nodes speak to the web processes, not to the node API's own process")
    parser.add_argument("--runtime", action="store_true",
                        help="only the real-runtime mode: each pool's single-slot baseline with real agents")
    parser.add_argument("--runtime-repeats", type=int, default=1, metavar="N",
                        help="submissions of each sample solution (default 1)")
    parser.add_argument("--pools", type=lambda text: text.split(","), default=list(RUNTIME_ORDER),
                        help="the runtime mode's pools (default cpp,java,python,mysql,arkts)")
    parser.add_argument("--rates", type=lambda text: [float(v) for v in text.split(",")], default=[0.5, 1.0, 2.0],
                        help="arrival rates (jobs/s) for the runtime mode's slot advice (default 0.5,1,2)")
    parser.add_argument("--exam-participants", type=int, default=60,
                        help="participants of the exam whose burst the runtime mode sizes (default 60)")
    args = parser.parse_args()
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/11")
    if args.runtime:
        # The agents' health endpoints listen on loopback ports picked free.
        os.environ.setdefault("KECE_PROBE_ALLOWED_PORTS", "1024-65535")
        setup("kece_bench_runtime")
        return runtime_mode(args)
    setup("kece_bench_accept")

    from django.db import connection
    from tests.factories import make_exam
    from tests.live import LiveServer

    students, tokens = ingest.students_with_tokens(64)
    problems = {pool: {"pool": pool, **make_problems(pool)} for pool in POOLS}
    exam_problems = {pool: {"pool": pool, **make_problems(pool)} for pool in POOLS}
    exam = make_exam(*[p[w.name] for p in exam_problems.values() for w in WEIGHTS], mode="ACM",
                     participants=students, minutes=600)
    ColdNode.weights = {p[w.name].current_manifest_id: w for group in (problems, exam_problems)
                        for p in group.values() for w in WEIGHTS}
    connection.close()
    database = os.environ["DATABASE_URL"].rsplit("/", 1)[1]
    web_url = dispatch.create_bench_user(database, dispatch.WEB_USER)
    worker_url = dispatch.create_bench_user(database, dispatch.WORKER_USER)
    env = {"KECE_IN_PROCESS_SCHEDULER": 0, "REDIS_URL": os.environ["REDIS_URL"]}
    shared = {"mariadb": pid_of("mariadbd"), "redis": pid_of("redis-server")}
    python300 = plan_of(problems["python"], 300, seed=300)
    results = {}
    repeats = []  # the queued 300 burst's further runs (--repeats)
    http_repeats = []  # and the 300 over HTTP's, alternating with them
    http_repeats_2w = []  # and the 300 over HTTP's on the default number of web processes

    if args.against:
        return compare(args, web_url, worker_url, env, shared, python300, tokens, students)

    def serve(name: str, workers: int, profile_dir=None):
        return LiveServer.for_database(web_url, workers=workers, env=env, args=WEB_ARGS,
                                       prefix=profiler(profile_dir, name) if profile_dir else ())

    def with_server(workers: int, body, profile_dir=None):
        web = serve("web", workers, profile_dir)
        # The node API on a process of its own, as Compose and Kubernetes run it.
        node_api = None if args.nodes_on_web else serve("node-api", 1, profile_dir)
        prefix = profiler(profile_dir, "worker") if profile_dir else ()
        with web, node_api or contextlib.nullcontext(), \
                dispatch.celery_worker({**web.env, "DATABASE_URL": worker_url, "KECE_CONN_MAX_AGE": "60"},
                                       prefix=prefix) as worker, dispatch.user_statistics(False):
            servers = {"web": web, **({"node-api": node_api} if node_api else {})}
            roots = {**{name: server.process.pid for name, server in servers.items()}, "worker": worker.pid, **shared}
            return body(Urls(web.url, (node_api or web).url), roots)

    def run(name, base, roots, plan, nodes_per_pool, http, backlog=None):
        return asyncio.run(kece_run(name, base, plan, nodes_per_pool=nodes_per_pool, tokens=tokens, users=students,
                                    roots=roots, http=http, backlog=backlog))

    def one_web(base, roots):
        steps = [] if args.quick else [30, 100]
        for count in steps:
            results[f"http{count}"] = run(f"{count} python submissions over HTTP, 4 nodes", base, roots,
                                          python300[:count], {"python": 4}, True)
        results["http300"] = run("300 python submissions over HTTP, 4 nodes", base, roots, python300,
                                 {"python": 4}, True)
        results["queued300"] = run("the same 300 queued before the nodes claim, 4 nodes", base, roots, python300,
                                   {"python": 4}, False)
        for _ in range(args.repeats - 1):
            http_repeats.append(run("again over HTTP", base, roots, python300, {"python": 4}, True))
            repeats.append(run("again", base, roots, python300, {"python": 4}, False))
        if not args.no_scale:
            results["http300-2n"] = run("300 over HTTP, 2 nodes", base, roots, python300, {"python": 2}, True)
            results["queued300-2n"] = run("300 queued, 2 nodes", base, roots, python300, {"python": 2}, False)
        if not args.quick:
            mixed, backlog = mixed_plan(problems, exam_problems, exam, students)
            results["mixed"] = run("300 mixed over the five pools (1 node each), EXAM + practice over HTTP,"
                                   " REJUDGE backlog", base, roots, mixed, {pool: 1 for pool in POOLS}, True, backlog)

    with_server(1, one_web)
    # What `python -m kece.serve` starts by default (Compose's and Kubernetes' web tier): a web
    # process per core this machine gives it, at least two, for the scale-out line.
    from kece.serve import usable_cores

    web_processes = max(2, usable_cores())
    if not args.no_scale:
        def two_web(base, roots):
            beside = "" if args.nodes_on_web else " beside the node API's one"
            results["http300-2w"] = run(f"300 over HTTP, {web_processes} web processes{beside}, 4 nodes", base,
                                        roots, python300, {"python": 4}, True)
            results["queued300-2w"] = run(f"300 queued, {web_processes} web processes{beside}, 4 nodes", base, roots,
                                          python300, {"python": 4}, False)
            http_repeats_2w.extend(run("again over HTTP", base, roots, python300, {"python": 4}, True)
                                   for _ in range(args.repeats - 1))
        with_server(web_processes, two_web)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        with_server(1, lambda base, roots: results.__setitem__("profiled", run(
            "300 queued, profiled (cProfile: slower)", base, roots, python300, {"python": 4}, False)), args.profile)

    queued = results["queued300"]
    judge_times = [queued.records[j][1] for j in queued.jobs]
    ideal = queued.ideal()
    peer_results = {}
    if not args.no_peers:
        # On MariaDB as KECE's runs had it: without the per-user statement counts the test
        # suite turns on, which cost the server CPU on every statement.
        with dispatch.user_statistics(False):
            peer_results["Celery + Redis, acks_late"] = peer_celery(judge_times, 4, ideal)
            peer_results["SKIP LOCKED pollers, 100 ms"] = peer_pollers(judge_times, 4, ideal)

    topology = "the nodes on the web processes" if args.nodes_on_web else "the node API on a process of its own"
    print(f"acceptance benchmark: uvicorn ({topology}) + Celery worker/beat + MariaDB + Redis, simulated cold nodes"
          f" of {SLOTS} slots over HTTP, {os.cpu_count()} cores shared with the load generator")
    print("  problems: " + ", ".join(f"{w.name} {int(w.share * 100)} % ({w.low * 1000:.0f}-{w.high * 1000:.0f} ms,"
                                     f" {w.cases} cases of {w.case_bytes // 1024} KiB)" for w in WEIGHTS))
    for key, result in results.items():
        print_run(result, per_class=key == "mixed")
    print("  peers on the queued burst's judge times (16 slots, results written to MariaDB):")
    best = None
    for name, (makespan, tail, monitor) in peer_results.items():
        ratio = makespan / ideal
        best = ratio if best is None else min(best, ratio)
        workers_cpu = sum(v for k, v in monitor.cpu.items() if k not in ("mariadb", "redis"))
        print(f"    {name}: makespan {makespan:.2f} s, ratio {ratio:.3f} (the tail {tail:.3f}, the rest of its slots'"
              f" time {ratio - 1 - tail:.3f}); KECE / peer {queued.ratio / ratio:.3f};"
              f" its workers' CPU {1000 * workers_cpu / len(judge_times):.1f} ms a job; {monitor.line()}")
    bursts = [queued, *repeats]
    cpu = statistics.median(burst.server_cpu_per_job() for burst in bursts)
    ratio = statistics.median(burst.ratio for burst in bursts)
    if repeats:
        print(f"  the queued 300 burst {len(bursts)} times on one server: server CPU per job "
              + ", ".join(f"{1000 * burst.server_cpu_per_job():.2f}" for burst in bursts) + " ms; ratio "
              + ", ".join(f"{burst.ratio:.3f}" for burst in bursts) + "; the targets take the medians")
    http_bursts = [results["http300"], *http_repeats]
    with_submissions = statistics.median(burst.server_cpu_per_job() for burst in http_bursts)
    http_ratio = statistics.median(burst.ratio for burst in http_bursts)
    if http_repeats:
        print(f"  the 300 over HTTP {len(http_bursts)} times on one server, alternating with the queued: server CPU"
              " per job " + ", ".join(f"{1000 * burst.server_cpu_per_job():.2f}" for burst in http_bursts)
              + " ms; ratio " + ", ".join(f"{burst.ratio:.3f}" for burst in http_bursts) + " (the tail "
              + ", ".join(f"{tail_of(burst):.3f}" for burst in http_bursts) + "); the targets take the medians")
    print("  targets:")
    print(f"    server CPU per judged job, queued 300 burst: {1000 * cpu:.2f} ms (target <= 4:"
          f" {'met' if cpu <= 0.004 else 'NOT met'}); with the submissions (300 over HTTP): {1000 * with_submissions:.2f} ms")
    if best is not None:
        print(f"    queued 300 ratio {ratio:.3f} against the better peer's {best:.3f} + 0.02:"
              f" {'met' if ratio <= best + 0.02 else 'NOT met'}")
    print(f"    300 over HTTP ratio, one web process: {http_ratio:.3f} (target <= 1.15:"
          f" {'met' if http_ratio <= 1.15 else 'NOT met'})")
    if "http300-2w" in results:
        default = [results["http300-2w"], *http_repeats_2w]
        ratio_2w = statistics.median(burst.ratio for burst in default)
        print(f"    300 over HTTP ratio, {web_processes} web processes (kece.serve's default here): {ratio_2w:.3f}"
              f" ({', '.join(f'{burst.ratio:.3f}' for burst in default)}; target <= 1.15:"
              f" {'met' if ratio_2w <= 1.15 else 'NOT met'})")
    if "mixed" in results:
        print("  slot advice (the mixed burst's judge times, 300 of a pool's mix in 60 s):")
        slot_advice(results["mixed"])
    if args.profile:
        print("  CPU profile of the queued 300 burst's server (cProfile on each thread's CPU clock; the whole"
              " life of the processes, start-up included):")
        for name in SERVER_PROCESSES:
            path = args.profile / f"{name}.pstats"
            if name == "node-api" and args.nodes_on_web:
                continue  # not started: a file there is an earlier run's
            if path.exists():
                profile_top(path)


def compare(args, web_url, worker_url, env, shared, plan, tokens, students) -> None:
    """The queued 300 burst on two checkouts' servers, alternating a round at a time so that
    both meet the machine's neighbours alike (and which goes first, too): each round starts a
    server and a worker from each checkout, runs the burst twice and counts the second (the
    first warms them). One server process each, which the nodes speak to: with nothing
    submitted meanwhile it does what a node-API process does in the main runs."""
    from tests.live import ROOT, LiveServer

    checkouts = {"this checkout": ROOT, str(args.against): args.against.resolve()}
    counted = defaultdict(list)
    for round_number in range(1, args.rounds + 1):
        # Each first in every other round: the first of a round may meet the machine differently.
        for name, root in list(checkouts.items())[::1 if round_number % 2 else -1]:
            server = LiveServer.for_database(web_url, workers=1, env=env, args=WEB_ARGS, root=root)
            with server, dispatch.celery_worker({**server.env, "DATABASE_URL": worker_url, "KECE_CONN_MAX_AGE": "60"},
                                                cwd=root) as worker:
                roots = {"web": server.process.pid, "worker": worker.pid, **shared}
                for _ in range(2):
                    burst = asyncio.run(kece_run(name, Urls(server.url, server.url), plan, nodes_per_pool={"python": 4},
                                                 tokens=tokens, users=students, roots=roots, http=False))
            counted[name].append(burst)
            store = statistics.mean(burst.timeline.done[j] - burst.timeline.posted[j] for j in burst.jobs)
            print(f"  round {round_number}, {name}: server CPU {1000 * burst.server_cpu_per_job():.2f} ms a job"
                  f" (web {burst.monitor.cpu['web']:.2f}, worker {burst.monitor.cpu['worker']:.2f} CPU-s), ratio"
                  f" {burst.ratio:.3f}, result post mean {1000 * store:.1f} ms", flush=True)
    print("  medians:")
    for name, bursts in counted.items():
        print(f"    {name}: server CPU {1000 * statistics.median(b.server_cpu_per_job() for b in bursts):.2f} ms a job,"
              f" ratio {statistics.median(b.ratio for b in bursts):.3f}")


def mixed_plan(problems, exam_problems, exam, students):
    """60 submissions per pool: a fifth exam answers, the rest practice, over HTTP; and a
    REJUDGE backlog of 12 per pool: their submissions judged before, now; the function that
    queues their rejudges."""
    from django.db import connection
    from django.utils import timezone
    from judging.models import JobState, JudgeJob, PriorityClass
    from judging.services.rejudge import submission_rejudge

    plan = []
    for pool in POOLS:
        plan += plan_of(problems[pool], 36, seed=len(plan))
        plan += plan_of(exam_problems[pool], 12, seed=len(plan), extra={"examId": exam.pk})
    random.Random(5).shuffle(plan)
    backlog_plan = [body for pool in POOLS for body in plan_of(problems[pool], 12, seed=7)]
    first = _submit_queued(backlog_plan, students)
    try:
        JudgeJob.objects.filter(pk__in=first).update(state=JobState.COMPLETED)
        rows = list(JudgeJob.objects.filter(pk__in=first).values_list("submission_type", "submission_id"))
    finally:
        connection.close()

    def backlog() -> list[int]:
        try:
            return [submission_rejudge(submission_type=kind, submission_id=pk, now=timezone.now(),
                                       priority_class=PriorityClass.REJUDGE).pk for kind, pk in rows]
        finally:
            connection.close()

    return plan, backlog


if __name__ == "__main__":
    main()
