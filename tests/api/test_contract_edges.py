"""Corners of API.md that a client written strictly against it relies on: the answer's
format whatever Accept says, capped waits, chunked bodies, pages that do not exist, and
the error envelope for requests Django refuses before any view."""

import json

import pytest
import requests
from django.test import Client

from tests.api.helpers import error_of, make_admin, token_client
from tests.factories import UserFactory, make_node, make_problem
from tests.judging.helpers import submit
from tests.live import NodeClient

pytestmark = pytest.mark.django_db(transaction=True)

INTERNAL = "/api/v1/internal/judgers/"


def node_headers(node) -> dict:
    return {"Authorization": f"Bearer {node.secret}", "X-Judge-Session": str(node.session_epoch)}


@pytest.fixture
def leased_job(server):
    node, _ = make_node(pool="python")
    submit(UserFactory(), make_problem(languages=("python",)), code="print(7)")
    agent = NodeClient(server.url, credential=node.secret, session=node.session_epoch)
    [job] = agent.claim(free_slots=1, wait_ms=2000).json()["jobs"]
    return node, job


@pytest.mark.mariadb
def test_an_artifact_is_sent_to_a_client_that_accepts_only_bytes(server, leased_job):
    node, job = leased_job
    path = f"{INTERNAL}jobs/{job['jobId']}/artifacts/{job['source']['digest']}"
    headers = {**node_headers(node), "X-Judge-Lease": str(job["leaseEpoch"])}

    download = requests.get(server.url + path, headers={**headers, "Accept": "application/octet-stream"}, timeout=10)
    assert download.status_code == 200 and download.content == b"print(7)"
    assert download.headers["Content-Type"] == "application/octet-stream"
    # Its refusals stay in the JSON envelope, whatever the client asked for.
    stale = requests.get(server.url + path, headers={**headers, "X-Judge-Lease": "9",
                                                      "Accept": "application/octet-stream"}, timeout=10)
    assert (stale.status_code, stale.json()["error"]) == (409, "lease_lost")


@pytest.mark.mariadb
def test_an_epoch_or_a_digest_is_exactly_what_was_given_in_digits(server, leased_job):
    """Not what `int()` or a `$` would also take: "+1", "0_1", a trailing newline."""
    node, job = leased_job
    path = f"{INTERNAL}jobs/{job['jobId']}/artifacts/{job['source']['digest']}"
    lease = str(job["leaseEpoch"])
    assert requests.get(server.url + path, headers={**node_headers(node), "X-Judge-Lease": lease},
                        timeout=10).status_code == 200
    for spelled in (f"+{lease}", f"0_{lease}", f"{lease}.0", "٣"):
        answer = requests.get(server.url + path, headers={**node_headers(node), "X-Judge-Lease": spelled.encode()},
                              timeout=10)
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid"), spelled
    newline = requests.get(server.url + path + "%0A", headers={**node_headers(node), "X-Judge-Lease": lease},
                           timeout=10)
    assert (newline.status_code, newline.json()["error"]) == (400, "invalid")
    epoch = str(node.session_epoch)
    for spelled in (f"+{epoch}", f"0_{epoch}"):
        for method, call, body in (("post", "jobs/claim", {"freeSlots": 0}), ("post", "heartbeat", None)):
            answer = requests.request(method, server.url + INTERNAL + call, json=body or {}, timeout=10,
                                      headers={**node_headers(node), "X-Judge-Session": spelled})
            assert (answer.status_code, answer.json()["error"]) == (409, "session_superseded"), (call, spelled)


@pytest.mark.mariadb
def test_a_user_token_is_the_key_letter_for_letter(server):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=UserFactory()).key
    path = server.url + "/api/v1/submissions/ALGO/999999"  # nobody's: 404 to whoever is signed in
    assert requests.get(path, headers={"Authorization": f"Token {token}"}, timeout=10).status_code == 404
    for spelled in (token.upper(), token[:-1] + "é"):
        answer = requests.get(path, headers={"Authorization": f"Token {spelled}".encode()}, timeout=10)
        assert (answer.status_code, answer.json()["error"]) == (401, "unauthenticated"), spelled


@pytest.mark.mariadb
def test_a_wait_far_above_the_servers_limit_is_capped_not_refused(server):
    node, _ = make_node(pool="python")
    submit(UserFactory(), make_problem(languages=("python",)))
    answer = requests.post(server.url + INTERNAL + "jobs/claim", json={"freeSlots": 1, "waitMs": 2**40},
                           headers=node_headers(node), timeout=30)
    assert answer.status_code == 200 and len(answer.json()["jobs"]) == 1


def chunks(data: bytes, size: int = 4096):
    for start in range(0, len(data), size):
        yield data[start:start + size]


@pytest.mark.mariadb
def test_a_chunked_body_is_read_and_held_to_the_size_limit(server):
    node, _ = make_node(pool="python")
    body = {"agentVersion": "test", "runtimeSpec": "python-r1", "localSlots": 4, "running": 0,
            "health": {"ok": True, "checks": {}}}
    url = server.url + INTERNAL + "heartbeat"
    # A generator body goes out with Transfer-Encoding: chunked and no Content-Length.
    beat = requests.post(url, data=chunks(json.dumps(body).encode()), timeout=10,
                         headers={**node_headers(node), "Content-Type": "application/json"})
    assert beat.status_code == 200, beat.text
    assert beat.json()["desiredState"] == "ENABLED"

    huge = {**body, "agentVersion": "x" * (1024 * 1024 + 10)}
    refused = requests.post(url, data=chunks(json.dumps(huge).encode()), timeout=10,
                            headers={**node_headers(node), "Content-Type": "application/json"})
    assert (refused.status_code, refused.json()["error"]) == (413, "too_large")


@pytest.mark.parametrize("page", ["abc", "0", "99"])
def test_a_page_that_does_not_exist_is_an_invalid_field_not_an_unknown_route(page):
    make_node(pool="python")
    response = token_client(make_admin()).get("/api/v1/admin/judgers", {"page": page})
    assert error_of(response) == (400, "invalid")
    assert "page" in response.json()["fields"]


def test_a_host_the_server_does_not_serve_gets_the_error_envelope():
    response = Client(HTTP_HOST="evil.example").get("/api/v1/system/judgers/summary")
    assert error_of(response) == (400, "invalid")
    assert response["Content-Type"] == "application/json"


@pytest.mark.mariadb
def test_a_number_too_long_to_convert_is_malformed_on_the_hot_calls_too(server):
    node, _ = make_node(pool="python")
    huge = "1" + "0" * 5000
    for path in ("jobs/claim", "jobs/1/result"):
        answer = requests.post(server.url + INTERNAL + path, data=f'{{"freeSlots": {huge}}}', timeout=10,
                               headers={**node_headers(node), "Content-Type": "application/json"})
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid"), path


@pytest.mark.mariadb
def test_nan_and_infinity_are_not_json_on_the_hot_calls_either(server):
    node, _ = make_node(pool="python")
    bodies = {"jobs/claim": '{"freeSlots": 0, "x": NaN}',
              "jobs/1/result": '{"leaseEpoch": 1, "outcome": "INFRA_ERROR", "error": "x", "message": Infinity}',
              "jobs/renew": '{"leases": [], "x": -Infinity}'}
    for path, body in bodies.items():
        answer = requests.post(server.url + INTERNAL + path, data=body, timeout=10,
                               headers={**node_headers(node), "Content-Type": "application/json"})
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid"), path


@pytest.mark.mariadb
def test_a_string_that_is_not_valid_unicode_is_malformed_wherever_it_is(server):
    node, _ = make_node(pool="python")
    heartbeat = ('{"agentVersion": "t", "runtimeSpec": "python-r1", "localSlots": 4, "running": 0,'
                 ' "health": {"ok": true, "checks": {"\\ud800": true}}}')
    renew = '{"leases": [{"jobId": 1, "leaseEpoch": 1, "progress": {"phase": "\\ud800"}}]}'
    result = '{"leaseEpoch": 1, "outcome": "JUDGED", "verdict": "\\udfff"}'
    for path, body in (("heartbeat", heartbeat), ("jobs/renew", renew), ("jobs/1/result", result)):
        answer = requests.post(server.url + INTERNAL + path, data=body, timeout=10,
                               headers={**node_headers(node), "Content-Type": "application/json"})
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid"), path
    # A surrogate pair is one valid character and is accepted.
    paired = heartbeat.replace("\\ud800", "\\ud83d\\ude00")
    assert requests.post(server.url + INTERNAL + "heartbeat", data=paired, timeout=10,
                         headers={**node_headers(node), "Content-Type": "application/json"}).status_code == 200


@pytest.mark.mariadb
def test_a_body_is_read_as_utf8_whatever_charset_its_content_type_names(server):
    """A charset is not a codec to run: a few hundred bytes "in" bz2 must not expand past the
    body limit, nor UTF-16 carry a string that is not valid Unicode past the check."""
    import bz2

    from judging.models import Submission
    from rest_framework.authtoken.models import Token

    node, _ = make_node(pool="python")
    bomb = bz2.compress(b'{"leases": []' + b" " * (64 * 1024 * 1024) + b"}")
    assert len(bomb) < 1024
    surrogate = '{"leases": [{"jobId": 1, "leaseEpoch": 1, "progress": {"phase": "\\ud800"}}]}'
    for charset, body in (("bz2", bomb), ("zlib", __import__("zlib").compress(b'{"leases": []}')),
                          ("utf-16", surrogate.encode("utf-16"))):
        answer = requests.post(server.url + INTERNAL + "jobs/renew", data=body, timeout=30,
                               headers={**node_headers(node), "Content-Type": f"application/json; charset={charset}"})
        assert (answer.status_code, answer.json().get("error")) == (400, "invalid"), (charset, answer.text[:200])
    # UTF-8 is read as such, whatever the charset calls it (rot13 once answered 503).
    for charset in ("utf-8", "UTF8", "rot13", "latin-1"):
        answer = requests.post(server.url + INTERNAL + "jobs/renew", data=b'{"leases": []}', timeout=10,
                               headers={**node_headers(node), "Content-Type": f"application/json; charset={charset}"})
        assert answer.status_code == 200, charset

    student, problem = UserFactory(), make_problem(languages=("python",))
    token = Token.objects.create(user=student).key
    body = bz2.compress(json.dumps({"problemId": problem.pk, "language": "python",
                                    "code": "print(1)" + " " * (8 * 1024 * 1024)}).encode())
    answer = requests.post(server.url + "/api/v1/submissions", data=body, timeout=30,
                           headers={"Authorization": f"Token {token}", "Content-Type": "application/json; charset=bz2"})
    assert (answer.status_code, answer.json()["error"]) == (400, "invalid")
    assert not Submission.objects.filter(user=student).exists()


def test_the_schemas_errors_are_in_the_envelope_and_any_accept_gets_the_schema():
    client = Client()
    refused = client.post("/api/schema/")
    assert error_of(refused) == (405, "method_not_allowed")
    assert refused["Content-Type"] == "application/json"
    schema = client.get("/api/schema/", HTTP_ACCEPT="text/html")
    assert schema.status_code == 200 and b"openapi:" in schema.content


@pytest.mark.mariadb
def test_a_body_declared_too_large_is_refused_before_it_is_sent(server):
    import socket
    from urllib.parse import urlsplit

    node, _ = make_node(pool="python")
    address = urlsplit(server.url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        request = (f"POST {INTERNAL}heartbeat HTTP/1.1\r\nHost: {address.hostname}\r\n"
                   f"Authorization: Bearer {node.secret}\r\nX-Judge-Session: {node.session_epoch}\r\n"
                   "Content-Type: application/json\r\nContent-Length: 5000000\r\n\r\n")
        sock.sendall(request.encode())  # and none of the five megabytes
        answer = b""
        while b'"too_large"' not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert b'"too_large"' in answer


@pytest.mark.mariadb
def test_a_repeated_credential_header_is_no_credential_on_the_hot_calls_as_elsewhere(server, leased_job):
    import httpx

    node, job = leased_job
    twice = [("Authorization", "Bearer not-a-credential"), ("Authorization", f"Bearer {node.secret}"),
             ("X-Judge-Session", str(node.session_epoch)), ("Content-Type", "application/json")]
    bodies = {"jobs/claim": b'{"freeSlots": 1, "waitMs": 0}', "heartbeat": b"{}",
              f"jobs/{job['jobId']}/result": b'{"leaseEpoch": %d, "outcome": "RELEASED"}' % job["leaseEpoch"]}
    for path, body in bodies.items():
        answer = httpx.post(server.url + INTERNAL + path, content=body, headers=twice, timeout=10)
        assert (answer.status_code, answer.json()["error"]) == (401, "unauthenticated"), path
    download = httpx.get(f"{server.url}{INTERNAL}jobs/{job['jobId']}/artifacts/{job['source']['digest']}",
                         headers=[*twice, ("X-Judge-Lease", str(job["leaseEpoch"]))], timeout=10)
    assert (download.status_code, download.json()["error"]) == (401, "unauthenticated")


def test_the_bare_error_pages_speak_the_visitors_language():
    """The pages that must render without templates or the database: a host the server does
    not serve (400) and an unexpected failure (500), in the visitor's language."""
    from django.test import RequestFactory
    from django.utils import translation

    from kece.views import server_error

    page = Client(HTTP_HOST="evil.example", HTTP_ACCEPT_LANGUAGE="zh-hans").get("/problems")
    assert page.status_code == 400 and "请求有误" in page.content.decode()
    with translation.override("zh-hans"):
        failed = server_error(RequestFactory().get("/problems"))
    assert failed.status_code == 500 and "出错了" in failed.content.decode() and 'lang="zh-hans"' in failed.content.decode()
    with translation.override("en"):
        assert "Something went wrong" in server_error(RequestFactory().get("/problems")).content.decode()
