"""Metrics benchmark: the time of one `/metrics` scrape with a fleet of 500 nodes.

    python bench/metrics.py [--nodes 500] [--scrapes 25]

MariaDB + Redis; 500 node rows over the five pools (a fifth of them offline), jobs queued in
every pool and class and running on some nodes, the operators' figures refreshed once as the
periodic step leaves them (its time is printed too), then uvicorn (one process, no periodic
work) scraped one request at a time. Before the timed scrapes, requests on a few routes and
the counters of a few hundred nodes give the files something to add up. Prints the median
and p95 of the scrapes (target: median under 50 ms), the series in one answer and the SQL
statements the web process sent while scraped (its own MariaDB user; target 0).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

try:
    from bench._django import percentile, setup
except ImportError:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench._django import percentile, setup


def make_fleet(nodes: int) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from bench.dispatch import make_nodes
    from judging.models import JobState, JudgeJob, PriorityClass
    from judging.services.submit import submission_submit
    from kece import metrics
    from nodes.models import JudgeNode
    from pools.registry import POOLS
    from tests.factories import UserFactory, make_problem

    per_pool = nodes // len(POOLS)
    for pool in POOLS:
        made = make_nodes(per_pool, 4, pool=pool)
        offline = [n.pk for n in made[: per_pool // 5]]
        JudgeNode.objects.filter(pk__in=offline).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
        for node in made[:40]:  # counters with a node label, as a fleet's errors leave them
            metrics.infra_error(pool, node.name)
    students = [UserFactory() for _ in range(5)]
    for pool in POOLS:
        kind = "SQL" if pool == "mysql" else "ALGO"
        problem = make_problem(kind=kind, languages=(pool,), cases=1)
        for index in range(30):
            submission_submit(user=students[index % 5], problem_id=problem.pk, language=pool, code="x")
    classes = list(PriorityClass.values)
    for index, job in enumerate(JudgeJob.objects.order_by("id")):
        job.priority_class = classes[index % 3]
        job.save(update_fields=["priority_class"])
    ready = list(JudgeNode.objects.filter(last_heartbeat_at__gt=timezone.now()).values_list("id", "pool"))
    for (node_id, pool), job in zip(ready, JudgeJob.objects.filter(id__in=JudgeJob.objects.order_by("id")
                                                                   .values_list("id", flat=True)[::3])):
        JudgeJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, node_id=node_id,
                                                  started_at=timezone.now(), lease_until=timezone.now())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--scrapes", type=int, default=25)
    args = parser.parse_args()
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    os.environ.setdefault("KECE_METRICS_DIR", tempfile.mkdtemp(prefix="kece-bench-metrics-"))
    # This process's own counters in a group of their own: the server empties its own as it starts.
    os.environ["KECE_METRICS_GROUP"] = "bench"
    setup("kece_bench_metrics")

    import requests
    from django.db import connection
    from prometheus_client.parser import text_string_to_metric_families

    from bench.dispatch import WEB_USER, create_bench_user, statements, user_statistics
    from pools import snapshot
    from tests.live import LiveServer

    make_fleet(args.nodes)
    refreshes = []
    for _ in range(5):
        started = time.perf_counter()
        snapshot.refresh_step()
        refreshes.append(time.perf_counter() - started)
    connection.close()
    database = os.environ["DATABASE_URL"].rsplit("/", 1)[1]
    # The server reads this process's counters (the per-node ones above) too: one folder.
    server = LiveServer.for_database(create_bench_user(database, WEB_USER),
                                     env={"KECE_IN_PROCESS_SCHEDULER": 0, "REDIS_URL": os.environ["REDIS_URL"],
                                          "KECE_METRICS_DIR": os.environ["KECE_METRICS_DIR"]})
    with server:
        http = requests.Session()
        for path in ("/livez", "/api/v1/system/judgers/summary", "/", "/no-such-page") * 10:
            http.get(server.url + path, timeout=10)
        answer = http.get(server.url + "/metrics", timeout=10)  # the first: imports, opening files
        series = sum(len(f.samples) for f in text_string_to_metric_families(answer.text))
        times = []
        with user_statistics(False):
            for _ in range(args.scrapes):
                started = time.perf_counter()
                answer = http.get(server.url + "/metrics", timeout=10)
                times.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.status_code
        with user_statistics(True):
            before = statements(WEB_USER)[1]
            for _ in range(5):
                http.get(server.url + "/metrics", timeout=10)
            sql = statements(WEB_USER)[1] - before
    ms = [t * 1000 for t in times]
    print(f"nodes: {args.nodes}; series in one answer: {series}; answer: {len(answer.content)} bytes")
    print(f"snapshot refresh (operators' figures and public status): median "
          f"{statistics.median(refreshes) * 1000:.1f} ms over {len(refreshes)}")
    print(f"/metrics scrape over {len(ms)}: median {statistics.median(ms):.1f} ms, p95 {percentile(ms, 95):.1f} ms, "
          f"max {max(ms):.1f} ms (target: median < 50 ms)")
    print(f"SQL statements sent by the web process over 5 scrapes: {sql} (target 0)")


if __name__ == "__main__":
    main()
