"""The canary problems of the node self-check (`nodes/canary/`).

Each folder under `nodes/canary/` is an ordinary problem package (`samples/README.md`) plus
`canary.json`: `{"programs": {"<file in programs/>": "<verdict>"}}`, each program with the
verdict an honest judge gives it. The package's single language names its pool. A self-check
sends every program of the node's pool as an ordinary DIAGNOSTIC job, and the server —
not the node — compares the verdict that comes back with the expected one.

The packages are imported when a check needs them, as canaries (hidden from students) and
idempotently by content: the same files keep their manifest, a changed package publishes
the next version, and a job keeps the version it was created with.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from django.db import IntegrityError

from judging import artifacts
from judging.models import Manifest, Problem, Verdict
from judging.services.problems import PackageError, problem_import

CANARY_ROOT = Path(__file__).resolve().parent / "canary"


@dataclass(frozen=True)
class Canary:
    name: str  # the program's file name: its item in the check record
    expect: str
    problem: Problem
    manifest: Manifest
    source: dict  # {digest, bytes} in the content store
    path: Path  # the program's file


def programs(package: Path) -> dict[str, str]:
    try:
        programs = json.loads((package / "canary.json").read_text(encoding="utf-8"))["programs"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PackageError(f"{package.name}/canary.json: {exc}") from exc
    if not isinstance(programs, dict) or not programs or any(v not in Verdict.values for v in programs.values()):
        raise PackageError(f"{package.name}/canary.json: programs must map file names to verdicts")
    return programs


def _pool_of(package: Path) -> str | None:
    try:
        languages = json.loads((package / "problem.json").read_text(encoding="utf-8")).get("languages")
    except (OSError, ValueError, AttributeError):
        return None
    return languages[0] if isinstance(languages, list) and len(languages) == 1 else None


def packages(pool: str) -> list[Path]:
    return sorted(p for p in CANARY_ROOT.iterdir() if (p / "canary.json").is_file() and _pool_of(p) == pool)


def _import(package: Path) -> tuple[Problem, Manifest]:
    try:
        return problem_import(package, canary=True)
    except IntegrityError:
        # Another check published the same new version first: the same files now match it.
        return problem_import(package, canary=True)


def canaries_for(pool: str) -> list[Canary]:
    """The pool's canary programs, their packages imported. Reads files and writes the
    content store: call it outside any transaction."""
    canaries = []
    for package in packages(pool):
        problem, manifest = _import(package)
        for name, expect in programs(package).items():
            path = package / "programs" / name
            if not path.is_file():
                raise PackageError(f"{package.name}: program {name!r} does not exist")
            canaries.append(Canary(name=name, expect=expect, problem=problem, manifest=manifest,
                                   source=artifacts.store_file(path), path=path))
    if len({c.name for c in canaries}) != len(canaries):
        raise PackageError(f"{pool}: two canary programs share a name")
    return canaries
