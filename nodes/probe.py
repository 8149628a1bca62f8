"""Node base URLs: normalised and held to the approved networks and ports (SSRF rules)."""

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

from kece.errors import Invalid


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
        port = parts.port or 443
    except ValueError as exc:
        raise Invalid("baseUrl is not a valid URL.", fields={"baseUrl": ["not a URL"]}) from exc
    if parts.scheme.lower() != "https" or not parts.hostname:
        raise Invalid("baseUrl must be an https:// URL.", fields={"baseUrl": ["must use https"]})
    if parts.username or parts.password or parts.query or parts.fragment or parts.path not in ("", "/"):
        raise Invalid("baseUrl must be just https://host[:port].", fields={"baseUrl": ["only scheme, host, port"]})
    if port not in settings.KECE_PROBE_ALLOWED_PORTS:
        raise Invalid(f"Port {port} is not an approved port.", fields={"baseUrl": ["port not approved"]})
    host = parts.hostname.lower()
    resolve_checked(host, port)
    shown_host = f"[{host}]" if ":" in host else host
    return f"https://{shown_host}" + ("" if port == 443 else f":{port}")
