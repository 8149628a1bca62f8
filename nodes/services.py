"""Node life: register, join, session, heartbeat, enable/drain/disable, revoke, rotate.

Writes that change what a node may claim lock the node row, which claim, renew and settle
lock too, so a drain or revoke is never interleaved with a claim half-way.
"""

import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from contextlib import contextmanager

from django.db import IntegrityError, transaction
from django.db.models import F

from judging.clock import require_agreeing_clock
from judging.identity import NodeIdentity, check_node_identity, credential_digest
from judging.locking import lock_host_group, lock_node
from judging.services.leases import release_node_leases
from judging.timing import offline_after
from judging.wakeups import node_changed_after_commit
from kece.api import iso
from kece.errors import InvalidJoinCode, Invalid, NotFound, NotVerified, RevisionConflict, Unauthenticated
from nodes.models import (
    DesiredState, HostGroupStatus, JoinCode, JudgeHostGroup, JudgeNode, NodeAudit, self_check_passed_for_current_config,
)
from nodes.probe import normalize_base_url
from pools.registry import POOLS

logger = logging.getLogger("kece.nodes")

JOIN_CODE_TTL = timedelta(minutes=10)
PROTOCOL_VERSION = 1
MAX_SLOTS_LIMIT = 256


def audit(*, node=None, host_group=None, actor, action: str, before: dict, after: dict, revision=None):
    NodeAudit.objects.create(
        node=node, host_group=host_group, actor=actor if getattr(actor, "pk", None) else None,
        actor_name=actor_name(actor),
        action=action, before=before, after=after, revision=revision,
    )


# What the server's own actions are audited as (a quarantine and its end).
SYSTEM_ACTOR = "system"


def actor_name(actor) -> str:
    """Who did it, as the audit names them: a user's name, or what a command calls itself."""
    return getattr(actor, "username", "") or (actor if isinstance(actor, str) else "")


def _node_fields(node, names) -> dict:
    values = {}
    for name in names:
        value = getattr(node, name)
        values[name] = iso(value) if isinstance(value, datetime) else value
    return values


# --- join codes and credentials ------------------------------------------------------------

@dataclass(frozen=True)
class IssuedJoinCode:
    code: str
    expires_at: object


def _supersede_join_codes(node, *, now) -> None:
    """The node's earlier codes stop working: an unused one joins no more, a used one no
    longer joins again with its key (`node_join`)."""
    JoinCode.objects.filter(node=node, superseded_at__isnull=True).update(superseded_at=now)


def _issue_join_code(node, *, actor, now) -> IssuedJoinCode:
    # 192 random bits; only the digest is kept.
    code = secrets.token_urlsafe(24)
    _supersede_join_codes(node, now=now)
    expires_at = now + JOIN_CODE_TTL
    JoinCode.objects.create(node=node, code_digest=credential_digest(code), expires_at=expires_at,
                            created_by=actor if getattr(actor, "pk", None) else None)
    return IssuedJoinCode(code, expires_at)


def node_issue_join_code(*, node_id: int, actor, now, action: str = "join_code") -> IssuedJoinCode:
    """A new one-time join code (also how a credential is rotated: the old credential keeps
    working until the node joins with the new code)."""
    with transaction.atomic(durable=True):
        node = lock_node(node_id)
        if node is None:
            raise NotFound()
        issued = _issue_join_code(node, actor=actor, now=now)
        audit(node=node, actor=actor, action=action, before={}, after={"joinCodeExpiresAt": iso(issued.expires_at)},
               revision=node.revision)
    return issued


@dataclass(frozen=True)
class AgentReport:
    agent_version: str
    runtime_spec: str
    local_slots: int


def _apply_agent_report(node, report: AgentReport, *, now) -> None:
    node.agent_version = report.agent_version[:64]
    node.runtime_spec = report.runtime_spec[:64]
    node.local_slots = report.local_slots
    node.last_heartbeat_at = now


SESSION_FIELDS = ["session_epoch", "session_open", "agent_version", "runtime_spec", "local_slots",
                  "last_heartbeat_at", "updated_at"]


def _new_session(node, report: AgentReport, *, now, reason: str) -> int:
    """Open the next session; the previous session's leases are released at once."""
    released = release_node_leases(node, now=now, reason=reason)
    node.session_epoch += 1
    node.session_open = True
    _apply_agent_report(node, report, now=now)
    return released


@dataclass(frozen=True)
class JoinResult:
    node: JudgeNode
    credential: str
    probe_key: str


def node_join(*, join_code: str, report: AgentReport, now, join_key: str = "", join_attempt: int = 0) -> JoinResult:
    """Exchange a one-time join code for a credential, a probe key and a first session.

    Unknown, expired, superseded and used codes get the same answer. The code is consumed
    by a guarded UPDATE under the node lock, so two agents racing with one code cannot
    both join.

    A join that came with a `join_key` (a random string the agent keeps while it retries)
    may be made again with the same code and key and a higher `join_attempt` (the agent's
    count of its tries) until the code would have expired, as long as the node has not been
    heard from with the credential since (`joined_unheard`: no heartbeat, no session): the
    answer, the only copy of the credential, was lost on its way back. The credential is
    then issued anew, and the one nobody received stops working. An earlier try that
    arrives late is refused: it would replace the credential the agent now holds.
    """
    require_agreeing_clock()  # a code's expiry is a deadline, the first heartbeat a time claims judge by
    digest = credential_digest(join_code or "")
    key_digest = credential_digest(join_key) if join_key else ""
    node_id = JoinCode.objects.filter(code_digest=digest).values_list("node_id", flat=True).first()
    if node_id is None:
        raise InvalidJoinCode()
    with transaction.atomic(durable=True):
        node = lock_node(node_id)
        valid = JoinCode.objects.filter(code_digest=digest, node_id=node_id, superseded_at__isnull=True,
                                        expires_at__gt=now)
        consumed = valid.filter(used_at__isnull=True).update(used_at=now, join_key_digest=key_digest,
                                                              join_attempt=join_attempt)
        if node is None or not (consumed or _join_again(valid, node, key_digest=key_digest,
                                                        attempt=join_attempt, now=now)):
            raise InvalidJoinCode()
        credential = secrets.token_urlsafe(32)
        probe_key = secrets.token_urlsafe(32)
        node.credential_digest = credential_digest(credential)
        node.probe_key = probe_key
        node.revoked_at = None
        node.joined_unheard = True
        released = _new_session(node, report, now=now, reason="session_replaced")
        # Only the fields written here: releasing the leases may have written others (a
        # failed self-check) that this stale copy must not overwrite.
        node.save(update_fields=SESSION_FIELDS + ["credential_digest", "probe_key", "revoked_at", "joined_unheard"])
        node_changed_after_commit(node.pk)
    logger.info("node joined" if consumed else "node joined again with its join key: the first answer was lost",
                extra={"node": node.pk, "nodeName": node.name, "pool": node.pool, "session": node.session_epoch,
                       "released": released})
    return JoinResult(node, credential, probe_key)


def _join_again(codes, node, *, key_digest: str, attempt: int, now) -> bool:
    """Take a used code of `codes` (valid ones of the locked `node`) again for a later try of
    the join that used it, with its key, while the node has not been heard from since."""
    if not key_digest or node.revoked_at is not None or not node.joined_unheard:
        return False
    return bool(codes.filter(join_key_digest=key_digest, join_attempt__lt=attempt)
                .update(used_at=now, join_attempt=attempt))


def node_session_open(*, node_id: int, credential_digest_value: str, report: AgentReport, now) -> JudgeNode:
    require_agreeing_clock()  # the session's first heartbeat is a time claims judge freshness by
    with transaction.atomic(durable=True):
        node = lock_node(node_id)
        if node is None or node.revoked_at is not None or node.credential_digest != credential_digest_value:
            raise Unauthenticated("The node credential is unknown or revoked.")
        released = _new_session(node, report, now=now, reason="session_replaced")
        node.joined_unheard = False  # heard from with its credential: a join of it stands
        node.save(update_fields=SESSION_FIELDS + ["joined_unheard"])
        node_changed_after_commit(node.pk)
    logger.info("node session opened", extra={"node": node.pk, "nodeName": node.name, "pool": node.pool,
                                              "session": node.session_epoch, "released": released})
    return node


@dataclass(frozen=True)
class HeartbeatReport:
    report: AgentReport
    running: int
    health_ok: bool
    health_checks: dict


def node_heartbeat(*, node_id: int, credential_digest_value: str, session_epoch: int, beat: HeartbeatReport,
                   now) -> JudgeNode:
    """Record a heartbeat at the server's receive time, under the node lock."""
    require_agreeing_clock()  # its time is what claims judge freshness by
    with transaction.atomic(durable=True):
        node = lock_node(node_id)
        check_node_identity(node, NodeIdentity(node_id, credential_digest_value, session_epoch))
        # Back from silence or ill health, it may claim again from now on: noted as a change
        # (`updated_at`), so the stall rule counts its idle time from here, not from before.
        back = beat.health_ok and not (node.health_ok and heartbeat_is_fresh(node, now=now))
        before = _reported(node)
        _apply_agent_report(node, beat.report, now=now)
        node.running_reported = beat.running
        node.health_ok = beat.health_ok
        node.health_checks = beat.health_checks
        node.joined_unheard = False  # heard from with its credential: the join that gave it stands
        node.save(update_fields=["agent_version", "runtime_spec", "local_slots", "last_heartbeat_at",
                                 "running_reported", "health_ok", "health_checks", "joined_unheard",
                                 *(["updated_at"] if back else [])])
    _log_reported_changes(node, before)
    return node


def _reported(node) -> dict:
    """What a heartbeat reports of a node that an operator follows in the logs."""
    failing = sorted(name for name, ok in (node.health_checks or {}).items() if not ok)
    return {"healthOk": node.health_ok, "failing": failing, "runtimeSpec": node.runtime_spec,
            "agentVersion": node.agent_version, "localSlots": node.local_slots}


def _log_reported_changes(node, before: dict) -> None:
    """A line when a heartbeat changes what the node reports (its health, the checks that
    fail, its runtime spec, agent version or local slots): the log tells when a node fell
    ill or was upgraded, not only the console's current view."""
    after = _reported(node)
    changed = {key: value for key, value in after.items() if before[key] != value}
    if not changed:
        return
    ill = not after["healthOk"] and (before["healthOk"] or "failing" in changed)
    message = "node reports ill health" if ill else \
        "node reports good health" if "healthOk" in changed else "node reports a change"
    logger.log(logging.WARNING if ill else logging.INFO, message, extra={
        "node": node.pk, "nodeName": node.name, "pool": node.pool, **after,
        "before": {key: before[key] for key in changed}})


# --- admin writes -------------------------------------------------------------------------------

AUDITED_FIELDS = ("name", "pool", "base_url", "host_group_id", "max_slots", "desired_state", "config_revision")


@contextmanager
def name_taken_on_conflict():
    """Names are checked before the insert, but two admins (or one double click) racing with
    one name both pass that check and the unique index refuses the second write: that is
    the same mistake as a taken name, not a server error."""
    try:
        yield
    except IntegrityError as exc:
        raise Invalid("That name is already taken.", fields={"name": ["already taken"]}) from exc


def _check_slots(max_slots) -> int:
    if not isinstance(max_slots, int) or isinstance(max_slots, bool) or not 1 <= max_slots <= MAX_SLOTS_LIMIT:
        raise Invalid(f"maxSlots must be an integer from 1 to {MAX_SLOTS_LIMIT}.", fields={"maxSlots": ["out of range"]})
    return max_slots


def _check_name(name) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise Invalid("name must be 1…100 characters.", fields={"name": ["invalid"]})
    return name.strip()


def _host_group(host_group_id) -> JudgeHostGroup:
    group = JudgeHostGroup.objects.filter(pk=host_group_id).first() if isinstance(host_group_id, int) else None
    if group is None:
        raise Invalid("Unknown host group.", fields={"hostGroupId": ["unknown host group"]})
    return group


def _check_pool(pool) -> str:
    if pool not in POOLS:
        raise Invalid(f"pool must be one of {', '.join(POOLS)}.", fields={"pool": ["unknown pool"]})
    return pool


def _every_field(**checks) -> dict:
    """Each field's checked value, or one Invalid naming every field refused (a form shows
    each problem beside its field, not the first alone)."""
    values, refusals = {}, []
    for field, check in checks.items():
        try:
            values[field] = check()
        except Invalid as refusal:
            refusals.append(refusal)
    if refusals:
        raise Invalid(" ".join(r.detail for r in refusals),
                      fields={k: v for r in refusals for k, v in (r.fields or {}).items()},
                      field_details={k: r.detail for r in refusals for k in (r.fields or {})})
    return values


def node_register(*, name, pool, base_url, host_group_id, max_slots, actor, now):
    """A new node, pending verification, and its one-time join code (shown once)."""
    checked = _every_field(pool=lambda: _check_pool(pool), name=lambda: _check_name(name),
                           max_slots=lambda: _check_slots(max_slots), url=lambda: normalize_base_url(base_url),
                           group=lambda: _host_group(host_group_id))
    name, max_slots, url, group = checked["name"], checked["max_slots"], checked["url"], checked["group"]
    if JudgeNode.objects.filter(name=name).exists():
        raise Invalid("A node with this name exists.", fields={"name": ["already taken"]})
    with name_taken_on_conflict(), transaction.atomic(durable=True):
        node = JudgeNode.objects.create(name=name, pool=pool, base_url=url, host_group=group, max_slots=max_slots)
        issued = _issue_join_code(node, actor=actor, now=now)
        audit(node=node, actor=actor, action="register", before={}, after=_node_fields(node, AUDITED_FIELDS),
               revision=node.revision)
    logger.info("node registered", extra={"node": node.pk, "nodeName": node.name, "pool": pool,
                                          "actor": actor_name(actor)})
    return node, issued


def heartbeat_is_fresh(node, *, now) -> bool:
    return node.last_heartbeat_at is not None and node.last_heartbeat_at >= now - offline_after()


def _enable_gate(node, *, now) -> None:
    if node.revoked_at is not None:
        raise NotVerified("The node was revoked: rotate its credential and let it join again before enabling it.")
    if not heartbeat_is_fresh(node, now=now) or not node.session_open:
        raise NotVerified("The node has no fresh heartbeat.")
    if not self_check_passed_for_current_config(node):
        raise NotVerified("The node has no passing self-check for its current configuration.")


SETTABLE_STATES = (DesiredState.ENABLED, DesiredState.DRAINING, DesiredState.DISABLED)


def node_update(*, node_id: int, revision: int | None, changes: dict, actor, now) -> JudgeNode:
    """Apply an admin PATCH based on `revision`; a stale revision is refused. `revision`
    None: a change that holds whatever the node is now (a drain), checked under the lock.

    Changing the address or the host group bumps the config revision and sends the node
    back to verification: its earlier self-check no longer speaks for it (another machine,
    other neighbours). Until it passes again the node takes no new judge jobs; the leases it
    holds still renew and settle, so a move drains it.
    """
    if "desired_state" in changes and changes["desired_state"] not in SETTABLE_STATES:
        raise Invalid("desiredState must be ENABLED, DRAINING or DISABLED.", fields={"desiredState": ["invalid"]})
    if "name" in changes:
        changes["name"] = _check_name(changes["name"])
    if "max_slots" in changes:
        _check_slots(changes["max_slots"])
    if "base_url" in changes:
        # The address the node already has is not looked up again: the console's form sends it
        # with every edit, and a renamed node whose host does not resolve now is still renamed.
        unchanged = normalize_base_url(changes["base_url"], resolve=False) == \
            JudgeNode.objects.filter(pk=node_id).values_list("base_url", flat=True).first()
        changes["base_url"] = normalize_base_url(changes["base_url"], resolve=not unchanged)
    if "host_group_id" in changes:
        _host_group(changes["host_group_id"])
    with name_taken_on_conflict(), transaction.atomic(durable=True):
        node = lock_node(node_id)
        if node is None:
            raise NotFound()
        if revision is not None and revision != node.revision:
            raise RevisionConflict(f"The node is at revision {node.revision}, not {revision}.")
        before = _node_fields(node, AUDITED_FIELDS)
        if "name" in changes and changes["name"] != node.name and \
                JudgeNode.objects.filter(name=changes["name"]).exclude(pk=node.pk).exists():
            raise Invalid("A node with this name exists.", fields={"name": ["already taken"]})
        reverify = any(name in changes and changes[name] != getattr(node, name) for name in ("base_url", "host_group_id"))
        for field_name in ("name", "max_slots", "host_group_id", "base_url"):
            if field_name in changes:
                setattr(node, field_name, changes[field_name])
        if reverify:
            node.config_revision += 1
            if node.desired_state != DesiredState.DISABLED:
                node.desired_state = DesiredState.PENDING_VERIFICATION
        target = changes.get("desired_state")
        if target and target != node.desired_state:
            if target == DesiredState.ENABLED:
                _enable_gate(node, now=now)
            node.desired_state = target
        after = _node_fields(node, AUDITED_FIELDS)
        if after == before:
            return node  # nothing changed: no new revision, nothing to audit
        node.revision += 1
        node.save()
        node_changed_after_commit(node.pk)
        audit(node=node, actor=actor, action="update", before=before, after=after, revision=node.revision)
    logger.info("node updated", extra={"node": node.pk, "nodeName": node.name, "revision": node.revision,
                                       "state": node.desired_state,
                                       "actor": actor_name(actor)})
    return node


def node_drain(*, node_id: int, actor, now) -> JudgeNode:
    """Stop new claims at once; running leases still renew and settle (ops command).

    A drain asks for one state whatever the node's other settings are: an admin's edit
    committing meanwhile is drained too, not a failed command."""
    return node_update(node_id=node_id, revision=None, changes={"desired_state": DesiredState.DRAINING},
                       actor=actor, now=now)


def node_revoke(*, node_id: int, reason: str, actor, now) -> JudgeNode:
    """Immediately: credential dead, session closed, leases released, state DISABLED. Again
    on a revoked node it does the same: a join code issued since (a rotation) stops working."""
    with transaction.atomic(durable=True):
        node = lock_node(node_id)
        if node is None:
            raise NotFound()
        before = _node_fields(node, AUDITED_FIELDS)
        released = release_node_leases(node, now=now, reason="node_revoked")
        node.credential_digest = None
        node.session_open = False
        node.session_epoch += 1
        node.revoked_at = now
        node.desired_state = DesiredState.DISABLED
        node.revision += 1
        node.save(update_fields=["credential_digest", "session_open", "session_epoch", "revoked_at",
                                 "desired_state", "revision", "updated_at"])
        node_changed_after_commit(node.pk)
        _supersede_join_codes(node, now=now)
        audit(node=node, actor=actor, action="revoke", before=before,
               after={**_node_fields(node, AUDITED_FIELDS), "reason": (reason or "")[:500], "releasedLeases": released},
               revision=node.revision)
    logger.warning("node revoked", extra={"node": node.pk, "nodeName": node.name, "released": released,
                                          "reason": reason,
                                          "actor": actor_name(actor)})
    return node


# --- host groups -----------------------------------------------------------------------------------

def host_group_create(*, name, host_id, total_slots, actor) -> JudgeHostGroup:
    _validate_group(name, host_id, total_slots)
    if JudgeHostGroup.objects.filter(name=name).exists():
        raise Invalid("A host group with this name exists.", fields={"name": ["already taken"]})
    with name_taken_on_conflict():
        group = JudgeHostGroup.objects.create(name=name, host_id=host_id, total_slots=total_slots)
    audit(host_group=group, actor=actor, action="host_group_create", before={},
           after={"name": name, "hostId": host_id, "totalSlots": total_slots}, revision=group.revision)
    return group


def _validate_group(name, host_id, total_slots):
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise Invalid("name must be 1…100 characters.", fields={"name": ["invalid"]})
    if not isinstance(host_id, str) or not host_id.strip() or len(host_id) > 200:
        raise Invalid("hostId must be 1…200 characters.", fields={"hostId": ["invalid"]})
    if not isinstance(total_slots, int) or isinstance(total_slots, bool) or not 1 <= total_slots <= 4096:
        raise Invalid("totalSlots must be an integer from 1 to 4096.", fields={"totalSlots": ["out of range"]})


def _group_fields(group) -> dict:
    return {"name": group.name, "hostId": group.host_id, "totalSlots": group.total_slots, "status": group.status}


def host_group_update(*, group_id: int, revision, changes: dict, actor) -> JudgeHostGroup:
    """Rename, resize, or disable and enable a host group, based on `revision`.

    A DISABLED group's nodes claim no judge job (`nodes.models.may_take_judge_jobs`, read
    under the group's lock by every claim); the leases they hold still renew and settle, so
    disabling drains the machine. Enabling gives them back their slots at once."""
    if "status" in changes and changes["status"] not in HostGroupStatus.values:
        raise Invalid("status must be ACTIVE or DISABLED.", fields={"status": ["invalid"]})
    with name_taken_on_conflict(), transaction.atomic(durable=True):
        group = lock_host_group(group_id)
        if group is None:
            raise NotFound()
        if revision != group.revision:
            raise RevisionConflict(f"The host group is at revision {group.revision}, not {revision}.")
        before = _group_fields(group)
        merged = {"name": group.name, "host_id": group.host_id, "total_slots": group.total_slots,
                  "status": group.status, **changes}
        _validate_group(merged["name"], merged["host_id"], merged["total_slots"])
        if JudgeHostGroup.objects.filter(name=merged["name"]).exclude(pk=group.pk).exists():
            raise Invalid("A host group with this name exists.", fields={"name": ["already taken"]})
        group.name, group.host_id, group.total_slots = merged["name"], merged["host_id"], merged["total_slots"]
        group.status = merged["status"]
        group.revision = F("revision") + 1
        group.save()
        group.refresh_from_db()
        audit(host_group=group, actor=actor, action="host_group_update", before=before, after=_group_fields(group),
              revision=group.revision)
        if before["status"] != group.status:
            for node_id in JudgeNode.objects.filter(host_group=group).values_list("id", flat=True):
                node_changed_after_commit(node_id)
    logger.info("host group updated", extra={"group": group.pk, "revision": group.revision, "status": group.status})
    return group
