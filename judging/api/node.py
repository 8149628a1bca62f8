"""The node API for jobs (`/api/v1/internal/judgers/jobs/…`): thin views over the services.

Join, session and heartbeat are the node's own life (`nodes.api_node`)."""

import asyncio
import logging

from django.core.handlers.asgi import ASGIRequest
from django.http import FileResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from judging import artifacts
from judging.api import node_serializers as s
from judging.auth import NodeCredentialAuthentication, session_identity
from judging.selectors import artifact_for_lease
from judging.services.leases import RenewItem, lease_renew
from kece.api import ContractView, validated
from kece.errors import Invalid, Unavailable
from kece.schema import errors

logger = logging.getLogger("kece.node_api")

TAGS = ["node"]
SESSION_PARAMETER = OpenApiParameter("X-Judge-Session", int, OpenApiParameter.HEADER, required=True,
                                     description="The node's current session epoch.")


class NodeView(ContractView):
    authentication_classes = [NodeCredentialAuthentication]
    permission_classes = [IsAuthenticated]


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
            logger.error("artifact missing from the store", extra={"job": job_id, "leaseEpoch": lease_epoch,
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
