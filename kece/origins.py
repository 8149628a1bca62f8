"""Same-origin check for WebSockets, reasoned as Django's CSRF middleware reasons for an
unsafe request (`CsrfViewMiddleware._origin_verified`): a browser sends its page's origin
with every socket, and the session cookie goes along whatever page opens it, so only a
page of this very site may open one.

The origin must equal the request's own (scheme, host and port) — the scheme is the
connection's, or the proxy's `X-Forwarded-Proto` where uvicorn trusts the proxy
(`--proxy-headers`, `--forwarded-allow-ips`), as Django's `request.is_secure()` sees it —
on a host in `ALLOWED_HOSTS`, or be one of `CSRF_TRUSTED_ORIGINS` (with its `*.` subdomain
form). A socket without an Origin is refused: every browser sends one.
"""

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

DEFAULT_PORTS = {"http": 80, "https": 443}


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _normalised(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port or DEFAULT_PORTS[scheme]
    except (ValueError, KeyError):
        return None
    return (scheme, parts.hostname, port) if parts.hostname else None


def own_origin(scope) -> tuple[str, str, int] | None:
    """The origin of the request itself; None when its Host is not one this site serves."""
    host = _header(scope, b"host")
    if not host:
        return None
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    return _normalised(scheme, host)


def _trusted(origin: str) -> bool:
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    return any(is_same_domain(parsed.netloc, trusted.netloc.lstrip("*"))
               for trusted in (urlsplit(o) for o in settings.CSRF_TRUSTED_ORIGINS if "*" in o)
               if trusted.scheme == parsed.scheme)


def same_origin(scope) -> bool:
    origin = _header(scope, b"origin")
    if not origin or origin == "null":
        return False
    if _trusted(origin):
        return True
    scheme, _, netloc = origin.partition("://")
    ours = own_origin(scope)
    return ours is not None and _normalised(scheme, netloc) == ours


class SameOriginValidator:
    """ASGI: a WebSocket whose Origin is not this site's own is refused at the handshake."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not same_origin(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
