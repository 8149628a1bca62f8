"""Pure judging rules: output comparison, run classification, result bodies."""

from __future__ import annotations

import itertools
import signal
from pathlib import Path
from typing import Iterable

from .sandbox import RunResult

VERDICTS = ("AC", "WA", "TLE", "MLE", "RE", "CE", "OLE")
COMPILE_OUTPUT_LIMIT = 64 * 1024


def outputs_match(actual: Path, expected: Path) -> bool:
    """Equal up to trailing whitespace on each line and trailing blank lines.

    Streams both files; a missing line on one side counts as blank, and that can only
    happen after the shorter file ended, so only trailing blank lines are forgiven.
    """
    with open(actual, "rb") as a, open(expected, "rb") as b:
        for line_a, line_b in itertools.zip_longest(a, b, fillvalue=b""):
            if line_a.rstrip() != line_b.rstrip():
                return False
    return True


def classify(res: RunResult, *, time_limit_ms: int, memory_limit_kb: int, output_limit_bytes: int,
             stdout_bytes: int, messages: bytes, oom_markers: Iterable[str]) -> str | None:
    """Verdict decided by how the program ran, or None when its output decides.

    ``messages`` is what the runtime may have said about running out of memory (stderr,
    and the end of stdout).
    """
    if stdout_bytes > output_limit_bytes or res.signal == signal.SIGXFSZ:
        return "OLE"
    # Having used more memory than allowed decides, even if the program then spun or crashed.
    if res.memory_exceeded or res.memory_kb > memory_limit_kb:
        return "MLE"
    if res.wall_timeout or res.cpu_ms > time_limit_ms or res.signal == signal.SIGXCPU:
        return "TLE"
    failed = res.exit_code != 0
    if failed and any(marker.encode() in messages for marker in oom_markers):
        return "MLE"
    if failed:
        return "RE"
    return None


def time_of(res: RunResult, verdict: str | None, time_limit_ms: int) -> int:
    # A program stopped by the wall clock used little CPU; report the wall time it was given.
    if verdict == "TLE" and res.wall_timeout and res.cpu_ms <= time_limit_ms:
        return res.wall_ms
    return res.cpu_ms


def cut_compile_output(data: bytes) -> str:
    if len(data) > COMPILE_OUTPUT_LIMIT:
        data = data[:COMPILE_OUTPUT_LIMIT]
    text = data.decode("utf-8", "replace")
    # Decoding with replacement may grow the text; the limit is on what we send.
    while len(text.encode("utf-8")) > COMPILE_OUTPUT_LIMIT:
        text = text[:-1024]
    return text


def case_entry(ordinal: int, verdict: str, time_ms: int, memory_kb: int, weight: int) -> dict:
    return {"ordinal": ordinal, "verdict": verdict, "timeMs": int(time_ms), "memoryKb": int(memory_kb),
            "score": int(weight) if verdict == "AC" else 0}


def judged(lease_epoch: int, cases: list[dict], compile_output: str = "") -> dict:
    """The JUDGED body: verdict of the first failing case (or AC), score = sum of case scores."""
    verdict = next((c["verdict"] for c in cases if c["verdict"] != "AC"), "AC")
    score = max(0, min(100, sum(c["score"] for c in cases)))
    return {
        "leaseEpoch": lease_epoch, "outcome": "JUDGED", "verdict": verdict, "score": score,
        "timeMs": max((c["timeMs"] for c in cases), default=0),
        "memoryKb": max((c["memoryKb"] for c in cases), default=0),
        "compileOutput": compile_output, "cases": cases,
    }


def compile_error(lease_epoch: int, output: str) -> dict:
    return {"leaseEpoch": lease_epoch, "outcome": "JUDGED", "verdict": "CE", "score": 0, "timeMs": 0,
            "memoryKb": 0, "compileOutput": output, "cases": []}


def infra_error(lease_epoch: int, error: str, message: str) -> dict:
    return {"leaseEpoch": lease_epoch, "outcome": "INFRA_ERROR", "error": error, "message": message[:2000]}


def released(lease_epoch: int) -> dict:
    return {"leaseEpoch": lease_epoch, "outcome": "RELEASED"}
