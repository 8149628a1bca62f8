"""Request and response shapes of the node API (API.md, "Node API")."""

from rest_framework import serializers

from judging.models import JobPhase, Verdict
from judging.services.settle import OUTCOMES

MAX_SLOTS = 1024


class AgentReportIn(serializers.Serializer):
    agentVersion = serializers.CharField(max_length=64)
    runtimeSpec = serializers.CharField(max_length=64)
    localSlots = serializers.IntegerField(min_value=0, max_value=MAX_SLOTS)


class JoinIn(AgentReportIn):
    joinCode = serializers.CharField(max_length=200)


class SessionTimingsOut(serializers.Serializer):
    nodeId = serializers.IntegerField()
    pool = serializers.CharField()
    sessionEpoch = serializers.IntegerField()
    protocolVersion = serializers.IntegerField()
    heartbeatIntervalMs = serializers.IntegerField()
    renewIntervalMs = serializers.IntegerField()
    leaseTtlMs = serializers.IntegerField()
    claimWaitMs = serializers.IntegerField()


class JoinOut(SessionTimingsOut):
    credential = serializers.CharField()
    probeKey = serializers.CharField()


class SessionOut(SessionTimingsOut):
    desiredState = serializers.CharField()


class HealthIn(serializers.Serializer):
    ok = serializers.BooleanField()
    checks = serializers.DictField(child=serializers.BooleanField(), required=False, default=dict)

    def validate_checks(self, value):
        if len(value) > 64 or any(len(str(k)) > 64 for k in value):
            raise serializers.ValidationError("at most 64 checks with names of at most 64 characters")
        return value


class HeartbeatIn(AgentReportIn):
    running = serializers.IntegerField(min_value=0, max_value=MAX_SLOTS)
    health = HealthIn()


class HeartbeatOut(serializers.Serializer):
    desiredState = serializers.CharField()
    maxSlots = serializers.IntegerField()
    serverTime = serializers.CharField()
    heartbeatIntervalMs = serializers.IntegerField()


class ClaimIn(serializers.Serializer):
    freeSlots = serializers.IntegerField(min_value=0, max_value=MAX_SLOTS)
    waitMs = serializers.IntegerField(min_value=0, required=False, max_value=2**31)


class FileRefOut(serializers.Serializer):
    digest = serializers.CharField()
    bytes = serializers.IntegerField()


class SourceOut(FileRefOut):
    language = serializers.CharField()


class CaseOut(serializers.Serializer):
    ordinal = serializers.IntegerField()
    weight = serializers.IntegerField()
    input = FileRefOut()
    output = FileRefOut()


class LimitsOut(serializers.Serializer):
    timeLimitMs = serializers.IntegerField()
    memoryLimitMb = serializers.IntegerField()
    outputLimitKb = serializers.IntegerField()


class SqlOut(serializers.Serializer):
    dialect = serializers.CharField()
    ordered = serializers.BooleanField()
    schema = FileRefOut()
    seed = FileRefOut(allow_null=True)
    answer = FileRefOut()
    check = FileRefOut(allow_null=True)


class JobOut(serializers.Serializer):
    jobId = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=["JUDGE", "DIAGNOSTIC"])
    submissionType = serializers.CharField()
    submissionId = serializers.IntegerField()
    generation = serializers.IntegerField()
    pool = serializers.CharField()
    leaseEpoch = serializers.IntegerField()
    leaseRemainingMs = serializers.IntegerField()
    runtimeSpec = serializers.CharField()
    manifestId = serializers.IntegerField(allow_null=True)
    limits = LimitsOut()
    source = SourceOut(allow_null=True)
    cases = CaseOut(many=True)
    sql = SqlOut(allow_null=True)


class ClaimOut(serializers.Serializer):
    jobs = JobOut(many=True)
    desiredState = serializers.CharField()


class ProgressIn(serializers.Serializer):
    phase = serializers.ChoiceField(choices=JobPhase.values)
    testcase = serializers.IntegerField(min_value=0, max_value=2**31, required=False, allow_null=True)


class RenewItemIn(serializers.Serializer):
    jobId = serializers.IntegerField(min_value=1, max_value=2**62)
    leaseEpoch = serializers.IntegerField(min_value=0, max_value=2**31)
    progress = ProgressIn(required=False)


class RenewIn(serializers.Serializer):
    leases = RenewItemIn(many=True, max_length=64)


class RenewItemOut(serializers.Serializer):
    jobId = serializers.IntegerField()
    ok = serializers.BooleanField()
    leaseRemainingMs = serializers.IntegerField(required=False)
    error = serializers.ChoiceField(choices=["lease_lost", "cancelled"], required=False)


class RenewOut(serializers.Serializer):
    leases = RenewItemOut(many=True)


class CaseResultIn(serializers.Serializer):
    ordinal = serializers.IntegerField(min_value=1, max_value=100000)
    verdict = serializers.ChoiceField(choices=Verdict.values)
    timeMs = serializers.IntegerField(min_value=0, max_value=2**31)
    memoryKb = serializers.IntegerField(min_value=0, max_value=2**31)
    score = serializers.IntegerField(min_value=0, max_value=100)


class CheckItemIn(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    ok = serializers.BooleanField()
    detail = serializers.CharField(max_length=4000, allow_blank=True, required=False, default="")


class NextClaimIn(serializers.Serializer):
    freeSlots = serializers.IntegerField(min_value=0, max_value=MAX_SLOTS)


class ResultIn(serializers.Serializer):
    leaseEpoch = serializers.IntegerField(min_value=0, max_value=2**31)
    outcome = serializers.ChoiceField(choices=OUTCOMES)
    verdict = serializers.ChoiceField(choices=Verdict.values, required=False)
    score = serializers.IntegerField(min_value=0, max_value=100, required=False)
    timeMs = serializers.IntegerField(min_value=0, max_value=2**31, required=False, default=0)
    memoryKb = serializers.IntegerField(min_value=0, max_value=2**31, required=False, default=0)
    compileOutput = serializers.CharField(allow_blank=True, required=False, default="", trim_whitespace=False)
    cases = CaseResultIn(many=True, required=False, default=list, max_length=100000)
    checks = CheckItemIn(many=True, required=False, default=list, max_length=200)
    error = serializers.CharField(max_length=64, required=False, default="")
    message = serializers.CharField(allow_blank=True, required=False, default="", trim_whitespace=False)
    claim = NextClaimIn(required=False, help_text=(
        "Optional: once the result is accepted, lease up to freeSlots more jobs without waiting and return them "
        "in `jobs` — the node's next claim, carried on this request. Usually 1: the slot this job frees."))

    def validate(self, data):
        if data["outcome"] == "JUDGED":
            missing = [f for f in ("verdict", "score") if f not in data]
            if missing:
                raise serializers.ValidationError({f: ["required for a JUDGED outcome"] for f in missing})
        if data["outcome"] == "INFRA_ERROR" and not data.get("error"):
            raise serializers.ValidationError({"error": ["required for an INFRA_ERROR outcome"]})
        return data


class ResultOut(serializers.Serializer):
    status = serializers.ChoiceField(choices=["settled", "duplicate", "requeued", "failed"])
    jobs = JobOut(many=True, required=False, help_text="Only when the request carried `claim`.")
    desiredState = serializers.CharField(required=False, help_text="Only when the request carried `claim`.")
