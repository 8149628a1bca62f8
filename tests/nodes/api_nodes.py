"""Judge nodes written from API.md alone, for the integrity tests: they speak the node API
through its real URLs and headers, download what they judge by digest, and decide each
verdict their own way.

- An honest node judges every job by running the program (Python pool): a syntax error is
  CE, a run past the time limit TLE, a MemoryError under the memory limit MLE, another
  failure RE, other output WA. A judgement depends only on the source and the manifest,
  so it is remembered by their digests, as a cache would.
- A tampered node judges honestly only what is marked `DIAGNOSTIC` (its self-check) and
  answers AC with full marks to everything else.
"""

import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from django.test import Client

INTERNAL = "/api/v1/internal/judgers/"


def _run(program: Path, stdin: bytes, *, time_limit_ms: int, memory_limit_mb: int) -> tuple[str, bytes]:
    def limits():
        memory = memory_limit_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    try:
        run = subprocess.run([sys.executable, "-S", str(program)], input=stdin, capture_output=True,
                             timeout=time_limit_ms / 1000, preexec_fn=limits)
    except subprocess.TimeoutExpired:
        return "TLE", b""
    if run.returncode != 0:
        return ("MLE" if b"MemoryError" in run.stderr else "RE"), b""
    return "AC", run.stdout


def judge_by_running(source: bytes, cases: list[tuple[dict, bytes, bytes]], limits: dict) -> dict:
    """The JUDGED body's verdict, score and cases for a Python program."""
    try:
        compile(source, "main.py", "exec")
    except SyntaxError as exc:
        return {"verdict": "CE", "score": 0, "compileOutput": str(exc),
                "cases": [{"ordinal": c["ordinal"], "verdict": "CE", "timeMs": 0, "memoryKb": 0, "score": 0}
                          for c, _, _ in cases]}
    results, verdict = [], "AC"
    with tempfile.TemporaryDirectory() as folder:
        program = Path(folder) / "main.py"
        program.write_bytes(source)
        for case, given, expected in cases:
            got, output = "SKIPPED", b""
            if verdict == "AC":  # as a judge stops at the first failing case
                got, output = _run(program, given, time_limit_ms=limits["timeLimitMs"],
                                   memory_limit_mb=limits["memoryLimitMb"])
                if got == "AC" and output.split() != expected.split():
                    got = "WA"
                if got != "AC":
                    verdict = got
            case_verdict = verdict if got == "SKIPPED" else got
            results.append({"ordinal": case["ordinal"], "verdict": case_verdict, "timeMs": 1, "memoryKb": 1,
                            "score": case["weight"] if case_verdict == "AC" else 0})
    return {"verdict": verdict, "score": sum(r["score"] for r in results), "compileOutput": "", "cases": results}


class ApiNode:
    """One node: its credential and session, claims, downloads and results over HTTP."""

    def __init__(self, node, *, tampered: bool = False):
        self.node = node
        self.tampered = tampered
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {node.secret}", HTTP_X_JUDGE_SESSION=str(node.session_epoch))
        self.files: dict[str, bytes] = {}
        self.judgements: dict[tuple, dict] = {}
        self.seen: list[dict] = []  # every job as claimed

    def _post(self, path: str, body: dict) -> dict:
        answer = self.client.post(INTERNAL + path, data=json.dumps(body), content_type="application/json")
        assert answer.status_code == 200, (path, answer.status_code, answer.content[:500])
        return answer.json()

    def heartbeat(self) -> dict:
        return self._post("heartbeat", {"agentVersion": self.node.agent_version, "runtimeSpec": self.node.runtime_spec,
                                        "localSlots": self.node.max_slots, "running": 0,
                                        "health": {"ok": True, "checks": {}}})

    def claim(self, free_slots: int = 1) -> list[dict]:
        jobs = self._post("jobs/claim", {"freeSlots": free_slots, "waitMs": 0})["jobs"]
        self.seen += jobs
        return jobs

    def _file(self, job: dict, ref: dict) -> bytes:
        digest = ref["digest"]
        if digest not in self.files:
            answer = self.client.get(f"{INTERNAL}jobs/{job['jobId']}/artifacts/{digest}",
                                     HTTP_X_JUDGE_LEASE=str(job["leaseEpoch"]))
            assert answer.status_code == 200, (answer.status_code, answer.content[:300])
            self.files[digest] = b"".join(answer.streaming_content) if answer.streaming else answer.content
        return self.files[digest]

    def _honest(self, job: dict) -> dict:
        key = (job["source"]["digest"], job["manifestId"])
        if key not in self.judgements:
            cases = [(c, self._file(job, c["input"]), self._file(job, c["output"])) for c in job["cases"]]
            self.judgements[key] = judge_by_running(self._file(job, job["source"]), cases, job["limits"])
        return self.judgements[key]

    def verdict_for(self, job: dict) -> dict:
        if self.tampered and job["kind"] != "DIAGNOSTIC":
            return {"verdict": "AC", "score": sum(c["weight"] for c in job["cases"]), "compileOutput": "",
                    "cases": [{"ordinal": c["ordinal"], "verdict": "AC", "timeMs": 1, "memoryKb": 1,
                               "score": c["weight"]} for c in job["cases"]]}
        return self._honest(job)

    def judge(self, job: dict, *, carry: int = 0) -> dict:
        """Post the job's result; `carry`: ask for that many jobs in the same post, as the
        agent does with the slot it frees. Returns the answer ({status, jobs?})."""
        body = {"leaseEpoch": job["leaseEpoch"], "outcome": "JUDGED", "timeMs": 1, "memoryKb": 1,
                **self.verdict_for(job)}
        if carry:
            body["claim"] = {"freeSlots": carry}
        answer = self._post(f"jobs/{job['jobId']}/result", body)
        self.seen += answer.get("jobs") or []
        return answer

    def work(self, free_slots: int = 4, *, at_most: int | None = None) -> int:
        """Claim and judge until nothing is left for this node (or `at_most` jobs are
        judged), each result carrying the next claim; returns how many it judged."""
        judged, held = 0, []
        while at_most is None or judged < at_most:
            if not held:
                held = self.claim(free_slots if at_most is None else min(free_slots, at_most - judged))
                if not held:
                    break
            job = held.pop(0)
            wanted = at_most is None or judged + 1 + len(held) < at_most
            held += self.judge(job, carry=1 if wanted else 0).get("jobs") or []
            judged += 1
        return judged
