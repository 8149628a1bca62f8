"""`POST /api/v1/internal/judgers/jobs/{jobId}/result`: a node reports the outcome of a lease.

The hottest call under load (one per job), so under uvicorn it is served bare
(`kece.asgi` routes it to `asgi_result`): the whole call is one task on the bounded
database pool. The DRF view serves the test client and describes the call in the schema.
Both run `serve_result`.

A result may carry the node's next claim (`claim: {freeSlots, inlineSource}`, an optional
field): once the result is accepted, up to freeSlots jobs are leased without waiting and
returned in `jobs`, with their sources if `inlineSource` asks (as a claim may). A busy
node then needs one request per job, not a result post, a claim and a source download.
The same post again (its answer was lost) is a `duplicate` whose `jobs` are the ones that
answer held.
"""

import logging

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny

from judging.api import bare
from judging.api import node_serializers as s
from judging.api.claim import claim_payload
from judging.api.node import SESSION_PARAMETER, TAGS
from judging.selectors import job_payloads
from judging.services.settle import CaseResult, SettleRequest, job_settle, job_settle_and_claim
from judging.waiting import registry, run_db
from kece.api import ContractView
from kece.errors import DomainError, Unavailable
from judging.auth import authenticate_cached

logger = logging.getLogger("kece.node_api")


def _settle_request(job_id: int, data: dict) -> SettleRequest:
    return SettleRequest(
        job_id=job_id, lease_epoch=data["leaseEpoch"], outcome=data["outcome"],
        verdict=data.get("verdict", ""), score=data.get("score", 0), time_ms=data["timeMs"],
        memory_kb=data["memoryKb"], compile_output=data["compileOutput"],
        cases=tuple(CaseResult(c["ordinal"], c["verdict"], c["timeMs"], c["memoryKb"], c["score"])
                    for c in data["cases"]),
        error=data["error"], message=data["message"][:4000],
        checks=tuple({"name": c["name"], "ok": c["ok"], "detail": c["detail"]} for c in data["checks"]),
    )


def _settled_with_claim(identity, auth, request: SettleRequest, free_slots: int, inline_source: bool) -> dict:
    """Settle and lease the carried claim in one transaction. Whatever the claim finds, an
    accepted result stands (a node moved to another host group meanwhile claims on its
    own, without waiting); a database failure, the sources' read with the COMMIT included,
    leaves neither, and the node posts again."""
    now = timezone.now()
    status, claim = job_settle_and_claim(identity=identity, request=request, now=now, free_slots=free_slots,
                                         with_sources=inline_source)
    if claim is not None:
        jobs = job_payloads(claim.jobs, now=now, inline_source=inline_source, sources=claim.sources_read())
        return {"status": status, "jobs": jobs, "desiredState": claim.desired_state}
    try:
        jobs, desired_state, _reason = claim_payload(identity, free_slots, inline_source=inline_source)
    except DomainError as error:
        logger.info("claim after result refused", extra={"node": identity.node_id, "error": error.code})
        return {"status": status, "jobs": [], "desiredState": auth.desired_state}
    return {"status": status, "jobs": jobs, "desiredState": desired_state}


def serve_result(*, authorization: str, session_header, job_id: int, body: bytes) -> bare.Answer:
    """Authenticate, settle, and lease the carried claim. Runs on a
    database pool thread (or the request thread of the DRF view)."""
    try:
        auth, session = authenticate_cached(authorization, session_header)
        data = bare.parse_json(body, s.ResultIn, fast=s.result_in_fast)
        identity = auth.identity(session)
        request = _settle_request(job_id, data)
        if "claim" in data:
            claim = data["claim"]
            return bare.ok(_settled_with_claim(identity, auth, request, claim["freeSlots"], claim["inlineSource"]))
        return bare.ok({"status": job_settle(identity=identity, request=request, now=timezone.now())})
    except DomainError as error:
        return bare.error_answer(error)
    except Exception:
        logger.exception("result failed", extra={"job": job_id})
        return bare.error_answer(Unavailable())


class ResultView(ContractView):
    authentication_classes = []
    permission_classes = [AllowAny]

    @extend_schema(tags=TAGS, request=s.ResultIn, responses={200: s.ResultOut}, parameters=[SESSION_PARAMETER],
                   auth=[{"nodeCredential": []}],
                   summary="Post the outcome of a lease: JUDGED, INFRA_ERROR or RELEASED")
    def post(self, request, job_id: int):
        return bare.as_response(serve_result(
            authorization=request.META.get("HTTP_AUTHORIZATION", ""),
            session_header=request.META.get("HTTP_X_JUDGE_SESSION"), job_id=job_id, body=request._request.body))


async def asgi_result(scope, receive, send, job_id: int):
    """The bare ASGI entry point."""

    async def call(headers, body):
        # The result is authenticated from the identity cache: keep receiving the node
        # changes that correct it.
        registry().keep_listening()
        return await run_db(serve_result, authorization=headers.get("authorization", ""),
                            session_header=headers.get("x-judge-session"), job_id=job_id, body=body)

    await bare.serve(scope, receive, send, call, stop_on_hangup=False)
