from __future__ import annotations

import hashlib
import hmac
from types import SimpleNamespace

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from node_agent.health import Identity, proof, start
from node_agent.metrics import AgentMetrics


def test_the_proof_is_hmac_sha256_of_the_challenge_keyed_with_the_probe_key():
    key, challenge = "pk_0123", "00ff" * 8
    assert proof(key, challenge) == hmac.new(key.encode(), challenge.encode(), hashlib.sha256).hexdigest()
    assert proof(key, challenge.upper()) != proof(key, challenge), "the challenge is used exactly as sent"


@pytest.fixture
def endpoint(tmp_path):
    """The health endpoint on a free port, with its metrics; shut down afterwards."""
    import trustme

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "node.pem"))
    leaf.private_key_pem.write_to_path(str(tmp_path / "node.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    servers = []

    def open_endpoint(token=None):
        identity = Identity("python", "python-r1")
        metrics = AgentMetrics()
        server = start(("127.0.0.1", 0), tmp_path / "node.pem", tmp_path / "node.key", identity, metrics,
                       metrics_token=token)
        servers.append(server)
        base = f"https://127.0.0.1:{server.server_address[1]}"

        def get(path, method="GET", **headers):
            return requests.request(method, base + path, verify=str(tmp_path / "ca.pem"), timeout=10,
                                    headers=headers)

        return SimpleNamespace(get=get, identity=identity, metrics=metrics)

    yield open_endpoint
    for server in servers:
        server.shutdown()
        server.server_close()


def test_metrics_are_served_beside_the_probe_which_answers_as_before(endpoint):
    endpoint = endpoint()
    endpoint.metrics.claimed(1)
    scraped = endpoint.get("/metrics")
    assert scraped.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(scraped.text)}
    assert [s.value for s in families["kece_agent_claims"].samples
            if s.name == "kece_agent_claims_total" and s.labels == {"result": "jobs"}] == [1.0]
    assert endpoint.get("/healthz?challenge=00ff00ff").status_code == 503, "not joined yet"
    endpoint.identity.set(5, "pk_secret")
    probe = endpoint.get("/healthz?challenge=00ff00ff")
    assert probe.status_code == 200 and probe.json()["proof"] == proof("pk_secret", "00ff00ff")
    assert "pk_secret" not in endpoint.get("/metrics").text
    assert endpoint.get("/healthz").status_code == 400
    assert endpoint.get("/metrics", "POST").status_code == 405
    assert endpoint.get("/healthz?challenge=00ff00ff", "POST").status_code == 405
    assert endpoint.get("/metricsz").status_code == 404


def test_with_a_token_metrics_need_it_and_the_probe_does_not(endpoint):
    endpoint = endpoint(token="t" * 24)
    endpoint.identity.set(5, "pk_secret")
    assert endpoint.get("/metrics").status_code == 401
    assert endpoint.get("/metrics", Authorization="Bearer " + "u" * 24).status_code == 401
    assert endpoint.get("/metrics", Authorization="Bearer " + "t" * 24).status_code == 200
    assert endpoint.get("/healthz?challenge=00ff00ff").status_code == 200, "the server's probe sends no token"
