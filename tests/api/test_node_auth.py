"""Node authentication (`judging/auth.py`) through the real URLs: the DRF views (heartbeat,
renew, artifacts) and the result call, which may answer from the in-process identity cache."""

import pytest
from django.test import Client
from django.utils import timezone

from judging.models import JudgeJob
from judging.auth import NodePrincipal, auth_cache, bearer_secret, epoch_of, lookup_for_waiting, node_for_digest
from nodes.models import JudgeNode
from nodes.services import AgentReport, node_session_open
from tests.api.helpers import INTERNAL, error_of, heartbeat_body, node_client, send
from tests.factories import identity_of, make_node
from tests.judging.helpers import claim, submit

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("header, secret", [
    ("Bearer abc", "abc"), ("bearer abc", "abc"), ("BEARER   abc  ", "abc"),
    ("Bearer", None), ("Bearer    ", None), ("Token abc", None), ("", None), ("Bearerabc", None), (None, None),
])
def test_only_a_bearer_header_with_a_secret_names_a_credential(header, secret):
    assert bearer_secret(header) == secret


@pytest.mark.parametrize("value, epoch", [
    ("1", 1), ("0", 0), (str(2**31 - 1), 2**31 - 1), (str(2**31), None), ("-1", None), ("one", None),
    ("", None), (None, None),
])
def test_a_session_header_is_a_non_negative_32_bit_epoch(value, epoch):
    assert epoch_of(value) == epoch


def test_a_node_principal_is_never_staff_and_holds_no_permission(node_a):
    principal = NodePrincipal(node_a[0])
    assert (principal.is_staff, principal.is_superuser, principal.pk) == (False, False, None)
    assert principal.is_authenticated and not principal.has_perm("nodes.manage_judgers")
    assert principal.username == f"node:{node_a[0].pk}"


def test_a_digest_that_differs_only_in_case_matches_no_node(node_a):
    """The column's collation ignores case; the comparison after it does not."""
    node, _ = node_a
    assert node_for_digest(node.credential_digest).pk == node.pk
    assert node_for_digest(node.credential_digest.upper()) is None


# --- the DRF views: heartbeat (and renew, artifacts) ------------------------------------------------

def _heartbeat(client):
    return send(client, "POST", INTERNAL + "heartbeat", heartbeat_body())


USE_BEARER = "Use Authorization: Bearer <credential>."
UNKNOWN = "The node credential is unknown or revoked."


def _refused(response, status, error, detail):
    assert (response.status_code, response.json()) == (status, {"error": error, "detail": detail})


def test_a_heartbeat_needs_a_bearer_credential(node_a):
    node, _ = node_a
    for headers, detail in [({}, "Authentication credentials were not provided."),
                            ({"HTTP_AUTHORIZATION": f"Token {node.secret}"}, USE_BEARER),
                            ({"HTTP_AUTHORIZATION": "Bearer nope"}, UNKNOWN)]:
        response = _heartbeat(Client(**headers, HTTP_X_JUDGE_SESSION="1"))
        _refused(response, 401, "unauthenticated", detail)
        assert response["WWW-Authenticate"] == 'Bearer realm="kece-judgers"'


def test_a_heartbeat_of_a_revoked_node_is_unauthenticated(node_a):
    node, _ = node_a
    JudgeNode.objects.filter(pk=node.pk).update(revoked_at=timezone.now())
    assert error_of(_heartbeat(node_client(node, 1))) == (401, "unauthenticated")


def test_a_heartbeat_needs_the_current_open_session(node_a):
    node, _ = node_a
    _refused(_heartbeat(node_client(node)), 409, "session_superseded",
             "X-Judge-Session is missing or not the node's current session; open a new session.")
    assert error_of(_heartbeat(node_client(node, 2))) == (409, "session_superseded")
    assert _heartbeat(node_client(node, 1)).status_code == 200
    JudgeNode.objects.filter(pk=node.pk).update(session_open=False)
    assert error_of(_heartbeat(node_client(node, 1))) == (409, "session_superseded")


def test_a_renew_needs_the_current_session(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    [job] = claim(identity)
    body = {"leases": [{"jobId": job.pk, "leaseEpoch": job.lease_epoch}]}
    assert error_of(send(node_client(node, 2), "POST", INTERNAL + "jobs/renew", body)) == (409, "session_superseded")
    [answer] = send(node_client(node, 1), "POST", INTERNAL + "jobs/renew", body).json()["leases"]
    assert answer["ok"] is True


# --- the result call: authenticated from the identity cache -------------------------------------------

def _result(node, session, job, **extra):
    client = node_client(node, session)
    body = {"leaseEpoch": job.lease_epoch, "outcome": "RELEASED", **extra}
    return send(client, "POST", INTERNAL + f"jobs/{job.pk}/result", body)


@pytest.fixture
def leased(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    submit(student, problem)
    [job] = claim(identity)
    return node, job


def test_a_result_needs_a_bearer_credential_of_a_known_node(leased):
    node, job = leased
    for header, detail in [("", USE_BEARER), (f"Token {node.secret}", USE_BEARER),
                           ("Bearer not-a-credential", UNKNOWN)]:
        response = send(Client(HTTP_AUTHORIZATION=header, HTTP_X_JUDGE_SESSION="1"), "POST",
                        INTERNAL + f"jobs/{job.pk}/result", {"leaseEpoch": job.lease_epoch, "outcome": "RELEASED"})
        _refused(response, 401, "unauthenticated", detail)
        assert response["WWW-Authenticate"] == 'Bearer realm="kece-judgers"'
    assert JudgeJob.objects.get(pk=job.pk).settled_status == ""


@pytest.mark.parametrize("session", [None, 0, 2, "x"])
def test_a_result_needs_the_current_session(leased, session):
    node, job = leased
    assert error_of(_result(node, session, job)) == (409, "session_superseded")


def test_a_result_is_accepted_from_a_new_session_the_cache_has_not_seen_yet(leased):
    """Another process opened the session: this one's cached identity is behind, and is
    read again before the call is refused."""
    node, job = leased
    assert _result(node, 1, job, outcome="INFRA_ERROR", error="x", message="").json()["status"] == "requeued"
    node_session_open(node_id=node.pk, credential_digest_value=node.credential_digest,
                      report=AgentReport("test", "python-r1", 4), now=timezone.now())
    [job] = claim(identity_of(node))
    response = _result(node, 2, job)
    assert response.json() == {"status": "requeued"}
    assert error_of(_result(node, 1, job)) == (409, "session_superseded")


def test_a_result_is_accepted_once_a_closed_session_is_open_again(leased):
    node, job = leased
    JudgeNode.objects.filter(pk=node.pk).update(session_open=False)
    assert error_of(_result(node, 1, job)) == (409, "session_superseded")  # cached as closed
    JudgeNode.objects.filter(pk=node.pk).update(session_open=True)
    assert _result(node, 1, job).json() == {"status": "requeued"}


def test_a_revoked_credential_is_refused_even_while_the_cache_still_knows_it(leased):
    node, job = leased
    assert lookup_for_waiting(node.credential_digest) is not None
    JudgeNode.objects.filter(pk=node.pk).update(revoked_at=timezone.now())
    assert error_of(_result(node, 1, job)) == (401, "unauthenticated")
    assert JudgeJob.objects.get(pk=job.pk).settled_status == ""


def test_a_known_credential_is_answered_from_the_cache(leased, django_assert_num_queries):
    node, _ = leased
    lookup_for_waiting(node.credential_digest)
    with django_assert_num_queries(0):
        assert lookup_for_waiting(node.credential_digest).node_id == node.pk
    with django_assert_num_queries(1):
        assert lookup_for_waiting(node.credential_digest, fresh=True).session_epoch == 1


def test_a_credential_found_revoked_is_dropped_from_the_cache(leased):
    node, _ = leased
    assert lookup_for_waiting(node.credential_digest).node_id == node.pk
    JudgeNode.objects.filter(pk=node.pk).update(revoked_at=timezone.now())
    assert lookup_for_waiting(node.credential_digest, fresh=True) is None
    assert auth_cache.get(node.credential_digest) is None
    assert lookup_for_waiting(node.credential_digest) is None


def test_the_identity_a_cached_answer_gives_names_the_node_its_group_and_session(leased):
    node, _ = leased
    auth = lookup_for_waiting(node.credential_digest)
    identity = auth.identity(7)
    assert (identity.node_id, identity.credential_digest, identity.session_epoch, identity.host_group_id) == (
        node.pk, node.credential_digest, 7, node.host_group_id)
    assert (auth.pool, auth.desired_state, auth.session_open) == ("python", "ENABLED", True)


def test_a_node_of_another_pool_is_not_confused_with_this_one(leased):
    node, job = leased
    foreign, _ = make_node(pool="cpp")
    assert error_of(_result(foreign, 1, job)) == (409, "lease_lost")


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("free_slots", [0, 1])
def test_a_claim_from_an_old_or_closed_session_is_refused_before_it_waits(free_slots):
    """The claim authenticates on the database pool, another connection: committed data."""
    node, _ = make_node(pool="python")
    body = {"freeSlots": free_slots, "waitMs": 60000}
    assert error_of(send(node_client(node, 2), "POST", INTERNAL + "jobs/claim", body)) == (409, "session_superseded")
    JudgeNode.objects.filter(pk=node.pk).update(session_open=False)
    auth_cache.drop(node.credential_digest)
    assert error_of(send(node_client(node, 1), "POST", INTERNAL + "jobs/claim", body)) == (409, "session_superseded")
