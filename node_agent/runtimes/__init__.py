"""Runtime specs: how each pool compiles and runs a submission.

A job carries the runtime spec id of its pool (``cpp-r1`` …) and the server gives a node
only jobs whose spec equals the one it reported, so a spec id names one fixed behaviour.
The built-in table lives in the per-pool modules; an operator can add or override specs
with a JSON file (``JUDGE_RUNTIME_SPEC_FILE``), e.g. to point ``arkts`` at the real
ArkCompiler::

    {"arkts-r1": {"compile": ["es2abc", "--output", "main.abc", "main.ets"],
                  "run": ["ark_js_vm", "main.abc"], "sourceFile": "main.ets",
                  "files": {}, "binds": ["/opt/arkcompiler"], "check": [["es2abc", "--version"]]}}

Command templates may use ``{memory_mb}``, ``{stack_mb}`` and ``{source}``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path


class SpecError(Exception):
    pass


@dataclass(frozen=True)
class RuntimeSpec:
    id: str
    pool: str
    source_file: str = ""
    compile: tuple[str, ...] | None = None
    run: tuple[str, ...] = ()
    # "native": the program lives under an address-space limit (limit + as_slack_mb).
    # "vm": a managed runtime that reserves far more address space than it uses (the JVM
    # wants >1 GiB for its class space, V8 ~1 GiB for its code range), so it gets no
    # RLIMIT_AS; its heap flag holds the heap and the sandbox watchdog kills the process
    # tree when resident memory passes limit + vm_overhead_mb.
    memory_model: str = "native"
    as_slack_mb: int = 16
    vm_overhead_mb: int = 64
    time_factor: float = 1.0
    time_extra_ms: int = 0
    compile_cpu_ms: int = 30_000
    compile_wall_ms: int = 60_000
    compile_memory_mb: int = 2048
    processes: int = 16
    compile_processes: int = 64
    files: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    binds: tuple[str, ...] = ()
    oom_markers: tuple[str, ...] = ()
    check: tuple[tuple[str, ...], ...] = ()
    stand_in: str = ""

    def effective_time_ms(self, limit_ms: int) -> int:
        return int(limit_ms * self.time_factor) + self.time_extra_ms

    def render(self, argv: tuple[str, ...], *, memory_mb: int) -> list[str]:
        values = {"memory_mb": memory_mb, "stack_mb": max(8, min(memory_mb, 256)), "source": self.source_file}
        return [part.format(**values) for part in argv]


_JSON_FIELDS = {
    "sourceFile": "source_file", "compile": "compile", "run": "run", "memoryModel": "memory_model",
    "asSlackMb": "as_slack_mb", "vmOverheadMb": "vm_overhead_mb", "timeFactor": "time_factor",
    "timeExtraMs": "time_extra_ms", "compileCpuMs": "compile_cpu_ms", "compileWallMs": "compile_wall_ms",
    "compileMemoryMb": "compile_memory_mb", "processes": "processes", "compileProcesses": "compile_processes",
    "files": "files", "env": "env", "binds": "binds", "oomMarkers": "oom_markers", "check": "check",
    "standIn": "stand_in", "pool": "pool",
}


def builtin_specs() -> dict[str, RuntimeSpec]:
    from . import arkts, cpp, java, mysql, python

    specs = [cpp.SPEC, java.SPEC, python.SPEC, arkts.SPEC, mysql.SPEC]
    return {spec.id: spec for spec in specs}


def _convert(key: str, value):
    if key in ("compile", "run", "binds", "oom_markers"):
        if value is None and key == "compile":
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpecError(f"{key} must be a list of strings")
        return tuple(value)
    if key == "check":
        if not isinstance(value, list) or not all(isinstance(v, list) for v in value):
            raise SpecError("check must be a list of commands (lists of strings)")
        return tuple(tuple(str(x) for x in cmd) for cmd in value)
    if key in ("files", "env"):
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise SpecError(f"{key} must map names to strings")
        if key == "files" and any("/" in name or name.startswith(".") for name in value):
            raise SpecError("files names must be plain file names")
        return tuple(sorted(value.items()))
    if key == "memory_model" and value not in ("native", "vm"):
        raise SpecError("memoryModel must be 'native' or 'vm'")
    return value


def load_specs(spec_file: Path | None) -> dict[str, RuntimeSpec]:
    specs = builtin_specs()
    if spec_file is None:
        return specs
    try:
        data = json.loads(Path(spec_file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot read {spec_file}: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError("the spec file must hold a JSON object of spec id -> fields")
    for spec_id, fields in data.items():
        if not isinstance(fields, dict):
            raise SpecError(f"{spec_id}: fields must be an object")
        base_id = fields.get("base", spec_id)
        base = specs.get(base_id)
        if base is None and "pool" not in fields:
            raise SpecError(f"{spec_id}: unknown base {base_id!r}; give 'base' or 'pool'")
        changes = {}
        for key, value in fields.items():
            if key == "base":
                continue
            if key not in _JSON_FIELDS:
                raise SpecError(f"{spec_id}: unknown field {key!r}")
            changes[_JSON_FIELDS[key]] = _convert(_JSON_FIELDS[key], value)
        try:
            if base is None:
                spec = RuntimeSpec(id=spec_id, **changes)
            else:
                spec = dataclasses.replace(base, id=spec_id, **changes)
        except TypeError as exc:
            raise SpecError(f"{spec_id}: {exc}") from None
        specs[spec_id] = spec
    return specs
