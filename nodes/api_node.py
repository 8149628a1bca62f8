"""The node API for a node's own life (`/api/v1/internal/judgers/join`, `session`,
`heartbeat`): thin views over `nodes.services`."""

import logging

from django.conf import settings
from django.core.cache.backends.locmem import LocMemCache
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import SimpleRateThrottle

from judging.api import node_serializers as s
from judging.api.node import SESSION_PARAMETER, TAGS, NodeView
from judging.auth import session_identity
from kece.api import ContractView, iso, validated
from kece.redis_clients import already_reported
from kece.schema import errors
from nodes.services import PROTOCOL_VERSION, AgentReport, HeartbeatReport, node_heartbeat, node_join, \
    node_session_open

logger = logging.getLogger("kece.node_api")


def timings() -> dict:
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "heartbeatIntervalMs": settings.KECE_HEARTBEAT_INTERVAL_MS,
        "renewIntervalMs": settings.KECE_RENEW_INTERVAL_MS,
        "leaseTtlMs": settings.KECE_LEASE_TTL_MS,
        "claimWaitMs": settings.KECE_CLAIM_WAIT_MS,
    }


def _report(data) -> AgentReport:
    return AgentReport(data["agentVersion"], data["runtimeSpec"], data["localSlots"])


class JoinThrottle(SimpleRateThrottle):
    """Joins per client address, counted in the shared cache; while it cannot be reached, in
    this process's memory. The cache holds hints: a Redis outage must not stop nodes from
    joining (or finishing a credential rotation), and guesses at a code stay limited."""

    scope = "join"
    _in_process = LocMemCache("kece-join-throttle", {})

    def allow_request(self, request, view):
        try:
            return super().allow_request(request, view)
        except Exception as error:  # noqa: BLE001 - whatever the cache's client raises
            if not already_reported(error):
                logger.warning("joins counted in this process: the cache cannot be reached",
                               extra={"error": type(error).__name__})
            self.cache = self._in_process
            return super().allow_request(request, view)

    def get_rate(self):
        return settings.KECE_JOIN_THROTTLE

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class JoinView(ContractView):
    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = [JoinThrottle]

    @extend_schema(tags=TAGS, request=s.JoinIn, responses={201: s.JoinOut, **errors(401, 429)}, auth=[],
                   summary="Exchange a one-time join code for a credential and a first session")
    def post(self, request):
        data = validated(s.JoinIn, request.data)
        joined = node_join(join_code=data["joinCode"], report=_report(data), now=timezone.now(),
                           join_key=data.get("joinKey", ""), join_attempt=data.get("joinAttempt", 0))
        node = joined.node
        return Response({"nodeId": node.pk, "pool": node.pool, "credential": joined.credential,
                         "probeKey": joined.probe_key, "sessionEpoch": node.session_epoch, **timings()}, status=201)


class SessionView(NodeView):
    @extend_schema(tags=TAGS, request=s.AgentReportIn, responses={200: s.SessionOut},
                   summary="Open a new session; the previous session's leases are released at once")
    def post(self, request):
        data = validated(s.AgentReportIn, request.data)
        node = node_session_open(node_id=request.auth.pk, credential_digest_value=request.auth.credential_digest,
                                 report=_report(data), now=timezone.now())
        return Response({"nodeId": node.pk, "pool": node.pool, "sessionEpoch": node.session_epoch,
                         "desiredState": node.desired_state, **timings()})


class HeartbeatView(NodeView):
    @extend_schema(tags=TAGS, request=s.HeartbeatIn, responses={200: s.HeartbeatOut}, parameters=[SESSION_PARAMETER],
                   summary="Report liveness, versions, slots and health")
    def post(self, request):
        identity = session_identity(request)
        data = validated(s.HeartbeatIn, request.data)
        now = timezone.now()
        beat = HeartbeatReport(_report(data), data["running"], data["health"]["ok"], data["health"]["checks"])
        node = node_heartbeat(node_id=identity.node_id, credential_digest_value=identity.credential_digest,
                              session_epoch=identity.session_epoch, beat=beat, now=now)
        # Added to the contract: why a quarantined node gets no judge jobs, for its owner.
        quarantine = {"since": iso(node.quarantined_at), "reason": node.quarantine_reason} \
            if node.quarantined_at is not None else None
        return Response({"desiredState": node.desired_state, "maxSlots": node.max_slots, "serverTime": iso(now),
                         "quarantine": quarantine,
                         "heartbeatIntervalMs": settings.KECE_HEARTBEAT_INTERVAL_MS})
