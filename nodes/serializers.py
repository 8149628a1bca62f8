from rest_framework import serializers

from kece.api import iso
from nodes.selectors import observed_state


class NodeOut(serializers.Serializer):
    """The contract's Node object (API.md)."""

    def to_representation(self, node):
        now = self.context["now"]
        return {
            "id": node.pk,
            "name": node.name,
            "pool": node.pool,
            "hostGroupId": node.host_group_id,
            "baseUrl": node.base_url,
            "desiredState": node.desired_state,
            "observedState": observed_state(node, now=now),
            "maxSlots": node.max_slots,
            "localSlots": node.local_slots,
            "running": getattr(node, "running", 0),
            "lastHeartbeatAt": iso(node.last_heartbeat_at),
            "agentVersion": node.agent_version,
            "runtimeSpec": node.runtime_spec,
            "sessionEpoch": node.session_epoch,
            "selfCheck": {
                "status": node.self_check_status,
                "configRevision": node.self_check_revision,
                "finishedAt": iso(node.self_check_finished_at),
            },
            "revision": node.revision,
            "createdAt": iso(node.created_at),
            # Added, optional: why the node was taken out of judging, and since when.
            "quarantine": {"reason": node.quarantine_reason, "since": iso(node.quarantined_at)}
            if node.quarantined_at is not None else None,
        }


class SelfCheckSchema(serializers.Serializer):
    status = serializers.CharField()
    configRevision = serializers.IntegerField(allow_null=True)
    finishedAt = serializers.CharField(allow_null=True)


class QuarantineSchema(serializers.Serializer):
    reason = serializers.CharField()
    since = serializers.CharField()


class NodeSchema(serializers.Serializer):
    """Schema-only twin of NodeOut for the OpenAPI document."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    pool = serializers.CharField()
    hostGroupId = serializers.IntegerField()
    baseUrl = serializers.CharField()
    desiredState = serializers.ChoiceField(choices=["PENDING_VERIFICATION", "ENABLED", "DRAINING", "DISABLED"])
    observedState = serializers.ChoiceField(
        choices=["offline", "unhealthy", "busy", "ready", "draining", "disabled", "unverified"])
    maxSlots = serializers.IntegerField()
    localSlots = serializers.IntegerField()
    running = serializers.IntegerField()
    lastHeartbeatAt = serializers.CharField(allow_null=True)
    agentVersion = serializers.CharField()
    runtimeSpec = serializers.CharField()
    sessionEpoch = serializers.IntegerField()
    selfCheck = SelfCheckSchema()
    revision = serializers.IntegerField()
    createdAt = serializers.CharField()
    quarantine = QuarantineSchema(allow_null=True, required=False,
                                  help_text="Why what the node did took it out of judging, and since when; "
                                            "null when it is not quarantined. Cleared by a passing check.")


class NodePage(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.CharField(allow_null=True)
    previous = serializers.CharField(allow_null=True)
    results = NodeSchema(many=True)


class CheckItem(serializers.Serializer):
    name = serializers.CharField()
    ok = serializers.BooleanField()
    detail = serializers.CharField()


class CheckOut(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.CharField()
    items = CheckItem(many=True)
    configRevision = serializers.IntegerField()
    startedAt = serializers.CharField()
    finishedAt = serializers.CharField(allow_null=True)


class AuditOut(serializers.Serializer):
    id = serializers.IntegerField()
    actor = serializers.CharField()
    action = serializers.CharField()
    before = serializers.DictField()
    after = serializers.DictField()
    revision = serializers.IntegerField(allow_null=True)
    at = serializers.CharField()


class RecentErrorOut(serializers.Serializer):
    jobId = serializers.IntegerField()
    error = serializers.CharField()
    message = serializers.CharField()
    at = serializers.CharField()


class NodeDetailSchema(NodeSchema):
    checks = CheckOut(many=True)
    recentErrors = RecentErrorOut(many=True)
    audit = AuditOut(many=True)


class RegisterIn(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    pool = serializers.CharField(max_length=16)
    baseUrl = serializers.CharField(max_length=300)
    hostGroupId = serializers.IntegerField(min_value=1, max_value=2**62)
    maxSlots = serializers.IntegerField(min_value=1, max_value=256)


class JoinCodeOut(serializers.Serializer):
    joinCode = serializers.CharField()
    joinCodeExpiresAt = serializers.CharField()


class RegisterOut(NodeSchema, JoinCodeOut):
    pass


class PatchIn(serializers.Serializer):
    revision = serializers.IntegerField(min_value=0, max_value=2**31)
    name = serializers.CharField(max_length=100, required=False)
    maxSlots = serializers.IntegerField(min_value=1, max_value=256, required=False)
    baseUrl = serializers.CharField(max_length=300, required=False)
    hostGroupId = serializers.IntegerField(min_value=1, max_value=2**62, required=False)
    desiredState = serializers.ChoiceField(choices=["ENABLED", "DRAINING", "DISABLED"], required=False)


class RevokeIn(serializers.Serializer):
    reason = serializers.CharField(max_length=500, allow_blank=True, required=False, default="")


class HostGroupIn(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    hostId = serializers.CharField(max_length=200)
    totalSlots = serializers.IntegerField(min_value=1, max_value=4096)


class HostGroupPatchIn(serializers.Serializer):
    revision = serializers.IntegerField(min_value=0, max_value=2**31)
    name = serializers.CharField(max_length=100, required=False)
    hostId = serializers.CharField(max_length=200, required=False)
    totalSlots = serializers.IntegerField(min_value=1, max_value=4096, required=False)
    # Added to the contract's PATCH: a DISABLED group's nodes claim nothing (its leases drain).
    status = serializers.ChoiceField(choices=["ACTIVE", "DISABLED"], required=False)


class HostGroupOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    hostId = serializers.CharField()
    totalSlots = serializers.IntegerField()
    status = serializers.CharField()
    revision = serializers.IntegerField()


class PoolFiguresOut(serializers.Serializer):
    pool = serializers.CharField()
    pending = serializers.IntegerField()
    claimable = serializers.IntegerField()
    backoff = serializers.IntegerField()
    oldestWaitSeconds = serializers.IntegerField()
    readyNodes = serializers.IntegerField()
    running = serializers.IntegerField()
    pendingByClass = serializers.DictField(child=serializers.IntegerField(), required=False,
                                           help_text="Queued jobs per priority class: EXAM, PRACTICE, REJUDGE.")
    oldestWaitByClass = serializers.DictField(child=serializers.IntegerField(), required=False,
                                              help_text="Seconds the oldest queued job of each class has waited.")
    throttling = serializers.BooleanField(required=False,
                                          help_text="Practice submits are refused (429) and bulk rejudges paused.")


def host_group_out(group) -> dict:
    return {"id": group.pk, "name": group.name, "hostId": group.host_id, "totalSlots": group.total_slots,
            "status": group.status, "revision": group.revision}
