"""Public status benchmark: the summary call and the homepage against a trivial view.

    python bench/status.py [--quick]

uvicorn (one process) on MariaDB + Redis, the status snapshot in the cache as the beat task
leaves it. A local load generator (aiohttp, the same machine) keeps a fixed number of
requests in flight against, in turn, the trivial liveness view `/livez`, the summary call
and the homepage (anonymous), for a few seconds each, over several rounds; it prints
requests per second of each, their ratio to the trivial view (target: at least 0.8) and
the SQL statements per request the web process sent (its own MariaDB user; target 0).
"""

import argparse
import asyncio
import os
import statistics
import sys
import time

try:
    from bench._django import percentile, setup
except ImportError:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench._django import percentile, setup

PATHS = {"trivial": "/livez", "summary": "/api/v1/system/judgers/summary", "homepage": "/"}


async def hammer(base: str, path: str, seconds: float, concurrency: int) -> tuple[float, list[float]]:
    """(requests per second, latencies) of `concurrency` clients asking for `path`."""
    import aiohttp

    latencies: list[float] = []
    errors = 0
    end = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def client():
            nonlocal errors
            while time.perf_counter() < end:
                start = time.perf_counter()
                async with session.get(base + path) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - start)

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    if errors:
        raise SystemExit(f"{path}: {errors} answers were not 200")
    return len(latencies) / elapsed, latencies


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter rounds (a smoke run)")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    setup("kece_bench_status")

    from django.db import connection

    from bench.dispatch import WEB_USER, create_bench_user, make_nodes, statements, user_statistics
    from pools import snapshot
    from tests.live import LiveServer

    for pool in ("cpp", "python", "java"):
        make_nodes(2, 2, pool=pool)
    snapshot.refresh_step()
    connection.close()
    database = os.environ["DATABASE_URL"].rsplit("/", 1)[1]
    server = LiveServer.for_database(create_bench_user(database, WEB_USER),
                                     env={"KECE_IN_PROCESS_SCHEDULER": 0, "REDIS_URL": os.environ["REDIS_URL"]})
    rounds, seconds = (2, 1.5) if args.quick else (5, 4.0)
    rates = {name: [] for name in PATHS}
    latencies = {name: [] for name in PATHS}
    requests = {name: 0 for name in PATHS}
    sql = {name: 0 for name in PATHS}
    with server, user_statistics(True):
        for name, path in PATHS.items():  # warm every path once
            asyncio.run(hammer(server.url, path, 0.3, 2))
        for _ in range(rounds):
            for name, path in PATHS.items():
                snapshot.refresh_step()  # the beat task's job: keep the snapshot fresh
                connection.close()
                before = statements(WEB_USER)[1]
                rate, lat = asyncio.run(hammer(server.url, path, seconds, args.concurrency))
                sql[name] += statements(WEB_USER)[1] - before
                rates[name].append(rate)
                latencies[name] += lat
                requests[name] += len(lat)

    print(f"status benchmark: uvicorn (1 process) + MariaDB + Redis, {args.concurrency} requests in flight,"
          f" {rounds} rounds of {seconds:.1f} s per path")
    trivial = statistics.median(rates["trivial"])
    for name, path in PATHS.items():
        rate = statistics.median(rates[name])
        p50, p95 = percentile(latencies[name], 50) * 1000, percentile(latencies[name], 95) * 1000
        line = (f"  {name:9} {path:33} {rate:8.0f} req/s  p50 {p50:6.1f} ms  p95 {p95:6.1f} ms"
                f"  SQL/request {sql[name] / max(1, requests[name]):.3f}")
        if name != "trivial":
            line += f"  ratio to trivial {rate / trivial:.2f} (target ≥ 0.80)"
        print(line)


if __name__ == "__main__":
    main()
