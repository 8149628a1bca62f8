"""The served OpenAPI schema (`/api/schema/`) against the frozen contract (API.md): every
operation, its success and error statuses, its security, and the fields it names."""

import re

import pytest
from django.test import Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

NODE = "/api/v1/internal/judgers/"
ADMIN = "/api/v1/admin/"
ADMIN_ERRORS = {401, 403}
USER_ERRORS = {401}

# (method, path with {} for each path parameter): (success status, error statuses) — API.md:
# its tables, and its conventions for what an operation's shape implies (a body or a query:
# 400; a path parameter: 404; a session header: 409; a browser session's unsafe request:
# 403 on a CSRF failure). Every operation can also answer 413 and 503 (ANY_ERRORS).
ANY_ERRORS = {413, 503}
CONTRACT = {
    ("POST", NODE + "join"): (201, {400, 401, 429}),
    ("POST", NODE + "session"): (200, {400, 401}),
    ("POST", NODE + "heartbeat"): (200, {400, 401, 409}),
    ("POST", NODE + "jobs/claim"): (200, {400, 401, 409}),
    ("GET", NODE + "jobs/{}/artifacts/{}"): (200, {400, 401, 404, 409}),
    ("POST", NODE + "jobs/renew"): (200, {400, 401, 409}),
    ("POST", NODE + "jobs/{}/result"): (200, {400, 401, 404, 409, 413}),
    ("GET", ADMIN + "judgers"): (200, ADMIN_ERRORS | {400}),
    ("GET", ADMIN + "judgers/{}"): (200, ADMIN_ERRORS | {404}),
    ("POST", ADMIN + "judgers"): (201, ADMIN_ERRORS | {400}),
    ("POST", ADMIN + "judgers/{}/join-code"): (201, ADMIN_ERRORS | {404}),
    ("POST", ADMIN + "judgers/{}/checks"): (202, ADMIN_ERRORS | {404, 409}),
    ("GET", ADMIN + "judgers/{}/checks/{}"): (200, ADMIN_ERRORS | {404}),
    ("PATCH", ADMIN + "judgers/{}"): (200, ADMIN_ERRORS | {400, 404, 409}),
    ("POST", ADMIN + "judgers/{}/revoke"): (200, ADMIN_ERRORS | {400, 404}),
    ("POST", ADMIN + "judgers/{}/rotate"): (201, ADMIN_ERRORS | {404}),
    ("GET", ADMIN + "pools"): (200, ADMIN_ERRORS),
    ("GET", ADMIN + "host-groups"): (200, ADMIN_ERRORS),
    ("POST", ADMIN + "host-groups"): (201, ADMIN_ERRORS | {400}),
    ("PATCH", ADMIN + "host-groups/{}"): (200, ADMIN_ERRORS | {400, 404, 409}),
    ("POST", ADMIN + "submissions/{}/{}/rejudge"): (202, ADMIN_ERRORS | {404}),
    ("DELETE", ADMIN + "submissions/{}/{}"): (204, ADMIN_ERRORS | {404}),
    ("POST", ADMIN + "rejudges"): (202, ADMIN_ERRORS | {400}),
    ("GET", ADMIN + "rejudges/{}"): (200, ADMIN_ERRORS | {404}),
    ("POST", ADMIN + "rejudges/{}/cancel"): (200, ADMIN_ERRORS | {404}),
    ("POST", "/api/v1/submissions"): (202, USER_ERRORS | {400, 403, 409, 429}),
    ("GET", "/api/v1/submissions/{}/{}"): (200, USER_ERRORS | {404}),
    ("GET", "/api/v1/system/judgers/summary"): (200, set()),
    # Exams and lessons (added to the contract: README, "API additions").
    ("GET", "/api/v1/exams/{}"): (200, USER_ERRORS | {400, 404}),  # 400: a page that does not exist
    ("PUT", "/api/v1/exams/{}/answers/{}"): (200, USER_ERRORS | {400, 403, 404, 409}),
    ("POST", "/api/v1/exams/{}/hand-in"): (200, USER_ERRORS | {403, 404, 409}),
    ("GET", "/api/v1/exams/{}/result"): (200, USER_ERRORS | {404, 409}),
    ("GET", "/api/v1/lessons/practices/{}"): (200, USER_ERRORS | {400, 404}),
    ("DELETE", ADMIN + "problems/{}"): (204, ADMIN_ERRORS | {404}),
    ("PATCH", ADMIN + "problems/{}"): (200, ADMIN_ERRORS | {400, 404}),
    ("GET", ADMIN + "submissions/{}/{}"): (200, ADMIN_ERRORS | {404}),
    ("POST", ADMIN + "exams"): (201, ADMIN_ERRORS | {400}),
    ("PATCH", ADMIN + "exams/{}"): (200, ADMIN_ERRORS | {400, 404, 409}),
    ("DELETE", ADMIN + "exams/{}"): (204, ADMIN_ERRORS | {404}),
    ("POST", ADMIN + "exams/{}/participants"): (200, ADMIN_ERRORS | {400, 404}),
    ("POST", ADMIN + "exams/{}/publish"): (200, ADMIN_ERRORS | {404}),
    ("POST", ADMIN + "lessons"): (201, ADMIN_ERRORS | {400}),
    ("PATCH", ADMIN + "lessons/{}"): (200, ADMIN_ERRORS | {400, 404, 409}),
    ("POST", ADMIN + "lessons/{}/practices"): (201, ADMIN_ERRORS | {400, 404}),
    ("PATCH", ADMIN + "lessons/practices/{}"): (200, ADMIN_ERRORS | {400, 404, 409}),
    ("DELETE", ADMIN + "lessons/practices/{}"): (204, ADMIN_ERRORS | {404}),
}

NODE_FIELDS = {"id", "name", "pool", "hostGroupId", "baseUrl", "desiredState", "observedState", "maxSlots",
               "localSlots", "running", "lastHeartbeatAt", "agentVersion", "runtimeSpec", "sessionEpoch",
               "selfCheck", "revision", "createdAt"}
TIMINGS = {"heartbeatIntervalMs", "renewIntervalMs", "leaseTtlMs", "claimWaitMs"}

# (method, path): (request fields, of which required), response fields of the success status.
FIELDS = {
    ("POST", NODE + "join"): (
        ({"joinCode", "agentVersion", "runtimeSpec", "localSlots"},) * 2,
        {"nodeId", "pool", "credential", "probeKey", "sessionEpoch", "protocolVersion"} | TIMINGS),
    ("POST", NODE + "session"): (({"agentVersion", "runtimeSpec", "localSlots"},) * 2,
                                 {"nodeId", "pool", "sessionEpoch", "protocolVersion", "desiredState"} | TIMINGS),
    ("POST", NODE + "heartbeat"): (({"agentVersion", "runtimeSpec", "localSlots", "running", "health"},) * 2,
                                   {"desiredState", "maxSlots", "serverTime", "heartbeatIntervalMs"}),
    ("POST", NODE + "jobs/claim"): (({"freeSlots", "waitMs"}, {"freeSlots"}), {"jobs", "desiredState"}),
    ("POST", NODE + "jobs/renew"): (({"leases"},) * 2, {"leases"}),
    ("POST", NODE + "jobs/{}/result"): (
        ({"leaseEpoch", "outcome", "verdict", "score", "timeMs", "memoryKb", "compileOutput", "cases", "error",
          "message"}, {"leaseEpoch", "outcome"}), {"status"}),
    ("GET", ADMIN + "judgers"): (None, {"count", "next", "previous", "results"}),
    ("GET", ADMIN + "judgers/{}"): (None, NODE_FIELDS | {"checks", "recentErrors", "audit"}),
    ("POST", ADMIN + "judgers"): (({"name", "pool", "baseUrl", "hostGroupId", "maxSlots"},) * 2,
                                  NODE_FIELDS | {"joinCode", "joinCodeExpiresAt"}),
    ("POST", ADMIN + "judgers/{}/join-code"): (None, {"joinCode", "joinCodeExpiresAt"}),
    ("POST", ADMIN + "judgers/{}/checks"): (None, {"checkId"}),
    ("GET", ADMIN + "judgers/{}/checks/{}"): (
        None, {"id", "kind", "status", "items", "configRevision", "startedAt", "finishedAt"}),
    ("PATCH", ADMIN + "judgers/{}"): (
        ({"revision", "name", "maxSlots", "baseUrl", "hostGroupId", "desiredState"}, {"revision"}), NODE_FIELDS),
    ("POST", ADMIN + "judgers/{}/revoke"): (({"reason"}, set()), NODE_FIELDS),
    ("POST", ADMIN + "judgers/{}/rotate"): (None, {"joinCode", "joinCodeExpiresAt"}),
    ("POST", ADMIN + "host-groups"): (({"name", "hostId", "totalSlots"},) * 2, {"id", "name", "hostId", "totalSlots",
                                                                                "revision"}),
    ("PATCH", ADMIN + "host-groups/{}"): (({"name", "hostId", "totalSlots", "revision"}, {"revision"}),
                                         {"id", "name", "hostId", "totalSlots", "revision"}),
    ("POST", ADMIN + "submissions/{}/{}/rejudge"): (None, {"generation"}),
    ("POST", "/api/v1/submissions"): (({"problemId", "language", "code", "lessonPracticeId"},
                                       {"problemId", "language", "code"}),
                                      {"submissionType", "submissionId", "status"}),
    ("GET", "/api/v1/submissions/{}/{}"): (None, {"submissionType", "submissionId", "status", "waitReason", "verdict",
                                                  "score", "timeMs", "memoryKb", "cases"}),
    ("GET", "/api/v1/system/judgers/summary"): (None, {"asOf", "freshness", "readyPools", "totalPools", "pools"}),
}
JOB_FIELDS = {"jobId", "kind", "submissionType", "submissionId", "generation", "pool", "leaseEpoch",
              "leaseRemainingMs", "runtimeSpec", "manifestId", "limits", "source", "cases", "sql"}
POOL_FIGURES = {"pool", "pending", "claimable", "backoff", "oldestWaitSeconds", "readyNodes", "running"}


@pytest.fixture(scope="module")
def schema(django_db_setup, django_db_blocker):
    """The whole schema, as an admin reads it."""
    from tests.api.helpers import make_admin

    with django_db_blocker.unblock():
        admin = make_admin("schema-reader")
        client = Client()
        client.force_login(admin)
        try:
            response = client.get("/api/schema/?format=json")
        finally:
            client.logout()
            admin.delete()
    assert response.status_code == 200
    return response.json()


def operations(schema) -> dict:
    found = {}
    for path, items in schema["paths"].items():
        for method, operation in items.items():
            if method in ("get", "post", "put", "patch", "delete"):
                found[(method.upper(), re.sub(r"\{[^}]+\}", "{}", path))] = operation
    return found


def resolve(schema, node):
    while isinstance(node, dict) and "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    if isinstance(node, dict) and "allOf" in node and len(node["allOf"]) == 1:
        return resolve(schema, node["allOf"][0])
    return node


def body_of(schema, operation, status, media="application/json"):
    return resolve(schema, operation["responses"][str(status)]["content"][media]["schema"])


def label(key):
    return f"{key[0]} {key[1]}"


def test_the_schema_serves_exactly_the_contracts_operations(schema):
    assert sorted(map(label, operations(schema))) == sorted(map(label, CONTRACT))


@pytest.mark.parametrize("key", list(CONTRACT), ids=label)
def test_each_operation_documents_its_statuses_in_the_error_envelope(schema, key):
    operation = operations(schema).get(key)
    assert operation is not None, f"{label(key)} is not in the served schema"
    success, errors = CONTRACT[key]
    responses = operation["responses"]
    assert str(success) in responses
    # One success status per operation, but for a submission's retry under its Idempotency-Key.
    replay = {"200"} if key == ("POST", "/api/v1/submissions") else set()
    assert {s for s in responses if s.startswith("2")} == {str(success)} | replay
    # Exactly these: a status the operation cannot answer would let a fuzzer's status check pass
    # whatever the server does.
    assert {int(s) for s in responses if s[0] in "45"} == errors | ANY_ERRORS
    # The public summary answers conditional GETs (ETag); nothing else redirects or caches.
    assert {s for s in responses if s.startswith("3")} == ({"304"} if key[1].endswith("/summary") else set())
    for status in errors | ANY_ERRORS:
        envelope = body_of(schema, operation, status)
        assert {"error", "detail"} <= set(envelope["required"])
    for status in {429, 503} & (errors | ANY_ERRORS):
        assert responses[str(status)]["headers"]["Retry-After"]["required"] is True


@pytest.mark.parametrize("key", list(CONTRACT), ids=label)
def test_each_operation_names_the_contracts_credentials(schema, key):
    operation = operations(schema)[key]
    security = {name for requirement in operation.get("security") or [] for name in requirement}
    parameters = {p["name"]: p for p in operation.get("parameters") or [] if p["in"] == "header"}
    if key in {("POST", NODE + "join"), ("GET", "/api/v1/system/judgers/summary")}:
        assert security <= {""} and not parameters
    elif key[1].startswith(NODE):
        assert security == {"nodeCredential"}
        scheme = schema["components"]["securitySchemes"]["nodeCredential"]
        assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
        if key == ("POST", NODE + "session"):
            assert "X-Judge-Session" not in parameters
        else:
            assert parameters["X-Judge-Session"]["required"] is True
    else:
        assert security == {"tokenAuth", "cookieAuth"}


@pytest.mark.parametrize("key", list(FIELDS), ids=label)
def test_each_operation_names_the_contracts_fields(schema, key):
    operation = operations(schema)[key]
    request, response = FIELDS[key]
    if request is not None:
        body = resolve(schema, operation["requestBody"]["content"]["application/json"]["schema"])
        named, required = request
        assert set(body["properties"]) >= named
        assert set(body.get("required", [])) == required
    success = CONTRACT[key][0]
    body = body_of(schema, operation, success)
    if body.get("type") == "array":
        body = resolve(schema, body["items"])
    assert set(body["properties"]) >= response


def test_the_node_and_job_objects_have_every_contract_field(schema):
    ops = operations(schema)
    page = body_of(schema, ops[("GET", ADMIN + "judgers")], 200)
    node = resolve(schema, page["properties"]["results"]["items"])
    # Every contract field, plus the optional fields added since (not required).
    assert set(node["properties"]) == NODE_FIELDS | {"quarantine"}
    assert "quarantine" not in node.get("required", [])
    observed = resolve(schema, node["properties"]["observedState"])
    assert set(observed["enum"]) == {"offline", "unhealthy", "busy", "ready", "draining", "disabled", "unverified"}
    claim = body_of(schema, ops[("POST", NODE + "jobs/claim")], 200)
    job = resolve(schema, claim["properties"]["jobs"]["items"])
    # The contract's fields, plus the optional ones it allows adding (none of them required).
    added = {"ownChecks", "sourceText"}
    assert set(job["properties"]) == JOB_FIELDS | added
    assert not added & set(job.get("required", []))
    figures = body_of(schema, ops[("GET", ADMIN + "pools")], 200)
    pool = resolve(schema, figures["items"])
    added = {"pendingByClass", "oldestWaitByClass", "throttling"}
    assert set(pool["properties"]) == POOL_FIGURES | added
    assert not added & set(pool.get("required", []))


def test_an_artifact_is_served_as_octet_stream(schema):
    operation = operations(schema)[("GET", NODE + "jobs/{}/artifacts/{}")]
    assert "application/octet-stream" in operation["responses"]["200"]["content"]
    lease = [p for p in operation["parameters"] if p["name"] == "X-Judge-Lease"]
    assert lease and lease[0]["in"] == "header" and lease[0]["required"] is True


def test_a_deleted_submission_answers_no_content(schema):
    operation = operations(schema)[("DELETE", ADMIN + "submissions/{}/{}")]
    assert "content" not in operation["responses"]["204"]


def test_the_api_reference_is_for_admins_and_others_are_sent_to_a_login_that_exists(client):
    from tests.api.helpers import make_admin, session_client

    anonymous = client.get("/api/docs/")
    assert anonymous.status_code == 302
    assert client.get(anonymous["Location"]).status_code == 200
    page = session_client(make_admin()).get("/api/docs/")
    assert page.status_code == 200 and b"swagger" in page.content.lower()
    # A student signed in is refused, not sent to a sign-in page that sends them back.
    student = session_client(UserFactory()).get("/api/docs/")
    assert student.status_code == 403


def test_signing_out_lands_on_the_homepage(client):
    from tests.api.helpers import session_client

    signed_in = session_client(UserFactory())
    answer = signed_in.post("/accounts/logout/")
    assert (answer.status_code, answer["Location"]) == (302, "/")
    assert "_auth_user_id" not in signed_in.session


# --- who reads which part ----------------------------------------------------------------------

PUBLIC_AND_USER = {key for key in CONTRACT if not key[1].startswith((NODE, ADMIN))}
NODE_API = {key for key in CONTRACT if key[1].startswith(NODE)}


def read_schema(client) -> tuple[set, str]:
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    assert response["Cache-Control"] == "private" and "Authorization" in response["Vary"]
    return set(operations(response.json())), response.content.decode()


@pytest.mark.parametrize("who", ["anonymous", "student", "teacher", "exam manager"])
def test_anyone_but_an_admin_or_a_node_reads_only_the_public_and_user_api(who):
    from django.contrib.auth.models import Permission

    from tests.api.helpers import make_teacher, person, session_client

    if who == "anonymous":
        client = Client()
    elif who == "exam manager":
        manager = person("manager")
        manager.user_permissions.add(Permission.objects.get(codename="manage_exams"))
        client = session_client(manager)
    else:
        client = session_client(make_teacher() if who == "teacher" else person("student"))
    found, text = read_schema(client)
    assert found == PUBLIC_AND_USER
    # Nor anything only the other parts use: their paths, fields, credentials.
    for word in ("/api/v1/internal/", "/api/v1/admin/", "joinCode", "probeKey", "leaseEpoch", "nodeCredential"):
        assert word not in text, word


def test_a_node_reads_the_node_api_by_its_credential():
    from tests.factories import make_node

    node, _ = make_node(pool="python")
    found, text = read_schema(Client(HTTP_AUTHORIZATION=f"Bearer {node.secret}"))
    assert found == NODE_API
    assert "/api/v1/admin/" not in text and "/api/v1/submissions" not in text


@pytest.mark.parametrize("header", ["Bearer not-a-credential", "Token not-a-token"])
def test_an_unknown_credential_is_refused_not_shown_the_public_part(header):
    response = Client(HTTP_AUTHORIZATION=header).get("/api/schema/?format=json")
    assert (response.status_code, response.json()["error"]) == (401, "unauthenticated")


@pytest.mark.parametrize("how", ["session", "token"])
def test_an_admin_reads_the_whole_schema(how):
    from tests.api.helpers import make_admin, session_client, token_client

    admin = make_admin()
    found, _ = read_schema(session_client(admin) if how == "session" else token_client(admin))
    assert found == set(CONTRACT)
