"""The job snapshot: everything judging needs, frozen when the job is created."""

import hashlib
import json

from judging.models import Manifest, Problem
from pools.registry import runtime_spec


def job_snapshot(*, problem: Problem, manifest: Manifest, pool: str, language: str, source: dict) -> dict:
    return {
        "problemId": problem.pk,
        "problemSlug": problem.slug,
        "problemKind": problem.kind,
        "language": language,
        "manifestId": manifest.pk,
        "manifestVersion": manifest.version,
        "source": {"language": language, "digest": source["digest"], "bytes": source["bytes"]},
        "limits": {
            "timeLimitMs": manifest.time_limit_ms,
            "memoryLimitMb": manifest.memory_limit_mb,
            "outputLimitKb": manifest.output_limit_kb,
        },
        "cases": manifest.cases,
        "sql": manifest.sql,
        "runtimeSpec": runtime_spec(pool).as_snapshot(),
    }


def snapshot_digests(snapshot: dict) -> set[str]:
    """Every artifact digest a job may download: its source, case files and SQL files."""
    digests = set()
    source = snapshot.get("source") or {}
    if source.get("digest"):
        digests.add(source["digest"])
    for case in snapshot.get("cases") or []:
        digests.add(case["input"]["digest"])
        digests.add(case["output"]["digest"])
    for entry in (snapshot.get("sql") or {}).values():
        if isinstance(entry, dict) and entry.get("digest"):
            digests.add(entry["digest"])
    return digests


def judged_data_digest(snapshot: dict) -> str:
    """sha-256 of what a judge was given to judge against: the manifest's limits, cases
    (each file by digest, with its weight) and SQL files, as canonical JSON. Two jobs with the
    same digest were judged on the same data, whatever the manifest's id."""
    data = {"limits": snapshot.get("limits") or {}, "cases": snapshot.get("cases") or [],
            "sql": snapshot.get("sql")}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
