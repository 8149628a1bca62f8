"""What a judging function gets to work with, and how it may fail."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager

from .downloads import Downloads
from .log import JobLog
from .sandbox import RunResult


class JobCancelled(Exception):
    """The job must stop now: lease lost, cancelled, superseded, deadline, stopping."""


class InfraError(Exception):
    """A fault of the node, not of the submission: reported as INFRA_ERROR."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class JobContext:
    job: dict
    run_dir: Path
    log: JobLog
    cancel: threading.Event
    artifact: Callable[[dict], Path]
    progress: Callable[[str, int | None], None] = lambda phase, testcase: None
    # Times a judging phase (metrics.PHASES): `with ctx.timed("run"): …`.
    timed: Callable[[str], ContextManager] = lambda phase: contextlib.nullcontext()
    stash: dict = field(default_factory=dict)
    # Files of one job fetched at once (`download`).
    download_threads: int = 1

    @property
    def job_id(self) -> int:
        return self.job["jobId"]

    @property
    def lease_epoch(self) -> int:
        return self.job["leaseEpoch"]

    def download(self, entries: list[dict]) -> Downloads:
        """Start fetching `entries` (`artifact` each) in the background; `.paths()` waits."""
        return Downloads(self.artifact, entries, threads=self.download_threads, name=f"job-{self.job_id}-data")

    def check(self) -> None:
        if self.cancel.is_set():
            raise JobCancelled()

    def checked(self, res: RunResult) -> RunResult:
        if res.setup_error:
            raise InfraError("sandbox_error", res.setup_error)
        if res.cancelled:
            raise JobCancelled()
        return res
