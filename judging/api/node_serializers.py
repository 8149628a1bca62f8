"""Request and response shapes of the node API (API.md, "Node API")."""

import re

from rest_framework import serializers

from judging.models import VERDICTS, JobPhase, Verdict
from judging.services.settle import OUTCOMES

MAX_SLOTS = 1024


class AgentReportIn(serializers.Serializer):
    agentVersion = serializers.CharField(max_length=64)
    runtimeSpec = serializers.CharField(max_length=64)
    localSlots = serializers.IntegerField(min_value=0, max_value=MAX_SLOTS)


class JoinIn(AgentReportIn):
    joinCode = serializers.CharField(max_length=200)
    # Optional: a random string the agent keeps while it retries; the same code with the same
    # key joins again while the node has not been heard from (`nodes.services.node_join`).
    joinKey = serializers.RegexField(r"^[A-Za-z0-9_-]{16,128}\Z", required=False)
    # Optional, with joinKey: the agent's count of its tries of this join, from 1.
    joinAttempt = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False)


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


class QuarantineOut(serializers.Serializer):
    since = serializers.CharField()
    reason = serializers.CharField()


class HeartbeatOut(serializers.Serializer):
    desiredState = serializers.CharField()
    maxSlots = serializers.IntegerField()
    serverTime = serializers.CharField()
    heartbeatIntervalMs = serializers.IntegerField()
    # Null unless the node is quarantined (`nodes.quarantine`): then since when and why.
    quarantine = QuarantineOut(allow_null=True)


class NextClaimIn(serializers.Serializer):
    """The claim a result post may carry; the long-poll claim's body is this and `waitMs`."""
    freeSlots = serializers.IntegerField(min_value=0, max_value=MAX_SLOTS)
    inlineSource = serializers.BooleanField(required=False, default=False, help_text=(
        "Optional (an addition to the contract; default false): send each leased job's source with it, as "
        "`sourceText`, when the source is the submission's code, so that the node need not download it."))


class ClaimIn(NextClaimIn):
    # Above claimWaitMs it is capped, not refused (API.md).
    waitMs = serializers.IntegerField(min_value=0, required=False)


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
    sourceText = serializers.CharField(required=False, help_text=(
        "Only when the claim asked for `inlineSource` and the source is the submission's code: that code, whose "
        "UTF-8 bytes are the ones `source.digest` names. Without it the node downloads the source as before."))
    ownChecks = serializers.BooleanField(required=False, help_text=(
        "Optional, DIAGNOSTIC jobs only: judge the job as usual, and also attach the node's own self-check items "
        "to the result as `checks` ([{name, ok, detail}]). The server grades the verdict either way."))


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
    # Empty or null is no error: what an agent that sends every field posts for a JUDGED or
    # RELEASED outcome.
    error = serializers.CharField(max_length=64, required=False, default="", allow_blank=True, allow_null=True)
    message = serializers.CharField(allow_blank=True, required=False, default="", trim_whitespace=False)
    claim = NextClaimIn(required=False, help_text=(
        "Optional: once the result is accepted, lease up to freeSlots more jobs without waiting and return them "
        "in `jobs` — the node's next claim, carried on this request. Usually 1: the slot this job frees."))

    def validate(self, data):
        data["error"] = data.get("error") or ""
        if data["outcome"] == "JUDGED":
            missing = [f for f in ("verdict", "score") if f not in data]
            if missing:
                raise serializers.ValidationError({f: ["required for a JUDGED outcome"] for f in missing})
        if data["outcome"] == "INFRA_ERROR" and not data.get("error"):
            raise serializers.ValidationError({"error": ["required for an INFRA_ERROR outcome"]})
        return data


_UNSAFE_TEXT = re.compile("[\x00\ud800-\udfff]")  # what DRF's CharField refuses in any string
_RESULT_KEYS = {"leaseEpoch", "outcome", "verdict", "score", "timeMs", "memoryKb", "compileOutput", "cases",
                "checks", "error", "message", "claim"}
_CASE_KEYS = {"ordinal", "verdict", "timeMs", "memoryKb", "score"}
_CLAIM_KEYS = {"freeSlots", "inlineSource"}


def _whole(value, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _text(value) -> bool:
    return type(value) is str and _UNSAFE_TEXT.search(value) is None


def result_in_fast(data) -> dict | None:
    """`ResultIn`'s validated data for a plainly well-formed result, or None to let `ResultIn`
    decide (and word any error). One result is posted per job, and building the DRF
    serializer costs more than the rest of the request's parsing; this accepts only what
    `ResultIn` accepts unchanged, which a test checks against it on generated bodies."""
    if type(data) is not dict or not _RESULT_KEYS.issuperset(data):
        return None
    out = {"leaseEpoch": data.get("leaseEpoch"), "outcome": data.get("outcome"), "timeMs": data.get("timeMs", 0),
           "memoryKb": data.get("memoryKb", 0), "compileOutput": data.get("compileOutput", ""),
           "error": data.get("error") or "", "message": data.get("message", ""), "checks": []}
    if not (_whole(out["leaseEpoch"], 0, 2**31) and out["outcome"] in OUTCOMES and type(out["outcome"]) is str
            and _whole(out["timeMs"], 0, 2**31) and _whole(out["memoryKb"], 0, 2**31)
            and _text(out["compileOutput"]) and _text(out["message"]) and _text(out["error"])
            and len(out["error"]) <= 64 and out["error"] == out["error"].strip()
            and data.get("error") in (None, "", out["error"]) and data.get("checks", []) == []):
        return None
    if "verdict" in data:
        if type(data["verdict"]) is not str or data["verdict"] not in VERDICTS:
            return None
        out["verdict"] = data["verdict"]
    if "score" in data:
        if not _whole(data["score"], 0, 100):
            return None
        out["score"] = data["score"]
    cases = data.get("cases", [])
    if type(cases) is not list or len(cases) > 100000:
        return None
    for case in cases:
        if not (type(case) is dict and case.keys() == _CASE_KEYS and _whole(case["ordinal"], 1, 100000)
                and type(case["verdict"]) is str and case["verdict"] in VERDICTS
                and _whole(case["timeMs"], 0, 2**31) and _whole(case["memoryKb"], 0, 2**31)
                and _whole(case["score"], 0, 100)):
            return None
    out["cases"] = [dict(case) for case in cases]
    if "claim" in data:
        claim = data["claim"]
        if not (type(claim) is dict and "freeSlots" in claim and _CLAIM_KEYS.issuperset(claim)
                and _whole(claim["freeSlots"], 0, MAX_SLOTS) and type(claim.get("inlineSource", False)) is bool):
            return None
        out["claim"] = {"freeSlots": claim["freeSlots"], "inlineSource": claim.get("inlineSource", False)}
    if out["outcome"] == "JUDGED" and not ("verdict" in out and "score" in out):
        return None
    if out["outcome"] == "INFRA_ERROR" and not out["error"]:
        return None
    return out


class ResultOut(serializers.Serializer):
    status = serializers.ChoiceField(choices=["settled", "duplicate", "requeued", "failed"])
    jobs = JobOut(many=True, required=False, help_text=(
        "Only when the request carried `claim`. On a `duplicate`, first the jobs the earlier answer to this "
        "result held, if the node has not renewed them (that answer was lost), under the same leases."))
    desiredState = serializers.CharField(required=False, help_text="Only when the request carried `claim`.")
