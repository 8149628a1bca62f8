"""Retention benchmark: how fast a backlog is pruned, and how long one batch holds its locks.

    python bench/retention.py [--jobs N] [--cases N] [--batch N]

Fills its own database with N finished judge jobs of a problem with `--cases` cases (snapshot
and result as settle writes them, a 2 kB compile output), finished 100 days ago, each with its
delivered outbox event applied 40 days ago, then runs `manage.py kece_gc`'s pass (until
nothing is left) and prints, per kind: rows, bytes freed, rows per second, and the time of a
batch's transaction (p50 / max): what a claim or a settle waiting on one of its rows could
wait at worst.
"""

import argparse
import sys
import time
from datetime import timedelta

try:
    from bench._django import percentile, setup
except ImportError:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench._django import percentile, setup


def fill(jobs: int, cases: int) -> None:
    from django.utils import timezone

    from judging.models import EventState, JobState, JudgeJob, SettlementEvent
    from judging.services.snapshot import job_snapshot
    from tests.factories import make_problem

    problem = make_problem(languages=("python",), cases=cases)
    manifest = problem.current_manifest
    finished = timezone.now() - timedelta(days=100)
    source = {"digest": "0" * 64, "bytes": 20}
    result = {"outcome": "JUDGED", "verdict": "WA", "score": 50, "timeMs": 12, "memoryKb": 2048,
              "compileOutput": "warning: unused variable\n" * 80, "checks": [],
              "cases": [{"ordinal": c["ordinal"], "verdict": "AC", "time_ms": 12, "memory_kb": 2048,
                         "score": c["weight"]} for c in manifest.cases]}
    snapshot = job_snapshot(problem=problem, manifest=manifest, pool="python", language="python", source=source)
    for start in range(0, jobs, 500):
        rows = [JudgeJob(submission_type="ALGO", submission_id=n, pool="python", runtime_spec="python-r1",
                         manifest=manifest, snapshot=snapshot, result=result, state=JobState.COMPLETED,
                         available_at=finished, claim_key=finished, created_at=finished, finished_at=finished)
                for n in range(start, min(start + 500, jobs))]
        JudgeJob.objects.bulk_create(rows)
    applied = timezone.now() - timedelta(days=40)
    for start in range(0, jobs, 2000):
        ids = JudgeJob.objects.order_by("id").values_list("id", flat=True)[start:start + 2000]
        SettlementEvent.objects.bulk_create([
            SettlementEvent(job_id=job_id, event_type="problem_stats", state=EventState.DONE,
                            payload={"userId": 1, "problemId": problem.pk, "submissionType": "ALGO",
                                     "submissionId": job_id, "practiceId": None, "examId": None},
                            next_attempt_at=applied, applied_at=applied, created_at=applied, attempts=1)
            for job_id in ids])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    setup("kece_bench_retention")

    from django.db import transaction
    from django.utils import timezone

    from judging.services import retention

    fill(args.jobs, args.cases)
    batches: dict[str, list[float]] = {}
    atomic = transaction.atomic

    def timed_atomic(*a, **kw):
        # Each batch's transaction, timed from its start to its commit.
        block = atomic(*a, **kw)
        enter, leave = block.__enter__, block.__exit__

        class Timed:
            def __enter__(self):
                self.start = time.perf_counter()
                return enter()

            def __exit__(self, *exc):
                try:
                    return leave(*exc)
                finally:
                    batches.setdefault(current[0], []).append(time.perf_counter() - self.start)
        return Timed()

    current = [""]
    retention.transaction.atomic = timed_atomic
    policy = retention.Policy(job_details=timedelta(days=90), events=timedelta(days=30), batch=args.batch,
                              batches=None)
    print(f"{args.jobs} finished jobs of {args.cases} cases, batches of {args.batch}")
    for kind, run in (("job_details", retention.job_details_prune), ("events", retention.events_prune)):
        current[0] = kind
        start = time.perf_counter()
        report = run(now=timezone.now(), policy=policy)
        elapsed = time.perf_counter() - start
        times = batches.get(kind, [])
        print(f"  {kind}: {report.count} rows, {report.bytes / 1e6:.1f} MB freed "
              f"({report.bytes / max(report.count, 1) / 1000:.1f} kB a row), {report.count / elapsed:.0f} rows/s; "
              f"a batch's transaction p50 {percentile(times, 50) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
