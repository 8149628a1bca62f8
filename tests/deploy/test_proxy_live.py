"""The Compose proxy for real: Debian's nginx runs deploy/compose/nginx.conf, changed only
where the containers' world meets this machine's — the upstream (`kece-web:8000` → a live server
on loopback), the listening ports (free loopback ports), and the files it reads and writes
(the TLS secrets, pid and logs, in a temporary folder) — in front of a live KECE server.

Through it, a signed-in admin's browser opens the console's live socket and receives the
first live message, and a body over the server's limit gets the contract's 413 from nginx.
The nginx process is stopped when the test ends, however it ends: a fixture finaliser, and
the kernel (PR_SET_PDEATHSIG) if this process dies without running it."""

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.test import Client

from tests.api.helpers import make_admin
from tests.concurrency import wait_until
from tests.deploy.test_compose import NGINX_CONF
from tests.live import LiveServer, free_port, read_answer, stop_process_group

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]

REQUIRE = os.environ.get("KECE_REQUIRE_SERVICES") == "1"
PR_SET_PDEATHSIG = 1


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found is None:
        if REQUIRE:
            pytest.fail("nginx is required (scripts/setup.sh installs it)")
        pytest.skip("nginx is not installed")
    return found


def adapted(conf: str, *, upstream: int, ports: dict[int, int], folder: Path) -> str:
    """The Compose configuration with the containers' addresses, ports and files replaced by
    this machine's; every replacement must apply, so a change to the file shows up here."""
    replacements = [
        (r"server kece-web:8000 resolve;", f"server 127.0.0.1:{upstream};"),
        (r"server node-api:8000 resolve;", f"server 127.0.0.1:{upstream};"),  # the same application
        (r"\n\s*resolver [^;]*;", ""),  # Docker's DNS; the upstream is an address now
        (r"listen 80 default_server;", f"listen 127.0.0.1:{ports[80]} default_server;"),
        (r"listen 443 ssl default_server;", f"listen 127.0.0.1:{ports[443]} ssl default_server;"),
        (r"listen 8443 ssl;", f"listen 127.0.0.1:{ports[8443]} ssl;"),
        (r"/run/secrets/(?:public|internal)_tls_(cert|key)", lambda m: f"{folder}/tls-{m.group(1)}.pem"),
        (r"\npid [^;]*;", f"\npid {folder}/nginx.pid;"),
        (r"\nerror_log [^;]*;", f"\nerror_log {folder}/error.log info;"),
        (r"access_log /var/log/nginx/access.log", f"access_log {folder}/access.log"),
    ]
    for pattern, replacement in replacements:
        conf, count = re.subn(pattern, replacement, conf)
        assert count, f"nginx.conf no longer has {pattern!r}"
    return conf


def die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@pytest.fixture
def proxy(tmp_path):
    """A live server and the Compose proxy in front of it: (public https origin, TLS
    context, the internal listener's https origin)."""
    import trustme

    binary = nginx_binary()
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.private_key_pem.write_to_path(tmp_path / "tls-key.pem")
    for index, pem in enumerate(leaf.cert_chain_pems):
        pem.write_to_path(tmp_path / "tls-cert.pem", append=index > 0)
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    client_tls = ssl.create_default_context(cafile=tmp_path / "ca.pem")

    ports = {80: free_port(), 443: free_port(), 8443: free_port()}
    origin = f"https://127.0.0.1:{ports[443]}"
    # As compose.yaml sets it: the site's own https origin, as the browser names it.
    server = LiveServer(env={"CSRF_TRUSTED_ORIGINS": origin}, log_path=tmp_path / "server.log").start()
    process = None
    try:
        conf = tmp_path / "nginx.conf"
        conf.write_text(adapted(NGINX_CONF.read_text(), upstream=server.port, ports=ports, folder=tmp_path))
        process = subprocess.Popen([binary, "-c", str(conf), "-e", str(tmp_path / "error.log"), "-g", "daemon off;"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # its log: error.log
                                   start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / "error.log").read_text(errors="replace")
            try:
                ready = requests.get(origin + "/api/v1/system/judgers/summary", verify=str(tmp_path / "ca.pem"),
                                     timeout=2)
                assert ready.status_code == 200, ready.text
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "nginx did not answer"
                time.sleep(0.1)
        yield origin, client_tls, f"https://127.0.0.1:{ports[8443]}"
    finally:
        if process is not None:
            stop_process_group(process, 10)
        server.stop()


def test_a_signed_in_admin_opens_the_consoles_live_socket_through_the_proxy(proxy):
    from websockets.sync.client import connect

    origin, client_tls, _internal = proxy
    browser = Client()
    browser.force_login(make_admin())
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
    address = origin.replace("https://", "wss://") + "/ws/admin/judgers"
    with connect(address, ssl=client_tls, origin=origin, additional_headers={"Cookie": cookie},
                 open_timeout=20) as socket_:
        assert json.loads(socket_.recv(timeout=20))["type"] == "live"


def test_a_body_over_the_limit_gets_the_contracts_413_from_the_proxy(proxy):
    origin, client_tls, _internal = proxy
    port = int(origin.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw, \
            client_tls.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(f"POST /problems/1 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    f"Content-Length: {settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1}\r\n\r\n".encode())
        status, body = read_answer(tls)
    assert status == 413
    assert json.loads(body)["error"] == "too_large"


def test_the_metrics_are_served_on_the_internal_listener_and_refused_on_the_public_one(proxy, tmp_path):
    origin, _client_tls, internal = proxy
    ca = str(tmp_path / "ca.pem")
    for spelling in ("/metrics", "/metrics/", "/METRICS", "//metrics", "/./metrics", "/%6Detrics"):
        public = requests.get(origin + spelling, verify=ca, timeout=20)
        assert public.status_code == 404, spelling
        assert "kece_" not in public.text
    scraped = requests.get(internal + "/metrics", verify=ca, timeout=20)
    assert scraped.status_code == 200
    assert "# TYPE kece_jobs_queued gauge" in scraped.text
    # The node API's processes answer their own scrape (here the same server stands for them).
    node_api = requests.get(internal + "/metrics/node-api", verify=ca, timeout=20)
    assert node_api.status_code == 200 and "# TYPE kece_jobs_queued gauge" in node_api.text
    assert requests.get(origin + "/metrics/node-api", verify=ca, timeout=20).status_code == 404


def test_the_proxy_gives_each_request_an_id_the_server_echoes_and_keeps_the_clients(proxy, tmp_path):
    origin, _client_tls, _internal = proxy
    ca = str(tmp_path / "ca.pem")
    made = [requests.get(origin + "/no-such-page", verify=ca, timeout=20).headers["X-Request-ID"] for _ in range(2)]
    # nginx's $request_id: 32 hex digits, a new one for each request.
    assert all(re.fullmatch(r"[0-9a-f]{32}", rid) for rid in made) and made[0] != made[1]
    kept = requests.get(origin + "/no-such-page", verify=ca, timeout=20, headers={"X-Request-ID": "client-chosen-id-1"})
    assert kept.headers["X-Request-ID"] == "client-chosen-id-1"
    # nginx writes the access log line after the answer has gone out, so the client may read
    # the answer first.
    wait_until(lambda: "rid=client-chosen-id-1" in (tmp_path / "access.log").read_text(), timeout=20,
               message="the access log records the client's request id")


def test_the_proxy_bounds_how_fast_one_address_sends_sign_ins_and_never_limits_the_page(proxy, tmp_path):
    origin, _client_tls, _internal = proxy
    browser, ca = requests.Session(), str(tmp_path / "ca.pem")
    pages = [browser.get(origin + "/accounts/login/", verify=ca, timeout=20).status_code for _ in range(130)]
    assert set(pages) == {200}
    token = browser.cookies["csrftoken"]
    answers = [browser.post(origin + "/accounts/login/", verify=ca, timeout=20, headers={"Referer": origin + "/accounts/login/"},
                            data={"username": "nobody", "password": "guess", "csrfmiddlewaretoken": token})
               for _ in range(200)]
    # A burst of 120 passes whatever the pace (a classroom signing in at once); then one a second.
    assert {a.status_code for a in answers[:120]} <= {200, 429}
    assert not any("Too many sign-ins from this address" in a.text for a in answers[:120])
    from_proxy = [a for a in answers[120:] if "Too many sign-ins from this address" in a.text]
    assert from_proxy and all(a.status_code == 429 and a.headers["Retry-After"] == "60" for a in from_proxy)
    assert "请等一分钟再试" in from_proxy[0].text
