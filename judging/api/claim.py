"""`POST /api/v1/internal/judgers/jobs/claim`: the long-poll batch claim.

Served natively async by a bare ASGI app under uvicorn (`kece.asgi` routes the path to
`asgi_claim`, so no Django request thread is parked while it waits), and by a DRF view
for the test client and non-ASGI deployments. Both call `serve_claim`, which:

1. authenticates (a short in-process cache may answer *who* is waiting; the claim itself
   re-checks credential and session under the node lock),
2. registers the waiter with the pool registry, then loops: wait for a wake-up or the
   deadline, run one claim transaction on the bounded database pool, answer as soon as a
   job is leased,
3. answers `jobs: []` when the wait ends, or at once when a newer claim of the same node
   supersedes this one.
"""

import asyncio
import json
import logging
import time

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from judging.api.node_serializers import ClaimIn, ClaimOut
from judging.identity import credential_digest
from judging.selectors import job_payload
from judging.services.claim import job_claim
from judging.services.settle import RELEASED, SettleRequest, job_settle
from judging.waiting import registry, run_db
from kece.api import ContractView
from kece.errors import DomainError, Invalid, SessionSuperseded, TooLarge, Unauthenticated, Unavailable
from nodes.auth import bearer_secret, lookup_for_waiting, parse_session

logger = logging.getLogger("kece.claim_api")


def _claim_payload(identity, free_slots):
    """One claim transaction; returns ready-to-send job dicts (no lazy loads in async)."""
    now = timezone.now()
    result = job_claim(identity=identity, free_slots=free_slots, now=now)
    return [job_payload(job, now=now) for job in result.jobs], result.desired_state, result.reason


def _parse_body(body: bytes) -> dict:
    if len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        raise TooLarge()
    try:
        data = json.loads(body.decode("utf-8") or "null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Invalid(f"Malformed JSON: {exc}") from exc
    serializer = ClaimIn(data=data)
    if not serializer.is_valid():
        raise Invalid("Some fields are invalid.", fields=serializer.errors)
    return serializer.validated_data


async def _authenticate(authorization: str, session_header):
    secret = bearer_secret(authorization)
    if secret is None:
        raise Unauthenticated("Use Authorization: Bearer <credential>.")
    digest = credential_digest(secret)
    session = parse_session(session_header)
    auth = await run_db(lookup_for_waiting, digest)
    if auth is not None and (session != auth.session_epoch or not auth.session_open):
        auth = await run_db(lookup_for_waiting, digest, fresh=True)  # the cache may be behind
    if auth is None:
        raise Unauthenticated("The node credential is unknown or revoked.")
    if session is None or session != auth.session_epoch or not auth.session_open:
        raise SessionSuperseded()
    return auth, session


async def serve_claim(*, authorization: str, session_header, body: bytes) -> tuple[int, dict]:
    try:
        auth, session = await _authenticate(authorization, session_header)
        data = _parse_body(body)
        return 200, await _wait_and_claim(auth, auth.identity(session), data, authorization)
    except DomainError as error:
        return error.status, error.envelope()
    except Exception:
        logger.exception("claim failed")
        return 503, Unavailable().envelope()


def _release_unsent(identity, jobs) -> None:
    """Give back leases whose claim answer never reached the node, at once and without
    counting the attempt, instead of letting them wait out the lease."""
    for job in jobs:
        request = SettleRequest(job_id=job["jobId"], lease_epoch=job["leaseEpoch"], outcome=RELEASED)
        try:
            job_settle(identity=identity, request=request, now=timezone.now())
        except DomainError:
            pass  # already gone (session change, revoke): nothing to give back
    logger.info("unsent claim answer released", extra={"node": identity.node_id,
                                                       "jobs": [j["jobId"] for j in jobs]})


async def _claim_once(identity, free_slots: int):
    """One claim transaction. If the request is cancelled meanwhile (the node hung up), the
    transaction still finishes on its thread; what it leased is released."""
    attempt = asyncio.ensure_future(run_db(_claim_payload, identity, free_slots))
    try:
        return await asyncio.shield(attempt)
    except asyncio.CancelledError:
        jobs, _, _ = await attempt
        if jobs:
            await run_db(_release_unsent, identity, jobs)
        raise


async def _wait_and_claim(auth, identity, data, authorization: str) -> dict:
    free_slots = data["freeSlots"]
    wait_ms = min(data.get("waitMs", settings.KECE_CLAIM_WAIT_MS), settings.KECE_CLAIM_WAIT_MS)
    desired_state = auth.desired_state
    if free_slots == 0:
        return {"jobs": [], "desiredState": desired_state}
    if wait_ms == 0:  # no waiting at all: look once
        jobs, desired_state, _reason = await _claim_once(identity, free_slots)
        return {"jobs": jobs, "desiredState": desired_state}
    pools = registry()
    waiter = pools.register(auth.pool, auth.node_id)
    deadline = time.monotonic() + wait_ms / 1000
    try:
        while True:
            remaining = deadline - time.monotonic()
            if waiter.superseded or remaining <= 0:
                break
            try:
                await asyncio.wait_for(waiter.event.wait(), timeout=remaining)
            except asyncio.TimeoutError:
                break
            if waiter.superseded:
                break
            if waiter.recheck:
                waiter.recheck = False
                auth, _ = await _authenticate(authorization, identity.session_epoch)
                desired_state = auth.desired_state
            jobs, desired_state, _reason = await _claim_once(identity, free_slots)
            if jobs:
                return {"jobs": jobs, "desiredState": desired_state}
            pools.requeue(auth.pool, waiter)
    finally:
        pools.unregister(auth.pool, waiter)
    return {"jobs": [], "desiredState": desired_state}


class ClaimView(ContractView):
    """The Django entry point (test client and non-ASGI deployments); under uvicorn the
    ASGI router serves this path with `asgi_claim` instead. Both run `serve_claim`."""

    authentication_classes = []
    permission_classes = [AllowAny]

    @extend_schema(
        tags=["node"], request=ClaimIn, responses={200: ClaimOut}, auth=[{"nodeCredential": []}],
        parameters=[OpenApiParameter("X-Judge-Session", int, OpenApiParameter.HEADER, required=True)],
        summary="Long-poll: lease up to freeSlots jobs, answering as soon as one is leased",
    )
    def post(self, request):
        status, payload = async_to_sync(serve_claim)(
            authorization=request.META.get("HTTP_AUTHORIZATION", ""),
            session_header=request.META.get("HTTP_X_JUDGE_SESSION"), body=request._request.body)
        response = Response(payload, status=status)
        for name, value in _extra_headers(status):
            response[name] = value
        return response


async def asgi_claim(scope, receive, send):
    """The bare ASGI entry point: no middleware, no request thread while waiting."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    if scope["method"] != "POST":
        return await _send_json(send, 405, {"error": "method_not_allowed", "detail": "Use POST."})
    body = bytearray()
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if len(body) > limit:
            return await _send_json(send, 413, TooLarge().envelope())
        if not message.get("more_body"):
            break

    claim = asyncio.create_task(serve_claim(authorization=headers.get("authorization", ""),
                                            session_header=headers.get("x-judge-session"), body=bytes(body)))
    disconnect = asyncio.create_task(_wait_for_disconnect(receive))
    done, _ = await asyncio.wait({claim, disconnect}, return_when=asyncio.FIRST_COMPLETED)
    if claim not in done:
        claim.cancel()  # the node went away: stop waiting for it
        try:
            await claim
        except asyncio.CancelledError:
            pass
        return
    if disconnect in done:
        # Hung up just as the answer was ready: it cannot be delivered.
        status, payload = claim.result()
        if payload.get("jobs"):
            await run_db(_release_unsent_by_header, headers, payload["jobs"])
        return
    disconnect.cancel()
    status, payload = claim.result()
    await _send_json(send, status, payload,
                     [(k.lower().encode(), v.encode()) for k, v in _extra_headers(status)])


def _extra_headers(status: int) -> list[tuple[str, str]]:
    if status == 401:
        return [("WWW-Authenticate", 'Bearer realm="kece-judgers"')]
    if status == 503:
        return [("Retry-After", "5")]
    return []


def _release_unsent_by_header(headers: dict, jobs) -> None:
    auth = lookup_for_waiting(credential_digest(bearer_secret(headers.get("authorization", "")) or ""))
    session = parse_session(headers.get("x-judge-session"))
    if auth is not None and session is not None:
        _release_unsent(auth.identity(session), jobs)


async def _wait_for_disconnect(receive):
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _send_json(send, status: int, payload: dict, extra_headers=()):
    body = json.dumps(payload, separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *extra_headers]})
    await send({"type": "http.response.body", "body": body})
