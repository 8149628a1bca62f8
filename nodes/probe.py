"""Node base URLs: normalised and held to the approved networks and ports (SSRF rules)."""

import http.client
import io
import ipaddress
import json
import socket
import ssl
import threading
import time
from concurrent.futures import Future
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.utils.translation import gettext

from kece.errors import Invalid


def allowed_ports_words() -> str:
    """The approved ports as an operator writes them: "443, 8443, 9441–9445"."""
    return ", ".join(str(low) if low == high else f"{low}–{high}" for low, high in settings.KECE_PROBE_ALLOWED_PORTS)


def port_allowed(port: int) -> bool:
    for entry in settings.KECE_PROBE_ALLOWED_PORTS:
        low, high = entry if isinstance(entry, tuple | list) else (entry, entry)
        if low <= port <= high:
            return True
    return False


def _allowed_networks():
    return [ipaddress.ip_network(n, strict=False) for n in settings.KECE_PROBE_ALLOWED_NETWORKS]


def lookup(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, in the resolver's order: the only place the SSRF
    rules ask the resolver."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def _lookup_within(host: str, port: int, seconds: float) -> list[str]:
    # getaddrinfo takes no timeout: a late answer is abandoned to its daemon thread, which
    # ends with the resolver's own timeout.
    answer = Future()

    def resolve():
        try:
            answer.set_result(lookup(host, port))
        except BaseException as exc:
            answer.set_exception(exc)

    threading.Thread(target=resolve, name="kece-resolve", daemon=True).start()
    return answer.result(timeout=seconds)


def resolve_checked(host: str, port: int, *, within: float | None = None) -> list[str]:
    """Every address `host` resolves to, all of which must lie in an approved network; the
    resolver gets `within` seconds (default: the probe's whole deadline)."""
    within = settings.KECE_PROBE_TIMEOUT_MS / 1000 if within is None else within
    try:
        addresses = _lookup_within(host, port, within)
    except TimeoutError as exc:
        raise Invalid(gettext("The host %(host)s did not resolve within %(seconds)s s.")
                      % {"host": repr(host), "seconds": f"{within:g}"},
                      fields={"baseUrl": ["host does not resolve"]}) from exc
    except (socket.gaierror, UnicodeError) as exc:
        raise Invalid(gettext("The host %(host)s does not resolve.") % {"host": repr(host)},
                      fields={"baseUrl": ["host does not resolve"]}) from exc
    if not addresses:
        raise Invalid(gettext("The host %(host)s has no address.") % {"host": repr(host)},
                      fields={"baseUrl": ["host does not resolve"]})
    networks = _allowed_networks()
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if not any(ip in net for net in networks):
            raise Invalid(
                gettext("%(host)s resolves to %(address)s, outside the approved networks.")
                % {"host": host, "address": address},
                fields={"baseUrl": ["outside the approved networks"]},
            )
    return addresses


def normalize_base_url(url: str, *, resolve: bool = True) -> str:
    """`https://host[:port]` with a lower-case host, no path, query, fragment or user info;
    its addresses checked against the approved networks unless `resolve` is False."""
    if not isinstance(url, str) or len(url) > 300:
        raise Invalid(gettext("baseUrl must be an HTTPS URL."), fields={"baseUrl": ["not a URL"]})
    try:
        parts = urlsplit(url.strip())
        port = 443 if parts.port is None else parts.port
    except ValueError as exc:
        raise Invalid(gettext("baseUrl is not a valid URL."), fields={"baseUrl": ["not a URL"]}) from exc
    if parts.scheme.lower() != "https" or not parts.hostname:
        raise Invalid(gettext("baseUrl must be an https:// URL."), fields={"baseUrl": ["must use https"]})
    if parts.username or parts.password or parts.query or parts.fragment or parts.path not in ("", "/"):
        raise Invalid(gettext("baseUrl must be just https://host[:port]."),
                      fields={"baseUrl": ["only scheme, host, port"]})
    if not port_allowed(port):
        raise Invalid(gettext("Port %(port)d is not an approved port (approved: %(ports)s).") % {
            "port": port, "ports": allowed_ports_words()},
                      fields={"baseUrl": ["port not approved"]})
    host = parts.hostname.lower()
    if resolve:
        resolve_checked(host, port)
    shown_host = f"[{host}]" if ":" in host else host
    return f"https://{shown_host}" + ("" if port == 443 else f":{port}")


# --- the connectivity check -------------------------------------------------------------------

PROBE_BODY_LIMIT = 64 * 1024


class ProbeFailed(Exception):
    """The node's health endpoint did not prove what it should; the message says what."""


class _Deadline:
    """One deadline for the whole probe: resolution, connect, handshake, request, answer."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._at = time.monotonic() + seconds

    def left(self) -> float:
        left = self._at - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left


class _DeadlineReader(io.RawIOBase):
    """The TLS socket read under the deadline: each read may wait only for what is left of
    it. A timeout per read alone would let a peer that sends a byte just before each
    timeout hold the probe for as long as it likes."""

    def __init__(self, sock: ssl.SSLSocket, deadline: _Deadline):
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self._sock.settimeout(self._deadline.left())
        return self._sock.recv_into(buffer)


class _Answer:
    """What http.client.HTTPResponse reads from: our reader, not the socket's own file."""

    def __init__(self, reader):
        self._reader = reader

    def makefile(self, mode):
        return self._reader


def _get(address: str, port: int, host: str, target: str, deadline: _Deadline) -> tuple[int, bytes]:
    """GET `target` over HTTPS from `address` (the checked one: nothing is resolved here)
    while TLS verifies the certificate for `host`; (status, body up to the limit + 1)."""
    context = ssl.create_default_context(cafile=settings.KECE_PROBE_CA_FILE or None)
    with (socket.create_connection((address, port), timeout=deadline.left()) as raw,
          context.wrap_socket(raw, server_hostname=host, do_handshake_on_connect=False) as tls):
        # ssl's handshake and send count their timeout for the whole call, not per packet.
        tls.settimeout(deadline.left())
        tls.do_handshake()
        shown = f"[{host}]" if ":" in host else host
        authority = shown if port == 443 else f"{shown}:{port}"
        # No Authorization, no cookie: the node's credential never goes to its health endpoint.
        tls.settimeout(deadline.left())
        tls.sendall(f"GET {target} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\n"
                    f"User-Agent: kece-probe\r\nConnection: close\r\n\r\n".encode("ascii"))
        response = http.client.HTTPResponse(_Answer(io.BufferedReader(_DeadlineReader(tls, deadline))),
                                            method="GET")
        response.begin()
        # No redirect is followed: any status but 200 fails the check.
        return response.status, response.read(PROBE_BODY_LIMIT + 1)


def probe_health(node, *, challenge: str) -> dict:
    """GET {baseUrl}/healthz?challenge=… under the SSRF rules; returns the parsed answer.

    Approved networks and ports only, every resolved address checked, the connection pinned
    to the checked address, certificate verified, no redirects, capped body, and one
    deadline (`KECE_PROBE_TIMEOUT_MS`) over all of it. The claim credential is never sent.
    """
    seconds = settings.KECE_PROBE_TIMEOUT_MS / 1000
    deadline = _Deadline(seconds)
    parts = urlsplit(node.base_url)
    host, port = parts.hostname, 443 if parts.port is None else parts.port
    if not port_allowed(port):
        raise ProbeFailed(f"port {port} is not an approved port")
    try:
        address = resolve_checked(host, port, within=deadline.left())[0]
        status, body = _get(address, port, host, "/healthz?" + urlencode({"challenge": challenge}), deadline)
    except Invalid as exc:
        raise ProbeFailed(exc.detail) from exc
    except TimeoutError as exc:
        raise ProbeFailed(f"health endpoint did not answer within {seconds:g} s") from exc
    except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, TLS, reset, malformed
        raise ProbeFailed(f"{type(exc).__name__}: {exc}"[:500]) from exc
    if status != 200:
        raise ProbeFailed(f"health endpoint answered {status}")
    if len(body) > PROBE_BODY_LIMIT:
        raise ProbeFailed("health answer is larger than 64 KiB")
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise ProbeFailed("health answer is not JSON") from exc
    if not isinstance(answer, dict):
        raise ProbeFailed("health answer is not a JSON object")
    return answer
