"""One JSON object per line (``JUDGE_LOG_FORMAT=json``, the default), as the control plane
logs: ``time``, ``level``, ``logger``, ``message``, this node's ``node`` and ``pool``, and
the event's fields. ``JUDGE_LOG_FORMAT=text`` prints ``time level logger message key=value…``.

Every line about a job goes through a :class:`JobLog`, which adds ``job`` and
``leaseEpoch``, so an operator can follow one attempt from claim to result — and, by the
job id, through the control plane's lines too.

Secrets (the credential, the probe key, a join code, credentials in URLs) are blanked
before a line is written; the agent imports nothing from the server, so the patterns are
its own.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time

from pythonjsonlogger.json import JsonFormatter

_BARE_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@+,%[]")
REDACTED = "[redacted]"
_SECRET_WORD = r"[\w-]*(?:credential|probe_?key|join_?code|join_?key|token|secret|password)[\w-]*"
_SECRET_FIELD = re.compile(rf"(?i){_SECRET_WORD}")
_SECRETS_IN_TEXT = (
    (re.compile(r"(://[^/\s:@]*:)[^@\s/]+@"), rf"\1{REDACTED}@"),
    (re.compile(r"\bBearer\s+\S{8,}"), f"Bearer {REDACTED}"),
    (re.compile(rf"(?i)\b({_SECRET_WORD}\\?[\"']?\s*[:=]\s*\\?[\"']?)(?!\[redacted)[^\s\"'\\,;}})\]]+"),
     rf"\1{REDACTED}"),
)

# This process's node and pool, on every line once known (`bind`).
_context: dict[str, object] = {}


def redact(text: str) -> str:
    for pattern, replacement in _SECRETS_IN_TEXT:
        text = pattern.sub(replacement, text)
    return text


def _fields(record: logging.LogRecord) -> dict[str, object]:
    fields = {**_context, **getattr(record, "kv", {})}
    return {key: REDACTED if _SECRET_FIELD.fullmatch(key) else redact(value) if isinstance(value, str) else value
            for key, value in fields.items() if value is not None}


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + ".%03dZ" % int(record.msecs)


class JsonLineFormatter(JsonFormatter):
    def __init__(self) -> None:
        super().__init__(json_ensure_ascii=False)

    def add_fields(self, log_data, record, message_dict) -> None:
        log_data.update(time=_timestamp(record), level=record.levelname, logger=record.name,
                        message=redact(record.getMessage()), **_fields(record))
        if record.exc_info:
            log_data["exception"] = self.formatException(record.exc_info)

    def format(self, record: logging.LogRecord) -> str:
        log_data: dict = {}
        self.add_fields(log_data, record, {})
        return self.serialize_log_record(log_data)

    def formatException(self, ei) -> str:
        return redact(super().formatException(ei))


def format_value(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    if text and all(ch in _BARE_SAFE for ch in text):
        return text
    return json.dumps(text, ensure_ascii=False)


class LineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, format_value(redact(record.getMessage()))]
        parts += [f"{key}={format_value(value)}" for key, value in _fields(record).items()]
        if record.exc_info:
            # Tracebacks are folded into one field so the one-line-per-event rule holds.
            parts.append("exc=" + format_value(redact(self.formatException(record.exc_info))))
        return " ".join(parts)


FORMATS = ("json", "text")


def setup(level: str = "INFO", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter() if fmt == "json" else LineFormatter())
    root = logging.getLogger("node_agent")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def bind(**fields: object) -> None:
    """Put these fields (the pool, the node once joined) on every later line."""
    _context.update(fields)


def get(name: str) -> logging.Logger:
    return logging.getLogger(name if name.startswith("node_agent") else f"node_agent.{name}")


def event(logger: logging.Logger, level: int, msg: str, exc_info: bool = False, **kv: object) -> None:
    logger.log(level, msg, extra={"kv": kv}, exc_info=exc_info)


class Repeated:
    """A call that keeps failing (the control plane away for minutes, a heartbeat every
    few seconds): its first failure said at once, then one line every `every_s` seconds with
    how many since, and one when it is answered again, instead of a line at every try. The
    last error is on each line."""

    def __init__(self, logger: logging.Logger, what: str, *, every_s: float = 60.0, clock=time.monotonic):
        self.logger, self.what, self.every_s, self.clock = logger, what, every_s, clock
        self.lock = threading.Lock()
        self.since: float | None = None  # the first failure of the run under way
        self.said = 0.0
        self.failures = 0

    def failed(self, **kv: object) -> None:
        with self.lock:
            now = self.clock()
            self.failures += 1
            if self.since is None:
                self.since = self.said = now
                event(self.logger, logging.WARNING, f"{self.what} failed", **kv)
            elif now - self.said >= self.every_s:
                self.said = now
                event(self.logger, logging.WARNING, f"{self.what} still failing", failures=self.failures,
                      for_s=round(now - self.since), **kv)

    def succeeded(self) -> None:
        with self.lock:
            if self.since is None:
                return
            event(self.logger, logging.INFO, f"{self.what} answered again", failures=self.failures,
                  after_s=round(self.clock() - self.since, 1))
            self.since, self.failures = None, 0


class JobLog:
    """Logger bound to one job attempt (job id + lease epoch)."""

    def __init__(self, logger: logging.Logger, job_id: int, lease_epoch: int):
        self.logger = logger
        self.base = {"job": job_id, "leaseEpoch": lease_epoch}

    def _log(self, level: int, msg: str, exc_info: bool = False, **kv: object) -> None:
        self.logger.log(level, msg, extra={"kv": {**self.base, **kv}}, exc_info=exc_info)

    def debug(self, msg: str, **kv: object) -> None:
        self._log(logging.DEBUG, msg, **kv)

    def info(self, msg: str, **kv: object) -> None:
        self._log(logging.INFO, msg, **kv)

    def warning(self, msg: str, **kv: object) -> None:
        self._log(logging.WARNING, msg, **kv)

    def error(self, msg: str, exc_info: bool = False, **kv: object) -> None:
        self._log(logging.ERROR, msg, exc_info=exc_info, **kv)
