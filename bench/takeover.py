"""Takeover benchmark: how long a silent node's jobs wait before another node has them.

    python bench/takeover.py [--jobs 24] [--mass 500]

With the production timings (lease 60 s, renew every 15 s, reaper every 5 s in a Celery
worker with beat, as Compose runs it), a node process holding jobs renews them once and then
stops answering, and an idle standby node of the same pool long-polls for work:

  1. the holder is paused (SIGSTOP): a hung agent, a frozen machine;
  2. the holder is killed (SIGKILL): a crash, a machine that lost power;
  3. a mass expiry: a paused holder of `--mass` leases (a host group lost at once).

For every job it prints, from the holder's last successful renew (its lease's deadline less
the lease time, by the server's clock) to the job being claimable again (the reaper's
requeue) and to the standby holding it (its claim): p50, p95 and max. The design's target:
within 65 s with an idle healthy node in the pool. A job is taken by the standby once, with
the next lease epoch: anything else is printed as an error.

The holder is this script run as `takeover.py holder` in a process of its own (so it can be
paused and killed); it speaks the node API with `requests`, as an agent written from the
contract would.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

try:
    from bench._django import percentile, setup
except ImportError:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench._django import percentile, setup

PREFIX = "/api/v1/internal/judgers/"
RENEW_BATCH = 64  # API.md: at most 64 leases a renew


def _headers(secret: str, session: int) -> dict:
    return {"Authorization": f"Bearer {secret}", "X-Judge-Session": str(session)}


def holder(url: str, secret: str, session: int, jobs: int, renew_s: float) -> None:
    """Claim `jobs` jobs, renew them all, say so on stdout, and keep renewing until stopped."""
    import requests

    http = requests.Session()
    http.headers.update(_headers(secret, session))
    held = {}
    while len(held) < jobs:
        answer = http.post(url + PREFIX + "jobs/claim", json={"freeSlots": jobs - len(held), "waitMs": 1000},
                           timeout=30).json()
        held.update({job["jobId"]: job["leaseEpoch"] for job in answer["jobs"]})
    while True:
        items = [{"jobId": job_id, "leaseEpoch": epoch, "progress": {"phase": "JUDGING", "testcase": 1}}
                 for job_id, epoch in held.items()]
        for start in range(0, len(items), RENEW_BATCH):
            answer = http.post(url + PREFIX + "jobs/renew", json={"leases": items[start:start + RENEW_BATCH]},
                               timeout=30).json()
            assert all(lease["ok"] for lease in answer["leases"]), answer
        print(json.dumps({"renewed": len(items)}), flush=True)
        time.sleep(renew_s)


class Standby(threading.Thread):
    """An idle node of the pool that long-polls for work and judges what it gets at once."""

    def __init__(self, url: str, node, slots: int):
        super().__init__(daemon=True)
        self.url, self.node, self.slots = url, node, slots
        self.received: dict[int, int] = {}  # job id -> lease epoch
        self.judged = False
        self.stop = threading.Event()

    def run(self):
        import requests

        http = requests.Session()
        http.headers.update(_headers(self.node.secret, self.node.session_epoch))
        jobs = []
        while not self.stop.is_set() and len(jobs) < self.slots:
            try:
                answer = http.post(self.url + PREFIX + "jobs/claim", timeout=30, json={
                    "freeSlots": self.slots - len(jobs), "waitMs": 2000}).json()
            except requests.RequestException:
                time.sleep(0.2)
                continue
            jobs.extend(answer.get("jobs", []))
            self.received.update({job["jobId"]: job["leaseEpoch"] for job in answer.get("jobs", [])})
        # Judged once all are held (so the posts do not delay the claims measured): a job left
        # running would expire again into the next scenario.
        for job in jobs:
            cases = [{"ordinal": c["ordinal"], "verdict": "AC", "timeMs": 1, "memoryKb": 1, "score": c["weight"]}
                     for c in job["cases"]]
            http.post(self.url + PREFIX + f"jobs/{job['jobId']}/result", timeout=30, json={
                "leaseEpoch": job["leaseEpoch"], "outcome": "JUDGED", "verdict": "AC", "score": 100,
                "timeMs": 1, "memoryKb": 1, "compileOutput": "", "cases": cases}).raise_for_status()
        self.judged = True


def _jobs(problem, count: int) -> list[int]:
    """`count` queued jobs, each a different student's (no per-user bound in the way)."""
    from django.db import connection
    from judging.services.submit import submission_submit
    from tests.factories import UserFactory

    try:
        return [submission_submit(user=student, problem_id=problem.pk, language="python", code="print(1)\n")
                .current_judge_job_id for student in UserFactory.create_batch(count)]
    finally:
        connection.close()


def _deadlines(job_ids) -> dict:
    from django.db import connection
    from judging.models import JudgeJob

    try:
        return dict(JudgeJob.objects.filter(pk__in=job_ids).values_list("id", "lease_until"))
    finally:
        connection.close()


def _timings(job_ids, renewed_until: dict, ttl_s: float) -> tuple[list, list, list]:
    """(seconds to claimable, seconds to claimed, problems) per job, by the server's clock:
    the last renew is the old deadline less the lease, claimable the requeue's available_at,
    claimed the standby's claim (started_at)."""
    from django.db import connection
    from judging.models import JudgeJob

    to_claimable, to_claimed, problems = [], [], []
    try:
        for job in JudgeJob.objects.filter(pk__in=job_ids):
            last_renew = renewed_until[job.pk].timestamp() - ttl_s
            if job.lease_epoch != 2 or job.state != "COMPLETED":
                problems.append(f"job {job.pk}: lease epoch {job.lease_epoch}, {job.state}")
            to_claimable.append(job.available_at.timestamp() - last_renew)
            to_claimed.append(job.started_at.timestamp() - last_renew)
    finally:
        connection.close()
    return to_claimable, to_claimed, problems


def scenario(name: str, *, url: str, problem, count: int, stop_signal, ttl_s: float, renew_s: float) -> dict:
    from bench.dispatch import make_nodes

    [holding], [idle] = make_nodes(1, count), make_nodes(1, count)
    job_ids = _jobs(problem, count)
    process = subprocess.Popen(
        [sys.executable, __file__, "holder", "--url", url, "--secret", holding.secret,
         "--session", str(holding.session_epoch), "--jobs", str(count), "--renew-s", str(renew_s)],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    standby = None
    try:
        line = process.stdout.readline()  # after its first renew of all of them
        if not line:
            raise RuntimeError(f"{name}: the holder stopped before renewing")
        os.kill(process.pid, stop_signal)
        renewed_until = _deadlines(job_ids)
        standby = Standby(url, idle, count)
        standby.start()
        started = time.monotonic()
        last_report = started
        while len(standby.received) < count:
            standby.join(1.0)
            if not standby.is_alive() and len(standby.received) < count:
                raise RuntimeError(f"{name}: the standby stopped with {len(standby.received)} of {count}")
            if time.monotonic() - last_report >= 15:
                last_report = time.monotonic()
                print(f"  {name}: {time.monotonic() - started:.0f} s, standby holds {len(standby.received)}"
                      f" of {count}", flush=True)
            if time.monotonic() - started > ttl_s * 3:
                raise RuntimeError(f"{name}: only {len(standby.received)} of {count} taken after {ttl_s * 3:.0f} s")
        standby.join(120)
    finally:
        if standby is not None:
            standby.stop.set()
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    to_claimable, to_claimed, problems = _timings(job_ids, renewed_until, ttl_s)
    return {"name": name, "jobs": count, "claimable": to_claimable, "claimed": to_claimed, "problems": problems}


def _line(label: str, values: list) -> str:
    return (f"{label} p50 {percentile(values, 50):.1f} s, p95 {percentile(values, 95):.1f} s,"
            f" max {max(values):.1f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=24, help="jobs held by the silent node (at least 20)")
    parser.add_argument("--mass", type=int, default=500, help="leases of the mass expiry (0: skip it)")
    args = parser.parse_args()
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
    setup("kece_bench_takeover")

    from django.conf import settings
    from django.db import connection
    from bench.dispatch import celery_worker
    from judging.timing import lease_ttl
    from tests.factories import make_problem
    from tests.live import LiveServer

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    problem = make_problem(languages=("python",), cases=2)
    connection.close()
    ttl_s, renew_s = lease_ttl().total_seconds(), settings.KECE_RENEW_INTERVAL_MS / 1000
    server = LiveServer(env={"KECE_IN_PROCESS_SCHEDULER": 0, "REDIS_URL": os.environ["REDIS_URL"]})
    results = []
    with server, celery_worker({**server.env, "KECE_CONN_MAX_AGE": "60"}):
        plan = [("paused (SIGSTOP)", args.jobs, signal.SIGSTOP), ("killed (SIGKILL)", args.jobs, signal.SIGKILL)]
        if args.mass:
            plan.append(("mass expiry, paused", args.mass, signal.SIGSTOP))
        for name, count, stop_signal in plan:
            print(f"{name}: {count} jobs held, then the holder stops answering", flush=True)
            results.append(scenario(name, url=server.url, problem=problem, count=count,
                                    stop_signal=stop_signal, ttl_s=ttl_s, renew_s=renew_s))
    print(f"takeover benchmark: lease {ttl_s:.0f} s, renew every {renew_s:.0f} s,"
          f" reaper every {settings.KECE_REAP_INTERVAL_MS / 1000:.0f} s (Celery beat), one idle standby node;"
          " from the holder's last successful renew:")
    worst = 0.0
    for result in results:
        print(f"  {result['name']}, {result['jobs']} jobs:")
        print(f"    {_line('claimable again:', result['claimable'])}")
        print(f"    {_line('claimed by the standby:', result['claimed'])}")
        for problem_line in result["problems"]:
            print(f"    ERROR {problem_line}")
        worst = max(worst, percentile(result["claimed"], 95), max(result["claimed"]))
    print(f"  target: p95 and max of the claim within 65 s: {'met' if worst <= 65 else 'NOT met'}"
          f" (worst {worst:.1f} s)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "holder":
        holder_args = argparse.ArgumentParser()
        for option in ("--url", "--secret"):
            holder_args.add_argument(option, required=True)
        holder_args.add_argument("--session", type=int, required=True)
        holder_args.add_argument("--jobs", type=int, required=True)
        holder_args.add_argument("--renew-s", type=float, required=True)
        parsed = holder_args.parse_args(sys.argv[2:])
        holder(parsed.url, parsed.secret, parsed.session, parsed.jobs, parsed.renew_s)
    else:
        main()
