"""Domain errors and their contract envelope: `{"error": code, "detail": text}` (API.md)."""

import logging

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.response import Response

logger = logging.getLogger("kece.errors")


class DomainError(Exception):
    status = 400
    code = "invalid"
    default_detail = "The request is invalid."
    default_retry_after: int | None = None  # the contract pairs one with 429 and 503

    def __init__(self, detail: str | None = None, *, fields: dict | None = None, retry_after: int | None = None,
                 field_details: dict | None = None):
        self.detail = detail or self.default_detail
        self.fields = fields
        # Each field's own sentence, when one error names several (`detail` joins them).
        self.field_details = field_details or {}
        self.retry_after = self.default_retry_after if retry_after is None else retry_after
        super().__init__(self.detail)

    def envelope(self) -> dict:
        body = {"error": self.code, "detail": self.detail}
        if self.fields:
            body["fields"] = self.fields
        return body

    def headers(self) -> list[tuple[str, str]]:
        """The headers the contract pairs with this error (Retry-After on 429 and 503)."""
        return [] if self.retry_after is None else [("Retry-After", str(self.retry_after))]


class Invalid(DomainError):
    pass


class Unauthenticated(DomainError):
    status, code, default_detail = 401, "unauthenticated", "Authentication credentials were missing or invalid."


class InvalidJoinCode(DomainError):
    status, code, default_detail = 401, "invalid_join_code", "The join code is unknown, expired or already used."


class Forbidden(DomainError):
    status, code, default_detail = 403, "forbidden", "You do not have permission to do this."


class NotFound(DomainError):
    status, code, default_detail = 404, "not_found", "Not found."


class NotInManifest(DomainError):
    status, code, default_detail = 404, "not_in_manifest", "This digest is not part of the job."


class SessionSuperseded(DomainError):
    status, code, default_detail = 409, "session_superseded", "This session is no longer the node's current one."


class LeaseLost(DomainError):
    status, code, default_detail = 409, "lease_lost", "This node does not hold a live lease on the job."


class Superseded(DomainError):
    status, code, default_detail = 409, "superseded", "A newer job replaced this one (rejudge or cancel)."


class ResultConflict(DomainError):
    status, code, default_detail = 409, "result_conflict", "This lease already settled with a different result."


class RevisionConflict(DomainError):
    status, code, default_detail = 409, "revision_conflict", "The record changed since that revision; reload it."


class ExamClosed(DomainError):
    status, code, default_detail = 409, "exam_closed", "This exam takes no more work from you."


class ExamInProgress(DomainError):
    status, code = 409, "exam_in_progress"
    default_detail = ("This problem belongs to an exam you are taking: submit it from the exam's page until the exam "
                      "ends.")


class NotPublished(DomainError):
    status, code, default_detail = 409, "not_published", "The results of this exam are not published yet."


class IdempotencyConflict(DomainError):
    status, code, default_detail = (
        409, "idempotency_conflict", "This Idempotency-Key was used for a different request; use a new key.",
    )


class NotVerified(DomainError):
    status, code, default_detail = (
        409, "not_verified", "The node needs a passing self-check for its current revision and a fresh heartbeat.",
    )


class Busy(DomainError):
    status, code, default_detail = 409, "busy", "A check is already running for this node."


class TooLarge(DomainError):
    status, code, default_detail = 413, "too_large", "The request body is too large."


class Throttled(DomainError):
    status, code, default_detail = 429, "throttled", "Too many requests; retry later."
    default_retry_after = 1


class Unavailable(DomainError):
    status, code, default_detail = 503, "unavailable", "A dependency is unavailable; retry later."
    default_retry_after = 5


def error_response(error: DomainError) -> Response:
    response = Response(error.envelope(), status=error.status)
    for name, value in error.headers():
        response[name] = value
    return response


def _from_drf(exc) -> DomainError | None:
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        return Unauthenticated(str(exc.detail))
    if isinstance(exc, drf.PermissionDenied):
        return Forbidden(str(exc.detail))
    if isinstance(exc, drf.NotFound | Http404):
        return NotFound()
    if isinstance(exc, drf.Throttled):
        return Throttled(str(exc.detail), retry_after=int(exc.wait or 1))
    if isinstance(exc, drf.ParseError):
        return Invalid(f"Malformed request body: {exc.detail}")
    if isinstance(exc, drf.UnsupportedMediaType):
        return Invalid(str(exc.detail))
    if isinstance(exc, drf.MethodNotAllowed):
        error = Invalid(str(exc.detail))
        error.status, error.code = 405, "method_not_allowed"
        return error
    if isinstance(exc, drf.NotAcceptable):
        error = Invalid(str(exc.detail))
        error.status, error.code = 406, "not_acceptable"
        return error
    if isinstance(exc, drf.ValidationError):
        detail = exc.detail
        if isinstance(detail, dict):
            return Invalid("Some fields are invalid.", fields=detail)
        return Invalid("; ".join(str(d) for d in detail) if isinstance(detail, list) else str(detail))
    if isinstance(exc, PermissionDenied):
        return Forbidden()
    if isinstance(exc, drf.APIException):
        error = Invalid(str(exc.detail))
        error.status = exc.status_code
        return error
    return None


def exception_handler(exc, context):
    """DRF's exception handler: every error in the contract's envelope."""
    error = exc if isinstance(exc, DomainError) else _from_drf(exc)
    if error is None:
        return None  # unexpected: let it surface (logged) rather than hide a bug
    response = error_response(error)
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        # The challenge of the view's first authenticator (DRF puts it on the exception):
        # `Token` for the admin and user APIs, `Bearer` for nodes. A 401 must name the
        # scheme the caller should use.
        response["WWW-Authenticate"] = getattr(exc, "auth_header", None) or 'Bearer realm="kece"'
    elif error.status == 401:
        # A service's own 401 (a join code refused, a credential found revoked) names the
        # scheme too: the view's, or a node's where the call takes none (join).
        view, request = context.get("view"), context.get("request")
        challenge = view.get_authenticate_header(request) if view is not None and request is not None else None
        response["WWW-Authenticate"] = challenge or 'Bearer realm="kece-judgers"'
    return response
