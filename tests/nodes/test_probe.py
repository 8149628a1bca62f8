"""Node base URLs and the connectivity probe follow the SSRF rules."""

import hashlib
import hmac
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from kece.errors import Invalid
from nodes.checks import connectivity_items
from nodes.probe import ProbeFailed, normalize_base_url, probe_health
from tests.factories import make_node


@pytest.fixture
def loopback_allowed(settings):
    settings.KECE_PROBE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.KECE_PROBE_ALLOWED_PORTS = [(443, 443), (1024, 65535)]


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

    def do_GET(self):
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
    cert = ca.issue_cert("127.0.0.1")
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
