"""The public judge status: availability rules, pending counts, honesty about age, and the
homepage, top bar and summary call served from the cache with no SQL."""

import re
import shutil
import socket
import subprocess
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from judging.models import JobState, JudgeJob
from nodes.models import DesiredState, HostGroupStatus, JudgeHostGroup, JudgeNode
from pools import snapshot
from pools.registry import POOLS
from tests.factories import UserFactory, make_node, make_problem
from tests.judging.helpers import claim, submit

pytestmark = pytest.mark.django_db


def pool_row(snap, pool="python"):
    return next(p for p in snap["pools"] if p["pool"] == pool)


def test_a_pool_with_an_enabled_fresh_verified_healthy_node_is_available(student, problem, node_a):
    snap = snapshot.compute(now=timezone.now())
    assert pool_row(snap)["status"] == "NORMAL"
    assert snap["readyPools"] == 1 and snap["totalPools"] == len(POOLS) == 5
    assert pool_row(snap, "java")["status"] == "UNAVAILABLE"


@pytest.mark.parametrize("breakage", [
    "offline", "unhealthy", "draining", "disabled", "unverified", "verified_for_an_old_revision",
    "session_closed", "revoked", "other_runtime_spec", "quarantined",
])
def test_a_node_that_cannot_take_new_jobs_gives_its_runtime_no_capacity(breakage, student, problem):
    node, _ = make_node(pool="python")
    change = {
        "offline": {"last_heartbeat_at": timezone.now() - timedelta(minutes=5)},
        "unhealthy": {"health_ok": False},
        "draining": {"desired_state": DesiredState.DRAINING},
        "disabled": {"desired_state": DesiredState.DISABLED},
        "unverified": {"desired_state": DesiredState.PENDING_VERIFICATION, "self_check_status": "NONE"},
        "verified_for_an_old_revision": {"config_revision": node.config_revision + 1},
        "session_closed": {"session_open": False},
        "revoked": {"revoked_at": timezone.now()},
        "other_runtime_spec": {"runtime_spec": "python-r0"},
        "quarantined": {"quarantined_at": timezone.now(), "quarantine_reason": "3 infrastructure errors in a row"},
    }[breakage]
    JudgeNode.objects.filter(pk=node.pk).update(**change)
    submit(student, problem, language="python")
    row = pool_row(snapshot.compute(now=timezone.now()))
    assert row["status"] == "UNAVAILABLE"
    assert row["pending"] == 1  # the work is still counted while no judge can take it


def test_a_busy_healthy_node_keeps_its_runtime_available_and_queueing(student, problem):
    node, identity = make_node(pool="python", max_slots=1)
    submit(student, problem, language="python")
    submit(student, problem, language="python")
    assert len(claim(identity, free_slots=1)) == 1  # the node is now full
    row = pool_row(snapshot.compute(now=timezone.now()))
    assert row == {"pool": "python", "label": "Python", "status": "QUEUEING", "pending": 1}


def test_pending_counts_everything_saved_and_not_yet_claimed_including_backoff(student, problem, node_a):
    waiting = submit(student, problem, language="python")
    in_backoff = submit(student, problem, language="python")
    now = timezone.now()
    JudgeJob.objects.filter(pk=in_backoff.current_judge_job_id).update(available_at=now + timedelta(seconds=30))
    row = pool_row(snapshot.compute(now=now))
    assert (row["status"], row["pending"]) == ("QUEUEING", 2)
    JudgeJob.objects.filter(pk=waiting.current_judge_job_id).update(state=JobState.COMPLETED)
    row = pool_row(snapshot.compute(now=now))
    # Only work in backoff: nothing can be claimed right now, but it still waits.
    assert (row["status"], row["pending"]) == ("NORMAL", 1)


def test_the_summary_is_fresh_then_stale_when_the_snapshot_ages(client, settings, node_a):
    now = timezone.now()
    snapshot.refresh_step(now=now - timedelta(milliseconds=settings.KECE_SNAPSHOT_INTERVAL_MS))
    body = client.get("/api/v1/system/judgers/summary").json()
    assert body["freshness"] == "fresh" and body["readyPools"] == 1
    snapshot.refresh_step(now=now - timedelta(milliseconds=settings.KECE_SNAPSHOT_INTERVAL_MS * 4))
    assert client.get("/api/v1/system/judgers/summary").json()["freshness"] == "stale"
    page = client.get("/").content.decode()
    assert "May be out of date, last updated" in page
    assert "freshness-stale" in page  # the values are greyed


def test_no_snapshot_yet_shows_no_runtime_as_available(client):
    body = client.get("/api/v1/system/judgers/summary").json()
    assert body["freshness"] == "unavailable" and body["asOf"] is None and body["readyPools"] == 0
    page = client.get("/").content.decode()
    assert "Status unknown" in page and "Judge status unknown" in page
    assert "Normal" not in page


def test_the_homepage_status_fragment_and_summary_run_no_sql_with_a_warm_cache(
        client, django_assert_num_queries, node_a):
    snapshot.refresh_step()
    for path in ("/", "/status/panel", "/api/v1/system/judgers/summary"):
        with django_assert_num_queries(0):
            assert client.get(path).status_code == 200


class CountingCache:
    """The cache, counting the round trips a request makes to it."""

    def __init__(self, inner):
        self.inner, self.reads = inner, 0

    def get(self, *args, **kwargs):
        self.reads += 1
        return self.inner.get(*args, **kwargs)

    def get_many(self, *args, **kwargs):
        self.reads += 1
        return self.inner.get_many(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def clock(monkeypatch):
    """The monotonic clock the snapshot reader sees, which the test can move on."""
    from time import monotonic

    moved = [0.0]
    monkeypatch.setattr(snapshot, "monotonic", lambda: monotonic() + moved[0])
    return moved


def past_the_reuse_window(clock, settings):
    clock[0] += settings.KECE_STATUS_REUSE_MS / 1000 + 1


def test_a_visitor_costs_one_cache_read_even_when_only_the_last_good_snapshot_is_left(
        client, node_a, monkeypatch, clock, settings):
    snapshot.refresh_step(now=timezone.now() - timedelta(minutes=5))
    cache.delete(snapshot.CACHE_KEY)  # the current snapshot expired; the last good one stays
    past_the_reuse_window(clock, settings)  # as in a web process other than the one that computed it
    counting = CountingCache(cache)
    monkeypatch.setattr(snapshot, "cache", counting)
    body = client.get("/api/v1/system/judgers/summary").json()
    assert body["freshness"] == "stale" and body["readyPools"] == 1
    assert counting.reads == 1


def test_a_web_process_reuses_the_snapshot_it_read_for_a_moment_then_reads_the_new_one(
        client, node_a, monkeypatch, clock, settings):
    settings.KECE_STATUS_REUSE_MS = 1000
    first = snapshot.compute(now=timezone.now())
    cache.set(snapshot.CACHE_KEY, first)  # written by another process (the beat task)
    counting = CountingCache(cache)
    monkeypatch.setattr(snapshot, "cache", counting)
    for _ in range(5):
        assert client.get("/api/v1/system/judgers/summary").json()["asOf"] == first["asOf"]
    assert counting.reads == 1
    make_node(pool="cpp")
    newer = snapshot.compute(now=timezone.now() + timedelta(seconds=1))
    cache.set(snapshot.CACHE_KEY, newer)
    assert client.get("/api/v1/system/judgers/summary").json()["asOf"] == first["asOf"]  # within the moment
    past_the_reuse_window(clock, settings)
    body = client.get("/api/v1/system/judgers/summary").json()
    assert (body["asOf"], body["readyPools"]) == (newer["asOf"], 2) and counting.reads == 2
    settings.KECE_STATUS_REUSE_MS = 0  # every visit reads the cache
    client.get("/")
    client.get("/api/v1/system/judgers/summary")
    assert counting.reads == 4


def test_anonymous_visitors_share_one_rendering_of_the_homepage_until_the_status_changes(node_a):
    snapshot.refresh_step()
    first, second = Client().get("/"), Client().get("/")
    assert first.content == second.content and "1 / 5 runtimes available" in first.content.decode()
    assert [t.name for t in first.templates][:1] == ["home.html"] and second.templates == []  # not rendered again
    assert "Cookie" in second["Vary"] and "Accept-Language" in second["Vary"]
    assert "csrftoken" not in second.cookies and "csrfmiddlewaretoken" not in second.content.decode()
    chinese = Client(HTTP_ACCEPT_LANGUAGE="zh-hans").get("/").content.decode()
    assert "1 / 5 个运行时可用" in chinese
    # What a screen reader says, with Chinese punctuation (it read "评测服务状态: …, 1 / 5 …").
    announced = re.search(r'data-announce="([^"]*)"', chinese).group(1)
    assert re.fullmatch(r"评测服务状态：[^,:]+，1 / 5 个运行时可用", announced), announced
    make_node(pool="cpp")
    snapshot.refresh_step(now=timezone.now() + timedelta(seconds=1))
    assert "2 / 5 runtimes available" in Client().get("/").content.decode()
    with_query = Client().get("/?from=mail")  # its links keep the query: rendered for it
    assert with_query.templates and "2 / 5 runtimes available" in with_query.content.decode()


def test_a_visitors_notice_is_shown_to_that_visitor_and_never_shared_with_the_others(node_a):
    """A notice waiting in a visitor's cookie (a form sent without a session) is that
    visitor's: the first visit after a refresh must not make it the shared page's."""
    from django.contrib.messages import constants
    from django.contrib.messages.storage.base import Message
    from django.contrib.messages.storage.cookie import CookieStorage
    from django.test import RequestFactory

    notice = CookieStorage(RequestFactory().get("/"))._encode([Message(constants.SUCCESS, "Answer saved.")])
    snapshot.refresh_step()
    with_notice = Client()
    with_notice.cookies["messages"] = notice
    assert "Answer saved." in with_notice.get("/").content.decode()
    assert "Answer saved." not in Client().get("/").content.decode()
    assert "Answer saved." not in with_notice.get("/").content.decode()  # shown once


def test_a_signed_in_visitor_never_gets_the_shared_homepage(client, student, node_a):
    snapshot.refresh_step()
    assert "Sign in" in Client().get("/").content.decode()  # the shared page exists now
    client.force_login(student)
    page = client.get("/").content.decode()
    assert "student" in page and "Sign out" in page and 'class="signin"' not in page


def test_the_language_switch_works_from_the_shared_homepage(node_a):
    snapshot.refresh_step()
    Client().get("/")  # another visitor's visit made the shared page
    visitor = Client(enforce_csrf_checks=True)
    page = visitor.get("/").content.decode()
    assert 'action="/i18n/setlang/"' in page
    switched = visitor.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    assert switched.status_code == 302 and switched["Location"] == "/"
    assert "1 / 5 个运行时可用" in visitor.get("/").content.decode()


def test_the_summary_lets_a_proxy_share_it_and_answers_conditional_gets(client, node_a):
    snapshot.refresh_step()
    first = client.get("/api/v1/system/judgers/summary")
    assert "public" in first["Cache-Control"] and "max-age=" in first["Cache-Control"]
    again = client.get("/api/v1/system/judgers/summary", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again.content == b""
    snapshot.refresh_step(now=timezone.now() + timedelta(seconds=1))  # a new snapshot
    changed = client.get("/api/v1/system/judgers/summary", HTTP_IF_NONE_MATCH=first["ETag"])
    assert changed.status_code == 200 and changed["ETag"] != first["ETag"]


def test_the_top_bar_and_the_panel_say_the_same_on_every_page(client, student, problem, node_a):
    make_node(pool="cpp")
    snapshot.refresh_step()
    client.force_login(student)
    for path in ("/", f"/problems/{problem.pk}", "/problems", "/submissions"):
        page = client.get(path).content.decode()
        assert "2 / 5 runtimes available" in page, path
    fragment = client.get("/status/panel").content.decode()
    assert fragment.count("2 / 5 runtimes available") >= 2  # the panel and the top bar, out of band
    assert 'id="topbar-status"' in fragment and 'hx-swap-oob="true"' in fragment


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def private_redis(settings, tmp_path):
    """A Redis of this test's own, as the cache, that the test can stop."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is required")
    port = _free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(port=port, socket_connect_timeout=1)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            process.poll()
            subprocess.run(["sleep", "0.05"])
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{port}/0"}}
    yield process
    process.kill()
    process.wait()


def test_an_unreadable_cache_shows_status_unavailable_with_the_last_good_time(
        client, private_redis, node_a, clock, settings):
    good = snapshot.refresh_step()
    page = client.get("/").content.decode()
    assert "1 / 5 runtimes available" in page
    private_redis.kill()
    private_redis.wait()
    past_the_reuse_window(clock, settings)
    body = client.get("/api/v1/system/judgers/summary").json()
    assert body["freshness"] == "unavailable" and body["readyPools"] == 0 and body["asOf"] is None
    assert all(p["status"] == "UNAVAILABLE" for p in body["pools"])
    page = client.get("/").content.decode()
    hhmm = timezone.datetime.fromisoformat(good["asOf"].replace("Z", "+00:00")).strftime("%H:%M")
    notice = re.search(r'<p id="judge-status-notice"[^>]*>(.*?)</p>', page, re.S)
    assert f"Status unavailable. Last good status: {hhmm} UTC." in page, notice and notice.group(1)
    assert "1 / 5 runtimes available" not in page and "Normal" not in page  # never the last green


@pytest.mark.django_db
def test_the_operators_figures_count_dead_events_and_leave_out_nodes_stopped_on_purpose(student, problem):
    """What the alerts read: outbox events that failed every try (KeceOutboxDead), and the
    heartbeat ages of nodes that may be silent (KeceNodeSilent) — not one disabled, nor one
    drained of its work, which `drain_node` says may then be stopped."""
    from judging.models import EventState, SettlementEvent
    from tests.judging.helpers import judged, settle

    working, identity = make_node(pool="python", name="working")
    drained, _ = make_node(pool="python", name="drained")
    draining, draining_identity = make_node(pool="cpp", name="draining")
    submit(student, problem)
    [first] = claim(identity)
    settle(identity, judged(first))
    now = timezone.now()
    [event] = SettlementEvent.objects.filter(job=first)
    assert snapshot.compute_figures(now=now)["outboxDead"] == 0
    SettlementEvent.objects.filter(pk=event.pk).update(state=EventState.DEAD)
    cpp = make_problem(languages=("cpp",))
    submit(student, cpp, language="cpp", code="int main(){}")
    assert claim(draining_identity)
    JudgeNode.objects.filter(pk__in=[drained.pk, draining.pk]).update(desired_state=DesiredState.DRAINING)

    on_a_machine_taken_away, _ = make_node(pool="python", name="machine-off")
    JudgeHostGroup.objects.filter(pk=on_a_machine_taken_away.host_group_id).update(status=HostGroupStatus.DISABLED)

    figures = snapshot.compute_figures(now=now + timedelta(minutes=5))
    assert figures["outboxDead"] == 1
    silent = {name for _pool, name, _age in figures["heartbeats"]}
    assert silent == {"working", "draining"}, "a drained node with nothing left to run may be stopped"
