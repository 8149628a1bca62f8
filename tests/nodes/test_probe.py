"""Node base URLs and the connectivity probe follow the SSRF rules."""

import hashlib
import hmac
import ipaddress
import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest

from kece.errors import Invalid
from nodes import probe
from nodes.checks import connectivity_items
from nodes.probe import ProbeFailed, normalize_base_url, probe_health
from tests.factories import make_node


@pytest.fixture
def resolver(monkeypatch):
    """The probe's resolver, answered by the test: `answers[name]` is a list of addresses or a
    function returning one; address literals resolve to themselves."""
    state = SimpleNamespace(answers={}, asked=[])

    def lookup(host, port):
        state.asked.append(host)
        try:
            return [str(ipaddress.ip_address(host))]
        except ValueError:
            pass
        if host not in state.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        answer = state.answers[host]
        return list(answer() if callable(answer) else answer)

    monkeypatch.setattr(probe, "lookup", lookup)
    return state


@pytest.fixture
def loopback_allowed(settings, resolver):
    settings.KECE_PROBE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.KECE_PROBE_ALLOWED_PORTS = [(443, 443), (1024, 65535)]
    resolver.answers["localhost"] = ["127.0.0.1"]
    resolver.answers["no-address.test"] = []


@pytest.mark.parametrize("url, normalised", [
    ("https://127.0.0.1", "https://127.0.0.1"),
    ("https://127.0.0.1:443/", "https://127.0.0.1"),
    ("HTTPS://LOCALHOST:8443", "https://localhost:8443"),
])
def test_base_urls_are_normalised(loopback_allowed, url, normalised):
    assert normalize_base_url(url) == normalised


@pytest.mark.parametrize("url, reason", [
    ("http://127.0.0.1", "must use https"),
    ("https://127.0.0.1:0", "port not approved"),
    ("https://127.0.0.1:80", "port not approved"),
    ("https://127.0.0.1/api", "only scheme, host, port"),
    ("https://user:pw@127.0.0.1", "only scheme, host, port"),
    ("https://127.0.0.1/?next=x", "only scheme, host, port"),
    ("https://10.1.2.3", "outside the approved networks"),
    ("https://no-such-host.invalid", "host does not resolve"),
    ("https://no-address.test", "host does not resolve"),
    ("https:///nohost", "must use https"),
    ("not a url", "must use https"),
])
def test_base_urls_outside_the_rules_are_refused(loopback_allowed, url, reason):
    with pytest.raises(Invalid) as refused:
        normalize_base_url(url)
    assert refused.value.fields["baseUrl"] == [reason]


class _Health(BaseHTTPRequestHandler):
    behaviour = "ok"
    probe_key = "key"
    node_id = 0
    seen: list[str] = []  # each request as it arrived: request line and headers

    def do_GET(self):
        self.seen.append(f"{self.requestline}\r\n{self.headers}")
        challenge = parse_qs(urlsplit(self.path).query).get("challenge", [""])[0]
        if self.behaviour == "redirect":
            self.send_response(302)
            self.send_header("Location", "https://127.0.0.1:1/elsewhere")
            self.end_headers()
            return
        if self.behaviour == "huge":
            body = b"{" + b" " * (200 * 1024) + b"}"
        else:
            key = self.probe_key if self.behaviour == "ok" else "another key"
            proof = hmac.new(key.encode(), challenge.encode(), hashlib.sha256).hexdigest()
            body = json.dumps({"nodeId": self.node_id, "pool": "python", "protocolVersion": 1,
                               "agentVersion": "t", "runtimeSpec": "python-r1", "proof": proof}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server(tmp_path, settings, loopback_allowed):
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "node.test")
    _Health.seen = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    settings.KECE_PROBE_CA_FILE = str(tmp_path / "ca.pem")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _node_at(server, db):
    node, _ = make_node(pool="python")
    node.base_url = f"https://127.0.0.1:{server.server_address[1]}"
    _Health.node_id, _Health.probe_key = node.pk, node.probe_key
    return node


@pytest.mark.django_db
def test_the_probe_proves_identity_with_the_hmac(health_server, db):
    node = _node_at(health_server, db)
    _Health.behaviour = "ok"
    answer = probe_health(node, challenge="c0ffee")
    assert all(item["ok"] for item in connectivity_items(node, answer, "c0ffee"))


@pytest.mark.django_db
def test_a_wrong_proof_fails_the_identity_item(health_server, db):
    node = _node_at(health_server, db)
    _Health.behaviour = "wrong-key"
    items = connectivity_items(node, probe_health(node, challenge="c0ffee"), "c0ffee")
    assert [i["name"] for i in items if not i["ok"]] == ["identity"]


@pytest.mark.django_db
@pytest.mark.parametrize("behaviour, message", [("redirect", "answered 302"), ("huge", "larger than 64 KiB")])
def test_redirects_are_not_followed_and_bodies_are_capped(health_server, db, behaviour, message):
    node = _node_at(health_server, db)
    _Health.behaviour = behaviour
    with pytest.raises(ProbeFailed, match=message):
        probe_health(node, challenge="c0ffee")


@pytest.mark.django_db
def test_an_untrusted_certificate_fails_the_probe(health_server, db, settings):
    node = _node_at(health_server, db)
    _Health.behaviour = "ok"
    settings.KECE_PROBE_CA_FILE = ""  # the system CAs do not know this certificate
    with pytest.raises(ProbeFailed, match="SSL|certificate"):
        probe_health(node, challenge="c0ffee")


@pytest.mark.django_db
def test_an_address_outside_the_approved_networks_is_never_contacted(health_server, db, settings):
    node = _node_at(health_server, db)
    settings.KECE_PROBE_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    with pytest.raises(ProbeFailed, match="outside the approved networks"):
        probe_health(node, challenge="c0ffee")


@pytest.mark.django_db
@pytest.mark.parametrize("answer", [["127.0.0.1", "169.254.169.254"], ["::1", "127.0.0.1"]])
def test_a_name_with_any_address_outside_the_networks_is_refused(health_server, resolver, db, answer):
    resolver.answers["node.test"] = answer
    port = health_server.server_address[1]
    with pytest.raises(Invalid) as refused:
        normalize_base_url(f"https://node.test:{port}")
    assert refused.value.fields["baseUrl"] == ["outside the approved networks"]
    node = _node_at(health_server, db)
    node.base_url = f"https://node.test:{port}"
    with pytest.raises(ProbeFailed, match="outside the approved networks"):
        probe_health(node, challenge="c0ffee")
    assert _Health.seen == []


@pytest.mark.django_db
def test_the_probe_talks_to_the_address_it_checked_even_if_the_name_rebinds(health_server, resolver, settings, db):
    """The name answers the node's address once and then a forbidden one, where a trap
    listens: the probe must reach the node, and the trap nothing."""
    port = health_server.server_address[1]
    settings.KECE_PROBE_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    answers = iter([["127.0.0.1"]])
    resolver.answers["node.test"] = lambda: next(answers, ["127.0.0.2"])
    with socket.create_server(("127.0.0.2", port)) as trap:
        trap.setblocking(False)
        node = _node_at(health_server, db)
        node.base_url = f"https://node.test:{port}"
        _Health.behaviour = "ok"
        answer = probe_health(node, challenge="c0ffee")
        assert answer["nodeId"] == node.pk and len(_Health.seen) == 1
        with pytest.raises(BlockingIOError):
            trap.accept()
    assert resolver.asked == ["node.test"]


@pytest.mark.django_db
def test_the_health_endpoint_never_sees_the_node_credential(health_server, db):
    node = _node_at(health_server, db)
    _Health.behaviour = "ok"
    probe_health(node, challenge="c0ffee")
    [request] = _Health.seen
    assert request.startswith("GET /healthz?challenge=c0ffee HTTP/1.1\r\n")
    assert "authorization" not in request.lower() and "cookie" not in request.lower()
    assert node.secret not in request and node.credential_digest not in request and node.probe_key not in request


# --- one deadline for the whole probe ----------------------------------------------------------

PROBE_DEADLINE = 1.5
MARGIN = 1.0  # thread start-up and scheduling on a loaded machine, never the peer's pace


class Dripper:
    """A TLS server that answers so slowly that only a deadline over the whole probe stops
    it: each byte comes well inside any per-read timeout. It stops on its own after
    `for_seconds`, so a probe without such a deadline ends (late) instead of hanging."""

    def __init__(self, context, phase: str, for_seconds: float = 3 * (PROBE_DEADLINE + MARGIN)):
        self.context, self.phase, self.for_seconds = context, phase, for_seconds
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        until = time.monotonic() + self.for_seconds
        with conn:
            if self.phase == "handshake":  # the TCP connection is accepted; TLS never starts
                self.stop.wait(self.for_seconds)
                return
            with self.context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(65536)
                if self.phase == "headers":
                    drip = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000
                else:
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n")
                    drip = b" " * 10_000
                for byte in drip:
                    if self.stop.wait(0.05) or time.monotonic() > until:
                        return
                    try:
                        tls.sendall(bytes([byte]))
                    except OSError:  # the probe gave up and closed the connection
                        return

    def close(self):
        self.stop.set()
        self.listener.close()
        self.thread.join(10)


@pytest.fixture
def dripper(tmp_path, settings, loopback_allowed):
    import trustme

    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    settings.KECE_PROBE_CA_FILE = str(tmp_path / "ca.pem")
    settings.KECE_PROBE_TIMEOUT_MS = int(PROBE_DEADLINE * 1000)
    servers = []

    def start(phase):
        servers.append(Dripper(context, phase))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.mark.django_db
@pytest.mark.parametrize("phase", ["handshake", "headers", "body"])
def test_a_peer_that_answers_a_byte_at_a_time_fails_within_the_deadline(dripper, db, phase):
    server = dripper(phase)
    node, _ = make_node(pool="python")
    node.base_url = f"https://127.0.0.1:{server.port}"
    started = time.monotonic()
    with pytest.raises(ProbeFailed, match="did not answer within 1.5 s"):
        probe_health(node, challenge="c0ffee")
    assert time.monotonic() - started < PROBE_DEADLINE + MARGIN


@pytest.mark.django_db
def test_a_resolver_that_never_answers_fails_within_the_deadline(dripper, resolver, db):
    hung = threading.Event()
    resolver.answers["node.test"] = lambda: hung.wait(30) and []
    node, _ = make_node(pool="python")
    node.base_url = "https://node.test:8443"
    started = time.monotonic()
    try:
        with pytest.raises(ProbeFailed, match="did not resolve within"):
            probe_health(node, challenge="c0ffee")
        assert time.monotonic() - started < PROBE_DEADLINE + MARGIN
    finally:
        hung.set()
