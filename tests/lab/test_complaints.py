"""A failed lab scenario prints what the servers and the worker complained of while it ran
(`Lab.complaints_since`), so that a failure in CI carries its cause in the output."""

import json

from bench.lab.lab import Lab


def _record(level, logger, message, time="2026-01-01T00:00:00.000Z"):
    return json.dumps({"time": time, "level": level, "logger": logger, "message": message})


def test_only_the_warnings_written_during_the_scenario_are_printed_the_last_ones_first_cut_short(tmp_path):
    lab = Lab()
    lab.tmp = tmp_path
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "worker.log").write_text(_record("ERROR", "celery.beat", "before the scenario") + "\n")
    (logs / "web1.log").write_text("")
    marks = lab.log_marks()

    with open(logs / "worker.log", "a") as worker:
        worker.write(_record("INFO", "celery.worker", "a task ran") + "\n")
        worker.write("a line that is not JSON\n")
        worker.write(_record("WARNING", "py.warnings", "a deprecation") + "\n")
        for n in range(15):
            worker.write(_record("ERROR", "celery.worker.consumer.consumer", f"cannot connect {n}\nWill retry") + "\n")
    with open(logs / "web1.log", "a") as web:
        web.write(_record("WARNING", "kece.console", "x" * 500) + "\n")

    lines = lab.complaints_since(marks, count=3)

    assert [line.split(": ", 1)[1] for line in lines if line.startswith("worker")] == \
        ["cannot connect 12", "cannot connect 13", "cannot connect 14"]
    (web,) = [line for line in lines if line.startswith("web1")]
    assert "WARNING kece.console: " in web and web.endswith("x" * 160)
    assert not any("before the scenario" in line or "deprecation" in line for line in lines)
