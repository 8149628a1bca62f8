from __future__ import annotations

import email.utils
import time

import pytest

from node_agent.client import ApiError, Backoff, Client, TransportError, parse_retry_after


def test_backoff_grows_exponentially_with_jitter_up_to_a_cap():
    low, high = Backoff(base=1, cap=8, rng=lambda: 0.0), Backoff(base=1, cap=8, rng=lambda: 1.0)
    assert [low.next_delay() for _ in range(6)] == [0.5, 1, 2, 4, 4, 4]
    assert [high.next_delay() for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    high.reset()
    assert high.next_delay() == 1


def test_retry_after_is_honoured():
    assert Backoff(base=0.5, rng=lambda: 0.0).next_delay(retry_after=7) == 7
    assert parse_retry_after("3") == 3.0
    when = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 < parse_retry_after(when) <= 60
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_api_errors_know_what_is_worth_retrying():
    assert ApiError(503, "unavailable").retryable and ApiError(429, "throttled").retryable
    assert not ApiError(409, "lease_lost").retryable and not ApiError(401, "unauthenticated").retryable


def test_it_speaks_the_contract_to_a_control_plane(plane):
    node_id, code = plane.register_node("cpp")
    client = Client(plane.url)
    with pytest.raises(ApiError) as refused:
        client.join(join_code="jc_nope", join_key="k" * 32, join_attempt=1, runtime_spec="cpp-r1", local_slots=1)
    assert (refused.value.status, refused.value.code) == (401, "invalid_join_code")

    joined = client.join(join_code=code, join_key="k" * 32, join_attempt=1, runtime_spec="cpp-r1", local_slots=2)
    assert joined["nodeId"] == node_id and joined["sessionEpoch"] == 1
    client.credential = joined["credential"]
    session = client.open_session(runtime_spec="cpp-r1", local_slots=2)  # no X-Judge-Session: else 400
    assert session["sessionEpoch"] == 2
    with pytest.raises(ApiError) as stale:
        client.heartbeat(session_epoch=1, body={})
    assert stale.value.code == "session_superseded"
    answer = client.claim(session_epoch=2, free_slots=1, wait_ms=0)
    assert answer["jobs"] == []
    assert client.renew(session_epoch=2, leases=[{"jobId": 999, "leaseEpoch": 1,
                                                   "progress": {"phase": "JUDGING", "testcase": 1}}]) == \
        {"leases": [{"jobId": 999, "ok": False, "error": "lease_lost"}]}
    with pytest.raises(ValueError):
        client.renew(session_epoch=2, leases=[{}] * 65)


def test_an_unreachable_server_is_a_transport_error():
    client = Client("http://127.0.0.1:9", timeout=2)
    with pytest.raises(TransportError):
        client.join(join_code="x", join_key="k" * 32, join_attempt=1, runtime_spec="cpp-r1", local_slots=1)
