"""The admin API (`/api/v1/admin/…`) through real URLs and headers: answers and rows."""

import hashlib
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from judging.models import JobKind, JobState, JudgeJob, Submission
from judging.services.leases import RenewItem, lease_renew
from judging.services.settle import job_settle
from nodes.models import DesiredState, JoinCode, JudgeHostGroup, JudgeNode, NodeAudit, NodeCheck
from tests.api.helpers import (
    ADMIN, INTERNAL, NODE_KEYS, error_of, heartbeat_body, join_body, make_admin, node_client, ready_node, send,
    token_client, verified,
)
from tests.concurrency import run_concurrently
from tests.factories import HostGroupFactory, UserFactory, identity_of, make_node, make_problem
from tests.judging.helpers import claim, infra_error, judged, settle, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(db):
    return make_admin()


@pytest.fixture
def api(admin):
    return token_client(admin)


@pytest.fixture
def group(db):
    return HostGroupFactory(name="rack-1")


@pytest.fixture
def approved_networks(settings):
    settings.KECE_PROBE_ALLOWED_NETWORKS = ["10.0.0.0/8", "127.0.0.0/8"]


@pytest.fixture
def python_problem(db):
    return make_problem(languages=("python",), cases=2)


def register(api, group, **overrides):
    body = {"name": "judge-py-1", "pool": "python", "baseUrl": "https://10.1.2.3:8443", "hostGroupId": group.pk,
            "maxSlots": 2, **overrides}
    return send(api, "POST", ADMIN + "judgers", body)


def audits(node, action=None):
    rows = NodeAudit.objects.filter(node=node).order_by("id")
    return list(rows.filter(action=action) if action else rows)


def assert_recent(value, seconds=30):
    moment = parse_datetime(value) if isinstance(value, str) else value
    assert abs((timezone.now() - moment).total_seconds()) < seconds


# --- list --------------------------------------------------------------------------------------

@pytest.fixture
def fleet(db):
    """Four nodes: ready python, draining python, offline java, unverified cpp."""
    ready, _ = ready_node(pool="python", name="py-ready")
    draining, _ = make_node(pool="python", name="py-draining", desired_state=DesiredState.DRAINING)
    offline, _ = ready_node(pool="java", name="java-offline", heartbeat=False)
    unverified, _ = make_node(pool="cpp", name="cpp-new", desired_state=DesiredState.PENDING_VERIFICATION)
    return {"ready": ready, "draining": draining, "offline": offline, "unverified": unverified}


def names(response):
    assert response.status_code == 200, response.content
    return [node["name"] for node in response.json()["results"]]


def test_it_lists_nodes_as_the_contracts_node_objects(api, fleet):
    response = api.get(ADMIN + "judgers")
    body = response.json()
    assert (body["count"], body["next"], body["previous"]) == (4, None, None)
    by_name = {n["name"]: n for n in body["results"]}
    assert all(set(n) == NODE_KEYS for n in body["results"])
    assert {name: n["observedState"] for name, n in by_name.items()} == {
        "py-ready": "ready", "py-draining": "draining", "java-offline": "offline", "cpp-new": "unverified"}
    ready = by_name["py-ready"]
    assert (ready["desiredState"], ready["pool"], ready["maxSlots"], ready["runtimeSpec"], ready["sessionEpoch"]) == (
        "ENABLED", "python", 4, "python-r1", 1)
    assert ready["selfCheck"] == {"status": "PASSED", "configRevision": 1, "finishedAt": None}
    assert ready["lastHeartbeatAt"].endswith("Z") and ready["createdAt"].endswith("Z")


def test_a_node_with_every_slot_running_is_busy_and_counts_its_running_jobs(api, python_problem):
    node, identity = ready_node(pool="python", name="py-full", max_slots=1)
    submit(UserFactory(), python_problem)
    claim(identity)
    [listed] = api.get(ADMIN + "judgers?observed=busy").json()["results"]
    assert (listed["name"], listed["running"], listed["observedState"]) == ("py-full", 1, "busy")


def test_a_node_in_a_disabled_host_group_is_not_observed_ready(api, python_problem):
    node, identity = ready_node(pool="python", name="py-rack-off")
    JudgeHostGroup.objects.filter(pk=node.host_group_id).update(status="DISABLED")
    submit(UserFactory(), python_problem)
    assert claim(identity) == []  # its host group gives it no judge jobs
    assert api.get(ADMIN + f"judgers/{node.pk}").json()["observedState"] == "disabled"
    assert names(api.get(ADMIN + "judgers?observed=ready")) == []
    python = {row["pool"]: row for row in api.get(ADMIN + "pools").json()}["python"]
    assert python["readyNodes"] == 0


def test_it_filters_nodes_by_pool_desired_state_and_observed_state(api, fleet):
    assert names(api.get(ADMIN + "judgers?pool=python")) == ["py-draining", "py-ready"]
    assert names(api.get(ADMIN + "judgers?state=DRAINING")) == ["py-draining"]
    assert names(api.get(ADMIN + "judgers?state=ENABLED")) == ["java-offline", "py-ready"]
    assert names(api.get(ADMIN + "judgers?observed=offline")) == ["java-offline"]
    assert names(api.get(ADMIN + "judgers?observed=unverified")) == ["cpp-new"]
    assert names(api.get(ADMIN + "judgers?pool=python&state=ENABLED&observed=ready")) == ["py-ready"]
    assert names(api.get(ADMIN + "judgers?pool=mysql")) == []


def test_it_refuses_an_unknown_pool_desired_or_observed_state_filter(api, fleet):
    bad_pool = api.get(ADMIN + "judgers?pool=fortran")
    assert error_of(bad_pool) == (400, "invalid") and "pool" in bad_pool.json()["fields"]
    bad_state = api.get(ADMIN + "judgers?state=RUNNING")
    assert error_of(bad_state) == (400, "invalid") and "state" in bad_state.json()["fields"]
    bad_observed = api.get(ADMIN + "judgers?observed=READY")
    assert error_of(bad_observed) == (400, "invalid") and "observed" in bad_observed.json()["fields"]


def test_it_pages_the_node_list(api, fleet):
    first = api.get(ADMIN + "judgers?pageSize=3").json()
    assert first["count"] == 4 and len(first["results"]) == 3 and first["previous"] is None
    assert "page=2" in first["next"] and "pageSize=3" in first["next"]
    second = api.get(first["next"]).json()
    assert second["count"] == 4 and len(second["results"]) == 1 and second["next"] is None
    assert second["previous"] is not None
    seen = [n["id"] for n in first["results"] + second["results"]]
    assert sorted(seen) == sorted(n.pk for n in fleet.values())
    assert error_of(api.get(ADMIN + "judgers?page=9")) == (400, "invalid")  # a field, not a route


def test_listing_nodes_costs_no_query_per_node(api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries_for_list():
        with CaptureQueriesContext(connection) as captured:
            assert api.get(ADMIN + "judgers?observed=ready").status_code == 200
        return len(captured)

    ready_node(pool="python")
    few = queries_for_list()
    for pool in ("python", "cpp", "java", "mysql", "arkts", "python"):
        ready_node(pool=pool)
    assert queries_for_list() == few


def test_filters_and_pages_compose(api, fleet):
    page = api.get(ADMIN + "judgers?pool=python&pageSize=1&page=2").json()
    assert page["count"] == 2 and [n["name"] for n in page["results"]] == ["py-ready"]
    assert "pool=python" in page["previous"]


# --- detail ------------------------------------------------------------------------------------

def test_it_shows_one_node_with_its_checks_recent_errors_and_audit(api, admin, python_problem):
    node, identity = ready_node(pool="python", name="py-detail")
    started = timezone.now() - timedelta(minutes=2)
    NodeCheck.objects.create(node=node, status=NodeCheck.Status.PASSED, config_revision=1, runtime_spec="python-r1",
                             items=[{"name": "sandbox", "ok": True, "detail": "isolated"}],
                             started_at=started, finished_at=started + timedelta(seconds=5))
    submit(UserFactory(), python_problem)
    [job] = claim(identity)
    assert job_settle(identity=identity, request=infra_error(job, error="sandbox_crashed"),
                      now=timezone.now()) == "requeued"
    assert send(api, "PATCH", ADMIN + f"judgers/{node.pk}", {"revision": 1, "maxSlots": 3}).status_code == 200

    response = api.get(ADMIN + f"judgers/{node.pk}")
    assert response.status_code == 200
    body = response.json()
    assert NODE_KEYS <= set(body) and body["maxSlots"] == 3 and body["revision"] == 2
    [check] = body["checks"]
    assert check["status"] == "PASSED" and check["configRevision"] == 1
    assert check["items"] == [{"name": "sandbox", "ok": True, "detail": "isolated"}]
    assert check["startedAt"].endswith("Z") and check["finishedAt"].endswith("Z")
    [error] = body["recentErrors"]
    assert (error["jobId"], error["error"], error["message"]) == (job.pk, "sandbox_crashed", "the sandbox died")
    [entry] = body["audit"]
    assert (entry["actor"], entry["action"], entry["revision"]) == ("admin", "update", 2)
    assert (entry["before"]["max_slots"], entry["after"]["max_slots"]) == (4, 3)
    assert_recent(entry["at"])


def test_an_unknown_node_is_not_found(api):
    for method, path in (("GET", "judgers/987654"), ("PATCH", "judgers/987654"), ("POST", "judgers/987654/revoke"),
                         ("POST", "judgers/987654/join-code"), ("POST", "judgers/987654/rotate")):
        response = send(api, method, ADMIN + path, {"revision": 1} if method == "PATCH" else None)
        assert error_of(response) == (404, "not_found"), (method, path)


# --- register and join codes ---------------------------------------------------------------------

def test_registering_creates_a_node_pending_verification_and_shows_its_join_code_once(
        api, admin, group, approved_networks):
    response = register(api, group)
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == NODE_KEYS | {"joinCode", "joinCodeExpiresAt"}
    assert (body["name"], body["pool"], body["baseUrl"], body["hostGroupId"], body["maxSlots"]) == (
        "judge-py-1", "python", "https://10.1.2.3:8443", group.pk, 2)
    assert (body["desiredState"], body["observedState"], body["revision"]) == ("PENDING_VERIFICATION",
                                                                                "unverified", 1)
    expires = parse_datetime(body["joinCodeExpiresAt"])
    assert timedelta(minutes=9) < expires - timezone.now() <= timedelta(minutes=10)

    node = JudgeNode.objects.get(pk=body["id"])
    code = body["joinCode"]
    [stored] = JoinCode.objects.filter(node=node)
    assert stored.code_digest == hashlib.sha256(code.encode()).hexdigest() and code not in stored.code_digest
    assert node.credential_digest is None
    # Shown once: neither the node nor its detail page ever repeats the code.
    assert code not in api.get(ADMIN + f"judgers/{node.pk}").content.decode()

    [entry] = audits(node)
    assert (entry.actor, entry.action, entry.revision) == (admin, "register", 1)
    assert entry.after["base_url"] == "https://10.1.2.3:8443" and entry.before == {}

    joined = send(Client(), "POST", INTERNAL + "join", join_body(code))
    assert joined.status_code == 201 and joined.json()["nodeId"] == node.pk


@pytest.mark.parametrize("overrides, field", [
    ({"pool": "fortran"}, "pool"),
    ({"baseUrl": "http://10.1.2.3:8443"}, "baseUrl"),
    ({"baseUrl": "https://8.8.8.8"}, "baseUrl"),
    ({"baseUrl": "https://10.1.2.3:22"}, "baseUrl"),
    ({"baseUrl": "https://10.1.2.3/agent"}, "baseUrl"),
    ({"baseUrl": "https://user:pw@10.1.2.3"}, "baseUrl"),
    ({"hostGroupId": 999999}, "hostGroupId"),
    ({"maxSlots": 0}, "maxSlots"),
    ({"maxSlots": 257}, "maxSlots"),
    ({"name": ""}, "name"),
    ({"name": None}, "name"),
])
def test_it_refuses_to_register_a_bad_node_and_writes_nothing(api, group, approved_networks, overrides, field):
    response = register(api, group, **overrides)
    assert error_of(response) == (400, "invalid"), response.content
    assert field in response.json()["fields"]
    assert not JudgeNode.objects.exists() and not JoinCode.objects.exists() and not NodeAudit.objects.exists()


def test_a_registration_wrong_in_several_fields_names_each(api, group, approved_networks):
    response = register(api, group, pool="fortran", hostGroupId=999999, baseUrl="http://10.1.2.3:8443")
    assert error_of(response) == (400, "invalid")
    assert set(response.json()["fields"]) == {"pool", "hostGroupId", "baseUrl"}
    assert not JudgeNode.objects.exists()


def test_base_urls_are_held_to_the_configured_networks_not_the_debug_default(api, group, settings):
    settings.KECE_PROBE_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    loopback = register(api, group, baseUrl="https://127.0.0.1:8443")
    assert error_of(loopback) == (400, "invalid") and "baseUrl" in loopback.json()["fields"]
    assert register(api, group, baseUrl="https://10.9.9.9").status_code == 201


def test_a_node_name_is_taken_only_once(api, group, approved_networks):
    assert register(api, group).status_code == 201
    again = register(api, group, baseUrl="https://10.1.2.4")
    assert error_of(again) == (400, "invalid") and "name" in again.json()["fields"]
    assert JudgeNode.objects.count() == 1


def test_a_new_join_code_makes_every_earlier_code_stop_working(api, admin, group, approved_networks):
    first = register(api, group).json()
    second = send(api, "POST", ADMIN + f"judgers/{first['id']}/join-code")
    third = send(api, "POST", ADMIN + f"judgers/{first['id']}/join-code")
    assert second.status_code == third.status_code == 201
    assert set(third.json()) == {"joinCode", "joinCodeExpiresAt"}
    agent = Client()
    for stale in (first["joinCode"], second.json()["joinCode"]):
        assert error_of(send(agent, "POST", INTERNAL + "join", join_body(stale))) == (401, "invalid_join_code")
    assert send(agent, "POST", INTERNAL + "join", join_body(third.json()["joinCode"])).status_code == 201
    node = JudgeNode.objects.get(pk=first["id"])
    assert [a.action for a in audits(node)] == ["register", "join_code", "join_code"]
    assert all(a.actor == admin for a in audits(node))
    # The audit trail writes the code's expiry as the contract writes every time.
    assert audits(node)[-1].after == {"joinCodeExpiresAt": third.json()["joinCodeExpiresAt"]}


# --- PATCH ---------------------------------------------------------------------------------------

def patch(api, node, **fields):
    return send(api, "PATCH", ADMIN + f"judgers/{node.pk}", fields)


def test_a_stale_revision_is_refused_and_changes_nothing(api):
    node, _ = make_node(name="py-1")
    assert patch(api, node, revision=1, name="py-renamed").status_code == 200
    stale = patch(api, node, revision=1, maxSlots=1)
    assert error_of(stale) == (409, "revision_conflict")
    node.refresh_from_db()
    assert (node.name, node.max_slots, node.revision) == ("py-renamed", 4, 2)
    assert len(audits(node)) == 1


def test_it_changes_name_slots_and_host_group_and_audits_before_and_after(api, admin):
    node, _ = ready_node(name="py-1")
    other = HostGroupFactory(name="rack-2")
    response = patch(api, node, revision=1, name="py-one", maxSlots=8, hostGroupId=other.pk)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == NODE_KEYS
    assert (body["name"], body["maxSlots"], body["hostGroupId"], body["revision"]) == ("py-one", 8, other.pk, 2)
    assert body["desiredState"] == "PENDING_VERIFICATION", "another machine: verified again before it judges"
    node.refresh_from_db()
    assert (node.name, node.max_slots, node.host_group_id, node.revision) == ("py-one", 8, other.pk, 2)
    [entry] = audits(node)
    assert (entry.actor, entry.actor_name, entry.action, entry.revision) == (admin, "admin", "update", 2)
    assert {k: entry.before[k] for k in ("name", "max_slots")} == {"name": "py-1", "max_slots": 4}
    assert {k: entry.after[k] for k in ("name", "max_slots", "host_group_id")} == {
        "name": "py-one", "max_slots": 8, "host_group_id": other.pk}
    assert_recent(entry.created_at)


@pytest.mark.parametrize("body, field", [
    ({"maxSlots": 0}, "maxSlots"),
    ({"desiredState": "PENDING_VERIFICATION"}, "desiredState"),
    ({"hostGroupId": 999999}, "hostGroupId"),
    ({"baseUrl": "http://10.0.0.1"}, "baseUrl"),
])
def test_it_refuses_invalid_changes(api, body, field, approved_networks):
    node, _ = make_node()
    response = patch(api, node, revision=1, **body)
    assert error_of(response) == (400, "invalid") and field in response.json()["fields"]
    assert JudgeNode.objects.get(pk=node.pk).revision == 1 and not audits(node)


def test_a_patch_without_a_revision_is_invalid(api):
    node, _ = make_node()
    response = patch(api, node, name="x")
    assert error_of(response) == (400, "invalid") and "revision" in response.json()["fields"]


def test_it_refuses_to_enable_a_node_without_a_fresh_heartbeat(api):
    node, _ = make_node(desired_state=DesiredState.PENDING_VERIFICATION, heartbeat=False)
    verified(node)
    assert error_of(patch(api, node, revision=1, desiredState="ENABLED")) == (409, "not_verified")
    node.refresh_from_db()
    assert (node.desired_state, node.revision) == (DesiredState.PENDING_VERIFICATION, 1) and not audits(node)


def test_it_refuses_to_enable_a_node_without_a_passing_self_check(api):
    node, _ = make_node(desired_state=DesiredState.PENDING_VERIFICATION)
    assert error_of(patch(api, node, revision=1, desiredState="ENABLED")) == (409, "not_verified")
    # A check that failed, or passed for another config revision or runtime, is not enough either.
    verified(node)
    for stale in ({"self_check_status": "FAILED"}, {"self_check_revision": 0},
                  {"self_check_runtime_spec": "python-r0"}):
        JudgeNode.objects.filter(pk=node.pk).update(**stale)
        assert error_of(patch(api, node, revision=1, desiredState="ENABLED")) == (409, "not_verified"), stale
        verified(JudgeNode.objects.get(pk=node.pk))
    assert JudgeNode.objects.get(pk=node.pk).desired_state == DesiredState.PENDING_VERIFICATION


def test_it_enables_a_verified_node_with_a_fresh_heartbeat(api, admin):
    node, _ = make_node(desired_state=DesiredState.PENDING_VERIFICATION)
    verified(node)
    response = patch(api, node, revision=1, desiredState="ENABLED")
    assert response.status_code == 200
    assert (response.json()["desiredState"], response.json()["observedState"]) == ("ENABLED", "ready")
    [entry] = audits(node)
    assert (entry.before["desired_state"], entry.after["desired_state"], entry.revision) == (
        "PENDING_VERIFICATION", "ENABLED", 2)


def test_changing_the_base_url_sends_the_node_back_to_verification(api, approved_networks, python_problem):
    node, identity = ready_node(name="py-1")
    same = patch(api, node, revision=1, baseUrl="https://127.0.0.1:8443/")  # normalises to the stored URL
    assert (same.json()["desiredState"], same.json()["revision"]) == ("ENABLED", 1)  # no change, no new revision
    assert audits(node) == []

    moved = patch(api, node, revision=1, baseUrl="https://10.0.0.5:8443")
    assert moved.status_code == 200
    body = moved.json()
    assert (body["baseUrl"], body["desiredState"], body["observedState"]) == (
        "https://10.0.0.5:8443", "PENDING_VERIFICATION", "unverified")
    assert body["selfCheck"]["configRevision"] == 1
    node.refresh_from_db()
    assert node.config_revision == 2
    submit(UserFactory(), python_problem)
    assert claim(identity) == []  # no judge jobs until it is verified again
    assert error_of(patch(api, node, revision=2, desiredState="ENABLED")) == (409, "not_verified")
    [entry] = audits(node)
    assert (entry.before["base_url"], entry.after["base_url"]) == ("https://127.0.0.1:8443", "https://10.0.0.5:8443")
    assert (entry.before["config_revision"], entry.after["config_revision"]) == (1, 2)


def test_draining_and_disabling_are_allowed_without_verification(api):
    node, _ = make_node(heartbeat=False)
    assert patch(api, node, revision=1, desiredState="DRAINING").json()["observedState"] == "draining"
    assert patch(api, node, revision=2, desiredState="DISABLED").json()["observedState"] == "disabled"
    assert [a.after["desired_state"] for a in audits(node)] == ["DRAINING", "DISABLED"]


# --- revoke and rotate ---------------------------------------------------------------------------

def test_revoking_kills_the_credential_closes_the_session_and_frees_the_running_job_at_once(
        api, admin, python_problem):
    node, identity = ready_node(pool="python", name="py-revoked")
    other, other_identity = ready_node(pool="python", name="py-other")
    submission = submit(UserFactory(), python_problem)
    [job] = claim(identity)
    JoinCode.objects.create(node=node, code_digest="0" * 64, expires_at=timezone.now() + timedelta(minutes=5))

    response = send(api, "POST", ADMIN + f"judgers/{node.pk}/revoke", {"reason": "stolen laptop"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == NODE_KEYS
    assert (body["desiredState"], body["observedState"], body["running"]) == ("DISABLED", "disabled", 0)

    stored = JudgeNode.objects.get(pk=node.pk)
    assert stored.credential_digest is None and stored.revoked_at is not None and not stored.session_open
    assert JoinCode.objects.get(node=node).superseded_at is not None
    heartbeat = send(node_client(node, session=identity.session_epoch), "POST", INTERNAL + "heartbeat",
                     heartbeat_body())
    assert error_of(heartbeat) == (401, "unauthenticated")

    freed = JudgeJob.objects.get(pk=job.pk)
    assert (freed.state, freed.node_id) == (JobState.QUEUED, None) and freed.available_at <= timezone.now()
    [again] = claim(other_identity)
    assert (again.pk, again.submission_id, again.lease_epoch) == (job.pk, submission.pk, job.lease_epoch + 1)

    [entry] = audits(node, "revoke")
    assert (entry.actor, entry.revision, entry.after["reason"], entry.after["releasedLeases"]) == (
        admin, stored.revision, "stolen laptop", 1)
    assert (entry.before["desired_state"], entry.after["desired_state"]) == ("ENABLED", "DISABLED")


def test_a_revoke_needs_no_body(api):
    node, _ = make_node()
    assert send(api, "POST", ADMIN + f"judgers/{node.pk}/revoke").status_code == 200
    assert audits(node, "revoke")[0].after["reason"] == ""


@pytest.mark.parametrize("body", ["[]", "null", "0", "false", '""'])
def test_a_revoke_whose_body_is_not_an_object_is_refused_and_revokes_nothing(api, body):
    node, _ = make_node()
    answer = api.post(ADMIN + f"judgers/{node.pk}/revoke", data=body, content_type="application/json")
    assert error_of(answer) == (400, "invalid")
    assert JudgeNode.objects.get(pk=node.pk).credential_digest == node.credential_digest
    assert not audits(node, "revoke")


def test_rotating_keeps_the_old_credential_until_the_node_joins_with_the_new_code(api, admin, group,
                                                                                     approved_networks):
    registered = register(api, group).json()
    agent = Client()
    joined = send(agent, "POST", INTERNAL + "join", join_body(registered["joinCode"])).json()
    old = {"HTTP_AUTHORIZATION": f"Bearer {joined['credential']}", "HTTP_X_JUDGE_SESSION": str(joined["sessionEpoch"])}

    rotated = send(api, "POST", ADMIN + f"judgers/{registered['id']}/rotate")
    assert rotated.status_code == 201 and set(rotated.json()) == {"joinCode", "joinCodeExpiresAt"}
    assert send(agent, "POST", INTERNAL + "heartbeat", heartbeat_body(), **old).status_code == 200

    rejoined = send(agent, "POST", INTERNAL + "join", join_body(rotated.json()["joinCode"]))
    assert rejoined.status_code == 201
    new = {"HTTP_AUTHORIZATION": f"Bearer {rejoined.json()['credential']}",
           "HTTP_X_JUDGE_SESSION": str(rejoined.json()["sessionEpoch"])}
    assert error_of(send(agent, "POST", INTERNAL + "heartbeat", heartbeat_body(), **old)) == (401, "unauthenticated")
    assert send(agent, "POST", INTERNAL + "heartbeat", heartbeat_body(), **new).status_code == 200
    node = JudgeNode.objects.get(pk=registered["id"])
    assert node.credential_digest == hashlib.sha256(rejoined.json()["credential"].encode()).hexdigest()
    assert [a.action for a in audits(node)] == ["register", "rotate"]


# --- host groups ---------------------------------------------------------------------------------

def test_host_groups_are_listed_created_and_changed_by_revision(api, admin):
    created = send(api, "POST", ADMIN + "host-groups", {"name": "rack-9", "hostId": "machine-9", "totalSlots": 6})
    assert created.status_code == 201
    group = created.json()
    assert group == {"id": group["id"], "name": "rack-9", "hostId": "machine-9", "totalSlots": 6,
                     "status": "ACTIVE", "revision": 1}
    listed = api.get(ADMIN + "host-groups")
    assert listed.status_code == 200 and listed.json() == [group]

    changed = send(api, "PATCH", ADMIN + f"host-groups/{group['id']}", {"revision": 1, "totalSlots": 12})
    assert changed.status_code == 200
    assert (changed.json()["totalSlots"], changed.json()["revision"]) == (12, 2)
    stale = send(api, "PATCH", ADMIN + f"host-groups/{group['id']}", {"revision": 1, "name": "rack-x"})
    assert error_of(stale) == (409, "revision_conflict")
    stored = JudgeHostGroup.objects.get(pk=group["id"])
    assert (stored.name, stored.total_slots, stored.revision) == ("rack-9", 12, 2)

    entries = list(NodeAudit.objects.filter(host_group=stored).order_by("id"))
    assert [(a.action, a.actor, a.revision) for a in entries] == [("host_group_create", admin, 1),
                                                                  ("host_group_update", admin, 2)]
    assert (entries[1].before["totalSlots"], entries[1].after["totalSlots"]) == (6, 12)


def test_host_group_mistakes_are_refused(api):
    HostGroupFactory(name="rack-1")
    taken = send(api, "POST", ADMIN + "host-groups", {"name": "rack-1", "hostId": "m", "totalSlots": 1})
    assert error_of(taken) == (400, "invalid") and "name" in taken.json()["fields"]
    zero = send(api, "POST", ADMIN + "host-groups", {"name": "rack-2", "hostId": "m", "totalSlots": 0})
    assert error_of(zero) == (400, "invalid") and "totalSlots" in zero.json()["fields"]
    assert error_of(send(api, "PATCH", ADMIN + "host-groups/987654", {"revision": 1})) == (404, "not_found")
    assert JudgeHostGroup.objects.count() == 1


# --- pool figures --------------------------------------------------------------------------------

def test_pool_figures_count_what_waits_what_runs_and_who_is_ready(api, python_problem):
    now = timezone.now()
    ready, identity = ready_node(pool="python", name="py-ready")
    make_node(pool="python", name="py-draining", desired_state=DesiredState.DRAINING)
    make_node(pool="python", name="py-offline", heartbeat=False)
    ready_node(pool="cpp", name="cpp-ready")

    user = UserFactory()
    submit(user, python_problem, now=now - timedelta(minutes=10))
    [running] = claim(identity)
    submit(user, python_problem, now=now - timedelta(seconds=120))
    in_backoff = submit(user, python_problem, now=now - timedelta(seconds=30))
    JudgeJob.objects.filter(pk=in_backoff.current_judge_job_id).update(available_at=now + timedelta(seconds=60))
    # A self-check waiting for its node is not user work.
    JudgeJob.objects.create(kind=JobKind.DIAGNOSTIC, submission_type="CHECK", submission_id=1, pool="python",
                            runtime_spec="python-r1", bound_node=ready, available_at=now, claim_key=now,
                            created_at=now - timedelta(hours=1))

    response = api.get(ADMIN + "pools")
    assert response.status_code == 200
    figures = {row["pool"]: row for row in response.json()}
    assert set(figures) == {"cpp", "java", "python", "mysql", "arkts"}
    python = figures.pop("python")
    assert 120 <= python.pop("oldestWaitSeconds") <= 125
    assert 120 <= python.pop("oldestWaitByClass").pop("PRACTICE") <= 125
    assert python == {"pool": "python", "pending": 2, "claimable": 1, "backoff": 1, "readyNodes": 1, "running": 1,
                      "pendingByClass": {"EXAM": 0, "PRACTICE": 2, "REJUDGE": 0}, "throttling": False}
    none = {"EXAM": 0, "PRACTICE": 0, "REJUDGE": 0}
    assert figures["cpp"] == {"pool": "cpp", "pending": 0, "claimable": 0, "backoff": 0, "oldestWaitSeconds": 0,
                              "readyNodes": 1, "running": 0, "pendingByClass": none, "oldestWaitByClass": none,
                              "throttling": False}
    assert all(row["readyNodes"] == row["pending"] == row["running"] == 0 for p, row in figures.items() if p != "cpp")
    assert JudgeJob.objects.get(pk=running.pk).state == JobState.RUNNING


def test_pool_figures_split_the_queue_by_class_and_say_when_a_pool_throttles(api, python_problem, settings):
    from judging.models import PriorityClass
    from judging.services.rejudge import submission_rejudge

    now = timezone.now()
    old = submit(UserFactory(), python_problem, now=now - timedelta(minutes=30))
    JudgeJob.objects.filter(pk=old.current_judge_job_id).update(state=JobState.COMPLETED)
    submission_rejudge(submission_type="ALGO", submission_id=old.pk, now=now - timedelta(minutes=5),
                       priority_class=PriorityClass.REJUDGE)
    submit(UserFactory(), python_problem, now=now - timedelta(seconds=60), priority_class=PriorityClass.EXAM)
    submit(UserFactory(), python_problem, now=now - timedelta(seconds=30))
    python = {row["pool"]: row for row in api.get(ADMIN + "pools").json()}["python"]
    assert python["pendingByClass"] == {"EXAM": 1, "PRACTICE": 1, "REJUDGE": 1}
    assert [55 <= python["oldestWaitByClass"]["EXAM"] <= 65, 25 <= python["oldestWaitByClass"]["PRACTICE"] <= 35,
            295 <= python["oldestWaitByClass"]["REJUDGE"] <= 305] == [True] * 3
    assert python["throttling"] is False
    settings.KECE_THROTTLE_BACKLOG = {"*": 0, "python": 2}
    assert {row["pool"]: row for row in api.get(ADMIN + "pools").json()}["python"]["throttling"] is True


# --- rejudge and delete --------------------------------------------------------------------------

def test_rejudge_answers_the_new_generation_and_cancels_the_running_job(api, python_problem):
    node, identity = ready_node(pool="python")
    submission = submit(UserFactory(), python_problem)
    [old] = claim(identity)

    response = send(api, "POST", ADMIN + f"submissions/ALGO/{submission.pk}/rejudge")
    assert (response.status_code, response.json()) == (202, {"generation": 2})
    submission.refresh_from_db()
    new = JudgeJob.objects.get(pk=submission.current_judge_job_id)
    assert (new.generation, new.state, new.submission_id) == (2, JobState.QUEUED, submission.pk)
    assert JudgeJob.objects.get(pk=old.pk).state == JobState.CANCELLED
    [answer] = lease_renew(identity=identity_of(node), items=[RenewItem(old.pk, old.lease_epoch)], now=timezone.now())
    assert answer == {"jobId": old.pk, "ok": False, "error": "cancelled"}
    assert send(api, "POST", ADMIN + f"submissions/ALGO/{submission.pk}/rejudge").json() == {"generation": 3}


def test_deleting_a_submission_cancels_its_job(api, python_problem):
    submission = submit(UserFactory(), python_problem)
    response = send(api, "DELETE", ADMIN + f"submissions/ALGO/{submission.pk}")
    assert response.status_code == 204 and response.content == b""
    stored = Submission.objects.get(pk=submission.pk)
    assert stored.deleted_at is not None
    assert JudgeJob.objects.get(pk=stored.current_judge_job_id).state == JobState.CANCELLED
    assert error_of(send(api, "DELETE", ADMIN + f"submissions/ALGO/{submission.pk}")) == (404, "not_found")
    assert error_of(send(api, "POST", ADMIN + f"submissions/ALGO/{submission.pk}/rejudge")) == (404, "not_found")


def test_rejudge_and_delete_of_an_unknown_submission_are_not_found(api, python_problem):
    submission = submit(UserFactory(), python_problem)
    for path in (f"submissions/ALGO/{submission.pk + 1000}", f"submissions/SQL/{submission.pk}",
                 f"submissions/CODE/{submission.pk}"):
        assert error_of(send(api, "POST", ADMIN + path + "/rejudge")) == (404, "not_found"), path
        assert error_of(send(api, "DELETE", ADMIN + path)) == (404, "not_found"), path
    assert JudgeJob.objects.get(pk=submission.current_judge_job_id).state == JobState.QUEUED


# --- races ---------------------------------------------------------------------------------------

@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_racing_registrations_of_one_name_make_one_node_and_refuse_the_rest(settings):
    """A double click, or two admins at once: both pass the "name is free" check, the unique
    index refuses the later insert — that is a taken name (400), never a server error."""
    settings.KECE_PROBE_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    admin = make_admin()
    group = HostGroupFactory()
    token = token_client(admin).defaults["HTTP_AUTHORIZATION"]

    def post(path, body):
        return lambda: send(Client(HTTP_AUTHORIZATION=token, raise_request_exception=False), "POST", path,
                            body).status_code

    for round_ in range(6):
        node = {"name": f"racer-{round_}", "pool": "python", "baseUrl": "https://10.0.0.1",
                "hostGroupId": group.pk, "maxSlots": 1}
        answers = run_concurrently([post(ADMIN + "judgers", node) for _ in range(3)])
        assert sorted(answers) == [201, 400, 400], answers
        rack = {"name": f"rack-{round_}", "hostId": "m", "totalSlots": 1}
        answers = run_concurrently([post(ADMIN + "host-groups", rack) for _ in range(3)])
        assert sorted(answers) == [201, 400, 400], answers
    assert JudgeNode.objects.count() == 6 and JudgeHostGroup.objects.count() == 7


# --- bulk rejudge ---------------------------------------------------------------------------------

def test_a_bulk_rejudge_is_accepted_tracked_and_cancelled_through_the_api(api, python_problem, settings):
    from kece.periodic import rejudges_step

    settings.KECE_REJUDGE_BATCH = 2
    node, identity = ready_node(pool="python")
    for _ in range(3):
        submit(UserFactory(), python_problem)
    for job in claim(identity, free_slots=3):
        assert settle(identity, judged(job)) == "settled"

    response = send(api, "POST", ADMIN + "rejudges", {"problemId": python_problem.pk})
    assert response.status_code == 202
    created = response.json()
    assert set(created) == {"rejudgeId", "total"} and created["total"] == 3
    path = ADMIN + f"rejudges/{created['rejudgeId']}"
    assert api.get(path).json() == {"id": created["rejudgeId"], "state": "RUNNING", "total": 3, "enqueued": 0,
                                    "judged": 0, "changed": 0, "skipped": 0}
    assert rejudges_step() == 2
    assert JudgeJob.objects.filter(state=JobState.QUEUED, priority_class="REJUDGE").count() == 2
    cancelled = send(api, "POST", path + "/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"
    assert rejudges_step() == 0
    assert api.get(path).json()["enqueued"] == 2


@pytest.mark.parametrize("body", [
    {}, {"problemId": 1, "submissions": [{"type": "ALGO", "id": 1}]}, {"nodeId": 1},
    {"problemId": 1, "since": "2026-01-01T00:00:00Z"}, {"submissions": []},
    {"submissions": [{"type": "CODE", "id": 1}]},
    {"nodeId": 1, "since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
])
def test_a_bulk_rejudge_names_exactly_one_way_of_choosing(api, body):
    assert error_of(send(api, "POST", ADMIN + "rejudges", body)) == (400, "invalid")


def test_a_bulk_rejudge_of_what_does_not_exist_is_refused_and_an_unknown_operation_is_not_found(api):
    assert error_of(send(api, "POST", ADMIN + "rejudges", {"problemId": 10**9})) == (400, "invalid")
    assert error_of(send(api, "POST", ADMIN + "rejudges", {"submissions": [{"type": "SQL", "id": 10**9}]})) == (
        400, "invalid")
    assert error_of(api.get(ADMIN + "rejudges/999999")) == (404, "not_found")
    assert error_of(send(api, "POST", ADMIN + "rejudges/999999/cancel")) == (404, "not_found")


def test_bulk_rejudges_are_for_admins_only(python_problem):
    student = token_client(UserFactory())
    assert error_of(send(student, "POST", ADMIN + "rejudges", {"problemId": python_problem.pk}))[0] == 403
