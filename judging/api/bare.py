"""Bare ASGI serving for the node API's two hot calls, the long-poll claim and the result
post: no Django request cycle (no per-request thread, signals or middleware), the same
error envelope and status codes as the DRF views that describe them in the schema.

A call is an async function returning an `Answer`, `(status, payload, headers)`. If the node hangs up before
its answer is sent, any jobs the answer leased are released at once instead of waiting
out their lease.
"""

import asyncio
import json
import logging

from django.conf import settings
from django.utils import timezone
from rest_framework.response import Response

from judging.identity import credential_digest
from judging.services.settle import RELEASED, SettleRequest, job_settle
from judging.waiting import run_db
from kece.api import lone_surrogate_in
from kece.errors import DomainError, Invalid, TooLarge
from judging.auth import bearer_secret, epoch_of, lookup_for_waiting

logger = logging.getLogger("kece.node_api")


def _not_json(name: str):
    # Python's decoder takes NaN and Infinity, which JSON has not (DRF's parser refuses them).
    raise ValueError(f"{name} is not a JSON value")


def parse_json(body: bytes, serializer_class, fast=None) -> dict:
    """The validated body; `fast(data)` may answer first for plainly valid input."""
    if len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        raise TooLarge()
    try:
        data = json.loads(body.decode("utf-8") or "null", parse_constant=_not_json)
    except ValueError as exc:  # not UTF-8, not JSON, or an integer too long to convert
        raise Invalid(f"Malformed JSON: {exc}") from exc
    except RecursionError:
        raise Invalid("Malformed JSON: nested too deeply") from None
    if lone_surrogate_in(body, data):
        raise Invalid("Malformed JSON: a string is not valid Unicode (lone surrogate)")
    if fast is not None:
        validated = fast(data)
        if validated is not None:
            return validated
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise Invalid("Some fields are invalid.", fields=serializer.errors)
    return serializer.validated_data


Answer = tuple[int, dict, list[tuple[str, str]]]


def ok(payload: dict) -> Answer:
    return 200, payload, []


def error_answer(error: DomainError) -> Answer:
    """The error's envelope with the headers the contract pairs with it: its own
    Retry-After (a clock check's is not a dependency outage's), and the challenge on 401."""
    headers = error.headers()
    if error.status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="kece-judgers"'))
    return error.status, error.envelope(), headers


def as_response(answer: Answer) -> Response:
    """The same answer from a DRF view (the test client, a deployment without the router)."""
    status, payload, headers = answer
    response = Response(payload, status=status)
    for name, value in headers:
        response[name] = value
    return response


def release_unsent(identity, jobs) -> None:
    """Give back leases whose answer never reached the node, at once and without counting
    the attempt, instead of letting them wait out the lease."""
    for job in jobs:
        request = SettleRequest(job_id=job["jobId"], lease_epoch=job["leaseEpoch"], outcome=RELEASED)
        try:
            job_settle(identity=identity, request=request, now=timezone.now())
        except DomainError:
            pass  # already gone (session change, revoke): nothing to give back
    logger.info("unsent answer released", extra={"node": identity.node_id, "jobs": [j["jobId"] for j in jobs]})


def _release_unsent_by_header(headers: dict, jobs) -> None:
    auth = lookup_for_waiting(credential_digest(bearer_secret(headers.get("authorization", "")) or ""))
    session = epoch_of(headers.get("x-judge-session"))
    if auth is not None and session is not None:
        release_unsent(auth.identity(session), jobs)


def header_map(scope) -> dict[str, str]:
    """The request's headers by lower-case name; a repeated header's copies joined with
    commas, as Django's ASGI handler joins them (two credentials are then none)."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    return headers


async def _read_body(receive) -> bytes | None:
    """The whole body, None if the client hung up (`kece.bodies` holds it to the limit)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if not message.get("more_body"):
            return bytes(body)


async def _wait_for_disconnect(receive):
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def send_json(send, status: int, payload: dict, headers=()):
    body = json.dumps(payload, separators=(",", ":")).encode()
    pairs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    pairs += [(k.lower().encode(), v.encode()) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": pairs})
    await send({"type": "http.response.body", "body": body})


async def serve(scope, receive, send, call, *, stop_on_hangup: bool):
    """Serve one POST: `await call(headers, body)` → an `Answer`, sent as JSON.

    When the node hangs up first, a call that only waits (`stop_on_hangup`) is cancelled;
    any other call finishes (its transaction is under way) and what it leased is released.
    """
    headers = header_map(scope)
    if scope["method"] != "POST":
        return await send_json(send, 405, {"error": "method_not_allowed", "detail": "Use POST."}, [("Allow", "POST")])
    body = await _read_body(receive)
    if body is None:
        return

    answer = asyncio.create_task(call(headers, body))
    disconnect = asyncio.create_task(_wait_for_disconnect(receive))
    done, _ = await asyncio.wait({answer, disconnect}, return_when=asyncio.FIRST_COMPLETED)
    if answer in done and disconnect not in done:
        disconnect.cancel()
        return await send_json(send, *answer.result())
    if answer not in done and stop_on_hangup:
        answer.cancel()
        try:
            _, payload, _ = await answer
        except asyncio.CancelledError:
            return
        # The cancel came too late to stop it: a woken wait goes on to its claim
        # (`asyncio.wait_for` returns what its inner wait had finished with instead of
        # raising). What it leased cannot be delivered either.
    else:
        _, payload, _ = await answer
    # The node hung up: whatever the answer leased cannot be delivered.
    if payload.get("jobs"):
        await run_db(_release_unsent_by_header, headers, payload["jobs"])
