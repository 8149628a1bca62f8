"""`GET /metrics`: the server's Prometheus metrics, served bare by the ASGI router.

Two sources, read when scraped:
- the counters and histograms every process of the deployment wrote (`kece.metrics`):
  every process group's files under KECE_METRICS_DIR, added up within each group and
  labelled with its name (`process_group`);
- the gauges, from the operators' figures the periodic snapshot refresh computed
  (`pools.snapshot.compute_figures`) and each periodic step's last success, all from the
  cache in one round trip: every web process answers the same, and a scrape runs no SQL.

Behind the Compose proxy only the internal listener passes `/metrics`; with
KECE_METRICS_TOKEN set, a scrape must also send it as `Authorization: Bearer <token>`.
"""

import asyncio
import concurrent.futures
import hmac
import importlib.metadata
import os
import time
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector

from judging.models import PriorityClass
from kece import metrics
from pools import snapshot
from pools.registry import POOLS

ROUTE = "metrics"
COMMIT_FILE = Path(settings.BASE_DIR) / "COMMIT"


# The label that names the process group a counter's or histogram's sample comes from.
GROUP_LABEL = "process_group"


def _merged_by_group(root: Path) -> dict:
    """Each process group's files merged, its samples labelled with the group's name. A group
    restarts on its own (the node API's processes, a Celery worker): its series start again
    from zero, which Prometheus takes as a counter reset, while the other groups' go on.
    Added up into one series, a restart of one group would look like a drop of the whole,
    and `rate()` would count the other groups' totals again."""
    groups: dict[str, list[str]] = {}
    for path in sorted(root.glob("*/*.db")):
        groups.setdefault(path.parent.name, []).append(str(path))
    found: dict = {}
    for group, files in groups.items():
        for family in MultiProcessCollector.merge(files, accumulate=True):
            into = found.setdefault(family.name, Metric(family.name, family.documentation, family.type, family.unit))
            into.samples += [sample._replace(labels={**sample.labels, GROUP_LABEL: group})
                             for sample in family.samples]
    return found


class FilesCollector:
    """Every process group's files, each group's series apart (`_merged_by_group`); a counter
    or histogram nothing recorded yet is still declared, so that its name is always there to
    query."""

    def collect(self):
        found = _merged_by_group(Path(settings.KECE_METRICS_DIR))
        empty = {"counter": CounterMetricFamily, "histogram": HistogramMetricFamily}
        for name, kind, documentation in metrics.get().families():
            family = found.pop(name, None)
            yield family if family is not None else empty[kind](name, documentation)
        yield from found.values()


def build_info() -> tuple[str, str]:
    try:
        version = importlib.metadata.version("kece")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    commit = os.environ.get("KECE_COMMIT", "").strip()
    if not commit:
        try:
            commit = COMMIT_FILE.read_text().strip()
        except OSError:
            commit = ""
    return version, commit or "unknown"


_BUILD = build_info()


def _redis_up() -> int:
    from kece.health import redis_failure

    return 0 if redis_failure() else 1


def _content_store_space() -> tuple[int, int] | None:
    """(free, size) in bytes of the content store's volume, as an unprivileged writer sees
    it; None while it does not exist."""
    try:
        volume = os.statvfs(settings.KECE_ARTIFACT_ROOT)
    except OSError:
        return None
    return volume.f_bavail * volume.f_frsize, volume.f_blocks * volume.f_frsize


def _gauge(name, documentation, labels=(), rows=()):
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for *values, value in rows:
        family.add_metric([str(v) for v in values], value)
    return family


class SnapshotCollector:
    def collect(self):
        keys = [snapshot.FIGURES_KEY, metrics.RECONCILE_FINDINGS_KEY,
                *(metrics.STEP_SUCCESS_KEY.format(step) for step in metrics.PERIODIC_STEPS)]
        try:
            found = cache.get_many(keys)
        except Exception:
            found = {}
        figures = found.get(snapshot.FIGURES_KEY) or {}
        as_of = figures.get("asOf")
        # Every pool and class, 0 where nothing waits or runs: an empty queue is a value.
        queued = {(p, c): (n, oldest) for p, c, n, oldest in figures.get("queued", ())}
        running = {p: (n, oldest) for p, n, oldest in figures.get("running", ())}
        cells = [(p, c) for p in POOLS for c in PriorityClass.values] if figures else []
        yield _gauge("kece_jobs_queued", "Judge jobs waiting for a node (due or in backoff).", ["pool", "class"],
                     [(p, c, queued.get((p, c), (0, 0))[0]) for p, c in cells])
        yield _gauge("kece_queue_oldest_wait_seconds", "How long the oldest due job has waited.", ["pool", "class"],
                     [(p, c, queued.get((p, c), (0, 0))[1]) for p, c in cells])
        pools = list(POOLS) if figures else []
        yield _gauge("kece_jobs_running", "Jobs holding a lease.", ["pool"],
                     [(p, running.get(p, (0, 0))[0]) for p in pools])
        yield _gauge("kece_running_oldest_seconds", "Age of the oldest running job since its claim.", ["pool"],
                     [(p, running.get(p, (0, 0))[1]) for p in pools])
        yield _gauge("kece_nodes", "Nodes (not revoked) by observed state.", ["pool", "state"],
                     figures.get("nodes", ()))
        yield _gauge("kece_pool_slots", "Slots of the pool's ready nodes.", ["pool"],
                     [(p, figures["slots"].get(p, 0)) for p in pools])
        yield _gauge("kece_pool_slots_busy", "Slots of the pool's ready nodes holding a job.", ["pool"],
                     [(p, figures["slotsBusy"].get(p, 0)) for p in pools])
        yield _gauge("kece_node_last_heartbeat_age_seconds", "Time since the node's last heartbeat.",
                     ["pool", "node"], figures.get("heartbeats", ()))
        yield _gauge("kece_outbox_pending", "Settlement events not yet applied.",
                     rows=[(figures["outboxPending"],)] if figures else ())
        yield _gauge("kece_outbox_oldest_seconds", "Age of the oldest pending settlement event.",
                     rows=[(figures["outboxOldest"],)] if figures else ())
        yield _gauge("kece_outbox_dead", "Settlement events that failed every try (DEAD), waiting to be retried "
                     "from the console's failed work.", rows=[(figures.get("outboxDead", 0),)] if figures else ())
        yield _gauge("kece_database_round_trip_seconds", "How long the database took to answer a `SELECT 1` "
                     "in the snapshot step's last pass.",
                     rows=[(figures["databaseRoundTrip"],)] if "databaseRoundTrip" in figures else ())
        if as_of:
            age = max(0.0, time.time() - datetime.fromisoformat(as_of.replace("Z", "+00:00")).timestamp())
        yield _gauge("kece_snapshot_age_seconds", "Age of the figures these gauges come from.",
                     rows=[(age,)] if as_of else ())
        # Without Redis (the embedded default) there is none to be down: no sample, and
        # KeceRedisDown stays quiet on a scraped embedded default.
        yield _gauge("kece_redis_up", "Whether this process reaches Redis (wake-ups, cache); none without Redis.",
                     rows=[(_redis_up(),)] if settings.REDIS_URL else ())
        yield _gauge("kece_periodic_last_success_timestamp_seconds", "When each periodic step last succeeded.",
                     ["step"], [(step, found[metrics.STEP_SUCCESS_KEY.format(step)].timestamp())
                                for step in metrics.PERIODIC_STEPS if metrics.STEP_SUCCESS_KEY.format(step) in found])
        yield _gauge("kece_reconcile_findings", "What the last reconciliation left out of place, by check (after "
                     "its repairs); none before the first.", ["check"],
                     sorted((found.get(metrics.RECONCILE_FINDINGS_KEY) or {}).items()))
        space = _content_store_space()
        yield _gauge("kece_content_store_free_bytes", "Free space of the content store's volume (test data).",
                     rows=[(space[0],)] if space else ())
        yield _gauge("kece_content_store_size_bytes", "Size of the content store's volume.",
                     rows=[(space[1],)] if space else ())
        yield _gauge("kece_build_info", "The server's version and commit.", ["version", "commit"], [(*_BUILD, 1)])


def scrape() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FilesCollector())
    registry.register(SnapshotCollector())
    return generate_latest(registry)


def serve_this_hosts_files(port: int):
    """The counters and histograms written on this host, on `port` (KECE_WORKER_METRICS_PORT):
    for a worker whose metrics folder web cannot read, as in Kubernetes, where each pod has
    its own. The gauges are web's: served here too they would be counted twice."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(FilesCollector())
    return start_http_server(port, registry=registry)


def authorized(header: bytes) -> bool:
    token = settings.KECE_METRICS_TOKEN
    if not token:
        return True
    return hmac.compare_digest(header, b"Bearer " + token.encode())


async def _answer(send, status: int, body: bytes, content_type: bytes, extra=()):
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
               (b"cache-control", b"no-store"), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# A scrape sends no SQL (files and one cache key): it is answered on threads of its own, so
# that requests held by a stalled database (the admin lane's) never make it time out, which
# would show the target down and blind every alert reading its figures.
SCRAPING = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="metrics-scrape")


async def asgi_metrics(scope, receive, send):
    header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
    if scope.get("method") not in ("GET", "HEAD"):
        await _answer(send, 405, b"GET only\n", b"text/plain", [(b"allow", b"GET, HEAD")])
    elif not authorized(header):
        await _answer(send, 401, b"a bearer token is required\n", b"text/plain",
                      [(b"www-authenticate", b'Bearer realm="metrics"')])
    else:
        body = await asyncio.get_running_loop().run_in_executor(SCRAPING, scrape)
        await _answer(send, 200, b"" if scope["method"] == "HEAD" else body, CONTENT_TYPE_LATEST.encode())
