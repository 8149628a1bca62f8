"""One log line per event: `ts level logger msg pid=… key=value…`, greppable by job and lease.

`pid` tells apart the lines of the web tier's several processes, which share one stream.
"""

import json
import logging

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def _format_value(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"))
    if not text or any(c in text for c in ' "=\n'):
        return json.dumps(text)
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [
            self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            record.levelname,
            record.name,
            _format_value(record.getMessage()),
            f"pid={record.process}",
        ]
        parts += [f"{k}={_format_value(v)}" for k, v in vars(record).items() if k not in _STANDARD]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line

    converter = __import__("time").gmtime
