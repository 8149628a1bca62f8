"""The agent's HTTPS health endpoint, probed by the control plane.

``GET /healthz?challenge=<hex>`` answers who this node is and proves it holds the probe key:
``proof = hex(HMAC-SHA256(key=probeKey, msg=challenge))``, both as UTF-8 bytes, the challenge
exactly as sent. The claim credential is never involved. Anything else is 404; a missing or
malformed challenge is 400.

``GET /metrics`` is the agent's Prometheus exposition (``metrics.py``). It asks for no key
unless ``JUDGE_METRICS_TOKEN`` is set (then ``Authorization: Bearer <token>``, else 401): it
holds counts, sizes and ages only — no credential, probe key, job, submission or user — and
the endpoint is on the judge network, not the public one. The probe key is never the
scraper's password: it proves the node to the server, and a scraper should not hold it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from . import AGENT_VERSION, PROTOCOL_VERSION, log
from .metrics import CONTENT_TYPE, AgentMetrics

logger = log.get("health")
CHALLENGE_RE = re.compile(r"^[0-9a-fA-F]{8,1024}$")


def proof(probe_key: str, challenge: str) -> str:
    return hmac.new(probe_key.encode("utf-8"), challenge.encode("utf-8"), hashlib.sha256).hexdigest()


class Identity:
    """What the endpoint reports; filled in once the node knows its id and probe key."""

    def __init__(self, pool: str, runtime_spec: str):
        self.pool = pool
        self.runtime_spec = runtime_spec
        self.node_id: int | None = None
        self.probe_key: str | None = None
        self.lock = threading.Lock()

    def set(self, node_id: int, probe_key: str) -> None:
        with self.lock:
            self.node_id, self.probe_key = node_id, probe_key


class _Handler(BaseHTTPRequestHandler):
    server_version = "kece-node-agent"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    identity: Identity
    metrics: AgentMetrics | None
    metrics_token: str | None

    def log_message(self, fmt, *args):  # access log through our own format
        log.event(logger, 10, "health request", peer=self.client_address[0], line=fmt % args)

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _send_metrics(self) -> None:
        if self.metrics_token is not None:
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.metrics_token}".encode()):
                return self._send(401, {"error": "unauthorized", "detail": "Authorization: Bearer <token> required"})
        data = self.metrics.render()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _paths(self) -> tuple[str, ...]:
        return ("/healthz", "/metrics") if self.metrics is not None else ("/healthz",)

    def do_GET(self):  # noqa: N802 (http.server naming)
        parts = urlsplit(self.path)
        if parts.path == "/metrics" and self.metrics is not None:
            return self._send_metrics()
        if parts.path != "/healthz":
            return self._send(404, {"error": "not_found", "detail": "unknown path"})
        values = parse_qs(parts.query, keep_blank_values=True).get("challenge", [])
        if len(values) != 1 or not CHALLENGE_RE.match(values[0]):
            return self._send(400, {"error": "invalid", "detail": "challenge must be 8-1024 hex characters"})
        ident = self.identity
        with ident.lock:
            node_id, key = ident.node_id, ident.probe_key
        if key is None:
            return self._send(503, {"error": "unavailable", "detail": "node has not joined yet"})
        self._send(200, {
            "nodeId": node_id, "pool": ident.pool, "protocolVersion": PROTOCOL_VERSION,
            "agentVersion": AGENT_VERSION, "runtimeSpec": ident.runtime_spec, "proof": proof(key, values[0]),
        })

    def _not_allowed(self):
        allowed = urlsplit(self.path).path in self._paths()
        detail = "only GET " + " and GET ".join(self._paths())
        self._send(405 if allowed else 404, {"error": "not_found", "detail": detail})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _not_allowed


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 32

    def __init__(self, address, handler, context: ssl.SSLContext):
        self.context = context
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        super().__init__(address, handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        sock.settimeout(10)
        # The handshake happens in the request thread, so a slow client cannot stall accept().
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address):
        log.event(logger, 10, "health connection error", peer=client_address[0])


def start(listen: tuple[str, int], cert: Path, key: Path, identity: Identity,
          metrics: AgentMetrics | None = None, metrics_token: str | None = None) -> ThreadingHTTPServer:
    """Bind and serve in a daemon thread. Raises OSError/ssl.SSLError on bad address or PEM files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    handler = type("HealthHandler", (_Handler,), {"identity": identity, "metrics": metrics,
                                                  "metrics_token": metrics_token})
    server = _TLSServer(listen, handler, context)
    thread = threading.Thread(target=server.serve_forever, name="health", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    log.event(logger, 20, "health endpoint listening", address=f"{host}:{port}")
    return server
