"""Node base URLs: normalised and held to the approved networks and ports (SSRF rules)."""

import ipaddress
import socket
import time
from urllib.parse import urlsplit

from django.conf import settings

from kece.errors import Invalid


def port_allowed(port: int) -> bool:
    for entry in settings.KECE_PROBE_ALLOWED_PORTS:
        low, high = entry if isinstance(entry, tuple | list) else (entry, entry)
        if low <= port <= high:
            return True
    return False


def _allowed_networks():
    return [ipaddress.ip_network(n, strict=False) for n in settings.KECE_PROBE_ALLOWED_NETWORKS]


def resolve_checked(host: str, port: int) -> list[str]:
    """Every address `host` resolves to, all of which must lie in an approved network."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Invalid(f"The host {host!r} does not resolve.", fields={"baseUrl": ["host does not resolve"]}) from exc
    addresses = sorted({info[4][0] for info in infos})
    networks = _allowed_networks()
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if not any(ip in net for net in networks):
            raise Invalid(
                f"{host} resolves to {address}, outside the approved networks.",
                fields={"baseUrl": ["outside the approved networks"]},
            )
    return addresses


def normalize_base_url(url: str) -> str:
    """`https://host[:port]` with a lower-case host, no path, query, fragment or user info."""
    if not isinstance(url, str) or len(url) > 300:
        raise Invalid("baseUrl must be an HTTPS URL.", fields={"baseUrl": ["not a URL"]})
    try:
        parts = urlsplit(url.strip())
        port = 443 if parts.port is None else parts.port
    except ValueError as exc:
        raise Invalid("baseUrl is not a valid URL.", fields={"baseUrl": ["not a URL"]}) from exc
    if parts.scheme.lower() != "https" or not parts.hostname:
        raise Invalid("baseUrl must be an https:// URL.", fields={"baseUrl": ["must use https"]})
    if parts.username or parts.password or parts.query or parts.fragment or parts.path not in ("", "/"):
        raise Invalid("baseUrl must be just https://host[:port].", fields={"baseUrl": ["only scheme, host, port"]})
    if not port_allowed(port):
        raise Invalid(f"Port {port} is not an approved port.", fields={"baseUrl": ["port not approved"]})
    host = parts.hostname.lower()
    resolve_checked(host, port)
    shown_host = f"[{host}]" if ":" in host else host
    return f"https://{shown_host}" + ("" if port == 443 else f":{port}")


# --- the connectivity check -------------------------------------------------------------------

PROBE_BODY_LIMIT = 64 * 1024
PROBE_CONNECT_TIMEOUT = 3.0
PROBE_READ_TIMEOUT = 5.0
PROBE_TOTAL_SECONDS = 10.0


class ProbeFailed(Exception):
    """The node's health endpoint did not prove what it should; the message says what."""


def _pinned_session(hostname: str):
    """A requests session whose HTTPS connections go to a given IP while TLS verifies the
    certificate for `hostname` (SNI too): the address we checked is the one we talk to."""
    import requests
    from requests.adapters import HTTPAdapter

    class PinnedAdapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            kwargs["server_hostname"] = hostname
            kwargs["assert_hostname"] = hostname
            super().init_poolmanager(*args, **kwargs)

    session = requests.Session()
    session.trust_env = False  # no proxies from the environment
    session.mount("https://", PinnedAdapter(max_retries=0))
    return session


def probe_health(node, *, challenge: str) -> dict:
    """GET {baseUrl}/healthz?challenge=… under the SSRF rules; returns the parsed answer.

    Approved networks and ports only, every resolved address checked, the connection pinned
    to the checked address, certificate verified, no redirects, capped body, short timeouts.
    The claim credential is never sent.
    """
    parts = urlsplit(node.base_url)
    host, port = parts.hostname, 443 if parts.port is None else parts.port
    if not port_allowed(port):
        raise ProbeFailed(f"port {port} is not an approved port")
    try:
        addresses = resolve_checked(host, port)
    except Invalid as exc:
        raise ProbeFailed(exc.detail) from exc
    address = addresses[0]
    shown = f"[{address}]" if ":" in address else address
    url = f"https://{shown}:{port}/healthz"
    verify = settings.KECE_PROBE_CA_FILE or True
    session = _pinned_session(host)
    started = time.monotonic()
    try:
        response = session.get(url, params={"challenge": challenge}, headers={"Host": host}, verify=verify,
                               allow_redirects=False, stream=True,
                               timeout=(PROBE_CONNECT_TIMEOUT, PROBE_READ_TIMEOUT))
        body = b""
        # The read timeout is per read: a peer sending a byte at a time is cut off by the
        # total deadline instead.
        for chunk in response.iter_content(8192):
            body += chunk
            if len(body) > PROBE_BODY_LIMIT or time.monotonic() - started > PROBE_TOTAL_SECONDS:
                break
    except Exception as exc:  # TLS, refused, timeout, reset: all are a failed check
        raise ProbeFailed(f"{type(exc).__name__}: {exc}"[:500]) from exc
    finally:
        session.close()
    if time.monotonic() - started > PROBE_TOTAL_SECONDS:
        raise ProbeFailed(f"health endpoint took longer than {PROBE_TOTAL_SECONDS:.0f} s")
    if response.status_code != 200:
        raise ProbeFailed(f"health endpoint answered {response.status_code}")
    if len(body) > PROBE_BODY_LIMIT:
        raise ProbeFailed("health answer is larger than 64 KiB")
    try:
        import json

        answer = json.loads(body)
    except ValueError as exc:
        raise ProbeFailed("health answer is not JSON") from exc
    if not isinstance(answer, dict):
        raise ProbeFailed("health answer is not a JSON object")
    return answer
