"""The server's Prometheus metrics (`/metrics`), scraped from a real server with two web
processes, as Prometheus would: every name of the shared vocabulary with its type, gauges
from the status snapshot that every process answers alike, counters that move where a real
agent's work happens, the bearer token, and a real Prometheus that reads them."""

import os
import re
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from judging.models import JobState, JudgeJob
from judging.services.submit import submission_submit
from nodes.models import DesiredState, JudgeNode
from pools import snapshot
from tests.deploy.test_proxy_live import die_with_parent
from tests.e2e.conftest import FAST_TIMINGS, Agents, need_pool, tls, wait_for  # noqa: F401 (tls: a fixture)
from tests.factories import UserFactory, make_node, make_problem
from tests.live import ROOT, LiveServer, free_port, stop_process_group

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]

TOKEN = "scrape-token-of-the-metrics-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

# The server's part of the shared vocabulary: every name, with its type (a counter's family
# is named without `_total`, as the exposition format's parser gives it).
VOCABULARY = {
    "kece_jobs_queued": "gauge", "kece_jobs_running": "gauge", "kece_queue_oldest_wait_seconds": "gauge",
    "kece_running_oldest_seconds": "gauge", "kece_nodes": "gauge", "kece_pool_slots": "gauge",
    "kece_pool_slots_busy": "gauge", "kece_node_last_heartbeat_age_seconds": "gauge", "kece_outbox_pending": "gauge",
    "kece_outbox_oldest_seconds": "gauge", "kece_outbox_dead": "gauge", "kece_snapshot_age_seconds": "gauge",
    "kece_redis_up": "gauge", "kece_database_round_trip_seconds": "gauge",
    "kece_periodic_last_success_timestamp_seconds": "gauge", "kece_build_info": "gauge",
    "kece_reconcile_findings": "gauge", "kece_content_store_free_bytes": "gauge", "kece_content_store_size_bytes": "gauge",
    "kece_queue_wait_seconds": "histogram", "kece_job_duration_seconds": "histogram",
    "kece_http_request_duration_seconds": "histogram",
    "kece_claims": "counter", "kece_settlements": "counter", "kece_result_rejections": "counter",
    "kece_lease_expiries": "counter", "kece_leases_released": "counter", "kece_node_infra_errors": "counter", "kece_quarantines": "counter",
    "kece_wakeup_fallback_polls": "counter", "kece_submit_throttled": "counter",
}
FLEET = ("kece_jobs_queued", "kece_queue_oldest_wait_seconds", "kece_nodes", "kece_pool_slots",
         "kece_pool_slots_busy", "kece_node_last_heartbeat_age_seconds", "kece_outbox_pending")


def families(text: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(found: dict, family: str, sample: str | None = None, **labels) -> float:
    """The total of `family`'s samples (named `sample`, default the family's own) with
    `labels` over the process groups, each of which has one (`process_group`; a gauge has
    none, and one sample); 0 when there is none (a counter nothing has moved yet)."""
    sample = sample or family
    matches = [s for s in found[family].samples
               if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
    groups = [s.labels.get("process_group") for s in matches]
    assert len(groups) == len(set(groups)), matches
    return sum(s.value for s in matches)


def scrape(server, *, headers=AUTH) -> dict:
    # A new connection each time, so that either web process may take it.
    answer = requests.get(server.url + "/metrics", headers={**headers, "Connection": "close"}, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"].startswith("text/plain")
    return families(answer.text)


def web_workers(server) -> list[int]:
    """The uvicorn worker processes (spawned children) of a live server."""
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
    return [int(pid) for pid in children
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]


@pytest.fixture(scope="module")
def server(tls, tmp_path_factory, django_db_setup, django_db_blocker):  # noqa: F811 (tls: imported above)
    """One server with two web processes for the module (its tests judge by differences);
    no periodic work in it: the tests refresh the snapshot themselves, at the times they choose."""
    from tests.conftest import ON_MARIADB

    if not ON_MARIADB:
        pytest.skip("live-server tests need MariaDB/MySQL")
    with django_db_blocker.unblock():
        live = LiveServer(env={**FAST_TIMINGS, "KECE_PROBE_ALLOWED_PORTS": "443,1024-65535",
                               "KECE_PROBE_CA_FILE": str(tls["ca"]), "KECE_IN_PROCESS_SCHEDULER": 0,
                               "KECE_METRICS_TOKEN": TOKEN},
                          log_path=tmp_path_factory.mktemp("metrics-server") / "server.log", workers=2).start()
        yield live
        live.stop()


def test_every_name_of_the_vocabulary_is_scraped_with_its_type(server):
    found = scrape(server)
    assert {name: found[name].type for name in VOCABULARY if name in found} == VOCABULARY
    # Nothing else of the server's own is invented beside the vocabulary.
    assert {name for name in found if name.startswith("kece_")} == set(VOCABULARY)
    [build] = found["kece_build_info"].samples
    assert build.value == 1 and build.labels["version"] == "0.1.0" and build.labels["commit"]
    assert value(found, "kece_redis_up") == 1


def test_the_counters_alerts_watch_are_there_at_zero_before_their_first_event(server):
    """A series that appears at 1 shows no increase: the first quarantine, lease expiry or
    system error of a pool after a start would never alert. Each is served at zero first."""
    from pools.registry import POOL_NAMES

    found = scrape(server)

    def samples(family, **labels):
        return [s.value for s in found[family].samples
                if s.name == f"{family}_total" and all(s.labels.get(k) == v for k, v in labels.items())]

    for pool in POOL_NAMES:
        for reason in ("infra_errors", "renew_lost", "stalled", "cross_check", "canary_mismatch"):
            assert samples("kece_quarantines", pool=pool, reason=reason) != [], (pool, reason)
        assert samples("kece_lease_expiries", pool=pool) != [] and samples(
            "kece_settlements", pool=pool, outcome="system_error") != []
        assert samples("kece_leases_released", pool=pool, reason="session_replaced") != []
    # Nothing quarantines in these tests: a series made in advance says 0, not 1.
    assert samples("kece_quarantines", pool="arkts", reason="canary_mismatch") == [0.0]


def test_a_scrape_needs_the_token_when_one_is_set(server):
    assert requests.get(server.url + "/metrics", timeout=10).status_code == 401
    wrong = requests.get(server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}x"}, timeout=10)
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"].startswith("Bearer")
    assert requests.get(server.url + "/metrics", headers={"Authorization": TOKEN}, timeout=10).status_code == 401
    assert "kece_build_info" in requests.get(server.url + "/metrics", headers=AUTH, timeout=10).text


def test_the_oldest_wait_rises_while_no_node_claims_and_both_processes_answer_the_same(server):
    problem = make_problem(languages=("python",), cases=1)
    student = UserFactory()
    t0 = timezone.now()
    node, _ = make_node(pool="python", max_slots=3, now=t0)
    make_node(pool="cpp", now=t0 - timedelta(minutes=5))  # offline by now
    for _ in range(3):
        submission_submit(user=student, problem_id=problem.pk, language="python", code="print(1)", now=t0)

    snapshot.refresh_step(now=t0 + timedelta(seconds=10))
    first = scrape(server)
    assert value(first, "kece_jobs_queued", pool="python", **{"class": "PRACTICE"}) == 3
    assert value(first, "kece_queue_oldest_wait_seconds", pool="python", **{"class": "PRACTICE"}) == 10
    assert value(first, "kece_nodes", pool="python", state="ready") == 1
    assert value(first, "kece_nodes", pool="cpp", state="offline") == 1
    assert value(first, "kece_pool_slots", pool="python") == 3
    assert value(first, "kece_pool_slots_busy", pool="python") == 0
    snapshot.refresh_step(now=t0 + timedelta(seconds=70))
    later = scrape(server)
    assert value(later, "kece_queue_oldest_wait_seconds", pool="python", **{"class": "PRACTICE"}) == 70
    # A minute without a heartbeat: the node is offline now, its slots gone from the pool.
    assert value(later, "kece_nodes", pool="python", state="offline") == 1
    assert value(later, "kece_pool_slots", pool="python") == 0
    assert value(later, "kece_node_last_heartbeat_age_seconds", pool="python", node=node.name) == 70
    # Disabled on purpose, it is no longer a silent node for KeceNodeSilent to report.
    JudgeNode.objects.filter(pk=node.pk).update(desired_state=DesiredState.DISABLED)
    snapshot.refresh_step(now=t0 + timedelta(seconds=80))
    ages = {s.labels["node"] for s in scrape(server)["kece_node_last_heartbeat_age_seconds"].samples}
    assert node.name not in ages
    JudgeNode.objects.filter(pk=node.pk).update(desired_state=DesiredState.ENABLED)
    snapshot.refresh_step(now=t0 + timedelta(seconds=70))  # as `later` read it, for what follows
    assert value(later, "kece_outbox_pending") == 0
    # An empty queue is a 0, not a missing series.
    assert value(later, "kece_jobs_queued", pool="cpp", **{"class": "EXAM"}) == 0
    assert len(later["kece_jobs_queued"].samples) == 15
    periodic = {s.labels["step"]: s.value for s in later["kece_periodic_last_success_timestamp_seconds"].samples}
    assert periodic.keys() == {"snapshot"} and abs(periodic["snapshot"] - time.time()) < 600

    # Each web process in turn, the other one stopped: the same fleet, read from the snapshot.
    workers = web_workers(server)
    assert len(workers) == 2
    answers = []
    for stopped in workers:
        os.kill(stopped, signal.SIGSTOP)
        try:
            answers.append(scrape(server))
        finally:
            os.kill(stopped, signal.SIGCONT)
    fleet = [{name: sorted((tuple(sorted(s.labels.items())), s.value) for s in found[name].samples) for name in FLEET}
             for found in answers]
    assert fleet[0] == fleet[1] == {name: sorted((tuple(sorted(s.labels.items())), s.value)
                                                 for s in later[name].samples) for name in FLEET}


@pytest.mark.usefixtures("unlimited_submits")
def test_counters_move_with_a_burst_a_real_agent_judges(server, tls, settings):  # noqa: F811
    need_pool("python")
    settings.KECE_PROBE_ALLOWED_PORTS = [(443, 443), (1024, 65535)]
    before = scrape(server)
    fleet = Agents(server, tls)
    try:
        node = fleet.register("python", slots=2)
        fleet.start(node, slots=2)
        fleet.enable(node)
        problem = make_problem(languages=("python",), cases=1)
        student = UserFactory()
        burst = [submission_submit(user=student, problem_id=problem.pk, language="python", code="print(1)")
                 for _ in range(5)]
        jobs = [s.current_judge_job_id for s in burst]
        wait_for(lambda: JudgeJob.objects.filter(pk__in=jobs, state=JobState.COMPLETED).count() == len(jobs), 60,
                 "the burst judged", fleet.started[0])
    finally:
        fleet.stop()
    after = scrape(server)

    def moved(family, sample=None, **labels):
        return value(after, family, sample, **labels) - value(before, family, sample, **labels)

    assert moved("kece_settlements", "kece_settlements_total", pool="python", outcome="judged") == 5
    assert moved("kece_job_duration_seconds", "kece_job_duration_seconds_count", pool="python",
                 outcome="judged") == 5
    assert moved("kece_queue_wait_seconds", "kece_queue_wait_seconds_count", pool="python",
                 **{"class": "PRACTICE"}) == 5
    assert moved("kece_claims", "kece_claims_total", pool="python", result="jobs") >= 1
    result_route = "api/v1/internal/judgers/jobs/<id:job_id>/result"
    assert moved("kece_http_request_duration_seconds", "kece_http_request_duration_seconds_count",
                 route=result_route, method="POST", code="200") >= 5
    # Routes are the URL patterns, never the raw paths with their ids.
    routes = {s.labels["route"] for s in after["kece_http_request_duration_seconds"].samples}
    assert not any(re.search(r"/\d+(/|$)", route) for route in routes), routes


def test_a_real_prometheus_scrapes_the_server(server, tmp_path):
    prometheus = "/usr/bin/prometheus"
    if not os.access(prometheus, os.X_OK):
        if os.environ.get("KECE_REQUIRE_SERVICES") == "1":
            pytest.fail("prometheus is required (scripts/setup.sh installs it)")
        pytest.skip("prometheus is not installed")
    problem = make_problem(languages=("java",), cases=1)
    submission_submit(user=UserFactory(), problem_id=problem.pk, language="java", code="class Main {}")
    snapshot.refresh_step()
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: kece\n    metrics_path: /metrics\n"
        f"    authorization:\n      credentials_file: {tmp_path / 'token'}\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{server.port}']\n")
    port = free_port()
    process = subprocess.Popen(
        [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"), start_new_session=True,
        preexec_fn=die_with_parent)
    try:
        query = f"http://127.0.0.1:{port}/api/v1/query"
        deadline = time.monotonic() + 45
        while True:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text(errors="replace")[-3000:]
            try:
                answer = requests.get(query, params={"query": 'kece_jobs_queued{pool="java",class="PRACTICE"}'}, timeout=2).json()
                if answer["data"]["result"]:
                    break
            except requests.RequestException:
                pass  # not listening yet
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        [series] = answer["data"]["result"]
        assert series["value"][1] == "1"
    finally:
        stop_process_group(process, 10)


def test_each_process_group_has_series_of_its_own_so_a_restart_resets_only_its_own(tmp_path, settings, monkeypatch):
    """The node API's processes and a Celery worker restart on their own. Were the groups
    added up into one series, a restart of one would look to Prometheus like a drop of the
    whole, and `rate()` would count the other groups' totals again."""
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    from kece import metrics
    from kece.metrics_endpoint import scrape as scrape_here

    settings.KECE_METRICS_DIR = tmp_path
    monkeypatch.setenv(metrics.GROUP_ENV, "web")  # reset_group names the group it starts

    def record(group: str, pid: int, count: float) -> None:
        (tmp_path / group).mkdir(exist_ok=True)
        written = MmapedDict(str(tmp_path / group / f"counter_{pid}.db"))
        written.write_value(mmap_key("kece_settlements", "kece_settlements_total", ["pool", "outcome"],
                                     ["python", "judged"], ""), count, 0)
        written.close()

    def judged() -> dict:
        found = families(scrape_here().decode())
        return {s.labels["process_group"]: s.value for s in found["kece_settlements"].samples
                if s.name == "kece_settlements_total" and s.labels["pool"] == "python"}

    record("web", 11, 3)
    record("web", 12, 4)  # a group's processes are added up
    record("node-api", 21, 40)
    assert judged() == {"web": 7, "node-api": 40}
    metrics.reset_group("node-api")  # it restarts: its starter empties its folder
    record("node-api", 22, 1)
    assert judged() == {"web": 7, "node-api": 1}


def test_the_celery_workers_counters_are_served_by_web_and_a_restart_starts_them_afresh(tmp_path):
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    from tests.judging.helpers import claim, submit

    with LiveServer(env={"KECE_IN_PROCESS_SCHEDULER": 0}, log_path=tmp_path / "server.log") as server:
        # What a previous run of the worker left: its group's starter must empty it.
        stale = Path(server.env["KECE_METRICS_DIR"]) / "celery"
        stale.mkdir(parents=True, exist_ok=True)
        left = MmapedDict(str(stale / "counter_4242.db"))
        left.write_value(mmap_key("kece_lease_expiries", "kece_lease_expiries_total", ["pool"], ["python"], ""), 7, 0)
        left.close()

        node, identity = make_node(pool="python")
        submit(UserFactory(), make_problem(languages=("python",), cases=1))
        [job] = claim(identity)
        JudgeJob.objects.filter(pk=job.pk).update(lease_until=timezone.now() - timedelta(seconds=1))

        worker_port = free_port()
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kece", "worker", "--beat", "--concurrency", "1",
             "--hostname", "celery@metrics-test", "--loglevel", "WARNING", "-s", str(tmp_path / "beat-schedule")],
            env={**server.env, "KECE_REAP_INTERVAL_MS": "300", "KECE_WORKER_METRICS_PORT": str(worker_port)},
            cwd=ROOT, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.log", "wb"), preexec_fn=die_with_parent)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert worker.poll() is None, (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
                found = scrape(server, headers={})
                # Until the worker's reaper has passed and counted: a success noted by any
                # other process meanwhile (the cache is shared) must not end the wait early.
                steps = {s.labels["step"] for s in found["kece_periodic_last_success_timestamp_seconds"].samples}
                if "reap" in steps and value(found, "kece_lease_expiries", "kece_lease_expiries_total",
                                             pool="python") >= 1:
                    break
                assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
                time.sleep(0.2)
            # Where web cannot read its folder (Kubernetes), the worker serves the same counter
            # itself, and no gauge that web serves: added up, each is counted once.
            own = families(requests.get(f"http://127.0.0.1:{worker_port}/metrics", timeout=10).text)
        finally:
            stop_process_group(worker, 20)
    assert value(own, "kece_lease_expiries", "kece_lease_expiries_total", pool="python") == 1
    assert "kece_jobs_queued" not in own and "kece_build_info" not in own
    # The reaper ran in the worker's pool process; web added up that group's files, and not
    # what the previous run had left.
    assert value(found, "kece_lease_expiries", "kece_lease_expiries_total", pool="python") == 1
    assert JudgeJob.objects.get(pk=job.pk).state == JobState.QUEUED


def test_the_queue_wait_counts_students_and_rejudges_not_self_checks_or_the_servers_own_jobs():
    """A node's self-check goes ahead as EXAM work, canaries and cross-checks as REJUDGE: in
    the wait figures they would pass for exam answers judged at once."""
    from django.utils import timezone

    from judging.models import JobKind, JudgeJob
    from kece import metrics

    def count(klass):
        [family] = metrics.get().queue_wait.collect()
        return sum(s.value for s in family.samples if s.name.endswith("_count")
                   and s.labels == {"pool": "python", "class": klass})

    now = timezone.now()
    waited = now - timezone.timedelta(seconds=3)
    before = {klass: count(klass) for klass in ("EXAM", "REJUDGE", "PRACTICE")}
    metrics.claimed("python", [
        JudgeJob(kind=JobKind.DIAGNOSTIC, pool="python", priority_class="EXAM", available_at=waited),
        JudgeJob(kind=JobKind.JUDGE, pool="python", priority_class="REJUDGE", available_at=waited, bound_node_id=7),
        JudgeJob(kind=JobKind.JUDGE, pool="python", priority_class="PRACTICE", available_at=waited),
    ], now=now)
    assert {klass: count(klass) - before[klass] for klass in before} == {"EXAM": 0, "REJUDGE": 0, "PRACTICE": 1}


def test_the_database_round_trip_is_how_long_the_snapshot_steps_select_1_took():
    """What KeceDatabaseSlow watches: a database that takes long to answer at all (here every
    statement held up a fifth of a second on its way) reads as that, from the snapshot step."""
    from django.db import connection

    from kece.metrics_endpoint import SnapshotCollector

    def gauge():
        [family] = [f for f in SnapshotCollector().collect() if f.name == "kece_database_round_trip_seconds"]
        return [s.value for s in family.samples]

    def slowly(execute, sql, params, many, context):
        time.sleep(0.2)
        return execute(sql, params, many, context)

    snapshot.refresh_step()
    [quick] = gauge()
    with connection.execute_wrapper(slowly):
        snapshot.refresh_step()
    [slow] = gauge()
    assert quick < 0.2 <= slow


def test_without_redis_there_is_no_redis_to_be_down(settings):
    """The embedded default runs without Redis by design: a 0 there would keep KeceRedisDown
    firing for ever on a scraped embedded default."""
    from kece.metrics_endpoint import SnapshotCollector

    settings.REDIS_URL = ""
    [family] = [f for f in SnapshotCollector().collect() if f.name == "kece_redis_up"]
    assert family.samples == []


def test_the_content_stores_free_space_is_its_volumes(settings, tmp_path):
    """What KeceContentStoreLow divides: the free and total bytes of the volume the test data
    is on, as `df` says them; nothing while the store does not exist (yet)."""
    from kece.metrics_endpoint import SnapshotCollector

    def gauges():
        found = {f.name: f.samples for f in SnapshotCollector().collect()}
        return [[s.value for s in found[name]] for name in ("kece_content_store_free_bytes",
                                                            "kece_content_store_size_bytes")]

    settings.KECE_ARTIFACT_ROOT = str(tmp_path / "store")
    assert gauges() == [[], []]
    (tmp_path / "store").mkdir()
    [[free], [size]] = gauges()
    df = subprocess.run(["df", "-B1", "--output=avail,size", str(tmp_path / "store")], capture_output=True,
                        text=True, check=True).stdout.split()
    assert size == int(df[-1]) and abs(free - int(df[-2])) < 64 * 1024 * 1024 and 0 < free <= size
