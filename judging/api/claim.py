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
import logging
import time

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import AllowAny

from judging.api import bare
from judging.api.node_serializers import ClaimIn, ClaimOut
from judging.selectors import job_payloads
from judging.services.claim import job_claim
from judging.waiting import registry, run_db
from kece.api import ContractView
from kece.errors import DomainError, Unavailable
from judging.auth import authenticate_cached

logger = logging.getLogger("kece.claim_api")


def claim_payload(identity, free_slots, *, inline_source: bool = False):
    """One claim transaction; returns ready-to-send job dicts (no lazy loads in async)."""
    now = timezone.now()
    result = job_claim(identity=identity, free_slots=free_slots, now=now, with_sources=inline_source)
    return (job_payloads(result.jobs, now=now, inline_source=inline_source, sources=result.sources_read()),
            result.desired_state, result.reason)


async def _authenticate(authorization: str, session_header):
    return await run_db(authenticate_cached, authorization, session_header)


async def serve_claim(*, authorization: str, session_header, body: bytes) -> bare.Answer:
    try:
        auth, session = await _authenticate(authorization, session_header)
        data = bare.parse_json(body, ClaimIn)
        return bare.ok(await _wait_and_claim(auth, auth.identity(session), data, authorization, session_header))
    except DomainError as error:
        return bare.error_answer(error)
    except Exception:
        logger.exception("claim failed")
        return bare.error_answer(Unavailable())


async def _claim_once(identity, free_slots: int, *, inline_source: bool = False):
    """One claim transaction. If the request is cancelled meanwhile (the node hung up), the
    transaction still finishes on its thread; what it leased is released."""
    attempt = asyncio.ensure_future(run_db(claim_payload, identity, free_slots, inline_source=inline_source))
    try:
        return await asyncio.shield(attempt)
    except asyncio.CancelledError:
        jobs, _, _ = await attempt
        if jobs:
            await run_db(bare.release_unsent, identity, jobs)
        raise


async def _wait_and_claim(auth, identity, data, authorization: str, session_header) -> dict:
    free_slots, inline_source = data["freeSlots"], data["inlineSource"]
    wait_ms = min(data.get("waitMs", settings.KECE_CLAIM_WAIT_MS), settings.KECE_CLAIM_WAIT_MS)
    desired_state = auth.desired_state
    if free_slots == 0:
        return {"jobs": [], "desiredState": desired_state}
    if wait_ms == 0:  # no waiting at all: look once
        jobs, desired_state, _reason = await _claim_once(identity, free_slots, inline_source=inline_source)
        return {"jobs": jobs, "desiredState": desired_state}
    pools = registry()
    waiter = pools.register(auth.pool, auth.node_id, auth.runtime_spec)
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
            if asyncio.current_task().cancelling():
                # The node hung up just as the wait ended: `wait_for` then returns instead of
                # raising, and the claim must not go on for no one.
                raise asyncio.CancelledError
            if waiter.superseded:
                break
            if waiter.recheck:
                waiter.recheck = False
                # The node's row changed (or the wake-ups reconnected): the call's own
                # headers checked again, as when it came.
                auth, _ = await _authenticate(authorization, session_header)
                desired_state = auth.desired_state
            jobs, desired_state, _reason = await _claim_once(identity, free_slots, inline_source=inline_source)
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
        return bare.as_response(async_to_sync(serve_claim)(
            authorization=request.META.get("HTTP_AUTHORIZATION", ""),
            session_header=request.META.get("HTTP_X_JUDGE_SESSION"), body=request._request.body))


async def asgi_claim(scope, receive, send):
    """The bare ASGI entry point: no middleware, no request thread while waiting."""

    async def call(headers, body):
        return await serve_claim(authorization=headers.get("authorization", ""),
                                 session_header=headers.get("x-judge-session"), body=body)

    await bare.serve(scope, receive, send, call, stop_on_hangup=True)
