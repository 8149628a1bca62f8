"""Host groups disabled and enabled, and nodes moved between them: a disabled machine's nodes
claim nothing and drain what they hold; a moved node drains and is verified again."""

import pytest
from django.utils import timezone

from judging.models import JobState, JudgeJob
from judging.services.leases import RenewItem, lease_renew
from nodes.models import DesiredState, HostGroupStatus, JudgeHostGroup, JudgeNode, NodeAudit
from tests.api.helpers import ADMIN, error_of, make_admin, ready_node, send, session_client, token_client
from tests.factories import HostGroupFactory, UserFactory
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    return token_client(make_admin())


def _set_status(api, group, status):
    group.refresh_from_db()
    return send(api, "PATCH", ADMIN + f"host-groups/{group.pk}", {"revision": group.revision, "status": status})


def test_a_disabled_groups_nodes_claim_nothing_and_drain_what_they_hold(api, problem):
    group = HostGroupFactory(name="rack-1", total_slots=8)
    node, identity = ready_node(host_group=group)
    submit(UserFactory(), problem)
    submit(UserFactory(), problem)
    [held] = claim(identity, free_slots=1)

    answer = _set_status(api, group, "DISABLED")
    assert answer.status_code == 200 and answer.json()["status"] == "DISABLED"
    assert claim(identity, free_slots=4) == [], "no new work for a disabled machine"
    renewed = lease_renew(identity=identity, items=[RenewItem(held.pk, held.lease_epoch)], now=timezone.now())
    assert renewed[0]["ok"], "what it holds still renews"
    assert settle(identity, judged(held)) == "settled"
    assert JudgeJob.objects.filter(state=JobState.QUEUED).count() == 1

    assert _set_status(api, group, "ACTIVE").json()["status"] == "ACTIVE"
    assert len(claim(identity, free_slots=4)) == 1
    entries = NodeAudit.objects.filter(host_group=group, action="host_group_update").order_by("id")
    assert [(e.before["status"], e.after["status"]) for e in entries] == [("ACTIVE", "DISABLED"),
                                                                        ("DISABLED", "ACTIVE")]
    assert node.pk


def test_a_status_that_is_not_one_or_a_stale_revision_changes_nothing(api):
    group = HostGroupFactory(name="rack-1")
    assert error_of(_set_status(api, group, "PAUSED")) == (400, "invalid")
    stale = send(api, "PATCH", ADMIN + f"host-groups/{group.pk}", {"revision": group.revision + 5,
                                                                   "status": "DISABLED"})
    assert error_of(stale) == (409, "revision_conflict")
    assert JudgeHostGroup.objects.get(pk=group.pk).status == HostGroupStatus.ACTIVE


def test_the_console_disables_and_enables_a_group_in_words(db):
    group = HostGroupFactory(name="rack-1")
    console = session_client(make_admin())
    page = console.get("/admin/judgers/host-groups").content.decode()
    assert "Disable rack-1" in page and "Active" in page
    console.post(f"/admin/judgers/host-groups/{group.pk}", {"revision": group.revision, "status": "DISABLED"})
    assert JudgeHostGroup.objects.get(pk=group.pk).status == HostGroupStatus.DISABLED
    page = console.get("/admin/judgers/host-groups").content.decode()
    assert "Disabled: its nodes take no new work" in page and "Enable rack-1" in page


def test_a_node_moved_to_another_group_drains_and_is_verified_again(api, problem):
    old, new = HostGroupFactory(name="rack-1"), HostGroupFactory(name="rack-2")
    node, identity = ready_node(host_group=old)
    submit(UserFactory(), problem)
    submit(UserFactory(), problem)
    [held] = claim(identity, free_slots=1)
    moved = send(api, "PATCH", ADMIN + f"judgers/{node.pk}", {"revision": node.revision, "hostGroupId": new.pk})
    assert moved.status_code == 200
    assert (moved.json()["desiredState"], moved.json()["observedState"]) == ("PENDING_VERIFICATION", "unverified")
    row = JudgeNode.objects.get(pk=node.pk)
    assert (row.host_group_id, row.config_revision) == (new.pk, node.config_revision + 1)
    assert claim(identity, free_slots=4) == [], "not verified for where it is now"
    assert settle(identity, judged(held)) == "settled", "what it held still settles"
    assert NodeAudit.objects.filter(node=node, action="update").get().after["config_revision"] == \
        node.config_revision + 1
    assert row.desired_state == DesiredState.PENDING_VERIFICATION
