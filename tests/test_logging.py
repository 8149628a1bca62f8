"""The server's log lines (`kece.logging`) and the agent's (`node_agent.log`): one JSON
object per line with the event's fields, the request id, and no secret."""

import asyncio
import io
import json
import logging
import os
import re

import httpx
import pytest

from kece.logging import JsonFormatter, RedactingFilter, RequestIdFilter, TextFormatter, request_id
from node_agent import log as agent_log
from tests.live import ROOT

SECRETS = ["hunter2-database-pw", "0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6", "Zx9_joincodejoincode-AAAA",
           "Kq4_joinkeyjoinkey-BBBB"]


def emit(formatter, *log_args, exc=None, **extra):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.addFilter(RequestIdFilter())
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("kece.test-logging")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        if exc is not None:
            try:
                raise exc
            except Exception:
                logger.exception(*log_args, extra=extra)
        else:
            logger.warning(*log_args, extra=extra)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    return stream.getvalue()


def test_a_line_is_one_json_object_with_the_events_fields_and_the_request_id():
    token = request_id.set("req-1234abcd")
    try:
        text = emit(JsonFormatter(), "job %s leased", 7, job=7, leaseEpoch=2, node=3, pool="python",
                    submission="ALGO:9", exc=ValueError("line one\nline two"))
    finally:
        request_id.reset(token)
    [line] = text.splitlines()
    event = json.loads(line)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", event["time"])
    assert (event["level"], event["logger"], event["message"]) == ("ERROR", "kece.test-logging", "job 7 leased")
    assert (event["job"], event["leaseEpoch"], event["node"], event["pool"], event["submission"]) == (
        7, 2, 3, "python", "ALGO:9")
    assert event["requestId"] == "req-1234abcd" and "line two" in event["exception"]


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()], ids=["json", "text"])
def test_secrets_are_blanked_in_messages_fields_and_tracebacks(formatter):
    database_pw, api_token, join_code, join_key = SECRETS
    text = emit(formatter, "connecting to mysql://kece:%s@db:3306/kece with Authorization: Token %s", database_pw,
                api_token, answer={"joinCode": join_code, "nodeId": 4}, credential=api_token,
                body=f'{{"joinKey": "{join_key}"}}', join_key=join_key,
                detail=f'{{"password": "{database_pw}"}}',
                exc=RuntimeError(f"cannot connect: mysql://kece:{database_pw}@db/kece joinCode={join_code}"))
    assert not [secret for secret in SECRETS if secret in text], text
    assert text.count("[redacted]") >= 5 and "nodeId" in text  # what is not secret stays


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_the_agents_lines_carry_node_pool_job_and_lease_and_no_secret(fmt, capsys, monkeypatch):
    monkeypatch.setattr(agent_log, "_context", {})
    agent_log.setup("DEBUG", fmt)
    agent_log.bind(pool="python", node=12)
    logger = agent_log.get("test")
    agent_log.JobLog(logger, 41, 3).info("judged", verdict="AC")
    agent_log.event(logger, logging.WARNING, "joined", credential=SECRETS[1],
                    body=f'{{"joinCode": "{SECRETS[2]}", "joinKey": "{SECRETS[3]}"}}', join_key=SECRETS[3],
                    url=f"https://node:{SECRETS[0]}@control/api")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert not [secret for secret in SECRETS if secret in "\n".join(lines)]
    if fmt == "json":
        judged, joined = map(json.loads, lines)
        assert (judged["job"], judged["leaseEpoch"], judged["node"], judged["pool"], judged["verdict"]) == (
            41, 3, 12, "python", "AC")
        assert joined["credential"] == "[redacted]" and joined["level"] == "WARNING"
    else:
        assert "job=41 leaseEpoch=3" in lines[0] and "node=12" in lines[0]


@pytest.mark.parametrize("offered, kept", [
    ("abc12345-trace", True), ("a" * 128, True), ("a" * 129, False), ("short", False),
    ("bad id with spaces", False), ("evil\u00e9value-1234", False), (None, False),
])
def test_a_request_id_is_the_clients_when_sane_else_a_new_one_echoed_in_the_answer(offered, kept):
    from kece.asgi import application

    async def get():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            headers = {} if offered is None else {"X-Request-ID": offered.encode("utf-8")}
            return await client.get("/livez", headers=headers)

    answer = asyncio.run(get())
    assert answer.status_code == 200
    echoed = answer.headers["X-Request-ID"]
    assert echoed == offered if kept else re.fullmatch(r"[0-9a-f]{32}", echoed)


def test_an_idle_workers_routine_and_a_scanners_wrong_host_write_nothing_and_a_failing_task_does():
    """What the server's processes log as configured: not every periodic task's receipt and
    success (hundreds of lines a minute, which would rotate the night's warnings out), nor a
    traceback for each request to a host the site is not; a failing task still is."""
    import subprocess
    import sys

    script = (
        "import django, logging; django.setup()\n"
        "from django.test import Client\n"
        "trace = logging.getLogger('celery.app.trace')\n"
        "trace.info('Task kece.periodic.reap[1] succeeded in 0.01s: None')\n"
        "logging.getLogger('celery.beat').info('Scheduler: Sending due task reap')\n"
        "logging.getLogger('celery.worker.strategy').info('Task kece.periodic.reap[2] received')\n"
        "print(Client(HTTP_HOST='scanner.example').get('/').status_code, flush=True)\n"
        "trace.error('Task kece.events.dispatch[3] raised unexpected: RuntimeError()')\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "kece.settings", "DEBUG": "0", "SECRET_KEY": "x" * 50,
           "ALLOWED_HOSTS": "judge.example.org", "KECE_LOG_FORMAT": "json", "KECE_LOG_LEVEL": "INFO"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.stdout.strip() == "400", done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    messages = [line["message"] for line in lines]
    assert not any(word in " ".join(messages) for word in ("succeeded", "Sending due task", "received", "HTTP_HOST"))
    assert [line["level"] for line in lines if "raised unexpected" in line["message"]] == ["ERROR"]


def test_a_failure_that_repeats_is_said_once_then_once_a_minute_and_when_it_ends(caplog):
    """The control plane away for five minutes: a heartbeat every 2 s fails 150 times; the
    agent's log says so 6 times, not 150, and says when it is answered again."""
    now = [0.0]
    logger = logging.getLogger("node_agent.test-repeated")
    repeated = agent_log.Repeated(logger, "heartbeat", clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="node_agent.test-repeated"):
        for _ in range(150):
            repeated.failed(error="connection refused")
            now[0] += 2.0
        repeated.succeeded()
        repeated.succeeded()  # nothing more to say
        repeated.failed(error="connection refused")  # a new outage: said at once
    lines = [(r.levelname, r.getMessage(), r.kv) for r in caplog.records]
    assert [message for _, message, _ in lines] == (
        ["heartbeat failed"] + ["heartbeat still failing"] * 4 + ["heartbeat answered again", "heartbeat failed"])
    assert lines[1][2] == {"failures": 31, "for_s": 60, "error": "connection refused"}
    assert lines[5][0] == "INFO" and lines[5][2] == {"failures": 150, "after_s": 300.0}
