"""ASGI entry point (`uvicorn kece.asgi:application`).

- Every HTTP request's body is held to one limit before anything reads it (`kece.bodies`).
- The hot node calls are served bare (`judging.api.bare`): the long-poll claim, so that no
  request thread is held while it waits, the result post, one per job, and the artifact
  download, one per job (its source) and per file a node does not hold yet.
- The rest of the node API (`/api/v1/internal/`) runs through Django without the browser
  middleware (sessions, CSRF, messages) — machines authenticate with bearer credentials —
  on the node lane (`kece.lanes`), whose threads `judging.waiting` uses too.
- Everything else is the ordinary Django application, its synchronous middleware and view
  run start to finish on a lane of warm threads (`kece.lanes`): what users touch on one,
  what administrators touch on another, so neither queues behind the other.
- `/metrics` (Prometheus) is served bare too (`kece.metrics_endpoint`), and every request's
  time is recorded here, by the URL pattern its handler resolved (`kece.metrics`); so are
  the probes, `/livez` by the event loop itself and `/readyz` on a thread of its own, never
  queued behind requests.
- Lifespan: the node-change subscription starts with the server, and the drain on
  SIGTERM (`kece.health`) is put in front of uvicorn's; in the embedded default the
  in-process scheduler starts and stops with it.
- Every HTTP request has an id (`with_request_id`) on its log lines and in its answer.
"""

import asyncio
import contextvars
import functools
import json
import os
import re
import time
from urllib.parse import parse_qs

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kece.settings")

get_asgi_application()  # sets Django up; the handlers below are its own, adjusted

from django.conf import settings  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402  (after settings are configured)
from django.core.handlers.exception import convert_exception_to_response  # noqa: E402

from kece import health, lanes  # noqa: E402
from kece.bodies import limit_request_bodies  # noqa: E402


# Where a handler leaves the resolved route in the ASGI scope (`route_http` reads it).
ROUTE_KEY = "kece.route"


class ContractASGIHandler(ASGIHandler):
    """Django's ASGI handler with the length of a chunked body filled in: DRF reads no body
    that comes without Content-Length. (The body limit is `kece.bodies`, in front of every
    path.)"""

    def create_request(self, scope, body_file):
        request, error_response = super().create_request(scope, body_file)
        if request is not None and not request.META.get("CONTENT_LENGTH"):
            size = body_file.seek(0, os.SEEK_END)
            body_file.seek(0)
            if size:
                request.META["CONTENT_LENGTH"] = str(size)
        return request, error_response


# Served on the admin lane: heavy or rare work that must not hold up submissions — the
# admin API (rejudges, checks), the judgers console's place (`/admin/judgers`, ARCHITECTURE
# §1), Django's admin, the schema and its docs.
ADMIN_PREFIXES = ("/api/v1/admin/", "/admin/", "/django-admin/", "/api/schema/", "/api/docs/")


class LaneASGIHandler(ContractASGIHandler):
    """Django's ASGI handler with the synchronous middleware chain and view run as one call
    on a lane of warm threads with their own database connections (`kece.lanes`), instead
    of one `sync_to_async` hop per middleware on a fresh thread (and connection) per
    request. A view runs on one thread start to finish, so its transactions and
    `on_commit` callbacks behave as under WSGI."""

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    def lane(self, request) -> lanes.Lane:
        return lanes.ADMIN if request.path.startswith(ADMIN_PREFIXES) else lanes.USER

    async def __call__(self, scope, receive, send):
        # Without Django's per-request ThreadSensitiveContext: it would start a thread per
        # request only to send the request signals, whose receivers find no connection
        # there to close. The lanes own the connections; nothing here streams a
        # synchronous iterator (static files have their own handler).
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)

    async def get_response_async(self, request):
        response = await self.lane(request).run(self.get_response, request)
        # The URL pattern the request resolved to, for the request-duration histogram.
        match = getattr(request, "resolver_match", None)
        if match is not None:
            request.scope[ROUTE_KEY] = match.route
        return response


django_application = LaneASGIHandler()

if settings.KECE_SERVE_STATIC:
    # No proxy in front (the embedded default): serve static files (the pages' styles and
    # scripts, the API docs' assets) from the app itself. In production the proxy serves
    # the collected files.
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_application = ASGIStaticFilesHandler(django_application)

from judging.api.claim import asgi_claim  # noqa: E402
from judging.api.node import asgi_artifact  # noqa: E402
from judging.api.result import asgi_result  # noqa: E402
from kece import metrics, metrics_endpoint  # noqa: E402
from kece.converters import IdConverter  # noqa: E402

INTERNAL_PREFIX = "/api/v1/internal/"
CLAIM_PATH = INTERNAL_PREFIX + "judgers/jobs/claim"
METRICS_PATH = "/metrics"
RESULT_PATH = re.compile(rf"{INTERNAL_PREFIX}judgers/jobs/({IdConverter.regex})/result")
ARTIFACT_PATH = re.compile(rf"{INTERNAL_PREFIX}judgers/jobs/({IdConverter.regex})/artifacts/([^/]+)")


class InternalASGIHandler(LaneASGIHandler):
    """Django's ASGI handler for the machine-to-machine API: no middleware, on the node
    lane. Django's own `__call__`: artifact downloads stream files."""

    __call__ = ContractASGIHandler.__call__

    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._middleware_chain = convert_exception_to_response(self._get_response)

    def lane(self, request) -> lanes.Lane:
        return lanes.NODE


internal_application = InternalASGIHandler()


CLAIM_ROUTE = CLAIM_PATH.lstrip("/")
RESULT_ROUTE = INTERNAL_PREFIX.lstrip("/") + "judgers/jobs/<id:job_id>/result"
ARTIFACT_ROUTE = INTERNAL_PREFIX.lstrip("/") + "judgers/jobs/<id:job_id>/artifacts/<str:digest>"
# Requests no URL pattern matched (and static files): one label each, never the raw path.
UNMATCHED_ROUTE = "unmatched"
# Any other method a client sends is one label too: the labels stay bounded.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


async def _route(scope, receive, send):
    path = scope.get("path", "")
    if path == CLAIM_PATH:
        scope[ROUTE_KEY] = CLAIM_ROUTE
        health.long_poll_started()  # a draining process waits for these (`kece.health`)
        try:
            await asgi_claim(scope, receive, send)
        finally:
            health.long_poll_ended()
        return
    if path.startswith(INTERNAL_PREFIX):
        result = RESULT_PATH.fullmatch(path)
        if result is not None:
            scope[ROUTE_KEY] = RESULT_ROUTE
            await asgi_result(scope, receive, send, int(result.group(1)))
            return
        artifact = ARTIFACT_PATH.fullmatch(path)
        if artifact is not None:
            scope[ROUTE_KEY] = ARTIFACT_ROUTE
            await asgi_artifact(scope, receive, send, int(artifact.group(1)), artifact.group(2),
                                internal_application)
            return
        await internal_application(scope, receive, send)
        return
    if path == METRICS_PATH:
        scope[ROUTE_KEY] = metrics_endpoint.ROUTE
        await metrics_endpoint.asgi_metrics(scope, receive, send)
        return
    if path == LIVEZ_PATH and scope.get("method") in ("GET", "HEAD"):
        scope[ROUTE_KEY] = LIVEZ_PATH.lstrip("/")
        await _alive(scope, send)
        return
    if path == READYZ_PATH and scope.get("method") in ("GET", "HEAD"):
        scope[ROUTE_KEY] = READYZ_PATH.lstrip("/")
        await _ready(scope, send)
        return
    await django_application(scope, receive, send)


LIVEZ_PATH = "/livez"
READYZ_PATH = "/readyz"


async def _alive(scope, send):
    """Liveness from the event loop itself (`kece.views.alive` answers the same): behind a
    lane whose threads all wait on a stalled database, or under a burst, a probe that queued
    with the requests would time out, and the supervisor would restart a healthy process."""
    from kece.views import ALIVE

    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/plain"), (b"cache-control", b"no-store"),
        (b"content-length", str(len(ALIVE)).encode())]})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else ALIVE})


async def _ready(scope, send):
    """Readiness on a thread of its own (`kece.views.ready` answers the same): its checks
    open their own connections with their own deadlines, and need no lane. Queued behind a
    user lane that a burst or a slow database keeps busy, the probe would time out, and the
    load balancer would take a process that is merely busy out of service, sending its
    load to the others."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    # In the request's context, as `asyncio.to_thread` would: its log lines carry its id.
    answer = functools.partial(contextvars.copy_context().run, health.answer, verbose="verbose" in query)
    status, body = await asyncio.get_running_loop().run_in_executor(health.ANSWERING, answer)
    content = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"cache-control", b"no-store"),
        (b"content-length", str(len(content)).encode())]})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else content})


async def route_http(scope, receive, send):
    if scope["type"] == "lifespan":
        from kece.lifespan import serve_lifespan

        await serve_lifespan(receive, send)
        return
    if scope["type"] != "http":
        await django_application(scope, receive, send)
        return
    # The request-duration histogram, by the route the handler resolved: the status is
    # taken from the answer as it goes out, the time when the handler is done.
    started = time.perf_counter()
    status = 500

    async def send_and_note(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    try:
        await _route(scope, receive, send_and_note)
    finally:
        method = scope.get("method", "")
        metrics.http_request(scope.get(ROUTE_KEY, UNMATCHED_ROUTE), method if method in METHODS else "other",
                             status, time.perf_counter() - started)


def with_request_id(app):
    """Every HTTP request gets an id (`kece.logging.accepted_request_id`: the proxy's or the
    client's `X-Request-ID` when sane, else a new one), on each log line emitted while
    serving it and in the answer's `X-Request-ID`."""
    from kece.logging import accepted_request_id, request_id

    async def identified(scope, receive, send):
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        offered = next((value for name, value in scope.get("headers", []) if name == b"x-request-id"), b"")
        current = accepted_request_id(offered.decode("latin-1"))
        header = (b"x-request-id", current.encode())

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        token = request_id.set(current)
        try:
            await app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)

    return identified


application = with_request_id(limit_request_bodies(route_http))


# --- WebSockets: the console's live channel, in front of the HTTP app above ---------------------

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from kece.origins import SameOriginValidator  # noqa: E402
from nodes.console.consumers import JudgersConsumer  # noqa: E402

http_application = application
application = ProtocolTypeRouter({
    "http": http_application,
    "lifespan": http_application,
    # The session cookie authenticates; the same-origin check (scheme, host and port) keeps
    # other sites' pages, and this host's other ports, from opening the socket with it.
    "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter([
        path("ws/admin/judgers", JudgersConsumer.as_asgi()),
    ]))),
})
