"""A cold job's test data over a slow link: the agent fetching one file at a time against a
few at once, while the program compiles.

    .venv/bin/python bench/agent_downloads.py [--delay-ms 10] [--cases 50] [--kib 64] [--repeats 3]

A real agent (one slot, a new workspace each run: its cache is empty) judges one job of
`--cases` cases of `--kib` KiB inputs against the test suite's control plane
(`tests/node_agent/fake_control.py`), which it reaches through the lab's delaying relay
(`bench.lab.relay`: every chunk held `--delay-ms` each way, so that a download costs a round
trip of twice that more). A run's time is the job's, from its lease to its result as the
plane saw them; `JUDGE_DOWNLOAD_THREADS` 1 and 4 alternate, for a python job and, where g++
is installed, a C++ one, whose downloads overlap its compile. Prints the medians and their
ratio. Needs bubblewrap and the pools' toolchains, no database; works in temporary folders
under /tmp, removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.agents import AgentProcess, missing_tools, private_dir  # noqa: E402
from tests.node_agent.fake_control import FakeControlPlane  # noqa: E402

SOURCES = {
    "python": "a, b = map(int, input().split())\nprint(a + b)\n",
    "cpp": "#include <cstdio>\nint main(){long a,b;scanf(\"%ld %ld\",&a,&b);printf(\"%ld\\n\",a+b);}\n",
}
THREADS = (1, 4)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cases(count: int, kib: int, salt: str) -> list:
    """Distinct inputs (a new salt each run: nothing is in any cache), the sum first."""
    out = []
    for n in range(1, count + 1):
        pad = (f"# {salt} {n} " + "x" * 64 + "\n") * max(1, kib * 1024 // 80)
        out.append((f"{n} {n}\n{pad}", f"{2 * n}\n", 1))
    return out


def one_job(plane: FakeControlPlane, url: str, pool: str, threads: int, args, salt: str) -> float:
    """Seconds from the job's lease to its result, on a fresh agent."""
    folder = private_dir("kece-bench-agent-", 0o711)
    secrets_dir = private_dir("kece-bench-cred-", 0o700)
    node_id, code = plane.register_node(pool)
    credential = secrets_dir / "credential"
    credential.write_text(code + "\n")
    os.chmod(credential, 0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGE_")}
    env.update({"JUDGE_MODE": "pool", "JUDGE_POOL": pool, "JUDGE_CONTROL_URL": url,
                "JUDGE_CREDENTIAL_FILE": str(credential), "JUDGE_LOCAL_SLOTS": "1",
                "JUDGE_WORKSPACE": str(folder / "ws"), "JUDGE_HEALTH_LISTEN": "off",
                "JUDGE_DOWNLOAD_THREADS": str(threads), "JUDGE_LOG_LEVEL": "WARNING"})
    agent = AgentProcess(env, folder).start()
    try:
        node = plane.nodes[node_id]
        plane.wait_for(lambda: node.sessions_opened >= 1 and node.heartbeats, timeout=60, what="agent session")
        job_id = plane.add_job(pool=pool, source=SOURCES[pool], cases=cases(args.cases, args.kib, salt),
                               limits={"timeLimitMs": 5000, "memoryLimitMb": 256, "outputLimitKb": 64})
        job = plane.wait_settled(job_id, timeout=600)
        ended = time.monotonic()
        verdict = (job.settled or {}).get("body", {}).get("verdict")
        if verdict != "AC":
            raise SystemExit(f"the {pool} job ended {job.state} {verdict}: {job.results}\n{agent.logs()[-3000:]}")
        return ended - job.claims[-1][3]
    finally:
        agent.kill()
        subprocess.run(["rm", "-rf", str(folder), str(secrets_dir)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--kib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    pools = [pool for pool in SOURCES if not missing_tools(pool)]
    if not pools:
        raise SystemExit(f"no pool can run here: {missing_tools('python')}")
    plane = FakeControlPlane(claim_wait_ms=2000).start()
    relay_port = free_port()
    host, port = plane.url.removeprefix("http://").rsplit(":", 1)
    relay = subprocess.Popen([sys.executable, "-m", "bench.lab.relay", "--listen", f"127.0.0.1:{relay_port}",
                              "--upstream", f"{host}:{port}", "--delay-ms", str(args.delay_ms),
                              "--jitter-ms", "0"], cwd=Path(__file__).resolve().parents[1])
    url = f"http://127.0.0.1:{relay_port}"
    print(f"agent downloads: one cold job of {args.cases} cases ({args.kib} KiB inputs: {2 * args.cases} files),"
          f" the control plane {args.delay_ms:g} ms away each way, one slot; {args.repeats} runs each")
    try:
        while True:  # the relay listens once its interpreter has started
            try:
                socket.create_connection(("127.0.0.1", relay_port), timeout=1).close()
                break
            except OSError:
                if relay.poll() is not None:
                    raise SystemExit("the relay did not start")
                time.sleep(0.05)
        for pool in pools:
            times = {threads: [] for threads in THREADS}
            for repeat in range(args.repeats):
                for threads in THREADS:
                    seconds = one_job(plane, url, pool, threads, args, salt=f"{pool}-{repeat}-{threads}")
                    times[threads].append(seconds)
                    print(f"  {pool}, {threads} download thread{'s' if threads > 1 else ''}: {seconds:.2f} s",
                          flush=True)
            one, four = (statistics.median(times[t]) for t in THREADS)
            print(f"{pool}: median {one:.2f} s one file at a time, {four:.2f} s four at once"
                  f" (x {one / four:.2f})")
    finally:
        relay.kill()
        plane.stop()


if __name__ == "__main__":
    main()
