"""A job's test data comes a few files at a time, while the job compiles."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from node_agent.cache import ArtifactError
from node_agent.downloads import Downloads

from .conftest import need_pool, verdict_of

PY_AC = "a, b = map(int, input().split())\nprint(a + b)\n"


def test_the_files_come_together_and_in_the_entries_order():
    together = threading.Barrier(3, timeout=30)  # broken unless all three are fetched at once

    def fetch(entry):
        together.wait()
        return Path(entry["digest"])

    downloads = Downloads(fetch, [{"digest": name} for name in "abc"], threads=3)
    assert downloads.paths() == [Path("a"), Path("b"), Path("c")]


def test_a_failure_is_the_first_in_the_entries_order_and_comes_after_the_others_ended():
    second_failed, ended = threading.Event(), []

    def fetch(entry):
        if entry["digest"] == "b":
            ended.append("b")
            second_failed.set()
            raise ArtifactError("artifact_missing", "b")
        second_failed.wait(30)
        ended.append("a")
        raise ArtifactError("artifact_corrupt", "a")

    with pytest.raises(ArtifactError) as raised:
        Downloads(fetch, [{"digest": "a"}, {"digest": "b"}], threads=2).paths()
    assert raised.value.code == "artifact_corrupt"
    assert sorted(ended) == ["a", "b"]


def test_a_job_that_ends_early_fetches_nothing_more():
    first_begun, go_on, fetched = threading.Event(), threading.Event(), []

    def fetch(entry):
        fetched.append(entry["digest"])
        first_begun.set()
        go_on.wait(30)
        return Path(entry["digest"])

    downloads = Downloads(fetch, [{"digest": name} for name in "abc"], threads=1)
    first_begun.wait(30)
    downloads.drop_waiting()
    go_on.set()
    downloads.stop()
    assert fetched == ["a"]


FOUR_CASES = [(f"{n} {n}\n", f"{2 * n}\n", 25) for n in range(1, 5)]


def test_the_agent_fetches_a_jobs_files_four_at_a_time(plane, launch):
    need_pool("python")
    plane.download_gate = 4  # each download is answered once four are under way together
    launch(plane, "python", slots=1)
    job = plane.add_job(pool="python", source=PY_AC, cases=FOUR_CASES)
    assert verdict_of(plane, job)["verdict"] == "AC"
    assert plane.most_downloads_at_once == 4


def test_a_case_runs_while_the_later_cases_files_still_come(plane, launch):
    need_pool("python")
    last_answer = plane.hold_download(FOUR_CASES[-1][1])  # held until the test lets it go
    try:
        launch(plane, "python", slots=1)
        job = plane.add_job(pool="python", source=PY_AC, cases=FOUR_CASES)
        with plane.changed:
            assert plane.changed.wait_for(lambda: (plane.jobs[job].progress or {}).get("testcase", 0) >= 3,
                                          timeout=60), "the first cases waited for the last case's answer"
    finally:
        last_answer.set()
    assert verdict_of(plane, job)["verdict"] == "AC"
    assert len(plane.calls("/artifacts/")) == 8


def test_with_one_thread_the_files_come_one_at_a_time(plane, launch):
    need_pool("python")
    launch(plane, "python", slots=1, env={"JUDGE_DOWNLOAD_THREADS": "1"})
    job = plane.add_job(pool="python", source=PY_AC, cases=FOUR_CASES)
    assert verdict_of(plane, job)["verdict"] == "AC"
    assert len(plane.calls("/artifacts/")) == 8 and plane.most_downloads_at_once == 1


def test_a_compile_error_is_the_verdict_even_when_the_test_data_is_missing(plane, launch):
    need_pool("cpp")
    launch(plane, "cpp", slots=1)
    broken = plane.add_job(pool="cpp", source="int main( {", cases=FOUR_CASES)
    del plane.blobs[plane.jobs[broken].cases[2]["input"]["digest"]]
    assert verdict_of(plane, broken)["verdict"] == "CE"
    sound = plane.add_job(pool="cpp", source="#include <cstdio>\nint main(){int a,b;scanf(\"%d %d\",&a,&b);"
                                             "printf(\"%d\\n\",a+b);}\n", cases=FOUR_CASES)
    assert verdict_of(plane, sound)["verdict"] == "AC"
