import threading
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from judging.models import JobState
from judging.services.leases import RenewItem, lease_renew
from nodes.models import DesiredState, NodeAudit
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = pytest.mark.django_db


def test_a_draining_node_claims_nothing_new_but_finishes_what_it_holds(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    submit(student, problem)
    [job] = claim(identity)
    out = StringIO()
    call_command("drain_node", node.name, stdout=out)
    assert "DRAINING; 1 running job(s)" in out.getvalue()
    node.refresh_from_db()
    assert node.desired_state == DesiredState.DRAINING
    assert NodeAudit.objects.filter(node=node, action="update", after__desired_state="DRAINING").exists()

    assert claim(identity) == []
    assert lease_renew(identity=identity, items=[RenewItem(job.pk, job.lease_epoch)], now=timezone.now())[0]["ok"]
    assert settle(identity, judged(job)) == "settled"


def test_the_log_names_the_node_and_who_drained_it(node_a, caplog):
    """Alerts name nodes by name; the log line must too, and say who did it (the audit does)."""
    node, _ = node_a
    with caplog.at_level("INFO", logger="kece.nodes"):
        call_command("drain_node", node.name, stdout=StringIO())
    [line] = [r for r in caplog.records if r.getMessage() == "node updated"]
    assert (line.node, line.nodeName, line.actor, line.state) == (node.pk, node.name, "manage.py drain_node", "DRAINING")


@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_drain_node_waits_until_the_last_lease_is_settled(student, problem, node_a):
    node, identity = node_a
    submit(student, problem)
    [job] = claim(identity)

    def finish_later():
        time.sleep(1.5)
        settle(identity, judged(job))
        from django.db import connection
        connection.close()

    threading.Thread(target=finish_later).start()
    out = StringIO()
    call_command("drain_node", str(node.pk), "--wait", "--timeout", "20", stdout=out)
    assert out.getvalue().strip().endswith("holds no lease; it may be stopped")
    assert job.__class__.objects.get(pk=job.pk).state == JobState.COMPLETED


def test_an_unknown_node_is_a_clear_error(db):
    with pytest.raises(CommandError, match="no node 'ghost'"):
        call_command("drain_node", "ghost")


def test_an_admins_edit_landing_while_it_drains_is_drained_too(node_a, monkeypatch):
    """The console saves the node (a new revision) between the command's read and its write:
    the command drains the node as it now is instead of failing on the revision."""
    from nodes import services

    node, _ = node_a
    update, edits = services.node_update, []

    def an_edit_lands_first(**kwargs):
        if not edits:
            edits.append(update(node_id=node.pk, revision=kwargs["revision"],
                                changes={"max_slots": 3}, actor=None, now=timezone.now()))
        return update(**kwargs)

    monkeypatch.setattr(services, "node_update", an_edit_lands_first)
    out = StringIO()
    call_command("drain_node", node.name, stdout=out)
    node.refresh_from_db()
    assert (node.desired_state, node.max_slots) == (DesiredState.DRAINING, 3)
    assert "DRAINING" in out.getvalue()
