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
