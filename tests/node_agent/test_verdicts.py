from __future__ import annotations

import signal

from node_agent import verdicts
from node_agent.sandbox import RunResult


def _files(tmp_path, actual: bytes, expected: bytes):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(actual)
    b.write_bytes(expected)
    return a, b


def test_it_ignores_trailing_spaces_and_trailing_blank_lines(tmp_path):
    assert verdicts.outputs_match(*_files(tmp_path, b"1 2  \r\n3\t\n\n\n", b"1 2\n3"))
    assert verdicts.outputs_match(*_files(tmp_path, b"", b"\n\n"))


def test_it_does_not_forgive_other_differences(tmp_path):
    assert not verdicts.outputs_match(*_files(tmp_path, b"1  2\n", b"1 2\n"))
    assert not verdicts.outputs_match(*_files(tmp_path, b"\n1\n", b"1\n"))
    assert not verdicts.outputs_match(*_files(tmp_path, b"1\n\n2\n", b"1\n2\n"))
    assert not verdicts.outputs_match(*_files(tmp_path, b"1\n", b"1\n2\n"))


def classify(res: RunResult, stdout_bytes: int = 0, messages: bytes = b"") -> str | None:
    return verdicts.classify(res, time_limit_ms=1000, memory_limit_kb=65536, output_limit_bytes=100,
                             stdout_bytes=stdout_bytes, messages=messages, oom_markers=("MemoryError",))


def test_run_classification():
    assert classify(RunResult(exit_code=0, cpu_ms=10, memory_kb=1000)) is None
    assert classify(RunResult(exit_code=0), stdout_bytes=101) == "OLE"
    assert classify(RunResult(signal=signal.SIGXFSZ)) == "OLE"
    assert classify(RunResult(exit_code=0, cpu_ms=1001)) == "TLE"
    assert classify(RunResult(signal=signal.SIGKILL, wall_timeout=True)) == "TLE"
    assert classify(RunResult(signal=signal.SIGXCPU, cpu_ms=1000)) == "TLE"
    assert classify(RunResult(signal=signal.SIGKILL, memory_exceeded=True)) == "MLE"
    assert classify(RunResult(exit_code=0, memory_kb=65537)) == "MLE"
    assert classify(RunResult(exit_code=1), messages=b"Traceback\nMemoryError\n") == "MLE"
    assert classify(RunResult(exit_code=1)) == "RE"
    assert classify(RunResult(signal=signal.SIGSEGV)) == "RE"
    # A program that ran out of memory and then spun is MLE, not TLE.
    assert classify(RunResult(exit_code=None, wall_timeout=True, memory_kb=70000)) == "MLE"


def test_job_verdict_is_the_first_failing_case_and_score_the_sum():
    cases = [verdicts.case_entry(1, "AC", 5, 100, 30), verdicts.case_entry(2, "TLE", 1000, 200, 30),
             verdicts.case_entry(3, "WA", 7, 300, 40)]
    body = verdicts.judged(4, cases)
    assert body["verdict"] == "TLE" and body["score"] == 30
    assert body["timeMs"] == 1000 and body["memoryKb"] == 300 and body["leaseEpoch"] == 4
    assert verdicts.judged(1, [verdicts.case_entry(1, "AC", 1, 1, 100)])["verdict"] == "AC"


def test_compile_output_is_cut_to_64_kib_of_utf8():
    text = verdicts.cut_compile_output(("é" * 70000).encode())
    assert len(text.encode("utf-8")) <= 64 * 1024
    assert verdicts.cut_compile_output(b"\xff\xfeok") .endswith("ok")
