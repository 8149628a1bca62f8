"""The node API for jobs (`/api/v1/internal/judgers/jobs/…`): thin views over the services.

Join, session and heartbeat are the node's own life (`nodes.api_node`)."""

import asyncio
import logging
import os

from django.core.handlers.asgi import ASGIRequest
from django.http import FileResponse, HttpResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from judging import artifacts
from judging.api import bare
from judging.api import node_serializers as s
from judging.auth import NodeCredentialAuthentication, authenticate_cached, epoch_of, session_identity
from judging.selectors import artifact_for_lease
from judging.services.leases import RenewItem, lease_renew
from judging.waiting import registry, run_db
from kece.api import ContractView, validated
from kece.errors import DomainError, Invalid, Unavailable
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


def lease_header(value) -> int:
    epoch = epoch_of(value)
    if epoch is None:
        raise Invalid("X-Judge-Lease must be the lease epoch: a whole number below 2^31, in digits.")
    return epoch


def _lease_header(request) -> int:
    return lease_header(request.META.get("HTTP_X_JUDGE_LEASE"))


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
        found = artifact_for_lease(identity=identity, job_id=job_id, lease_epoch=lease_epoch, digest=digest,
                                   now=timezone.now())
        if isinstance(found, bytes):  # the source, from its submission row
            response, size = HttpResponse(found, content_type="application/octet-stream"), len(found)
        else:
            try:
                handle = open(found, "rb")
            except FileNotFoundError as exc:
                logger.error("artifact missing from the store", extra={"job": job_id, "leaseEpoch": lease_epoch,
                                                                       "digest": digest})
                raise Unavailable("The file is missing from the store.") from exc
            response, size = _file_response(request, handle), os.fstat(handle.fileno()).st_size
        response["Content-Length"] = str(size)
        response["X-Content-SHA256"] = digest
        return response


# A file is read and sent in chunks of this size: most test files fit in one, read in the
# same lane hop that checks the lease; a larger file costs one thread hop per chunk. Memory
# held per download in flight.
CHUNK = 1024 * 1024


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


def _open_for_download(headers: dict, job_id: int, lease_epoch: int, digest: str):
    """On a lane thread, in one hop: the caller from the credential cache, the lease
    checked, the file opened and its first chunk read (or the source read from its row).
    (handle or None, size, first chunk); the handle is None once the whole file is in the
    chunk. `_ViewAnswers` when the view should answer instead."""
    try:
        auth, session = authenticate_cached(headers.get("authorization", ""), headers.get("x-judge-session"))
    except DomainError as error:
        raise _ViewAnswers() from error
    found = artifact_for_lease(identity=auth.identity(session), job_id=job_id, lease_epoch=lease_epoch,
                               digest=digest, now=timezone.now())
    if isinstance(found, bytes):
        return None, len(found), found
    try:
        handle = open(found, "rb")
    except FileNotFoundError as exc:
        raise _ViewAnswers() from exc
    try:
        size = os.fstat(handle.fileno()).st_size
        first = handle.read(CHUNK)
    except BaseException:
        handle.close()
        raise
    if len(first) >= size:
        handle.close()
        return None, size, first
    return handle, size, first


class _ViewAnswers(Exception):
    """A download the Django view answers (it has a status of the contract for it)."""


async def asgi_artifact(scope, receive, send, job_id: int, digest: str, view) -> None:
    """The bare ASGI entry point of the download, one per job (the source) and per file a
    node does not hold yet: the caller from the credential cache (`authenticate_cached`;
    `artifact_for_lease` re-checks credential and session on the node's row with the job's),
    the file streamed with the view's headers. A request this path does not answer as the
    view would (not a GET, a malformed header or digest, a caller the cache does not know,
    a file missing from the store) goes to `view`, the Django application: the view answers
    it, with every status of the contract.

    Authentication, the lease check, opening the file and reading its first chunk are one
    hop to a lane thread (a file of at most one chunk, as most are, needs no other): each
    hop costs the event loop and the thread a wake-up."""
    headers = bare.header_map(scope)
    if scope["method"] != "GET" or not artifacts.is_digest(digest):
        return await view(scope, receive, send)
    try:
        lease_epoch = lease_header(headers.get("x-judge-lease"))
    except DomainError:
        return await view(scope, receive, send)
    registry().keep_listening()  # the cache is corrected by the node changes it hears
    try:
        handle, size, data = await run_db(_open_for_download, headers, job_id, lease_epoch, digest)
    except _ViewAnswers:
        return await view(scope, receive, send)
    except DomainError as error:
        return await bare.send_json(send, *bare.error_answer(error))
    except Exception:
        logger.exception("artifact download failed", extra={"job": job_id})
        return await bare.send_json(send, *bare.error_answer(Unavailable()))
    try:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/octet-stream"), (b"content-length", str(size).encode()),
            (b"x-content-sha256", digest.encode())]})
        sent = len(data)
        while handle is not None and data and sent < size:
            await send({"type": "http.response.body", "body": data, "more_body": True})
            data = await asyncio.to_thread(handle.read, CHUNK)
            sent += len(data)
        await send({"type": "http.response.body", "body": data})
    finally:
        if handle is not None:
            handle.close()
