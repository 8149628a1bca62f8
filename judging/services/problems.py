"""Problem packages: import a folder into an immutable, content-addressed manifest version."""

import json
import logging
from pathlib import Path

from django.db import transaction
from django.db.models import Max

from judging import artifacts
from judging.models import Manifest, Problem, ProblemKind, ProblemVisibility
from kece.errors import Invalid, NotFound
from pools.registry import ALGO_LANGUAGES

logger = logging.getLogger("kece.problems")


class PackageError(Exception):
    """The problem package is malformed; the message says where."""


def _file(directory: Path, name, what: str) -> dict:
    if not isinstance(name, str) or not name:
        raise PackageError(f"{what}: a file name is required")
    path = (directory / name).resolve()
    if directory.resolve() not in path.parents:
        raise PackageError(f"{what}: {name!r} is outside the package folder")
    if not path.is_file():
        raise PackageError(f"{what}: file {name!r} does not exist")
    return artifacts.store_file(path)


def _positive_int(spec: dict, key: str, default=None) -> int:
    value = spec.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PackageError(f"{key} must be a positive integer")
    return value


def _read_spec(directory: Path) -> dict:
    try:
        spec = json.loads((directory / "problem.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise PackageError(f"{directory}/problem.json does not exist") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PackageError(f"problem.json is not valid JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise PackageError("problem.json must hold an object")
    return spec


def _cases(directory: Path, spec: dict, kind: str) -> list[dict]:
    raw = spec.get("cases") or []
    if not isinstance(raw, list):
        raise PackageError("cases must be a list")
    if kind == ProblemKind.ALGO and not raw:
        raise PackageError("an ALGO problem needs at least one case")
    cases = []
    for ordinal, case in enumerate(raw, start=1):
        if not isinstance(case, dict):
            raise PackageError(f"case {ordinal} must be an object")
        weight = case.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or weight < 0:
            raise PackageError(f"case {ordinal}: weight must be a non-negative integer")
        cases.append({
            "ordinal": ordinal, "weight": weight,
            "input": _file(directory, case.get("input"), f"case {ordinal} input"),
            "output": _file(directory, case.get("output"), f"case {ordinal} output"),
        })
    if cases and sum(c["weight"] for c in cases) != 100:
        raise PackageError("case weights must add up to 100")
    return cases


def _sql(directory: Path, spec: dict) -> dict:
    sql = spec.get("sql")
    if not isinstance(sql, dict):
        raise PackageError("a SQL problem needs an sql object")
    if sql.get("dialect", "mysql") != "mysql":
        raise PackageError("sql.dialect must be mysql")
    result = {"dialect": "mysql", "ordered": bool(sql.get("ordered", False))}
    for key in ("schema", "answer"):
        result[key] = _file(directory, sql.get(key), f"sql.{key}")
    for key in ("seed", "check"):
        result[key] = _file(directory, sql[key], f"sql.{key}") if sql.get(key) else None
    return result


MAX_SAMPLE_BYTES = 4096


def _text_file(directory: Path, name, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise PackageError(f"{what}: a file name is required")
    path = (directory / name).resolve()
    if directory.resolve() not in path.parents or not path.is_file():
        raise PackageError(f"{what}: file {name!r} does not exist in the package folder")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PackageError(f"{what}: {name!r} is not UTF-8") from exc


def _samples(directory: Path, spec: dict) -> list[dict]:
    raw = spec.get("samples") or []
    if not isinstance(raw, list) or not all(isinstance(s, dict) for s in raw):
        raise PackageError("samples must be a list of {input, output} objects")
    samples = []
    for number, sample in enumerate(raw, start=1):
        pair = {part: _text_file(directory, sample.get(part), f"sample {number} {part}") for part in ("input", "output")}
        if any(len(text.encode()) > MAX_SAMPLE_BYTES for text in pair.values()):
            raise PackageError(f"sample {number}: a sample file may hold at most {MAX_SAMPLE_BYTES} bytes")
        samples.append(pair)
    return samples


def _statement(directory: Path, spec: dict) -> str:
    """The Markdown statement: `statement` names a file in the package; `statement.md` is the
    default when present. A problem without one has an empty statement."""
    name = spec.get("statement")
    if name is None:
        name = "statement.md" if (directory / "statement.md").is_file() else None
    return "" if name is None else _text_file(directory, name, "statement")


def _same_manifest(manifest: Manifest | None, *, languages, cases, sql, limits: dict) -> bool:
    return manifest is not None and (manifest.languages, manifest.cases, manifest.sql) == (languages, cases, sql) \
        and all(getattr(manifest, name) == value for name, value in limits.items())


def problem_import(directory, *, canary: bool = False) -> tuple[Problem, Manifest]:
    """Import `directory`; the same slug again with changed test data, languages or limits
    publishes the next manifest version, and with the same ones keeps the current manifest
    (a script that imports its whole problem set again adds no version; the title,
    statement and samples are updated either way).

    Files go to the content store before the transaction (idempotent, content-addressed);
    the problem row and the new manifest are written in one transaction. Jobs created
    earlier keep the manifest they were created with.

    `canary`: a built-in problem of the node self-check (`nodes.canaries`), hidden from
    students; the same files give it back untouched. A slug is either a canary or a student
    problem, never both.
    """
    directory = Path(directory)
    spec = _read_spec(directory)
    slug, title, kind = spec.get("slug"), spec.get("title"), spec.get("kind")
    if not isinstance(slug, str) or not slug or len(slug) > 100:
        raise PackageError("slug is required (at most 100 characters)")
    if kind not in ProblemKind.values:
        raise PackageError("kind must be ALGO or SQL")
    languages = spec.get("languages") or (["mysql"] if kind == ProblemKind.SQL else [])
    allowed = ["mysql"] if kind == ProblemKind.SQL else list(ALGO_LANGUAGES)
    if not isinstance(languages, list) or not languages or any(lang not in allowed for lang in languages):
        raise PackageError(f"languages must be a non-empty subset of {allowed}")
    limits = {
        "time_limit_ms": _positive_int(spec, "timeLimitMs"),
        "memory_limit_mb": _positive_int(spec, "memoryLimitMb"),
        "output_limit_kb": _positive_int(spec, "outputLimitKb", 65536),
    }
    cases = _cases(directory, spec, kind)
    sql = _sql(directory, spec) if kind == ProblemKind.SQL else None
    statement, samples = _statement(directory, spec), _samples(directory, spec)
    visibility = spec.get("visibility")
    if visibility is not None and (canary or visibility not in ProblemVisibility.values):
        raise PackageError(f"visibility must be one of {ProblemVisibility.values} (and canaries have none)")

    with transaction.atomic(durable=True):
        problem, _ = Problem.objects.get_or_create(slug=slug, defaults={"title": title or slug, "kind": kind,
                                                                       "is_canary": canary})
        if problem.kind != kind:
            raise PackageError(f"problem {slug} is {problem.kind}; a package cannot change its kind")
        if problem.is_canary != canary:
            raise PackageError(f"problem {slug} is {'a built-in canary' if problem.is_canary else 'a student problem'}"
                               f"; its slug cannot be imported as {'a canary' if canary else 'a student problem'}")
        current = Manifest.objects.filter(pk=problem.current_manifest_id).first()
        unchanged = _same_manifest(current, languages=languages, cases=cases, sql=sql, limits=limits)
        if canary and unchanged:
            return problem, current
        if unchanged:
            manifest, version = current, current.version
        else:
            version = (Manifest.objects.filter(problem=problem).aggregate(v=Max("version"))["v"] or 0) + 1
            manifest = Manifest.objects.create(problem=problem, version=version, languages=languages, cases=cases,
                                               sql=sql, **limits)
        problem.title = title or slug
        problem.statement, problem.samples = statement, samples
        problem.current_manifest = manifest
        # A package without `visibility` leaves what an admin set since the last import.
        problem.visibility = visibility or problem.visibility
        problem.save(update_fields=["title", "statement", "samples", "current_manifest", "visibility", "updated_at"])
    logger.info("problem imported", extra={"problem": problem.pk, "slug": slug, "manifest": manifest.pk,
                                           "version": version, "cases": len(cases), "newVersion": not unchanged})
    return problem, manifest


def problem_visibility_set(*, problem_id: int, visibility: str) -> Problem:
    """Who sees the problem outside its exams (`judging.visibility`); an exam that has not
    ended keeps its problems secret whatever this says."""
    if visibility not in ProblemVisibility.values:
        raise Invalid(f"visibility must be one of {ProblemVisibility.values}.", fields={"visibility": ["unknown"]})
    if not Problem.objects.filter(pk=problem_id, is_canary=False, deleted_at__isnull=True).update(
            visibility=visibility):
        raise NotFound()
    logger.info("problem visibility set", extra={"problem": problem_id, "visibility": visibility})
    return Problem.objects.get(pk=problem_id)
