"""Who may call what: admin, teacher, student and anonymous × every admin and user endpoint,
over a Django session and over `Authorization: Token`."""

import pytest
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client
from django.utils import timezone

from judging.models import DbSubmission, JudgeJob, Submission
from nodes.models import JoinCode, JudgeHostGroup, JudgeNode, NodeAudit, NodeCheck
from tests.api.helpers import (
    ADMIN, error_of, make_admin, make_teacher, person, send, session_client, token_client,
)
from tests.factories import HostGroupFactory, make_node, make_problem
from tests.judging.helpers import submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db, settings):
    settings.KECE_PROBE_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    people = {"admin": make_admin(), "teacher": make_teacher(), "student": person("student"),
              "other_student": person("other-student")}
    group = HostGroupFactory(name="rack-1")
    node, _ = make_node(pool="python", host_group=group, name="py-1")
    problem = make_problem(languages=("python",))
    submission = submit(people["student"], problem)
    check = NodeCheck.objects.create(node=node, status=NodeCheck.Status.PASSED, config_revision=1,
                                     started_at=timezone.now(), finished_at=timezone.now())
    return {"people": people, "group": group, "node": node, "problem": problem, "submission": submission,
            "check": check}


def state_of_everything():
    """What a refused request must not have changed."""
    return (
        list(JudgeNode.objects.order_by("id").values_list("id", "name", "revision", "desired_state",
                                                          "credential_digest", "session_epoch")),
        list(JudgeHostGroup.objects.order_by("id").values_list("id", "name", "revision", "total_slots")),
        list(JoinCode.objects.order_by("id").values_list("id", "superseded_at")),
        list(NodeCheck.objects.order_by("id").values_list("id", "status")),
        NodeAudit.objects.count(),
        list(JudgeJob.objects.order_by("id").values_list("id", "state", "generation")),
        list(Submission.objects.order_by("id").values_list("id", "deleted_at")),
        DbSubmission.objects.count(),
    )


# (method, path, body, status for an admin); {node}, {group}, {submission} fill in from `world`.
ADMIN_ENDPOINTS = [
    ("GET", "judgers", None, 200),
    ("POST", "judgers", {"name": "py-2", "pool": "python", "baseUrl": "https://10.0.0.2", "hostGroupId": "{group}",
                         "maxSlots": 2}, 201),
    ("GET", "judgers/{node}", None, 200),
    ("PATCH", "judgers/{node}", {"revision": 1, "maxSlots": 3}, 200),
    ("POST", "judgers/{node}/join-code", None, 201),
    ("POST", "judgers/{node}/revoke", {"reason": "test"}, 200),
    ("POST", "judgers/{node}/rotate", None, 201),
    ("POST", "judgers/{node}/checks", None, 202),
    ("GET", "judgers/{node}/checks/{check}", None, 200),
    ("GET", "pools", None, 200),
    ("GET", "host-groups", None, 200),
    ("POST", "host-groups", {"name": "rack-2", "hostId": "m-2", "totalSlots": 4}, 201),
    ("PATCH", "host-groups/{group}", {"revision": 1, "totalSlots": 3}, 200),
    ("POST", "submissions/ALGO/{submission}/rejudge", None, 202),
    ("DELETE", "submissions/ALGO/{submission}", None, 204),
]
ENDPOINT_IDS = [f"{m} {p}" for m, p, _, _ in ADMIN_ENDPOINTS]


def fill(world, path, body):
    ids = {"node": world["node"].pk, "group": world["group"].pk, "submission": world["submission"].pk,
           "check": world["check"].pk}
    path = path.format(**ids)
    if body is not None:
        body = {k: (int(v.format(**ids)) if isinstance(v, str) and v.startswith("{") else v) for k, v in body.items()}
    return ADMIN + path, body


CLIENTS = {"session": session_client, "token": token_client}


@pytest.mark.parametrize("method, path, body, status", ADMIN_ENDPOINTS, ids=ENDPOINT_IDS)
@pytest.mark.parametrize("auth", ["session", "token"])
def test_an_admin_may_call_every_admin_endpoint(world, auth, method, path, body, status):
    url, body = fill(world, path, body)
    response = send(CLIENTS[auth](world["people"]["admin"]), method, url, body)
    assert response.status_code == status, response.content


@pytest.mark.parametrize("method, path, body, status", ADMIN_ENDPOINTS, ids=ENDPOINT_IDS)
@pytest.mark.parametrize("role", ["teacher", "student"])
@pytest.mark.parametrize("auth", ["session", "token"])
def test_teachers_and_students_are_forbidden_every_admin_endpoint(world, auth, role, method, path, body, status):
    url, body = fill(world, path, body)
    before = state_of_everything()
    response = send(CLIENTS[auth](world["people"][role]), method, url, body)
    assert error_of(response) == (403, "forbidden")
    assert "manage_judgers" in response.json()["detail"]
    assert state_of_everything() == before


@pytest.mark.parametrize("method, path, body, status", ADMIN_ENDPOINTS, ids=ENDPOINT_IDS)
def test_anonymous_callers_are_unauthenticated_on_every_admin_endpoint(world, method, path, body, status):
    url, body = fill(world, path, body)
    before = state_of_everything()
    response = send(Client(), method, url, body)
    assert error_of(response) == (401, "unauthenticated")
    assert response["WWW-Authenticate"].startswith("Token")
    assert state_of_everything() == before


@pytest.mark.parametrize("header", ["Token not-a-real-token", "Token", "Token a b", "Bearer credential-1-python"])
def test_a_bad_authorization_header_is_unauthenticated_not_anonymous_access(world, header):
    for method, path, body, _ in ADMIN_ENDPOINTS[:3]:
        url, body = fill(world, path, body)
        response = send(Client(HTTP_AUTHORIZATION=header), method, url, body)
        assert error_of(response) == (401, "unauthenticated"), (header, method, path)
    response = send(Client(HTTP_AUTHORIZATION=header), "POST", "/api/v1/submissions",
                    {"problemId": world["problem"].pk, "language": "python", "code": "print(1)"})
    assert error_of(response) == (401, "unauthenticated")


def test_a_deactivated_admin_is_refused(world):
    admin = world["people"]["admin"]
    token = token_client(admin)
    session = session_client(admin)
    admin.is_active = False
    admin.save()
    assert error_of(token.get(ADMIN + "judgers")) == (401, "unauthenticated")
    assert error_of(session.get(ADMIN + "judgers")) == (401, "unauthenticated")


def test_a_superuser_is_an_admin_without_the_explicit_permission(world):
    root = person("root", is_superuser=True, is_staff=True)
    assert token_client(root).get(ADMIN + "judgers").status_code == 200


# --- user endpoints ------------------------------------------------------------------------------

@pytest.mark.parametrize("role", ["admin", "teacher", "student"])
@pytest.mark.parametrize("auth", ["session", "token"])
def test_every_logged_in_user_may_submit(world, auth, role):
    user = world["people"][role]
    response = send(CLIENTS[auth](user), "POST", "/api/v1/submissions",
                    {"problemId": world["problem"].pk, "language": "python", "code": "print(2)"})
    assert response.status_code == 202, response.content
    assert Submission.objects.get(pk=response.json()["submissionId"]).user == user


def test_anonymous_callers_may_not_submit(world):
    before = state_of_everything()
    response = send(Client(), "POST", "/api/v1/submissions",
                    {"problemId": world["problem"].pk, "language": "python", "code": "print(2)"})
    assert error_of(response) == (401, "unauthenticated")
    assert state_of_everything() == before


@pytest.mark.parametrize("role, status", [("student", 200), ("admin", 200), ("teacher", 404),
                                          ("other_student", 404)])
@pytest.mark.parametrize("auth", ["session", "token"])
def test_a_submission_is_readable_by_its_owner_and_admins_only(world, auth, role, status):
    submission = world["submission"]
    response = CLIENTS[auth](world["people"][role]).get(f"/api/v1/submissions/ALGO/{submission.pk}")
    assert response.status_code == status
    if status == 200:
        assert (response.json()["submissionId"], response.json()["status"]) == (submission.pk, "PENDING")
    else:
        assert response.json()["error"] == "not_found"


def test_someone_elses_submission_looks_exactly_like_a_missing_one(world):
    client = token_client(world["people"]["other_student"])
    foreign = client.get(f"/api/v1/submissions/ALGO/{world['submission'].pk}")
    missing = client.get(f"/api/v1/submissions/ALGO/{world['submission'].pk + 1000}")
    assert (foreign.status_code, foreign.json()) == (missing.status_code, missing.json())


def test_anonymous_callers_may_not_read_a_submission(world):
    response = Client().get(f"/api/v1/submissions/ALGO/{world['submission'].pk}")
    assert error_of(response) == (401, "unauthenticated")


# --- CSRF for browser sessions ---------------------------------------------------------------------

def browser(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def with_csrf(client) -> dict:
    token = _get_new_csrf_string()
    client.cookies["csrftoken"] = token
    return {"HTTP_X_CSRFTOKEN": token}


def test_a_session_submit_without_the_csrf_token_is_refused_and_with_it_accepted(world):
    client = browser(world["people"]["student"])
    body = {"problemId": world["problem"].pk, "language": "python", "code": "print(3)"}
    before = Submission.objects.count()

    refused = send(client, "POST", "/api/v1/submissions", body)
    assert error_of(refused) == (403, "forbidden") and "CSRF" in refused.json()["detail"]
    assert Submission.objects.count() == before

    accepted = send(client, "POST", "/api/v1/submissions", body, **with_csrf(client))
    assert accepted.status_code == 202
    assert Submission.objects.count() == before + 1


def test_a_session_admin_change_needs_the_csrf_token_but_a_read_does_not(world):
    client = browser(world["people"]["admin"])
    node = world["node"]
    assert client.get(ADMIN + "judgers").status_code == 200
    refused = send(client, "PATCH", ADMIN + f"judgers/{node.pk}", {"revision": 1, "maxSlots": 2})
    assert error_of(refused) == (403, "forbidden")
    assert JudgeNode.objects.get(pk=node.pk).max_slots == 4
    accepted = send(client, "PATCH", ADMIN + f"judgers/{node.pk}", {"revision": 1, "maxSlots": 2},
                    **with_csrf(client))
    assert accepted.status_code == 200 and JudgeNode.objects.get(pk=node.pk).max_slots == 2


def test_token_requests_need_no_csrf_token(world):
    client = token_client(world["people"]["admin"], enforce_csrf_checks=True)
    node = world["node"]
    assert send(client, "POST", ADMIN + f"judgers/{node.pk}/revoke", {"reason": "x"}).status_code == 200


# --- routing before authentication -----------------------------------------------------------------

@pytest.mark.parametrize("method", ["GET", "POST", "PATCH", "PUT", "DELETE"])
@pytest.mark.parametrize("path", ["/api/v1/admin/nothing", "/api/v1/admin/judgers/", "/api/v1/submissions/",
                                  "/api/v1/submissions/ALGO/abc", "/api/v1/admin/submissions/%F0%9D%95%8B/1",
                                  "/api/v1/internal/judgers/nothing"])
def test_an_unknown_api_route_is_not_found_for_every_method_even_from_a_browser_session(world, method, path):
    client = browser(world["people"]["student"])
    response = send(client, method, path, None if method == "GET" else {"x": 1})
    assert error_of(response) == (404, "not_found")


def test_the_node_api_challenges_with_bearer_not_token(world):
    response = send(Client(), "POST", "/api/v1/internal/judgers/heartbeat", {})
    assert error_of(response) == (401, "unauthenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")
