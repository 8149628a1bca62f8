"""Ingest benchmark: submissions over HTTP as students send them, on MariaDB + Redis + uvicorn
+ the Celery worker (as in production).

    python bench/ingest.py [--quick] [--workers N]

Prints:
  1. sequential `POST /api/v1/submissions` p50/p95, and the public reads (the status summary,
     the homepage) p50/p95;
  2. 300 submissions from 8 and from 64 concurrent clients (token-authenticated students):
     accepted per second, p50/p95/max, errors (anything but 202, a 429 included); and the
     same service (`submission_submit`) called in-process from as many threads, for the
     ratio HTTP ÷ in-process (target at 64: at least 0.5); p95 at 64 against what a fair
     queue gives (1.5 × 64 ÷ the accept rate);
     and a practice submit's time into a pool 0, 800 and 1600 jobs behind, counting its
     backlog on every submit against keeping the pool's figures KECE_PRESSURE_REFRESH_S;
  3. a 300-submission burst from 8 HTTP clients while 16 simulated slots (4 nodes × 4, a
     200 ms judge, `bench/dispatch.py`) judge: makespan ÷ ideal (target: within 10 %); the
     same jobs queued beforehand; and the machine's floor for the ratio: the best it could
     be if every result post cost what it costs one slot alone (40 jobs on one slot); and
     the whole machine's CPU during the bursts: busy, idle, stolen by the hypervisor, and the
     CPU seconds the burst's work took against those two cores offer in the target's makespan;
     and where the slots' time went: judging, waiting for result posts, no job to run.
The acceptance phases submit to a pool no node serves, so their jobs stay out of the burst.
"""

import argparse
import asyncio
import os
import sys
import threading
import time

try:
    from bench._django import percentile, setup
except ImportError:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench._django import percentile, setup

from bench import dispatch

SUBMIT = "/api/v1/submissions"


def source() -> str:
    """A program of its own for every submission, as students send them."""
    return f"print(int(input()) + 1)  # {time.time_ns()} {os.getpid()} {threading.get_ident()}\n"


class Clients:
    """aiohttp, one connection per client: the load generator shares the machine with the
    server, so it spends as little CPU per request as it can."""

    def __init__(self, session, base_url: str, tokens: list[str], problem_id: int, language: str, plan=None):
        """`plan`: what the n-th submission of a burst sends, a list of bodies without the
        code (`problemId`, `language`, `examId`, …) taken in turn; else one problem."""
        self.session, self.base_url, self.tokens = session, base_url, tokens
        self.plan = plan or [{"problemId": problem_id, "language": language}]

    async def submit(self, client: int, number: int = 0) -> tuple[int, float, dict]:
        headers = {"Authorization": f"Token {self.tokens[client % len(self.tokens)]}"}
        body = {**self.plan[number % len(self.plan)], "code": source()}
        start = time.perf_counter()
        async with self.session.post(self.base_url + SUBMIT, json=body, headers=headers) as response:
            answer = await response.json(content_type=None)
            return response.status, time.perf_counter() - start, answer

    async def get(self, path: str) -> float:
        start = time.perf_counter()
        async with self.session.get(self.base_url + path) as response:
            await response.read()
            assert response.status == 200, (path, response.status)
        return time.perf_counter() - start

    async def burst(self, count: int, clients: int, on_accepted=None) -> dict:
        """`count` submissions shared out among `clients` concurrent clients."""
        left = iter(range(count))
        latencies, errors = [], 0

        async def client(number):
            nonlocal errors
            for index in left:
                status, seconds, answer = await self.submit(number, index)
                if status != 202:
                    errors += 1
                    continue
                latencies.append(seconds)
                if on_accepted is not None:
                    on_accepted(answer, seconds)

        start = time.perf_counter()
        await asyncio.gather(*(client(n) for n in range(clients)))
        elapsed = time.perf_counter() - start
        return {"rate": len(latencies) / elapsed, "latencies": latencies, "errors": errors, "elapsed": elapsed}


def session_for(clients: int):
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients),
                                 timeout=aiohttp.ClientTimeout(total=120))


def in_process_rate(users, problem, language: str, count: int, threads: int) -> float:
    """Submissions per second of `submission_submit` itself, from `threads` threads."""
    from django.db import connection
    from judging.services.submit import submission_submit

    left = iter(range(count))
    lock, barrier = threading.Lock(), threading.Barrier(threads + 1)

    def worker(number):
        try:
            barrier.wait()
            while True:
                with lock:
                    if next(left, None) is None:
                        return
                submission_submit(user=users[number % len(users)], problem_id=problem.pk, language=language,
                                  code=source())
        finally:
            connection.close()

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in workers:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in workers:
        thread.join()
    return count / (time.perf_counter() - start)


def behind_costs(users, problem, language: str, levels=(0, 800, 1600), count=100) -> list:
    """A practice submit's time (`submission_submit` in-process, one thread) into a pool that
    many jobs behind, reading the pool's figures on every submit against keeping them
    KECE_PRESSURE_REFRESH_S: (level, seconds a submit each way), the two alternating in
    rounds of ten submits."""
    from django.conf import settings
    from django.db import connection
    from judging import pressure
    from judging.models import JobState, JudgeJob
    from judging.services.submit import submission_submit

    kept = settings.KECE_PRESSURE_REFRESH_S
    submitted = iter(range(10**9))

    def one():
        number = next(submitted)
        submission_submit(user=users[number % len(users)], problem_id=problem.pk, language=language, code=source())

    costs = []
    try:
        for level in levels:
            while JudgeJob.objects.filter(pool=language, state=JobState.QUEUED).count() < level:
                for _ in range(100):
                    one()
            spent = {0: 0.0, kept: 0.0}
            for _ in range(count // 10):
                for refresh in spent:
                    settings.KECE_PRESSURE_REFRESH_S = refresh
                    pressure.forget_pool_figures()
                    one()  # reads the figures either way
                    start = time.perf_counter()
                    for _ in range(10):
                        one()
                    spent[refresh] += time.perf_counter() - start
            costs.append((level, spent[0] / count, spent[kept] / count))
    finally:
        settings.KECE_PRESSURE_REFRESH_S = kept
        connection.close()
    return costs


async def http_phases(base, tokens, problem, quick: bool) -> dict:
    results = {}
    async with session_for(64) as session:
        http = Clients(session, base, tokens, problem.pk, "cpp")
        for _ in range(20):  # warm every lane thread, caches, connections
            await http.submit(0)
        sequential = []
        for _ in range(50 if quick else 200):
            status, seconds, _ = await http.submit(0)
            assert status == 202, status
            sequential.append(seconds)
        results["sequential"] = sequential
        for path in ("/api/v1/system/judgers/summary", "/"):
            results[path] = [await http.get(path) for _ in range(50 if quick else 200)]
        for clients in (8, 64):
            results[clients] = await http.burst(300, clients)
    return results


def _submit_when_told(base, tokens, plan, count, clients, go, out, warm=True) -> None:
    """Submitter process: the burst's HTTP clients run in an interpreter of their own, like
    students' browsers, so that they do not hold the simulated nodes' GIL. `plan`: the
    submissions' bodies (`Clients`). Puts (start, [((submission type, id), committed at,
    seconds it took)], errors) on `out`."""

    async def run():
        async with session_for(clients) as session:
            http = Clients(session, base, tokens, 0, "", plan=plan)
            if warm:
                await http.submit(0)  # warm: the connection, the first statements
            out.put("ready")
            await asyncio.to_thread(go.wait)
            committed = []
            started = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
            outcome = await http.burst(count, clients, on_accepted=lambda answer, seconds: committed.append(
                ((answer["submissionType"], answer["submissionId"]), time.perf_counter(), seconds)))
            return started, committed, outcome["errors"]

    out.put(asyncio.run(run()))


async def submitted_burst(base, tokens, problem, server_pid, jobs=300, clients=8, nodes_count=4, slots=4,
                          judge_seconds=0.2) -> dispatch.Burst:
    """`jobs` submissions over HTTP from `clients` students while the simulated nodes judge."""
    import multiprocessing

    nodes = await asyncio.to_thread(dispatch.make_nodes, nodes_count, slots)
    context = multiprocessing.get_context("spawn")
    go, out = context.Event(), context.Queue()
    plan = [{"problemId": problem.pk, "language": "python"}]
    submitter = context.Process(target=_submit_when_told, args=(base, tokens, plan, jobs, clients, go, out),
                                daemon=True)
    submitter.start()

    async def scenario(timeline):
        assert await asyncio.to_thread(out.get, True, 60) == "ready"
        await asyncio.sleep(1.5)  # every node is waiting
        cpu_before, machine_before = dispatch.cpu_seconds(server_pid), dispatch.MachineCpu.now()
        go.set()
        start, committed, errors = await asyncio.to_thread(out.get, True, 120)
        assert not errors, errors
        job_ids = await asyncio.to_thread(job_ids_of, [s for s, _, _ in committed])
        return await dispatch.when_judged(timeline, job_ids, start=start, arrivals=[at - start for _, at, _ in committed],
                                          slots=nodes_count * slots, judge_seconds=judge_seconds,
                                          server_pid=server_pid, cpu_before=cpu_before,
                                          machine_before=machine_before)

    try:
        return await dispatch.gather_nodes(base, nodes, slots, judge_seconds, scenario)
    finally:
        submitter.join(10)


def job_ids_of(submissions) -> list:
    """The current jobs of (submission type, id) pairs, in their order."""
    from django.db import connection
    from judging.models import SUBMISSION_MODELS

    try:
        jobs = {}
        for kind, model in SUBMISSION_MODELS.items():
            ids = [pk for of, pk in submissions if of == kind]
            jobs.update({(kind, pk): job for pk, job in
                         model.objects.filter(pk__in=ids).values_list("id", "current_judge_job_id")})
        return [jobs[s] for s in submissions]
    finally:
        connection.close()


def students_with_tokens(count: int) -> tuple[list, list[str]]:
    """`count` students and their API tokens (passwords hashed cheaply: a benchmark's
    accounts are made by the dozen)."""
    from django.conf import settings
    from rest_framework.authtoken.models import Token
    from tests.factories import UserFactory

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    students = UserFactory.create_batch(count)
    return students, [Token.objects.create(user=user).key for user in students]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (for a smoke run)")
    parser.add_argument("--burst-only", action="store_true", help="only the judged bursts (3)")
    parser.add_argument("--workers", type=int, default=int(os.environ.get("KECE_WEB_WORKERS", os.cpu_count() or 1)),
                        help="uvicorn worker processes (default: KECE_WEB_WORKERS, else the cores)")
    args = parser.parse_args()
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    setup("kece_bench_ingest")

    from django.db import connection
    from tests.factories import make_problem
    from tests.live import LiveServer

    students, tokens = students_with_tokens(64)
    unserved = make_problem(languages=("cpp",), cases=2)  # no node serves cpp here
    judged = make_problem(languages=("python",), cases=2)
    connection.close()
    database = os.environ["DATABASE_URL"].rsplit("/", 1)[1]
    server = LiveServer.for_database(dispatch.create_bench_user(database, dispatch.WEB_USER), workers=args.workers,
                                     env={"KECE_IN_PROCESS_SCHEDULER": 0, "REDIS_URL": os.environ["REDIS_URL"]})
    worker_db_url = dispatch.create_bench_user(database, dispatch.WORKER_USER)
    with server, dispatch.celery_worker({**server.env, "DATABASE_URL": worker_db_url, "KECE_CONN_MAX_AGE": "60"}), \
            dispatch.user_statistics(False):
        if not args.burst_only:
            http = asyncio.run(http_phases(server.url, tokens, unserved, args.quick))
            in_process = {threads: in_process_rate(students, unserved, "cpp", 300, threads) for threads in (8, 64)}
            behind = behind_costs(students, make_problem(languages=("java",), cases=2), "java")
        bursts = [asyncio.run(submitted_burst(server.url, tokens, judged, server.process.pid)) for _ in range(1 if args.quick else 3)]
        # The same jobs queued before the nodes start: no submission in the way, so its ratio
        # is what dispatching alone reaches on this machine as loaded as it is now.
        queued = asyncio.run(dispatch.queued_burst(server.url, students, judged, 300, 4, 4, 0.2, server.process.pid))
        # One slot alone: its result posts meet no other, so they cost what one costs on this
        # machine by itself.
        alone = asyncio.run(dispatch.burst(server.url, students, judged, 40, 1, 1, 0.2, server.process.pid))

    ms = lambda s: f"{s * 1000:.1f} ms"  # noqa: E731
    print(f"ingest benchmark: uvicorn ({args.workers} process{'es' if args.workers > 1 else ''}) + Celery worker/beat"
          f" + MariaDB + Redis, {os.cpu_count()} cores shared with the load generator")
    if not args.burst_only:
        print_acceptance(http, in_process, ms)
        from django.conf import settings

        for level, every, kept in behind:
            print(f"  a practice submit into a pool {level} jobs behind (in-process, one thread): {ms(every)} reading"
                  f" the pool's backlog on every submit, {ms(kept)} with it kept {settings.KECE_PRESSURE_REFRESH_S} s"
                  f" ({every / kept:.2f} x)")
    median = sorted(bursts, key=lambda b: b.ratio)[len(bursts) // 2]
    print(f"  300 submissions over HTTP from 8 clients while 16 slots judge (200 ms): makespan"
          f" {median.makespan:.2f} s, ideal {median.ideal:.2f} s, ratio {median.ratio:.3f}"
          f" (target <= 1.10: {'met' if median.ratio <= 1.10 else 'NOT met'}); accepting took"
          f" {median.arrivals[-1]:.2f} s, which alone allows {median.bound():.3f}; result post p50"
          f" {ms(percentile(median.result_posts, 50))}")
    ratios = ", ".join(f"{b.ratio:.3f}" for b in bursts)
    again = ", ".join(str(b.leased_again) for b in [*bursts, queued])
    print(f"    ratios of the {len(bursts)} bursts: {ratios}; the same 300 jobs queued before the nodes start"
          f" (no submissions): ratio {queued.ratio:.3f}, the dispatcher's own on this machine now;"
          f" jobs leased more than once (a lost lease waited out), per burst: {again}")
    print(f"    the median burst's {median.slot_time()};\n    the queued burst's {queued.slot_time()}")
    target_makespan = 1.10 * median.ideal
    print(f"    the machine during the median burst: {median.machine_during(target_makespan)};"
          f"\n    during the queued burst: {queued.machine_during(target_makespan)}")
    alone_post = percentile(alone.result_posts, 50)
    print(f"    this machine's floor for it: one slot alone gets its result post answered in {ms(alone_post)} (p50);"
          f" with the submissions arriving as they did and every post costing that, the ratio could be no better"
          f" than {median.bound(alone_post):.3f}")


def print_acceptance(http, in_process, ms):
    spread = lambda v: f"p50 {ms(percentile(v, 50))}  p95 {ms(percentile(v, 95))}"  # noqa: E731
    print(f"  sequential POST {SUBMIT}: {spread(http['sequential'])}")
    print(f"  GET /api/v1/system/judgers/summary: {spread(http['/api/v1/system/judgers/summary'])};"
          f"  GET / (homepage): {spread(http['/'])}")
    for clients in (8, 64):
        run = http[clients]
        lat, ratio = run["latencies"], run["rate"] / in_process[clients]
        print(f"  300 submissions, {clients} clients: {run['rate']:.1f} accepted/s, {spread(lat)}"
              f"  max {ms(max(lat))}, errors {run['errors']}; in-process service from {clients} threads"
              f" {in_process[clients]:.1f}/s: HTTP / in-process {ratio:.2f}")
    fair = 1.5 * 64 / http[64]["rate"]
    p95 = percentile(http[64]["latencies"], 95)
    print(f"    64 clients: HTTP / in-process {http[64]['rate'] / in_process[64]:.2f} (target >= 0.5:"
          f" {'met' if http[64]['rate'] >= 0.5 * in_process[64] else 'NOT met'}); p95 {ms(p95)} against a fair"
          f" queue's 1.5 x 64 / rate = {ms(fair)} ({'met' if p95 <= fair else 'NOT met'})")


if __name__ == "__main__":
    main()
