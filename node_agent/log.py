"""One line per event: ``ts level logger msg key=value…``.

Every line about a job goes through a :class:`JobLog`, which adds ``job=<id> lease=<epoch>``
so an operator can grep one attempt from claim to result.
"""

from __future__ import annotations

import json
import logging
import sys
import time

_BARE_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@+,%")


def format_value(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    if text and all(ch in _BARE_SAFE for ch in text):
        return text
    return json.dumps(text, ensure_ascii=False)


class LineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        ts += ".%03dZ" % int(record.msecs)
        parts = [ts, record.levelname, record.name, format_value(record.getMessage())]
        for key, value in getattr(record, "kv", {}).items():
            if value is None:
                continue
            parts.append(f"{key}={format_value(value)}")
        if record.exc_info:
            # Tracebacks are folded into one field so the one-line-per-event rule holds.
            parts.append("exc=" + format_value(self.formatException(record.exc_info)))
        return " ".join(parts)


def setup(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LineFormatter())
    root = logging.getLogger("node_agent")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def get(name: str) -> logging.Logger:
    return logging.getLogger(name if name.startswith("node_agent") else f"node_agent.{name}")


def event(logger: logging.Logger, level: int, msg: str, exc_info: bool = False, **kv: object) -> None:
    logger.log(level, msg, extra={"kv": kv}, exc_info=exc_info)


class JobLog:
    """Logger bound to one job attempt (job id + lease epoch)."""

    def __init__(self, logger: logging.Logger, job_id: int, lease_epoch: int):
        self.logger = logger
        self.base = {"job": job_id, "lease": lease_epoch}

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
