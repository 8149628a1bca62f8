"""Log lines of every server process (web, worker, beat, demo): one JSON object per line
(`KECE_LOG_FORMAT=json`, the default) with `time`, `level`, `logger`, `message`, `pid` (the
web tier's processes share one stream) and the event's fields — `job`, `leaseEpoch`,
`node`, `pool`, `submission` where they apply, and `requestId` on every line emitted while
serving a request — or the same as `time level logger message key=value…` for people
(`KECE_LOG_FORMAT=text`).

Secrets never reach the stream: the handler's `RedactingFilter` blanks fields named like
one and secret-shaped text (credentials in URLs, bearer and token headers, `password=…`,
`"joinCode": "…"`) in messages, fields and tracebacks.
"""

import contextvars
import json
import logging
import os
import random
import re
import time

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message", "taskName"}

REDACTED = "[redacted]"
_SECRET_NAME = r"[\w-]*(?:password|passwd|secret|token|credential|join_?code|join_?key|probe_?key|api_?key)[\w-]*"
_SECRET_KEY = re.compile(rf"(?i)^{_SECRET_NAME}$")
_SECRET_TEXT = [
    # scheme://user:password@host
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@", re.I), rf"\1{REDACTED}@"),
    # Authorization: Bearer …, Token …
    (re.compile(r"\b(Bearer|Token|Basic)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    # password=…, "joinCode": "…", credential: … (quotes escaped or not)
    (re.compile(rf"(?i)\b({_SECRET_NAME})(\\?[\"']?\s*[:=]\s*\\?[\"']?)(?!{re.escape(REDACTED)})[^\s\"'\\,&;}})\]]+"),
     rf"\1\2{REDACTED}"),
]


def redact(text: str) -> str:
    for pattern, replacement in _SECRET_TEXT:
        text = pattern.sub(replacement, text)
    return text


def _redact_value(key: str, value):
    if _SECRET_KEY.match(key) and value is not None and not isinstance(value, (bool, int, float)):
        return REDACTED
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_value(key, v) for v in value]
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    return redact(str(value))


class RedactingFilter(logging.Filter):
    """Blanks secrets in a record's message and fields before any formatter sees them."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is the formatter's to report
            return True
        record.msg, record.args = redact(message), None
        for key, value in list(vars(record).items()):
            if key not in _STANDARD:
                setattr(record, key, _redact_value(key, value))
        return True


# --- request ids ---------------------------------------------------------------------------

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{8,128}")


def accepted_request_id(offered: str | None) -> str:
    """The client's (or the proxy's) X-Request-ID when it is a sane token, else a new one:
    it goes into every log line and back in the response, so it must be bounded and safe
    to print."""
    if offered and _SANE_REQUEST_ID.fullmatch(offered):
        return offered
    # An id to find a request's lines by, not a secret: no system call per request.
    return f"{random.getrandbits(128):032x}"


class ReadinessAnswerFilter(logging.Filter):
    """On `django.request`: not its ERROR line for a 503 from `/readyz`. Not being ready (a
    database away, a process draining for a rollout) is that probe's answer, not a server
    error, and every probe would log one; `kece.views.ready` says it at WARNING instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        return not (getattr(record, "status_code", None) == 503 and getattr(request, "path", None) == "/readyz")


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        current = request_id.get()
        if current is not None and not hasattr(record, "requestId"):
            record.requestId = current
        return True


# --- formats -------------------------------------------------------------------------------


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def _fields(record: logging.LogRecord) -> dict:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class JsonFormatter(_JsonFormatter):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, json_ensure_ascii=False, reserved_attrs=sorted(_STANDARD), **kwargs)

    def add_fields(self, log_data, record, message_dict):
        log_data.update(time=_timestamp(record), level=record.levelname, logger=record.name,
                        message=record.message, pid=record.process)
        log_data.update(_fields(record))
        log_data.update(message_dict)
        if "exc_info" in log_data:
            log_data["exception"] = log_data.pop("exc_info")

    def formatException(self, ei) -> str:
        return redact(super().formatException(ei))


def _format_value(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"),
                                                           ensure_ascii=False)
    if not text or any(c in text for c in ' "=\n'):
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    """`time level logger message pid=… key=value…`, for reading in a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, _format_value(record.getMessage()),
                 f"pid={record.process}"]
        parts += [f"{k}={_format_value(v)}" for k, v in _fields(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line

    def formatException(self, ei) -> str:
        return redact(super().formatException(ei))




FORMATTERS = {"json": JsonFormatter, "text": TextFormatter}


def formatter_from_environment() -> logging.Formatter:
    """The formatter `KECE_LOG_FORMAT` names, for a process that logs before (or without)
    Django's settings: the web tier's supervising process (`kece.serve`)."""
    name = os.environ.get("KECE_LOG_FORMAT", "json")
    if name not in FORMATTERS:
        raise ValueError(f"KECE_LOG_FORMAT must be json or text, got {name!r}")
    return FORMATTERS[name]()
