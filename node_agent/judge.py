"""Judging a program (cpp, java, python, arkts): compile once, run every case."""

from __future__ import annotations

from .jobs import JobContext
from .runtimes import RuntimeSpec
from .sandbox import Limits, Sandbox, read_head, read_tail
from . import verdicts

MiB = 1 << 20


def compile_limits(spec: RuntimeSpec) -> Limits:
    return Limits(
        cpu_ms=spec.compile_cpu_ms,
        wall_ms=spec.compile_wall_ms,
        memory_kb=spec.compile_memory_mb * 1024,
        address_space_bytes=spec.compile_memory_mb * MiB if spec.memory_model == "native" else None,
        stack_bytes=None,
        file_size_bytes=256 * MiB,
        processes=spec.compile_processes,
        tmp_bytes=256 * MiB,
    )


def run_limits(spec: RuntimeSpec, limits: dict) -> tuple[Limits, int, int]:
    """Sandbox limits for one case, plus the time and memory bounds that decide TLE/MLE."""
    time_ms = spec.effective_time_ms(int(limits["timeLimitMs"]))
    memory_mb = int(limits["memoryLimitMb"])
    output_bytes = int(limits["outputLimitKb"]) * 1024
    if spec.memory_model == "native":
        address_space = (memory_mb + spec.as_slack_mb) * MiB
        watchdog_kb = (memory_mb + spec.as_slack_mb) * 1024
        memory_bound_kb = memory_mb * 1024
        stack = memory_mb * MiB
    else:
        address_space = None
        watchdog_kb = (memory_mb + spec.vm_overhead_mb) * 1024
        memory_bound_kb = watchdog_kb
        stack = None
    sandbox_limits = Limits(
        # The CPU rlimit sits a little above the limit so an overrun is measured, not guessed.
        cpu_ms=time_ms + 200,
        wall_ms=time_ms * 2 + 1000,
        memory_kb=watchdog_kb,
        address_space_bytes=address_space,
        stack_bytes=stack,
        file_size_bytes=output_bytes + 1,  # one byte more than allowed proves the overflow
        processes=spec.processes,
    )
    return sandbox_limits, time_ms, memory_bound_kb


def prepare_box(ctx: JobContext, spec: RuntimeSpec, sandbox: Sandbox, source: bytes):
    box = ctx.run_dir / "box"
    with ctx.timed("prepare"):
        sandbox.prepare_box(box)
        sandbox.place_file(box, spec.source_file, source)
        for name, content in spec.files:
            sandbox.place_file(box, name, content.encode("utf-8"))
    return box


def compile_in(ctx: JobContext, spec: RuntimeSpec, sandbox: Sandbox, box, memory_mb: int) -> tuple[bool, str]:
    """Compile in the box; (ok, compiler output cut to 64 KiB)."""
    if not spec.compile:
        return True, ""
    out, err = ctx.run_dir / "compile.out", ctx.run_dir / "compile.err"
    ctx.log.info("compiling", compiler=spec.compile[0])
    with ctx.timed("compile"):
        res = ctx.checked(sandbox.run(
            spec.render(spec.compile, memory_mb=memory_mb), box=box, box_writable=True, stdin=None,
            stdout=out, stderr=err, limits=compile_limits(spec), env=dict(spec.env), cancel=ctx.cancel,
        ))
    text = read_head(out, verdicts.COMPILE_OUTPUT_LIMIT) + read_head(err, verdicts.COMPILE_OUTPUT_LIMIT)
    if res.ok:
        ctx.log.info("compiled", ms=res.wall_ms)
        return True, verdicts.cut_compile_output(text)
    if res.wall_timeout or res.signal:
        why = "timed out" if res.wall_timeout else f"was killed by signal {res.signal}"
        text += f"\ncompiler {why}".encode()
    ctx.log.info("compile error", exit=res.exit_code, signal=res.signal, ms=res.wall_ms)
    return False, verdicts.cut_compile_output(text.strip() or b"compilation failed")


def run_case(ctx: JobContext, spec: RuntimeSpec, sandbox: Sandbox, box, case: dict, input_path, expected_path,
             limits: dict, of: int | None = None) -> dict:
    sandbox_limits, time_ms, memory_bound_kb = run_limits(spec, limits)
    out, err = ctx.run_dir / "run.out", ctx.run_dir / "run.err"
    argv = spec.render(spec.run, memory_mb=int(limits["memoryLimitMb"]))
    with ctx.timed("run"):
        res = ctx.checked(sandbox.run(
            argv, box=box, box_writable=False, stdin=input_path, stdout=out, stderr=err,
            limits=sandbox_limits, env=dict(spec.env), cancel=ctx.cancel,
        ))
    verdict = verdicts.classify(
        res, time_limit_ms=time_ms, memory_limit_kb=memory_bound_kb,
        output_limit_bytes=int(limits["outputLimitKb"]) * 1024, stdout_bytes=out.stat().st_size,
        # The JVM reports "Terminating due to java.lang.OutOfMemoryError" on stdout.
        messages=read_head(err, 64 * 1024) + read_tail(out, 4096), oom_markers=spec.oom_markers,
    )
    if verdict is None:
        with ctx.timed("compare"):
            verdict = "AC" if verdicts.outputs_match(out, expected_path) else "WA"
    time_used = verdicts.time_of(res, verdict, time_ms)
    ctx.log.info("case judged", case=case["ordinal"], of=of, verdict=verdict, time_ms=time_used,
                 memory_kb=res.memory_kb, exit=res.exit_code, signal=res.signal)
    return verdicts.case_entry(case["ordinal"], verdict, time_used, res.memory_kb, case.get("weight", 0))


def judge_program(ctx: JobContext, spec: RuntimeSpec, sandbox: Sandbox) -> dict:
    job = ctx.job
    limits = job["limits"]
    ctx.progress("COMPILING", None)
    source = ctx.artifact(job["source"]).read_bytes()
    # The test data comes while the program compiles (a compile error needs none of it), and
    # the later cases' while the first ones run: each case waits only for its own two files.
    downloads = ctx.download([entry for case in job["cases"] for entry in (case["input"], case["output"])])
    try:
        ctx.check()
        box = prepare_box(ctx, spec, sandbox, source)
        ok, compile_output = compile_in(ctx, spec, sandbox, box, int(limits["memoryLimitMb"]))
        if not ok:
            return verdicts.compile_error(ctx.lease_epoch, compile_output)
        cases = []
        for i, case in enumerate(job["cases"]):
            ctx.check()
            with ctx.timed("data"):
                input_path, expected_path = downloads.path(2 * i), downloads.path(2 * i + 1)
            ctx.progress("JUDGING", case["ordinal"])
            cases.append(run_case(ctx, spec, sandbox, box, case, input_path, expected_path, limits,
                                  of=len(job["cases"])))
    finally:
        downloads.stop()
    return verdicts.judged(ctx.lease_epoch, cases, compile_output)
