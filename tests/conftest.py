import os

import pytest
from django.conf import settings
from django.db import connection

import kece.redis_clients as redis_clients
from judging import wakeups
from tests.factories import UserFactory, make_node, make_problem

ON_MARIADB = settings.DATABASE_VENDOR == "mysql"


def pytest_collection_modifyitems(config, items):
    if os.environ.get("KECE_REQUIRE_SERVICES") == "1":
        # CI: a missing service is a failure, never a skip.
        if not ON_MARIADB:
            raise pytest.UsageError("KECE_REQUIRE_SERVICES=1 but DATABASE_URL does not point at MySQL/MariaDB")
        if not settings.REDIS_URL:
            raise pytest.UsageError("KECE_REQUIRE_SERVICES=1 but REDIS_URL is not set")
        import redis

        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
    if ON_MARIADB:
        return
    skip = pytest.mark.skip(reason="needs MariaDB/MySQL: row locks and SKIP LOCKED are not real on SQLite")
    for item in items:
        if "mariadb" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing():
    # Factories set passwords for every user; the production hasher would dominate test time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True, scope="session")
def _artifact_root(tmp_path_factory):
    # Session-wide (live servers started by module fixtures must see the same store).
    settings.KECE_ARTIFACT_ROOT = str(tmp_path_factory.getbasetemp() / "artifacts")


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    from django.core.cache import cache

    from pools import snapshot, status

    # A test that stopped a Redis of its own left this process holding Redis for down: the
    # next test's Redis is another, answering one. No hint of an earlier test is published
    # during this one.
    wakeups.publisher.flush(10)
    redis_clients.outage.forget()
    cache.clear()
    # The status snapshot this process last read goes with the cache it came from, and so
    # does the newest snapshot time it has seen (the "last good status" while the cache is
    # away): a test that refreshed a snapshot dated ahead must not lend it to the next.
    monkeypatch.setattr(snapshot, "_last_read", (float("-inf"), None))
    monkeypatch.setattr(status, "_last_seen", {})
    yield
    wakeups.publisher.flush(10)


@pytest.fixture
def unlimited_submits(settings):
    """For tests that submit from one account as fast as a loop can, as no student does: the
    per-user limits of fair use (`judging.pressure`) out of the way."""
    settings.KECE_USER_ACTIVE_MAX = 0
    settings.KECE_USER_SUBMIT_RATE = None
    settings.KECE_EXAM_SUBMIT_RATE = None
    settings.KECE_EXAM_ACTIVE_MAX = 10**6


@pytest.fixture(autouse=True)
def _lock_order_checked(settings):
    settings.KECE_LOCK_ORDER_CHECK = True


@pytest.fixture(autouse=True)
def _pool_figures_read_on_every_submit(settings):
    # So that a test's submits see the jobs it has just queued (servers the tests start keep
    # the default); the tests of the interval set it.
    settings.KECE_PRESSURE_REFRESH_S = 0


@pytest.fixture(autouse=True)
def _language_of_its_own():
    # The test client runs LocaleMiddleware in the test's own thread, and Django leaves the
    # language it activated there: a page asked for in Chinese would make the next test's
    # messages Chinese. A server activates each request's language afresh.
    yield
    from django.utils import translation

    translation.deactivate()


@pytest.fixture
def student(db):
    return UserFactory(username="student")


@pytest.fixture
def problem(db):
    return make_problem(languages=("python", "cpp"), cases=2)


@pytest.fixture
def node_a(db):
    return make_node(pool="python", name="node-a")


@pytest.fixture
def node_b(db):
    return make_node(pool="python", name="node-b")


@pytest.fixture
def foreign_node(db):
    return make_node(pool="cpp", name="foreign-node")


@pytest.fixture
def mariadb():
    if not ON_MARIADB:
        pytest.skip("needs MariaDB/MySQL")
    return connection
