"""The console's live channel: who may open it, what is published, and that a burst of
changes reaches a page as one message."""

import asyncio
import logging

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from judging.models import JudgeJob
from kece.asgi import application
from nodes.console import live
from nodes.models import JudgeNode
from nodes.services import AgentReport, HeartbeatReport, node_heartbeat
from pools.registry import POOLS
from tests.api.helpers import make_admin, make_teacher
from tests.factories import make_node
from tests.judging.helpers import claim, submit

PATH = "/ws/admin/judgers"
ORIGIN = (b"origin", b"http://127.0.0.1")


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _cookie(user, client: Client | None = None) -> tuple[bytes, bytes]:
    client = client or _signed_in(user)
    return b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}".encode()


def _socket(*headers):
    return WebsocketCommunicator(application, PATH, headers=[(b"host", b"127.0.0.1"), *headers])


async def _open_live(cookie) -> WebsocketCommunicator:
    """An admin's console socket, connected and told it is live."""
    socket = _socket(ORIGIN, cookie)
    connected, _ = await socket.connect()
    assert connected and await socket.receive_json_from(timeout=3) == {"type": "live",
                                                                      "silentAfterMs": live.silent_after_ms()}
    return socket


@pytest.fixture
def standing_checks(monkeypatch):
    """Set each time a console socket's standing check marks the console watched."""
    import threading

    checked = threading.Event()
    mark = live.mark_watched

    def noted_mark():
        mark()
        checked.set()

    monkeypatch.setattr(live, "mark_watched", noted_mark)
    return checked


async def _next_check(checked, timeout: float = 5) -> bool:
    """Whether a standing check marks the console within `timeout` from now."""
    checked.clear()
    return await asyncio.to_thread(checked.wait, timeout)


@pytest.fixture
def memory_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who", ["anonymous", "teacher"])
def test_a_non_admin_is_refused(who, memory_layer):
    headers = [ORIGIN] if who == "anonymous" else [ORIGIN, _cookie(make_teacher())]

    async def scenario():
        socket = _socket(*headers)
        connected, code = await socket.connect()
        await socket.disconnect()
        return connected, code

    connected, code = async_to_sync(scenario)()
    assert not connected and code == 4403


@pytest.mark.django_db(transaction=True)
def test_without_redis_the_socket_is_refused_and_the_page_may_try_again(settings):
    from channels.layers import channel_layers

    from tests.live import free_port

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"]}}}
    channel_layers.backends.clear()
    cookie = _cookie(make_admin())

    async def scenario():
        socket = _socket(ORIGIN, cookie)
        connected, code = await socket.connect(timeout=30)
        # What the page sees is that answer; the consumer's own loop on the channel layer fails
        # after it (without Redis) and is only logged by the server.
        socket.future.cancel()
        return connected, code

    try:
        assert async_to_sync(scenario)() == (False, 1011)
    finally:
        channel_layers.backends.clear()


@pytest.mark.django_db(transaction=True)
def test_another_sites_page_cannot_open_it_with_an_admins_cookie(memory_layer):
    cookie = _cookie(make_admin())

    async def scenario():
        socket = _socket((b"origin", b"https://evil.example"), cookie)
        connected, _ = await socket.connect()
        await socket.disconnect()
        return connected

    assert async_to_sync(scenario)() is False


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("origin", ["http://127.0.0.1:8080", "https://127.0.0.1", "http://127.0.0.1.evil.example",
                                    "null"])
def test_a_page_of_another_origin_on_the_same_host_cannot_open_it(memory_layer, origin):
    """Same origin means the same scheme, host and port: another port of the host (another
    program's page) or the https site talking to a plain socket is another origin."""
    cookie = _cookie(make_admin())

    async def scenario():
        socket = _socket((b"origin", origin.encode()), cookie)
        connected, _ = await socket.connect()
        await socket.disconnect()
        return connected

    assert async_to_sync(scenario)() is False


@pytest.mark.django_db(transaction=True)
def test_an_origin_the_settings_trust_may_open_it(memory_layer, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://judge.example.org"]
    cookie = _cookie(make_admin())

    async def scenario():
        socket = _socket((b"origin", b"https://judge.example.org"), cookie)
        connected, _ = await socket.connect()
        greeting = await socket.receive_json_from() if connected else None
        await socket.disconnect()
        return connected, greeting

    assert async_to_sync(scenario)() == (True, {"type": "live", "silentAfterMs": live.silent_after_ms()})


def _take_permission(user, client):
    user.user_permissions.clear()


def _deactivate(user, client):
    user.is_active = False
    user.save(update_fields=["is_active"])


def _sign_out(user, client):
    client.logout()  # the session is flushed, as the page's "Sign out" does


def _sign_out_everywhere(user, client):
    user.set_password("a new password")  # every session's hash stops verifying
    user.save(update_fields=["password"])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("lose_standing", [_take_permission, _deactivate, _sign_out, _sign_out_everywhere],
                         ids=lambda f: f.__name__.strip("_"))
def test_an_open_socket_is_closed_within_an_interval_once_its_admin_loses_standing(memory_layer, settings,
                                                                                   lose_standing):
    settings.KECE_CONSOLE_PUBLISH_MS = 200
    admin = make_admin()
    client = _signed_in(admin)

    async def scenario():
        socket = await _open_live(_cookie(admin, client))
        # Several intervals pass with the admin's standing intact: the socket stays open.
        assert await socket.receive_nothing(timeout=1)
        await database_sync_to_async(lose_standing)(admin, client)
        closed = await socket.receive_output(timeout=5)
        await socket.disconnect()
        return closed

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4403}


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_changes_reaches_an_admin_as_one_coalesced_message(memory_layer, settings):
    settings.KECE_CONSOLE_PUBLISH_MS = 1000
    cookie = _cookie(make_admin())

    async def scenario():
        socket = await _open_live(cookie)
        layer = get_channel_layer()
        # The first change goes out at once; the next 29, inside the same second, wait and go
        # out together.
        for index in range(30):
            await layer.group_send(live.GROUP, {"type": "fleet.changed", "pools": [["python", "cpp", "java"][index % 3]]})
        first = await socket.receive_json_from(timeout=3)
        second = await socket.receive_json_from(timeout=3)
        quiet = await socket.receive_nothing(timeout=1.5)
        await socket.disconnect()
        return first, second, quiet

    first, second, quiet = async_to_sync(scenario)()
    assert first == {"type": "changed", "pools": ["python"]}
    assert second == {"type": "changed", "pools": ["cpp", "java", "python"]}
    assert quiet  # thirty changes, two messages


@pytest.mark.django_db(transaction=True)
def test_while_nothing_changes_an_open_page_is_told_the_server_is_alive(memory_layer, settings):
    settings.KECE_CONSOLE_PUBLISH_MS = 1000
    cookie = _cookie(make_admin())

    async def scenario():
        socket = await _open_live(cookie)
        await get_channel_layer().group_send(live.GROUP, {"type": "fleet.alive"})
        message = await socket.receive_json_from(timeout=3)
        await socket.disconnect()
        return message

    assert async_to_sync(scenario)() == {"type": "alive"}


@pytest.mark.django_db
def test_the_step_says_it_is_alive_every_few_intervals_while_nothing_changes(monkeypatch, settings, student,
                                                                             problem):
    settings.KECE_CONSOLE_PUBLISH_MS = 1000
    sent = []
    monkeypatch.setattr(live, "_group_send", lambda message, what: sent.append(message["type"]))
    make_node(pool="python", name="py-1")
    live.mark_watched()
    start = timezone.now()

    def step_at(seconds: float) -> list[str]:
        sent.clear()
        live.publish_step(now=start + timezone.timedelta(seconds=seconds))
        return list(sent)

    assert step_at(0) == ["fleet.changed"]  # the first step knows nothing of what the pages loaded
    assert [step_at(second) for second in (1, 2)] == [[], []]
    assert step_at(3) == ["fleet.alive"]  # three intervals without a word
    assert [step_at(second) for second in (4, 5)] == [[], []]
    submit(student, problem, language="python")
    assert step_at(6) == ["fleet.changed"]  # a change says as much
    assert [step_at(second) for second in (7, 8)] == [[], []]
    assert step_at(9) == ["fleet.alive"]
    assert step_at(5) == ["fleet.alive"]  # a step on a clock behind the last one's is not kept quiet


@pytest.mark.django_db
def test_a_heartbeat_that_changes_nothing_publishes_nothing(monkeypatch, student, problem):
    published = []
    monkeypatch.setattr(live, "publish", published.append)
    node, identity = make_node(pool="python", name="py-1")
    make_node(pool="cpp", name="cpp-1")
    live.mark_watched()
    live.publish_step()  # the first step: every pool
    published.clear()
    beat = HeartbeatReport(AgentReport("test", "python-r1", 4), running=0, health_ok=True, health_checks={})
    node_heartbeat(node_id=node.pk, credential_digest_value=node.credential_digest, session_epoch=1, beat=beat,
                   now=timezone.now())
    assert live.publish_step() == [] and published == []


@pytest.mark.django_db
def test_a_change_before_the_first_step_reaches_the_pages_open_then(monkeypatch):
    # A page loaded, then a node joined, and only then did the first step run (a new server,
    # an emptied cache): it cannot know the page's figures are stale, so it says every pool
    # changed. Otherwise the page would show "Waiting for the agent" until its slow refresh.
    published = []
    monkeypatch.setattr(live, "publish", published.append)
    make_node(pool="python", name="py-1")
    make_node(pool="cpp", name="cpp-1")
    live.mark_watched()
    assert live.publish_step() == sorted(POOLS)
    assert live.publish_step() == [] and published == [sorted(POOLS)]


@pytest.mark.django_db
def test_what_the_console_shows_live_publishes_its_pool(monkeypatch, student, problem):
    published = []
    monkeypatch.setattr(live, "publish", published.append)
    node, identity = make_node(pool="python", name="py-1")
    live.mark_watched()
    live.publish_step()  # the first step: every pool
    published.clear()
    submit(student, problem, language="python")
    assert live.publish_step() == ["python"]  # a submission waits
    [job] = claim(identity)
    assert live.publish_step() == ["python"]  # a lease is taken: running 1 / 4
    JudgeJob.objects.filter(pk=job.pk).update(state="QUEUED", node=None)
    assert live.publish_step() == ["python"]  # and returned
    JudgeNode.objects.filter(pk=node.pk).update(health_ok=False)
    assert live.publish_step() == ["python"]  # ready → unhealthy
    assert published == [["python"]] * 4


@pytest.mark.django_db(transaction=True)
def test_a_publish_from_another_thread_reaches_pages_on_the_in_memory_layer(memory_layer):
    cookie = _cookie(make_admin())

    async def scenario():
        socket = await _open_live(cookie)
        # The in-process scheduler publishes from its own thread.
        await asyncio.get_running_loop().run_in_executor(None, live.publish, ["mysql"])
        message = await socket.receive_json_from(timeout=3)
        await socket.disconnect()
        return message

    assert async_to_sync(scenario)() == {"type": "changed", "pools": ["mysql"]}


@pytest.mark.django_db
def test_with_no_console_open_the_step_reads_nothing_until_a_page_listens(monkeypatch, student, problem,
                                                                          django_assert_num_queries):
    from django.core.cache import cache

    published = []
    monkeypatch.setattr(live, "publish", published.append)
    make_node(pool="python", name="py-1")
    live.mark_watched()
    live.publish_step()  # the first step: every pool
    published.clear()
    cache.delete(live.WATCHED_KEY)  # the last page closed, its mark lapsed
    submit(student, problem, language="python")
    with django_assert_num_queries(0):
        assert live.publish_step() == []
    live.mark_watched()  # a page opens
    assert live.publish_step() == ["python"] and published == [["python"]]


@pytest.mark.django_db(transaction=True)
def test_an_open_console_socket_marks_the_console_watched_until_it_lapses(memory_layer, settings, monkeypatch):
    import threading

    from django.core.cache import cache

    settings.KECE_CONSOLE_PUBLISH_MS = 200
    cookie = _cookie(make_admin())
    marks = []
    marked = threading.Event()
    mark = live.mark_watched

    def noted_mark():
        mark()
        marks.append(cache.get(live.WATCHED_KEY))
        marked.set()

    monkeypatch.setattr(live, "mark_watched", noted_mark)

    async def scenario():
        socket = await _open_live(cookie)
        first = await asyncio.to_thread(marked.wait, 5)  # the check that runs beside the live message
        marked.clear()
        await database_sync_to_async(cache.delete)(live.WATCHED_KEY)
        again = await asyncio.to_thread(marked.wait, 5)  # the socket's next standing check
        await socket.disconnect()
        return first, again

    first, again = async_to_sync(scenario)()
    assert first and again and all(marks), "marked at the connect, and again at each standing check"


@pytest.mark.django_db(transaction=True)
def test_a_socket_whose_group_membership_was_lost_hears_the_console_again_after_its_next_check(
        memory_layer, settings, standing_checks):
    """A Redis failover may lose the group's members the old primary had not passed on: each
    standing check adds the socket again."""
    settings.KECE_CONSOLE_PUBLISH_MS = 200
    cookie = _cookie(make_admin())

    async def scenario():
        socket = await _open_live(cookie)
        assert await _next_check(standing_checks)
        get_channel_layer().groups.clear()  # what the new primary never had
        # Two checks on: the first one after the loss has rejoined by the time the next marks.
        assert await _next_check(standing_checks) and await _next_check(standing_checks)
        live.publish(["python"])
        message = await socket.receive_json_from(timeout=3)
        await socket.disconnect()
        return message

    assert async_to_sync(scenario)() == {"type": "changed", "pools": ["python"]}


@pytest.mark.django_db(transaction=True)
def test_a_socket_whose_channel_layer_fails_under_it_stops_checking_and_leaves_its_group(
        memory_layer, settings, standing_checks):
    """Its disconnect never runs then; without this its standing checks would go on marking the
    console watched, and adding a channel nobody reads to the group, for the process's life."""
    settings.KECE_CONSOLE_PUBLISH_MS = 100
    cookie = _cookie(make_admin())

    async def scenario():
        socket = await _open_live(cookie)
        assert await _next_check(standing_checks)
        layer = get_channel_layer()
        [waiting] = layer.channels.values()  # the queue the consumer's receive waits on
        waiting.put_nowait(None)  # not a message: that receive fails, and the consumer ends
        with pytest.raises(TypeError):
            await socket.wait(3)
        # Ten intervals without a check: the task is gone (it checks once an interval).
        still_checking = await _next_check(standing_checks, 10 * settings.KECE_CONSOLE_PUBLISH_MS / 1000)
        return still_checking, dict(layer.groups)

    still_checking, groups = async_to_sync(scenario)()
    assert not still_checking
    assert not groups.get(live.GROUP)


@pytest.mark.parametrize("refusal", [
    RuntimeError("Unexpected ASGI message 'websocket.send', after sending 'websocket.close' or response already "
                 "completed."),
    OSError("the client disconnected"),  # uvicorn's ClientDisconnected: the peer's close not yet read
])
def test_a_change_for_a_page_that_has_just_left_is_dropped_without_an_error(caplog, refusal):
    # The page followed a link: the server refuses a write to the closed socket before
    # channels has handed the consumer its disconnect. The coalesced message due then is dropped.
    from nodes.console.consumers import JudgersConsumer

    async def closed_socket(message):
        raise refusal

    async def scenario():
        consumer = JudgersConsumer()
        consumer.base_send = closed_socket
        consumer.pending, consumer.last_sent = set(), float("-inf")
        await consumer.fleet_changed({"pools": ["python"]})
        await consumer.flush
        await consumer.fleet_alive({})
        return consumer.flush

    with caplog.at_level("WARNING"):
        assert async_to_sync(scenario)() is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_any_other_refusal_to_send_is_not_hidden():
    from nodes.console.consumers import JudgersConsumer

    async def broken(message):
        raise RuntimeError("Expected ASGI message 'websocket.accept' or 'websocket.close', but got 'websocket.send'.")

    async def scenario():
        consumer = JudgersConsumer()
        consumer.base_send = broken
        await consumer._tell({"type": "alive"})

    with pytest.raises(RuntimeError, match="Expected ASGI message"):
        async_to_sync(scenario)()
