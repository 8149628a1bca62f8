"""`POST join` through Django's stack: throttled, one answer for every bad code."""

import pytest

pytestmark = pytest.mark.django_db

JOIN = "/api/v1/internal/judgers/join"
BODY = {"joinCode": "no-such-code-0000000000000", "agentVersion": "1", "runtimeSpec": "python-r1", "localSlots": 1}


def test_a_refused_code_is_401_with_a_challenge(client):
    refused = client.post(JOIN, BODY, content_type="application/json")
    assert (refused.status_code, refused.json()["error"]) == (401, "invalid_join_code")
    assert refused["WWW-Authenticate"] == 'Bearer realm="kece-judgers"'


def test_join_is_throttled_per_address(client, settings):
    settings.KECE_JOIN_THROTTLE = "3/min"
    answers = [client.post(JOIN, BODY, content_type="application/json") for _ in range(4)]
    assert [a.status_code for a in answers] == [401, 401, 401, 429]
    assert answers[-1].json()["error"] == "throttled"
    assert int(answers[-1]["Retry-After"]) > 0


def test_a_client_cannot_escape_the_throttle_by_rotating_x_forwarded_for(client, settings):
    settings.KECE_JOIN_THROTTLE = "3/min"
    answers = [client.post(JOIN, BODY, content_type="application/json", HTTP_X_FORWARDED_FOR=f"203.0.113.{i}")
               for i in range(4)]
    assert [a.status_code for a in answers] == [401, 401, 401, 429]


def test_behind_one_proxy_the_address_it_forwards_is_throttled(client, settings):
    settings.KECE_JOIN_THROTTLE = "3/min"
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}

    def join(forwarded):
        return client.post(JOIN, BODY, content_type="application/json", HTTP_X_FORWARDED_FOR=forwarded).status_code

    # What the client wrote itself comes first; the proxy's own entry is the last.
    assert [join(f"198.51.100.{i}, 203.0.113.7") for i in range(4)] == [401, 401, 401, 429]
    assert join("203.0.113.8") == 401


@pytest.mark.parametrize("body", [
    {}, {"joinCode": ""}, {**BODY, "localSlots": -1}, {**BODY, "localSlots": "many"}, [1, 2], "text",
])
def test_malformed_joins_are_400_invalid(client, body):
    response = client.post(JOIN, body, content_type="application/json")
    assert (response.status_code, response.json()["error"]) == (400, "invalid")


def test_a_body_over_one_mebibyte_is_413(client):
    response = client.post(JOIN, {**BODY, "agentVersion": "x" * (1024 * 1024 + 10)},
                           content_type="application/json")
    assert (response.status_code, response.json()["error"]) == (413, "too_large")


def test_with_the_cache_unreachable_joins_are_answered_and_still_throttled(client, settings, caplog):
    """Redis away: a join is answered as ever (here 401, a code that does not exist), not
    503, and the address is still held to its rate, in the process's memory meanwhile."""
    from nodes.api_node import JoinThrottle
    from tests.live import free_port

    JoinThrottle._in_process.clear()  # a process's own counts outlive a test: start from none
    settings.CACHES = {"default": {"BACKEND": "kece.cache.SharedClientRedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
                                   "OPTIONS": dict(settings.CACHE_LINK_OPTIONS)}}
    settings.KECE_JOIN_THROTTLE = "3/min"
    answers = [client.post(JOIN, BODY, content_type="application/json", REMOTE_ADDR="192.0.2.77")
               for _ in range(4)]
    assert [a.status_code for a in answers] == [401, 401, 401, 429]
    assert answers[-1].json()["error"] == "throttled"
    assert "joins counted in this process: the cache cannot be reached" in caplog.text


def _registered():
    import time

    from django.utils import timezone

    from nodes.services import node_register
    from tests.factories import HostGroupFactory

    node, issued = node_register(name=f"n-{time.monotonic_ns()}", pool="python", base_url="https://127.0.0.1",
                                 host_group_id=HostGroupFactory().pk, max_slots=2, actor=None, now=timezone.now())
    return node, issued.code


def _node_call(client, path, credential, session, body):
    return client.post(f"/api/v1/internal/judgers/{path}", body, content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {credential}", HTTP_X_JUDGE_SESSION=str(session))


HEARTBEAT = {"agentVersion": "1", "runtimeSpec": "python-r1", "localSlots": 1, "running": 0,
             "health": {"ok": True, "checks": {}}}
KEY = "k" * 32


def test_a_join_whose_answer_was_lost_is_made_again_with_its_key_and_the_lost_credential_stops_working(client):
    node, code = _registered()
    body = {**BODY, "joinCode": code, "joinKey": KEY, "joinAttempt": 1}
    lost = client.post(JOIN, body, content_type="application/json").json()  # never reached the agent
    again = client.post(JOIN, {**body, "joinAttempt": 2}, content_type="application/json")
    assert again.status_code == 201
    answer = again.json()
    assert answer["nodeId"] == node.pk and answer["credential"] != lost["credential"]
    assert answer["sessionEpoch"] == lost["sessionEpoch"] + 1
    assert _node_call(client, "heartbeat", lost["credential"], lost["sessionEpoch"], HEARTBEAT).status_code == 401
    assert _node_call(client, "heartbeat", answer["credential"], answer["sessionEpoch"], HEARTBEAT).status_code == 200
    # Heard from with it now: the code is spent for good, key or not.
    refused = client.post(JOIN, {**body, "joinAttempt": 3}, content_type="application/json")
    assert (refused.status_code, refused.json()["error"]) == (401, "invalid_join_code")


def test_an_earlier_try_of_a_join_arriving_late_does_not_undo_the_later_one(client):
    node, code = _registered()
    body = {**BODY, "joinCode": code, "joinKey": KEY}
    client.post(JOIN, {**body, "joinAttempt": 1}, content_type="application/json")  # its answer lost
    held = client.post(JOIN, {**body, "joinAttempt": 2}, content_type="application/json").json()
    late = client.post(JOIN, {**body, "joinAttempt": 1}, content_type="application/json")  # the first, delayed
    assert (late.status_code, late.json()["error"]) == (401, "invalid_join_code")
    assert _node_call(client, "heartbeat", held["credential"], held["sessionEpoch"], HEARTBEAT).status_code == 200


def test_a_session_opened_with_the_credential_ends_the_joins_retries(client):
    node, code = _registered()
    body = {**BODY, "joinCode": code, "joinKey": KEY, "joinAttempt": 1}
    joined = client.post(JOIN, body, content_type="application/json").json()
    opened = client.post("/api/v1/internal/judgers/session", {"agentVersion": "1", "runtimeSpec": "python-r1",
                                                              "localSlots": 1}, content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {joined['credential']}")
    assert opened.status_code == 200
    refused = client.post(JOIN, {**body, "joinAttempt": 2}, content_type="application/json")
    assert (refused.status_code, refused.json()["error"]) == (401, "invalid_join_code")


@pytest.mark.parametrize("then", ["other key", "no key", "revoked", "new code", "expired"])
def test_a_used_code_joins_again_only_with_its_own_key_while_it_is_still_valid(client, then):
    from datetime import timedelta

    from django.utils import timezone

    from nodes.models import JoinCode, JudgeNode
    from nodes.services import node_issue_join_code

    node, code = _registered()
    body = {**BODY, "joinCode": code, "joinKey": KEY, "joinAttempt": 1}
    assert client.post(JOIN, body, content_type="application/json").status_code == 201
    body["joinAttempt"] = 2
    if then == "other key":
        body["joinKey"] = "x" * 32
    elif then == "no key":
        del body["joinKey"]
    elif then == "revoked":
        JudgeNode.objects.filter(pk=node.pk).update(revoked_at=timezone.now())
    elif then == "new code":
        node_issue_join_code(node_id=node.pk, actor=None, now=timezone.now())
    else:
        JoinCode.objects.filter(node=node).update(expires_at=timezone.now() - timedelta(seconds=1))
    refused = client.post(JOIN, body, content_type="application/json")
    assert (refused.status_code, refused.json()["error"]) == (401, "invalid_join_code")


@pytest.mark.parametrize("field", [{"joinKey": "short"}, {"joinKey": "x" * 129}, {"joinKey": "with space in it 123"},
                                   {"joinKey": 7}, {"joinKey": KEY, "joinAttempt": 0},
                                   {"joinKey": KEY, "joinAttempt": "two"}, {"joinKey": KEY, "joinAttempt": 2**31}])
def test_a_join_key_or_attempt_of_another_shape_is_invalid(client, field):
    node, code = _registered()
    refused = client.post(JOIN, {**BODY, "joinCode": code, **field}, content_type="application/json")
    assert (refused.status_code, refused.json()["error"]) == (400, "invalid")
    assert client.post(JOIN, {**BODY, "joinCode": code}, content_type="application/json").status_code == 201, \
        "the refused call did not use the code"
