from __future__ import annotations

import pytest

from node_agent.config import ConfigError, load, parse_control_url, parse_listen, parse_mysql_url


@pytest.mark.parametrize("raw, origin, plain", [
    ("https://kece.internal", "https://kece.internal", False),
    ("https://kece.internal:8443/", "https://kece.internal:8443", False),
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000", True),
    ("http://localhost:8000", "http://localhost:8000", True),
    ("http://[::1]:8000", "http://[::1]:8000", True),
])
def test_control_url_is_an_origin(raw, origin, plain):
    assert parse_control_url(raw) == (origin, plain)


@pytest.mark.parametrize("raw", ["http://10.1.2.3", "http://kece.internal", "https://x/api", "https://x?a=1",
                                 "https://u:p@x", "kece.internal", "https://x:99999"])
def test_other_control_urls_are_refused(raw):
    with pytest.raises(ConfigError):
        parse_control_url(raw)


def test_listen_and_mysql_urls():
    assert parse_listen("0.0.0.0:8443") == ("0.0.0.0", 8443)
    assert parse_listen("[::]:8443") == ("::", 8443)
    target = parse_mysql_url("mysql://judge:p%40ss@db.internal:3307/")
    assert (target.user, target.password, target.host, target.port) == ("judge", "p@ss", "db.internal", 3307)
    with pytest.raises(ConfigError):
        parse_mysql_url("postgres://x")


def base_env(tmp_path, **extra) -> dict[str, str]:
    credential = tmp_path / "secret" / "credential"
    credential.parent.mkdir(exist_ok=True)
    credential.write_text("join-code\n")
    return {"JUDGE_MODE": "pool", "JUDGE_POOL": "python", "JUDGE_CONTROL_URL": "http://127.0.0.1:8000",
            "JUDGE_CREDENTIAL_FILE": str(credential), "JUDGE_WORKSPACE": str(tmp_path / "ws"),
            "JUDGE_HEALTH_LISTEN": "off", **extra}


def test_the_cache_watermarks(tmp_path):
    assert (load(base_env(tmp_path)).cache_max_mb, load(base_env(tmp_path)).cache_low_mb) == (2048, 1536)
    config = load(base_env(tmp_path, JUDGE_CACHE_MAX_MB="100", JUDGE_CACHE_LOW_MB="40"))
    assert (config.cache_max_mb, config.cache_low_mb) == (100, 40)
    assert load(base_env(tmp_path, JUDGE_CACHE_MAX_MB="100")).cache_low_mb == 75
    with pytest.raises(ConfigError, match="JUDGE_CACHE_LOW_MB"):
        load(base_env(tmp_path, JUDGE_CACHE_MAX_MB="100", JUDGE_CACHE_LOW_MB="101"))
    with pytest.raises(ConfigError, match="JUDGE_CACHE_LOW_MB"):
        load(base_env(tmp_path, JUDGE_CACHE_LOW_MB="-1"))


def test_the_metrics_token(tmp_path):
    assert load(base_env(tmp_path)).metrics_token is None
    assert load(base_env(tmp_path, JUDGE_METRICS_TOKEN="k" * 16)).metrics_token == "k" * 16
    for bad in ("short", "sixteen chars ok", "k" * 15 + "\x07"):
        with pytest.raises(ConfigError, match="JUDGE_METRICS_TOKEN"):
            load(base_env(tmp_path, JUDGE_METRICS_TOKEN=bad))


def test_a_ca_file_without_a_certificate_is_bad_configuration(tmp_path, tls_files):
    """A key, or an empty file, as JUDGE_CA_FILE made every call fail its verification,
    retried for ever as "control plane unreachable": it stops at start (exit 2) saying so."""
    _cert, key, ca = tls_files
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    for wrong in (key, empty):
        with pytest.raises(ConfigError, match="JUDGE_CA_FILE .* holds no CA certificate"):
            load(base_env(tmp_path, JUDGE_CA_FILE=str(wrong)))
    assert load(base_env(tmp_path, JUDGE_CA_FILE=str(ca))).ca_file == ca


def test_a_control_plane_whose_certificate_the_ca_file_did_not_sign_is_said_so(tls_files):
    """Not "unreachable": the owner is told to look at JUDGE_CA_FILE and the host name."""
    import http.server
    import ssl
    import threading

    import trustme

    from node_agent.client import Client, TransportError
    from node_agent.loop import _untrusted_certificate

    cert, _key, _ca = tls_files
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    other_ca = tls_files[0].parent / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    try:
        client = Client(f"https://127.0.0.1:{server.server_port}", str(other_ca), timeout=5)
        client.credential = "a-credential"
        with pytest.raises(TransportError) as refused:
            client.heartbeat(session_epoch=1, body={})
        assert _untrusted_certificate(refused.value)
        assert not _untrusted_certificate(TransportError("POST /heartbeat: ConnectionError: refused"))
    finally:
        server.shutdown()
