"""One request-body limit for every path (`kece.bodies`), held by the real server before it
reads the body: a page takes no more than the API does, and a body too large is answered 413
in the contract's envelope without being read, declared or chunked."""

import json
import socket
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from tests.live import LiveServer, read_answer

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True)]

LIMIT = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
# Pages an anonymous visitor can post to; none of them asks for more than the API.
PAGES = ["/problems/1", "/accounts/login/", "/admin/judgers/register", "/"]


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    from tests.conftest import ON_MARIADB

    if not ON_MARIADB:
        pytest.skip("live-server tests need MariaDB/MySQL")
    with LiveServer(log_path=tmp_path_factory.mktemp("bodies") / "server.log") as live:
        yield live


def connect(server) -> socket.socket:
    address = urlsplit(server.url)
    return socket.create_connection((address.hostname, address.port), timeout=30)


def head(path: str, *headers: str) -> bytes:
    return "\r\n".join([f"POST {path} HTTP/1.1", "Host: 127.0.0.1",
                        "Content-Type: application/x-www-form-urlencoded", *headers, "", ""]).encode()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@pytest.mark.parametrize("path", PAGES)
def test_a_body_declared_larger_than_the_limit_is_refused_on_a_page_before_any_of_it_is_sent(server, path):
    with connect(server) as sock:
        sock.sendall(head(path, "Content-Length: 1000000000"))  # and not one byte of the gigabyte
        status, body = read_answer(sock)
    assert status == 413
    assert json.loads(body)["error"] == "too_large" and json.loads(body)["detail"]


@pytest.mark.parametrize("path", ["/problems/1", "/api/v1/submissions"])
def test_a_chunked_body_is_cut_off_once_past_the_limit_on_a_page_as_on_the_api(server, path):
    piece = b"x" * 65536
    with connect(server) as sock:
        sock.sendall(head(path, "Transfer-Encoding: chunked"))
        for _ in range(LIMIT // len(piece) + 1):  # one piece past the limit, and the body never ends
            sock.sendall(chunk(piece))
        status, body = read_answer(sock)
    assert status == 413
    assert json.loads(body)["error"] == "too_large"


@pytest.mark.parametrize("framing", ["declared", "chunked"])
def test_a_body_of_exactly_the_limit_still_reaches_the_page(server, framing):
    body = b"a=" + b"x" * (LIMIT - 2)
    with connect(server) as sock:
        if framing == "declared":
            sock.sendall(head("/problems/1", f"Content-Length: {LIMIT}") + body)
        else:
            sock.sendall(head("/problems/1", "Transfer-Encoding: chunked") + chunk(body) + b"0\r\n\r\n")
        status, _ = read_answer(sock)
    assert status == 403  # the page's own refusal: an anonymous post without a CSRF token
