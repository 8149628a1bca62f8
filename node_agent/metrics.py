"""The agent's own Prometheus metrics, served as ``GET /metrics`` on its health endpoint.

One registry per agent (not the process-wide default, and no multiprocess mode: one agent
is one process). Names and labels follow the project's shared vocabulary; labels are
bounded, never a job or submission id. Counters and the histogram are moved where things
happen; gauges are read at scrape time from the agent's own state, so a scrape costs no
more than reading a few fields.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CLAIM_RESULTS = ("jobs", "empty")
PHASES = ("prepare", "compile", "data", "run", "compare", "sql")
# From a box being laid out (milliseconds) to a slow compile or a long SQL check (a minute).
PHASE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class AgentMetrics:
    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.claims = Counter("kece_agent_claims", "Long-poll claims answered, by whether they brought a job.",
                              ["result"], registry=r)
        self.renew_failures = Counter("kece_agent_renew_failures",
                                      "Renew calls that got no answer or an error answer.", registry=r)
        self.slots = Gauge("kece_agent_slots", "Slots this agent may use now: its local slots, within the "
                           "server's limit.", registry=r)
        self.slots_busy = Gauge("kece_agent_slots_busy", "Slots holding a job (judging or posting its result).",
                                registry=r)
        self.cache_bytes = Gauge("kece_agent_cache_bytes", "Bytes of test data in the cache.", registry=r)
        self.cache_evictions = Counter("kece_agent_cache_evictions", "Files evicted from the test-data cache.",
                                       registry=r)
        self.phase_seconds = Histogram("kece_agent_sandbox_phase_seconds",
                                       "Wall time of each judging phase, per run of it.", ["phase"],
                                       buckets=PHASE_BUCKETS, registry=r)
        self.last_answer_age = Gauge("kece_agent_server_last_answer_age_seconds",
                                     "Seconds since the control plane last answered (since start until it "
                                     "first does).", registry=r)
        # Every label value is there from the start: a series that appears only once it
        # moves makes rate() blind to its first increase.
        for result in CLAIM_RESULTS:
            self.claims.labels(result)
        for phase in PHASES:
            self.phase_seconds.labels(phase)

    def watch(self, *, slots: Callable[[], float], slots_busy: Callable[[], float],
              cache_bytes: Callable[[], float], last_answer: Callable[[], float]) -> None:
        """Gauges read at scrape time; `last_answer` is a time.monotonic() value."""
        self.slots.set_function(slots)
        self.slots_busy.set_function(slots_busy)
        self.cache_bytes.set_function(cache_bytes)
        self.last_answer_age.set_function(lambda: max(0.0, time.monotonic() - last_answer()))

    def claimed(self, jobs: int) -> None:
        self.claims.labels("jobs" if jobs else "empty").inc()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Times one phase that ran to its end (a killed or failed one says nothing of its length)."""
        started = time.monotonic()
        yield
        self.phase_seconds.labels(name).observe(time.monotonic() - started)

    def render(self) -> bytes:
        return generate_latest(self.registry)
