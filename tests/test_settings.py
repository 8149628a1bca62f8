"""What the settings default to in production, whatever imports them."""

import ipaddress
import json
import subprocess
import sys

import pytest

from tests.live import ROOT, operator_environment

SHOW = ("import pytest, django; django.setup(); from django.conf import settings as s; import json; "
        "print(json.dumps({'networks': s.KECE_PROBE_ALLOWED_NETWORKS, 'hosts': s.ALLOWED_HOSTS, "
        "'lock_order_check': s.KECE_LOCK_ORDER_CHECK}))")


def _settings_of(**env):
    """The settings a fresh process reads, with pytest imported (as a worker sharing a
    virtualenv with the tests might have it) and a leftover KECE_TESTING."""
    return subprocess.run([sys.executable, "-c", SHOW], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=operator_environment(DJANGO_SETTINGS_MODULE="kece.settings", KECE_TESTING=1, **env))


def test_production_probes_no_loopback_link_local_or_metadata_address():
    run = _settings_of(SECRET_KEY="a production secret")
    assert run.returncode == 0, run.stderr
    shown = json.loads(run.stdout)
    networks = [ipaddress.ip_network(n) for n in shown["networks"]]
    for address in ("127.0.0.1", "::1", "::ffff:127.0.0.1", "169.254.169.254", "169.254.0.1", "fe80::1"):
        assert not any(ipaddress.ip_address(address) in n for n in networks), address
    assert any(ipaddress.ip_address("10.1.2.3") in n for n in networks)
    assert shown["hosts"] == [] and shown["lock_order_check"] is False


def test_the_database_and_redis_addresses_and_the_metrics_token_may_come_from_files(tmp_path):
    """As the secret key may: a command run in a container without the entry point reaches
    the database the servers use, not a SQLite file of its own."""
    files = {"DATABASE_URL": "mysql://kece:pw@db.example:3306/kece", "REDIS_URL": "redis://:pw@cache.example:6379/0",
             "KECE_METRICS_TOKEN": "a-metrics-token-of-length"}
    for name, value in files.items():
        (tmp_path / name).write_text(value + "\n")
    show = ("import django; django.setup(); from django.conf import settings as s; import json; "
            "d = s.DATABASES['default']; print(json.dumps([d['ENGINE'], d['HOST'], d['NAME'], s.REDIS_URL, "
            "s.KECE_METRICS_TOKEN]))")
    run = subprocess.run([sys.executable, "-c", show], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env=operator_environment(DJANGO_SETTINGS_MODULE="kece.settings", SECRET_KEY="a secret",
                                                  **{f"{name}_FILE": str(tmp_path / name) for name in files}))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == ["kece.mysql", "db.example", "kece",
                                      "redis://:pw@cache.example:6379/0", "a-metrics-token-of-length"]


def test_production_needs_a_secret_key():
    run = _settings_of()
    assert run.returncode != 0 and "SECRET_KEY (or SECRET_KEY_FILE) must be set" in run.stderr


@pytest.mark.parametrize("name, value, message", [
    ("KECE_LOG_FORMAT", "xml", "KECE_LOG_FORMAT must be json or text"),
    ("KECE_DRAIN_MS", "-1", "KECE_DRAIN_MS must be 0 (off) or more"),
    ("KECE_WORKER_METRICS_PORT", "70000", "KECE_WORKER_METRICS_PORT must be a port number"),
    ("KECE_WORKER_METRICS_PORT", "http", "KECE_WORKER_METRICS_PORT must be a port number"),
])
def test_a_bad_log_format_or_drain_time_stops_the_start(name, value, message):
    run = _settings_of(SECRET_KEY="a production secret", **{name: value})
    assert run.returncode != 0 and "ImproperlyConfigured" in run.stderr and message in run.stderr


@pytest.mark.parametrize("env, message", [
    ({"KECE_LEASE_TTL_MS": "20000"}, "KECE_LEASE_TTL_MS must be at least twice KECE_RENEW_INTERVAL_MS"),
    ({"KECE_LEASE_TTL_MS": "60000", "KECE_RENEW_INTERVAL_MS": "40000"},
     "KECE_LEASE_TTL_MS must be at least twice KECE_RENEW_INTERVAL_MS"),
    ({"KECE_JOIN_THROTTLE": "abc"}, "KECE_JOIN_THROTTLE: 'abc' is not a rate"),
    ({"KECE_JOIN_THROTTLE": "20/fortnight"}, "KECE_JOIN_THROTTLE: '20/fortnight' is not a rate"),
    ({"KECE_EVENT_MAX_ATTEMPTS": "0"}, "KECE_EVENT_MAX_ATTEMPTS must be a whole number of at least 1"),
    ({"KECE_MAX_ATTEMPTS": "lots"}, "KECE_MAX_ATTEMPTS must be a whole number of at least 1"),
    ({"KECE_TIME_ZONE": "Asia/Beijing"}, "KECE_TIME_ZONE must name a time zone such as Asia/Shanghai"),
    ({"KECE_TIME_ZONE": "Asia"}, "KECE_TIME_ZONE must name a time zone such as Asia/Shanghai"),
    ({"KECE_TIME_ZONE": "../../etc/passwd"}, "KECE_TIME_ZONE must name a time zone such as Asia/Shanghai"),
])
def test_settings_that_cannot_work_stop_the_start_not_the_first_request_that_needs_them(env, message):
    """Checked as the settings load, as every process starts: not only by `check --deploy`,
    which no deployment runs, nor by the first join that a bad rate would fail."""
    run = _settings_of(SECRET_KEY="a production secret", **env)
    assert run.returncode != 0 and "ImproperlyConfigured" in run.stderr and message in run.stderr, run.stderr


def test_the_usual_rates_of_joins_are_taken():
    for rate in ("20/min", "5/s", "600/hour", "1000/day", "3/m", "20/minutes", "5/seconds"):
        assert _settings_of(SECRET_KEY="a production secret", KECE_JOIN_THROTTLE=rate).returncode == 0, rate


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_development_probes_loopback(address):
    run = _settings_of(DEBUG=1)
    assert run.returncode == 0, run.stderr
    assert any(ipaddress.ip_address(address) in ipaddress.ip_network(n) for n in json.loads(run.stdout)["networks"])


@pytest.mark.django_db
def test_outside_development_the_session_and_csrf_cookies_are_secure(client):
    from tests.factories import UserFactory

    UserFactory(username="teacher")  # password "pw-for-tests-only"
    login_page = client.get("/accounts/login/")
    assert login_page.cookies["csrftoken"]["secure"] is True
    signed_in = client.post("/accounts/login/", {"username": "teacher", "password": "pw-for-tests-only"})
    assert signed_in.status_code == 302 and signed_in.cookies["sessionid"]["secure"] is True


FAIR_USE = ("import django; django.setup(); from django.conf import settings as s; import json; "
            "print(json.dumps([s.KECE_USER_ACTIVE_MAX, s.KECE_USER_SUBMIT_RATE, s.KECE_EXAM_ACTIVE_MAX, "
            "s.KECE_EXAM_SUBMIT_RATE]))")


def _shown_in_development(script: str, **env):
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=operator_environment(DJANGO_SETTINGS_MODULE="kece.settings", DEBUG=1, **env))


def _fair_use_of(**env):
    return _shown_in_development(FAIR_USE, **env)


def test_fair_use_limits_default_to_what_no_honest_class_reaches_and_read_rates_in_any_unit():
    run = _fair_use_of()
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [20, [30, 60], 10, [20, 60]]
    run = _fair_use_of(KECE_USER_ACTIVE_MAX="0", KECE_USER_SUBMIT_RATE="0", KECE_EXAM_ACTIVE_MAX="3",
                       KECE_EXAM_SUBMIT_RATE="10/90s")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [0, None, 3, [10, 90]]


@pytest.mark.parametrize("name, value", [
    ("KECE_USER_SUBMIT_RATE", "fast"), ("KECE_USER_SUBMIT_RATE", "30/fortnight"), ("KECE_USER_SUBMIT_RATE", "30"),
    ("KECE_EXAM_SUBMIT_RATE", "-1/min"), ("KECE_EXAM_SUBMIT_RATE", "5/0s"), ("KECE_USER_ACTIVE_MAX", "-1"),
    ("KECE_USER_ACTIVE_MAX", "many"), ("KECE_EXAM_ACTIVE_MAX", "0"),
])
def test_a_bad_fair_use_limit_stops_the_start_and_names_itself(name, value):
    run = _fair_use_of(**{name: value})
    assert run.returncode != 0 and "ImproperlyConfigured" in run.stderr and name in run.stderr


@pytest.mark.parametrize("name, value, message", [
    ("KECE_CANARY_RATE", "-1", "KECE_CANARY_RATE must be 0 (off) or more"),
    ("KECE_CANARY_MIN_INTERVAL_S", "hourly", "KECE_CANARY_MIN_INTERVAL_S must be a whole number"),
    ("KECE_CROSS_CHECK_RATE", "-5", "KECE_CROSS_CHECK_RATE must be 0 (off) or more"),
    ("KECE_CROSS_CHECK_QUARANTINE_AFTER", "0", "KECE_CROSS_CHECK_QUARANTINE_AFTER must be at least 1"),
    ("KECE_CAPACITY_UTILISATION", "1.5", "KECE_CAPACITY_UTILISATION must be a number above 0 and at most 1"),
    ("KECE_CAPACITY_UTILISATION", "most", "KECE_CAPACITY_UTILISATION must be a number above 0 and at most 1"),
    ("KECE_EXAM_SUBMISSIONS_PER_PROBLEM", "0", "KECE_EXAM_SUBMISSIONS_PER_PROBLEM must be a number above 0"),
    ("KECE_CAPACITY_WINDOW_S", "10", "KECE_CAPACITY_WINDOW_S must be a whole number of at least 60"),
    ("KECE_EXAM_BURST_TARGET_S", "soon", "KECE_EXAM_BURST_TARGET_S must be a whole number of at least 1"),
])
def test_a_bad_verdict_check_or_capacity_setting_stops_the_start(name, value, message):
    run = _settings_of(SECRET_KEY="a production secret", **{name: value})
    assert run.returncode != 0 and "ImproperlyConfigured" in run.stderr and message in run.stderr


RETENTION = ("import django; django.setup(); from django.conf import settings as s; import json; "
             "print(json.dumps([s.KECE_GC_JOB_DETAILS_DAYS, s.KECE_GC_EVENTS_DAYS, s.KECE_GC_AUDIT_DAYS, "
             "s.KECE_GC_BLOB_GRACE_HOURS, s.KECE_GC_BATCH, s.KECE_GC_BATCHES, s.KECE_GC_INTERVAL_MS]))")


def _retention_of(**env):
    return _shown_in_development(RETENTION, **env)


def test_retention_ages_default_to_a_term_and_more_and_zero_or_empty_keeps_forever():
    run = _retention_of()
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [90, 30, 365, 24, 200, 10, 3_600_000]
    run = _retention_of(KECE_GC_JOB_DETAILS_DAYS="0", KECE_GC_EVENTS_DAYS="", KECE_GC_AUDIT_DAYS="730",
                        KECE_GC_BLOB_GRACE_HOURS="0")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)[:4] == [0, 0, 730, 0]


@pytest.mark.parametrize("name, value", [
    ("KECE_GC_JOB_DETAILS_DAYS", "-1"), ("KECE_GC_EVENTS_DAYS", "a month"), ("KECE_GC_BLOB_GRACE_HOURS", "1.5"),
    ("KECE_GC_BATCH", "0"), ("KECE_GC_BATCHES", "many"), ("KECE_GC_INTERVAL_MS", "0"),
])
def test_a_bad_retention_setting_stops_the_start_and_names_itself(name, value):
    run = _retention_of(**{name: value})
    assert run.returncode != 0 and "ImproperlyConfigured" in run.stderr and name in run.stderr


DATABASE_BOUNDS = ("import django; django.setup(); from django.conf import settings as s; import json; "
                   "o = s.DATABASES['default']['OPTIONS']; "
                   "print(json.dumps([o.get(k) for k in ('connect_timeout', 'read_timeout', 'write_timeout')]))")


def _database_bounds_of(**env):
    return _shown_in_development(DATABASE_BOUNDS, DATABASE_URL="mysql://kece@db.invalid/kece", **env)


def test_database_connects_and_statements_are_bounded_by_default_and_zero_lifts_a_statement_bound():
    run = _database_bounds_of()
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [5, 10, 10]
    run = _database_bounds_of(KECE_DB_CONNECT_TIMEOUT_S="2", KECE_DB_READ_TIMEOUT_S="0", KECE_DB_WRITE_TIMEOUT_S="30")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [2, None, 30]


@pytest.mark.parametrize("name, value", [
    ("KECE_DB_CONNECT_TIMEOUT_S", "0"), ("KECE_DB_READ_TIMEOUT_S", "-1"), ("KECE_DB_WRITE_TIMEOUT_S", "2.5"),
])
def test_a_bad_database_bound_stops_the_start_and_names_itself(name, value):
    run = _database_bounds_of(**{name: value})
    assert run.returncode != 0 and "ImproperlyConfigured" in run.stderr and name in run.stderr
