"""The node side of the HTTP contract (API.md, "Node API"), and nothing else.

Each call returns the decoded JSON body or raises :class:`ApiError` (the server answered
with an error envelope) or :class:`TransportError` (no usable answer). Retrying is the
caller's decision; :class:`Backoff` gives it exponential delays with jitter that honour
``Retry-After``.
"""

from __future__ import annotations

import email.utils
import logging
import random
import secrets
import threading
import time
from typing import Any, Callable, Iterator

import requests
import urllib3

from . import AGENT_VERSION, log

logger = log.get("client")

PREFIX = "/api/v1/internal/judgers"
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str = "", retry_after: float | None = None):
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.status in RETRYABLE_STATUS


class TransportError(Exception):
    """Connection refused, reset, timed out, TLS failure, or an answer that is not the contract."""

    retry_after: float | None = None
    retryable = True


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Backoff:
    """Exponential backoff with equal jitter: half the step fixed, half random.

    Jitter keeps a fleet of agents that lost the server at the same moment from coming back
    in lockstep; the fixed half keeps a single agent from hammering it.
    """

    def __init__(self, base: float = 0.5, cap: float = 30.0, rng: Callable[[], float] = random.random):
        self.base = base
        self.cap = cap
        self.rng = rng
        self.attempt = 0

    def next_delay(self, retry_after: float | None = None) -> float:
        step = min(self.cap, self.base * (2**self.attempt))
        self.attempt += 1
        delay = step / 2 + self.rng() * step / 2
        if retry_after is not None:
            delay = max(delay, min(retry_after, 300.0))
        return delay

    def reset(self) -> None:
        self.attempt = 0


class Client:
    def __init__(self, origin: str, ca_file: str | None = None, timeout: float = 20.0):
        self.base = origin.rstrip("/") + PREFIX
        self.verify: str | bool = ca_file or True
        self.timeout = timeout
        self.credential: str | None = None
        self._local = threading.local()
        # time.monotonic() of the control plane's last answer (start, until the first).
        self.last_answer = time.monotonic()

    # One requests.Session per thread: the claim long-poll, renewals, heartbeats and
    # workers run concurrently and must not share a connection pool's state.
    def _http(self) -> requests.Session:
        http = getattr(self._local, "http", None)
        if http is None:
            http = requests.Session()
            http.headers["User-Agent"] = f"kece-node-agent/{AGENT_VERSION}"
            http.trust_env = False
            self._local.http = http
        return http

    def _headers(self, session_epoch: int | None, auth: bool = True) -> dict[str, str]:
        headers: dict[str, str] = {}
        if auth:
            if not self.credential:
                raise RuntimeError("no credential yet")
            headers["Authorization"] = f"Bearer {self.credential}"
        if session_epoch is not None:
            headers["X-Judge-Session"] = str(session_epoch)
        return headers

    def _send(self, method: str, path: str, *, headers: dict[str, str], json: Any = None,
              timeout: float | None = None, stream: bool = False) -> requests.Response:
        # The control plane puts this id on its log lines about the request, and this line
        # puts it on the agent's: one call can be followed across both.
        request_id = secrets.token_hex(16)
        try:
            resp = self._http().request(
                method, self.base + path, headers={**headers, "X-Request-ID": request_id}, json=json,
                verify=self.verify, timeout=(5.0, timeout or self.timeout), stream=stream, allow_redirects=False,
            )
        except requests.RequestException as exc:
            log.event(logger, logging.DEBUG, "request failed", method=method, path=path, requestId=request_id)
            raise TransportError(f"{method} {path}: {exc.__class__.__name__}: {exc}") from None
        # A 5xx may come from a proxy in front of a control plane that is down: not an answer.
        if resp.status_code < 500:
            self.last_answer = time.monotonic()
        log.event(logger, logging.DEBUG, "request", method=method, path=path, status=resp.status_code,
                  requestId=request_id)
        if resp.status_code >= 300:
            raise _error_from(resp)
        return resp

    def _json(self, method: str, path: str, *, headers: dict[str, str], json: Any = None,
              timeout: float | None = None) -> dict:
        resp = self._send(method, path, headers=headers, json=json, timeout=timeout)
        try:
            body = resp.json()
        except ValueError:
            raise TransportError(f"{method} {path}: answer is not JSON") from None
        if not isinstance(body, dict):
            raise TransportError(f"{method} {path}: answer is not a JSON object")
        return body

    # -- the calls ---------------------------------------------------------------------

    def join(self, *, join_code: str, join_key: str, join_attempt: int, runtime_spec: str, local_slots: int) -> dict:
        """`join_key`: the same on every retry of this join, `join_attempt` one more each time,
        so that one whose answer was lost can be made again (the server then issues the
        credential anew) and a try that arrives late cannot undo a later one."""
        body = {"joinCode": join_code, "joinKey": join_key, "joinAttempt": join_attempt, "agentVersion": AGENT_VERSION,
                "runtimeSpec": runtime_spec, "localSlots": local_slots}
        return self._json("POST", "/join", headers={}, json=body)

    def open_session(self, *, runtime_spec: str, local_slots: int) -> dict:
        body = {"agentVersion": AGENT_VERSION, "runtimeSpec": runtime_spec, "localSlots": local_slots}
        return self._json("POST", "/session", headers=self._headers(None), json=body)

    def heartbeat(self, *, session_epoch: int, body: dict) -> dict:
        return self._json("POST", "/heartbeat", headers=self._headers(session_epoch), json=body)

    def claim(self, *, session_epoch: int, free_slots: int, wait_ms: int) -> dict:
        return self._json(
            "POST", "/jobs/claim", headers=self._headers(session_epoch),
            json={"freeSlots": free_slots, "waitMs": wait_ms, "inlineSource": True}, timeout=wait_ms / 1000 + 15,
        )

    def renew(self, *, session_epoch: int, leases: list[dict]) -> dict:
        if len(leases) > 64:
            raise ValueError("at most 64 leases per renew call")
        return self._json("POST", "/jobs/renew", headers=self._headers(session_epoch), json={"leases": leases})

    def post_result(self, *, session_epoch: int, job_id: int, body: dict) -> dict:
        return self._json("POST", f"/jobs/{job_id}/result", headers=self._headers(session_epoch), json=body)

    def artifact_stream(self, *, session_epoch: int, job_id: int, lease_epoch: int,
                        digest: str) -> tuple[requests.Response, Iterator[bytes]]:
        headers = self._headers(session_epoch)
        headers["X-Judge-Lease"] = str(lease_epoch)
        path = f"/jobs/{job_id}/artifacts/{digest}"
        resp = self._send("GET", path, headers=headers, timeout=60, stream=True)
        return resp, _body_pieces(resp, f"GET {path}")


def _body_pieces(resp: requests.Response, what: str) -> Iterator[bytes]:
    """A streamed body, each piece as soon as the network gives it (up to 64 KiB: one
    receive, `read1`), not once 64 KiB have come: a caller may stop between pieces however
    slowly they come. Transport failures as TransportError; the response closed at the end."""
    try:
        while data := resp.raw.read1(1 << 16, decode_content=True):
            yield data
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise TransportError(f"{what}: {exc.__class__.__name__}: {exc}") from None
    finally:
        resp.close()


def _error_from(resp: requests.Response) -> ApiError:
    retry_after = parse_retry_after(resp.headers.get("Retry-After"))
    code, detail = f"http_{resp.status_code}", ""
    try:
        body = resp.json()
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            code = body["error"]
            detail = str(body.get("detail", ""))
    except ValueError:
        detail = resp.text[:200]
    finally:
        resp.close()
    return ApiError(resp.status_code, code, detail, retry_after)
