"""The alert rules (deploy/prometheus/): promtool checks them and runs their unit tests,
every rule has a test that fires it and one that keeps it quiet, a runbook entry, a
severity, and names only metrics of the shared vocabulary; and the Compose deployment's
Prometheus really scrapes the internal listener and loads these rules."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy.test_compose import (
    DEPLOY as COMPOSE_DIR,
    REPO,
    directive,
    load_compose,
    select_location,
    server_listening_on,
)
from tests.deploy.tools import program

PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "kece-alerts.yml"
RUNBOOK = PROMETHEUS_DIR / "RUNBOOK.md"
RULE_TESTS = PROMETHEUS_DIR / "tests"
CONFIG = PROMETHEUS_DIR / "prometheus.yml"

# The rules the operators asked for, by name; more may be added.
NAMED_RULES = {
    "KeceNoCapacity", "KeceExamQueueWaitHigh", "KeceQueueWaitHigh", "KeceStalledPool", "KeceJobStuck",
    "KeceLeaseExpiryBurst", "KeceSystemErrorRatio", "KeceNodeSilent", "KeceNodeQuarantined",
    "KecePeriodicStale", "KecePeriodicStepStale", "KeceOutboxLag", "KeceOutboxDead", "KeceSnapshotStale", "KeceRedisDown",
    # The target down, or its gauges gone: without these every rule above goes quiet.
    "KeceTargetDown", "KeceMetricsAbsent",
    # The node API's own processes down while the web side answers.
    "KeceNodeApiDown",
    # A pool that cannot judge before anything waits; server errors; the test data's volume.
    "KecePoolWithoutJudge", "KeceServerErrors", "KeceContentStoreLow",
}

# The server's metric vocabulary (names and label values every dashboard and rule shares).
SERVER_METRICS = {
    "kece_jobs_queued", "kece_jobs_running", "kece_queue_oldest_wait_seconds", "kece_running_oldest_seconds",
    "kece_nodes", "kece_pool_slots", "kece_pool_slots_busy", "kece_node_last_heartbeat_age_seconds",
    "kece_outbox_pending", "kece_outbox_oldest_seconds", "kece_outbox_dead", "kece_snapshot_age_seconds",
    "kece_redis_up",
    "kece_periodic_last_success_timestamp_seconds", "kece_build_info",
    "kece_claims_total", "kece_settlements_total", "kece_result_rejections_total", "kece_lease_expiries_total",
    "kece_leases_released_total", "kece_node_infra_errors_total", "kece_quarantines_total", "kece_wakeup_fallback_polls_total",
    "kece_submit_throttled_total", "kece_reconcile_findings",
    "kece_http_request_duration_seconds_count", "kece_http_request_duration_seconds_bucket",
    "kece_content_store_free_bytes", "kece_content_store_size_bytes", "kece_database_round_trip_seconds",
}
LABEL_VALUES = {
    "pool": {"cpp", "java", "python", "mysql", "arkts"},
    "class": {"EXAM", "PRACTICE", "REJUDGE"},
    "state": {"ready", "busy", "draining", "unhealthy", "offline", "disabled", "unverified"},
    "outcome": {"judged", "system_error"},
    "step": {"reap", "events", "exams", "checks", "stall", "integrity", "rejudges", "reconcile", "snapshot", "gc"},
}
SEVERITIES = {"critical", "warning"}


def promtool() -> str:
    return program("promtool", "scripts/setup.sh installs Debian's prometheus package")


def run_promtool(*args: str, cwd: Path = PROMETHEUS_DIR) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def rule_groups() -> list[dict]:
    return yaml.safe_load(RULES.read_text())["groups"]


def alerts() -> list[dict]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def github_anchor(heading: str) -> str:
    """The anchor GitHub (and most Markdown renderers) give a heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    """anchor → the text under that level-2 heading."""
    sections, current = {}, None
    for line in RUNBOOK.read_text().splitlines():
        if line.startswith("## "):
            current = github_anchor(line[3:])
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


# --- promtool -------------------------------------------------------------------------------

def test_promtool_accepts_the_rules():
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("group", [g["name"] for g in yaml.safe_load(RULES.read_text())["groups"]])
def test_the_rule_groups_unit_tests_pass(group):
    test_file = RULE_TESTS / f"{group}.test.yml"
    assert test_file.is_file(), f"rule group {group} has no test file {test_file.name}"
    result = run_promtool("test", "rules", test_file.name, cwd=RULE_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_is_tested_firing_and_quiet_in_its_groups_file():
    test_files = {path.name for path in RULE_TESTS.glob("*.test.yml")}
    assert test_files == {f"{g['name']}.test.yml" for g in rule_groups()}, "one test file per rule group"
    for group in rule_groups():
        suite = yaml.safe_load((RULE_TESTS / f"{group['name']}.test.yml").read_text())
        assert [str((RULE_TESTS / f).resolve()) for f in suite["rule_files"]] == [str(RULES)]
        fired, quiet = set(), set()
        for case in suite["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
        names = {rule["alert"] for rule in group["rules"] if "alert" in rule}
        assert names <= fired, f"{group['name']}: never shown firing: {sorted(names - fired)}"
        assert names <= quiet, f"{group['name']}: never shown staying quiet: {sorted(names - quiet)}"


# --- the rules themselves ---------------------------------------------------------------------

def test_the_named_rules_exist_once_each():
    names = [rule["alert"] for rule in alerts()]
    assert len(names) == len(set(names)), "an alert name is used twice"
    assert NAMED_RULES <= set(names), f"missing: {sorted(NAMED_RULES - set(names))}"


def test_every_alert_has_a_severity_and_a_runbook_entry():
    sections = runbook_sections()
    for rule in alerts():
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        url = urlsplit(rule["annotations"]["runbook_url"])
        assert url.path == "deploy/prometheus/RUNBOOK.md", rule["alert"]
        assert url.fragment == github_anchor(rule["alert"]), f"{rule['alert']} links to #{url.fragment}"
        text = sections.get(url.fragment)
        assert text is not None, f"RUNBOOK.md has no section for {rule['alert']}"
        for part in ("Meaning", "First checks", "Fixes"):
            assert f"**{part}" in text, f"RUNBOOK.md, {rule['alert']}: no **{part}**"
    assert set(sections) == {github_anchor(rule["alert"]) for rule in alerts()}, \
        "every runbook section belongs to a rule"


def test_redis_down_is_a_warning_and_an_exam_wait_is_critical():
    severity = {rule["alert"]: rule["labels"]["severity"] for rule in alerts()}
    # Redis holds only hints (nothing is lost without it); students in an exam wait now.
    assert severity["KeceRedisDown"] == "warning"
    assert severity["KeceExamQueueWaitHigh"] == "critical"


def expression_names(expr: str) -> set[str]:
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    without_ranges = re.sub(r"\[[^\]]*\]", "", without_strings)
    return set(re.findall(r"\b(kece_[a-z0-9_]+|up)\b", without_ranges))


def test_rules_use_only_the_shared_metric_names_and_label_values():
    for rule in alerts():
        expr = rule["expr"]
        unknown = expression_names(expr) - SERVER_METRICS - {"up"}
        assert not unknown, f"{rule['alert']} uses metrics outside the vocabulary: {sorted(unknown)}"
        for label, value in re.findall(r'\b(pool|class|state|outcome|step)\s*=~?\s*"([^"]*)"', expr):
            for alternative in value.split("|"):
                assert alternative in LABEL_VALUES[label], f"{rule['alert']}: {label}={alternative!r}"


def server_metric_names() -> set[str]:
    """Names of the metrics the server's code declares (with prometheus_client, or in a
    module of its own for metrics)."""
    names = set()
    for package in ("kece", "judging", "nodes", "pools"):
        for path in (REPO / package).rglob("*.py"):
            source = path.read_text()
            if "prometheus_client" not in source and "metrics" not in path.name:
                continue
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and re.fullmatch(r"kece_[a-z0-9_]+", node.value):
                    names.add(node.value)
    return names


def test_rules_name_metrics_the_server_declares():
    declared = server_metric_names()
    if not declared:
        pytest.skip("the server declares no metrics yet")
    for rule in alerts():
        for name in expression_names(rule["expr"]) - {"up"}:
            # prometheus_client adds `_total` to a counter's declared name, `_count` (with
            # `_sum` and `_bucket`) to a histogram's.
            assert name in declared or name.removesuffix("_total") in declared \
                or name.removesuffix("_count") in declared or name.removesuffix("_bucket") in declared, \
                f"{rule['alert']}: the server declares no metric {name}"


# --- the Compose deployment's Prometheus --------------------------------------------------------

@pytest.fixture(scope="module")
def prometheus_service() -> dict:
    return load_compose()["services"]["prometheus"]


def mounts(service: dict) -> dict[str, Path]:
    """target → source of the service's file mounts."""
    found = {}
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            found[target] = (COMPOSE_DIR / source).resolve()
    return found


def test_compose_runs_a_pinned_prometheus_with_this_config_and_these_rules(prometheus_service):
    image, _, tag = prometheus_service["image"].partition(":")
    assert image == "prom/prometheus" and re.fullmatch(r"v\d+\.\d+\.\d+", tag), prometheus_service["image"]
    command = prometheus_service["command"]
    (config_path,) = [a.removeprefix("--config.file=") for a in command if a.startswith("--config.file=")]
    files = mounts(prometheus_service)
    assert files[config_path] == CONFIG
    config = yaml.safe_load(CONFIG.read_text())
    assert [files[path] for path in config["rule_files"]] == [RULES]
    # Its database lives in a named volume, and the rest of its file system is read-only.
    (data_path,) = [a.removeprefix("--storage.tsdb.path=") for a in command if a.startswith("--storage.tsdb.path=")]
    assert any(v.split(":")[1] == data_path and not v.startswith(".") for v in prometheus_service["volumes"])
    assert prometheus_service["read_only"] is True and prometheus_service["cap_drop"] == ["ALL"]
    # The UI is on the host's loopback only.
    for port in prometheus_service.get("ports", []):
        assert str(port).startswith("127.0.0.1:"), port


def test_prometheus_scrapes_the_web_tier_on_the_internal_listener(prometheus_service):
    compose = load_compose()
    config = yaml.safe_load(CONFIG.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "kece"]
    assert job["scheme"] == "https"
    (target,) = [t for static in job["static_configs"] for t in static["targets"]]
    host, port = target.rsplit(":", 1)
    proxy = compose["services"]["proxy"]
    shared = set(prometheus_service["networks"]) & set(proxy["networks"])
    assert any(host in (proxy["networks"][n] or {}).get("aliases", []) for n in shared), \
        f"{host} is not the proxy on a network Prometheus shares with it"
    # The internal listener passes /metrics to the web tier; the public one refuses it.
    internal = server_listening_on(int(port))
    assert "ssl" in directive(internal, "listen")
    _args, metrics = select_location(internal, job.get("metrics_path", "/metrics"))
    assert directive(metrics, "proxy_pass") == ["http://kece_web"]
    _args, public = select_location(server_listening_on(443), "/metrics")
    assert directive(public, "return") == ["404"] and directive(public, "proxy_pass") is None
    # Its certificate is checked against the internal CA, mounted as the secret named there.
    ca_file = job["tls_config"]["ca_file"]
    mounted = {f"/run/secrets/{s['target']}": s["source"] for s in prometheus_service["secrets"]}
    assert mounted[ca_file] == "internal_ca"


def test_prometheus_sees_the_node_apis_own_processes_answer_and_keeps_none_of_their_samples():
    """The node API runs on processes the `kece` job's scrape never reaches: a job of its
    own asks them through the same listener, for KeceNodeApiDown. Its answer is the shared
    counters again, so every sample is dropped (only the scrape's `up` stays)."""
    config = yaml.safe_load(CONFIG.read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    web, node_api = jobs["kece"], jobs["kece-node-api"]
    assert node_api["static_configs"] == web["static_configs"] and node_api["tls_config"] == web["tls_config"]
    (target,) = [t for static in node_api["static_configs"] for t in static["targets"]]
    _args, location = select_location(server_listening_on(int(target.rsplit(":", 1)[1])), node_api["metrics_path"])
    assert directive(location, "proxy_pass") == ["http://kece_node_api/metrics"]
    (drop,) = node_api["metric_relabel_configs"]
    assert drop["action"] == "drop" and drop["source_labels"] == ["__name__"]
    assert re.fullmatch(drop["regex"], "kece_jobs_settled_total") and re.fullmatch(drop["regex"], "up")
    (rule,) = [r for r in alerts() if r["alert"] == "KeceNodeApiDown"]
    assert 'job="kece-node-api"' in rule["expr"]


def test_promtool_accepts_the_config_with_its_mounted_files(prometheus_service, tmp_path):
    """`promtool check config` on prometheus.yml as the container sees it (the mounted
    paths point into a temporary folder), which also checks the rule file it loads."""
    text = CONFIG.read_text()
    for target, source in mounts(prometheus_service).items():
        if source != CONFIG:
            (tmp_path / Path(target).name).write_text(source.read_text())
            text = text.replace(target, str(tmp_path / Path(target).name))
    (tmp_path / "internal_ca.pem").write_text("")
    text = text.replace("/run/secrets/internal_ca.pem", str(tmp_path / "internal_ca.pem"))
    (tmp_path / "prometheus.yml").write_text(text)
    result = run_promtool("check", "config", str(tmp_path / "prometheus.yml"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "15 rules found" in result.stdout or "rules found" in result.stdout
