"""Core benchmark: the services on MariaDB with several threads, no HTTP.

    python bench/core.py [--jobs 2000] [--threads 4] [--batch 8]

Submits N jobs, then node threads claim in batches and settle each job. Prints jobs per
second, p50/p95 claim and settle transaction times, and SQL statements per job — a count
that does not depend on the machine. Target: at most 10 statements per job at batch 8.
"""

import argparse
import threading
import time
from collections import Counter

try:
    from bench._django import count_round_trips, percentile, setup
except ImportError:  # run as a script
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench._django import count_round_trips, percentile, setup


class StatementCounter:
    """Counts statements per phase on the current thread's connection, and its round trips
    to the server (statements sent together make one)."""

    def __init__(self):
        self.counts = Counter()
        self.phase = None
        count_round_trips(self.sent)

    def sent(self, _what) -> None:
        self.counts[f"{self.phase} trips"] += 1

    def __call__(self, execute, sql, params, many, context):
        self.counts[self.phase] += 1
        if sql.lstrip().upper().startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO")):
            self.counts["savepoint"] += 1
        return execute(sql, params, many, context)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    setup("kece_bench_core")

    from django.db import connection
    from django.utils import timezone

    from judging.identity import NodeIdentity, credential_digest
    from judging.models import JobState, JudgeJob
    from judging.services.claim import job_claim
    from judging.services.settle import CaseResult, SettleRequest, job_settle
    from judging.services.submit import submission_submit
    from tests.factories import HostGroupFactory, UserFactory, make_problem
    from nodes.models import JudgeNode

    user = UserFactory()
    problem = make_problem(languages=("python",), cases=4)
    group = HostGroupFactory(total_slots=10_000)
    identities = []
    for i in range(args.threads):
        node = JudgeNode.objects.create(
            name=f"bench-{i}", pool="python", base_url="https://10.0.0.1", host_group=group, max_slots=1000,
            desired_state="ENABLED", runtime_spec="python-r1", credential_digest=credential_digest(f"c{i}"),
            session_epoch=1, session_open=True, health_ok=True, agent_version="bench", self_check_status="PASSED",
            self_check_revision=1, self_check_runtime_spec="python-r1", self_check_agent_version="bench",
            last_heartbeat_at=timezone.now() + timezone.timedelta(hours=1),
        )
        identities.append(NodeIdentity(node.pk, node.credential_digest, 1, group.pk))
    connection.close()

    per_thread = args.jobs // args.threads
    totals = Counter()
    submit_times, claim_times, settle_times = [], [], []
    lock = threading.Lock()
    barrier = threading.Barrier(args.threads)

    def submitter():
        counter = StatementCounter()
        counter.phase = "submit"
        local = []
        try:
            with connection.execute_wrapper(counter):
                barrier.wait()
                for _ in range(per_thread):
                    t = time.perf_counter()
                    submission_submit(user=user, problem_id=problem.pk, language="python", code="print(1)\n")
                    local.append(time.perf_counter() - t)
        finally:
            connection.close()
        with lock:
            totals.update(counter.counts)
            submit_times.extend(local)

    def worker(identity):
        counter = StatementCounter()
        local_claim, local_settle, done = [], [], 0
        try:
            with connection.execute_wrapper(counter):
                barrier.wait()
                idle = 0
                while idle < 3:
                    counter.phase = "claim"
                    t = time.perf_counter()
                    jobs = job_claim(identity=identity, free_slots=args.batch, now=timezone.now()).jobs
                    local_claim.append(time.perf_counter() - t)
                    if not jobs:
                        idle += 1
                        continue
                    idle = 0
                    counter.phase = "settle"
                    for job in jobs:
                        cases = tuple(CaseResult(c["ordinal"], "AC", 5, 900, c["weight"]) for c in job.snapshot["cases"])
                        request = SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED",
                                                verdict="AC", score=100, time_ms=5, memory_kb=900, cases=cases)
                        t = time.perf_counter()
                        assert job_settle(identity=identity, request=request, now=timezone.now()) == "settled"
                        local_settle.append(time.perf_counter() - t)
                        done += 1
        finally:
            connection.close()
        with lock:
            totals.update(counter.counts)
            claim_times.extend(local_claim)
            settle_times.extend(local_settle)
            totals["jobs_done"] += done

    def run(target, arguments):
        threads = [threading.Thread(target=target, args=a) for a in arguments]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - start

    submit_seconds = run(submitter, [()] * args.threads)
    judge_seconds = run(worker, [(i,) for i in identities])
    jobs = per_thread * args.threads
    assert totals["jobs_done"] == jobs == JudgeJob.objects.filter(state=JobState.COMPLETED).count()

    ms = lambda s: f"{s * 1000:.2f} ms"  # noqa: E731
    print(f"core benchmark: {jobs} jobs, {args.threads} threads, claim batch {args.batch}, MariaDB")
    print(f"  submit:             {jobs / submit_seconds:8.1f} jobs/s   p50 {ms(percentile(submit_times, 50))}"
          f"  p95 {ms(percentile(submit_times, 95))}")
    print(f"  claim + settle:     {jobs / judge_seconds:8.1f} jobs/s")
    print(f"  end to end:         {jobs / (submit_seconds + judge_seconds):8.1f} jobs/s")
    print(f"  claim transaction:  p50 {ms(percentile(claim_times, 50))}  p95 {ms(percentile(claim_times, 95))}"
          f"  ({len(claim_times)} claims, {totals['claim'] / len(claim_times):.1f} statements each)")
    print(f"  settle transaction: p50 {ms(percentile(settle_times, 50))}  p95 {ms(percentile(settle_times, 95))}")
    per_job = {phase: totals[phase] / jobs for phase in ("submit", "claim", "settle")}
    total = sum(per_job.values())
    print(f"  SQL statements per job: {total:.2f} (submit {per_job['submit']:.2f}, claim {per_job['claim']:.2f},"
          f" settle {per_job['settle']:.2f}); savepoints {totals['savepoint']}")
    trips = {phase: totals[f"{phase} trips"] / jobs for phase in ("submit", "claim", "settle")}
    print(f"  round trips per job: {sum(trips.values()):.2f} (submit {trips['submit']:.2f}, claim {trips['claim']:.2f},"
          f" settle {trips['settle']:.2f})")
    print(f"  target <= 10 statements per job at batch 8: {'met' if total <= 10 else 'NOT met'}")


if __name__ == "__main__":
    main()
