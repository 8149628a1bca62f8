"""What a heartbeat changes is in the log: an operator reading it after a night learns when a
node fell ill, which check failed, and when it was upgraded; a heartbeat that changes
nothing writes nothing (one every few seconds per node)."""

from django.utils import timezone

from nodes.services import AgentReport, HeartbeatReport, node_heartbeat


def _beat(node, identity, *, healthy=True, checks=None, version=None, spec=None):
    node_heartbeat(node_id=node.pk, credential_digest_value=identity.credential_digest,
                   session_epoch=identity.session_epoch, now=timezone.now(),
                   beat=HeartbeatReport(AgentReport(version or node.agent_version, spec or node.runtime_spec,
                                                    node.local_slots),
                                        running=0, health_ok=healthy, health_checks=checks or {"sandbox": True}))


def _lines(caplog):
    return [(r.levelname, r.getMessage(), r) for r in caplog.records if r.name == "kece.nodes"]


def test_falling_ill_and_recovering_are_logged_once_each_with_the_failing_checks(node_a, caplog):
    node, identity = node_a
    _beat(node, identity)
    with caplog.at_level("INFO", logger="kece.nodes"):
        _beat(node, identity)  # nothing changed: nothing said
        assert _lines(caplog) == []
        _beat(node, identity, healthy=False, checks={"sandbox": False, "disk": True})
        _beat(node, identity, healthy=False, checks={"sandbox": False, "disk": True})
        _beat(node, identity, healthy=False, checks={"sandbox": False, "disk": False})
        _beat(node, identity)
    ill, worse, well = _lines(caplog)
    assert ill[:2] == ("WARNING", "node reports ill health")
    assert (ill[2].nodeName, ill[2].healthOk, ill[2].failing, ill[2].before) == \
        (node.name, False, ["sandbox"], {"healthOk": True, "failing": []})
    assert worse[:2] == ("WARNING", "node reports ill health") and worse[2].failing == ["disk", "sandbox"]
    assert well[:2] == ("INFO", "node reports good health") and well[2].failing == []


def test_an_upgrade_is_logged_with_what_it_was_before(node_a, caplog):
    node, identity = node_a
    _beat(node, identity)
    old_spec, old_version = node.runtime_spec, node.agent_version
    with caplog.at_level("INFO", logger="kece.nodes"):
        _beat(node, identity, version="2.0.0", spec="python-r2")
    [(level, message, line)] = _lines(caplog)
    assert (level, message) == ("INFO", "node reports a change")
    assert (line.runtimeSpec, line.agentVersion) == ("python-r2", "2.0.0")
    assert line.before == {"runtimeSpec": old_spec, "agentVersion": old_version}
