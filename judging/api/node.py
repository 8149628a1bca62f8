"""The node API (`/api/v1/internal/judgers/…`): thin views over the services."""

import asyncio
import logging

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import FileResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import SimpleRateThrottle

from judging import artifacts
from judging.api import node_serializers as s
from judging.selectors import artifact_for_lease
from judging.services.leases import RenewItem, lease_renew
from kece.api import ContractView, iso, validated
from kece.errors import Invalid, Unavailable
from kece.schema import errors
from nodes.auth import NodeCredentialAuthentication, session_identity
from nodes.services import PROTOCOL_VERSION, AgentReport, HeartbeatReport, node_heartbeat, node_join, \
    node_session_open

logger = logging.getLogger("kece.node_api")

TAGS = ["node"]
SESSION_PARAMETER = OpenApiParameter("X-Judge-Session", int, OpenApiParameter.HEADER, required=True,
                                     description="The node's current session epoch.")


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
    scope = "join"

    def get_rate(self):
        return settings.KECE_JOIN_THROTTLE

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class NodeView(ContractView):
    authentication_classes = [NodeCredentialAuthentication]
    permission_classes = [IsAuthenticated]


class JoinView(ContractView):
    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = [JoinThrottle]

    @extend_schema(tags=TAGS, request=s.JoinIn, responses={201: s.JoinOut, **errors(401, 429)}, auth=[],
                   summary="Exchange a one-time join code for a credential and a first session")
    def post(self, request):
        data = validated(s.JoinIn, request.data)
        joined = node_join(join_code=data["joinCode"], report=_report(data), now=timezone.now())
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
        return Response({"desiredState": node.desired_state, "maxSlots": node.max_slots, "serverTime": iso(now),
                         "heartbeatIntervalMs": settings.KECE_HEARTBEAT_INTERVAL_MS})


class RenewView(NodeView):
    @extend_schema(tags=TAGS, request=s.RenewIn, responses={200: s.RenewOut}, parameters=[SESSION_PARAMETER],
                   summary="Renew a batch of leases and report progress")
    def post(self, request):
        identity = session_identity(request)
        data = validated(s.RenewIn, request.data)
        items = [
            RenewItem(item["jobId"], item["leaseEpoch"], (item.get("progress") or {}).get("phase", ""),
                      (item.get("progress") or {}).get("testcase"))
            for item in data["leases"]
        ]
        answers = lease_renew(identity=identity, items=items, now=timezone.now())
        return Response({"leases": answers})


def _lease_header(request) -> int:
    try:
        epoch = int(request.META.get("HTTP_X_JUDGE_LEASE", ""))
    except ValueError as exc:
        raise Invalid("X-Judge-Lease must be the lease epoch (an integer).") from exc
    if not 0 <= epoch < 2**31:
        raise Invalid("X-Judge-Lease is out of range.")
    return epoch


class ArtifactView(NodeView):
    renderer_classes = ContractView.renderer_classes

    @extend_schema(
        tags=TAGS, summary="Download one of the job's files by digest under the live lease",
        parameters=[SESSION_PARAMETER, OpenApiParameter("X-Judge-Lease", int, OpenApiParameter.HEADER, required=True)],
        responses={(200, "application/octet-stream"): OpenApiResponse(description="The bytes."), **errors(400)},
    )
    def get(self, request, job_id: int, digest: str):
        identity = session_identity(request)
        lease_epoch = _lease_header(request)
        if not artifacts.is_digest(digest):
            raise Invalid("The digest must be 64 lowercase hex characters.")
        path = artifact_for_lease(identity=identity, job_id=job_id, lease_epoch=lease_epoch, digest=digest,
                                  now=timezone.now())
        try:
            handle = open(path, "rb")
        except FileNotFoundError as exc:
            logger.error("artifact missing from the store", extra={"job": job_id, "lease": lease_epoch,
                                                                   "digest": digest})
            raise Unavailable("The file is missing from the store.", retry_after=5) from exc
        response = _file_response(request, handle)
        response["Content-Length"] = str(path.stat().st_size)
        response["X-Content-SHA256"] = digest
        return response


CHUNK = 256 * 1024


def _file_response(request, handle):
    """Stream a file: an async iterator under ASGI (reads in a thread, no blocked event
    loop), a plain file response under WSGI."""
    if not isinstance(request._request, ASGIRequest):
        return FileResponse(handle, content_type="application/octet-stream")

    async def chunks():
        try:
            while data := await asyncio.to_thread(handle.read, CHUNK):
                yield data
        finally:
            handle.close()

    return StreamingHttpResponse(chunks(), content_type="application/octet-stream")
