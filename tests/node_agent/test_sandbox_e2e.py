"""What user code can and cannot do, shown through a real agent judging hostile programs.

Each probe program prints what happened to it; the expected output is what a sound
sandbox allows, so AC means "contained". Only loopback addresses are ever probed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.agents import sandbox_pids

from .conftest import SUM_CASES, need_pool, verdict_of

LIMITS = {"timeLimitMs": 2000, "memoryLimitMb": 128, "outputLimitKb": 64}

NETWORK_PROBE = """
import socket
results = []
for port in map(int, input().split()):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        results.append("open")
    except OSError:
        results.append("blocked")
print(" ".join(results))
print(",".join(sorted(name for _i, name in socket.if_nameindex())))
"""

WRITE_PROBE = """
import os
for path in input().split():
    try:
        with open(path, "w") as fh:
            fh.write("escaped")
        print("wrote", path)
    except OSError:
        print("denied")
"""

READ_PROBE = """
import os
for path in input().split():
    try:
        with open(path, "rb") as fh:
            fh.read(1)
        print("READ", path)
    except OSError:
        print("unreadable")
try:
    print(len(os.listdir(input())))
except OSError:
    print("no cache")
"""


def test_user_code_has_no_network_no_host_writes_and_no_secrets(plane, launch):
    need_pool("python")
    agent, _ = launch(plane, "python", slots=2)
    fake_port = int(plane.url.rsplit(":", 1)[1])
    ws = agent.workspace
    marker = f"kece-escape-{os.getpid()}"

    net = plane.add_job(pool="python", source=NETWORK_PROBE, limits=LIMITS,
                        cases=[(f"{fake_port} 3306\n", "blocked blocked\nlo\n", 100)])
    targets = [str(ws / marker), str(ws / "cache" / marker), "/usr/" + marker, "/etc/" + marker,
               "/box/" + marker, str(agent.credential.parent / marker)]
    write = plane.add_job(pool="python", source=WRITE_PROBE, limits=LIMITS,
                          cases=[(" ".join(targets) + "\n", "denied\n" * len(targets), 100)])
    # The agent's own process (environment, open files) is outside the sandbox's PID namespace.
    secrets_ = [str(agent.credential), f"/proc/{agent.pid}/environ", f"/proc/{agent.pid}/cmdline", "/etc/shadow",
                "/root/.bash_history"]
    read = plane.add_job(pool="python", source=READ_PROBE, limits=LIMITS,
                         cases=[(" ".join(secrets_) + "\n" + str(ws / "cache") + "\n",
                                 "unreadable\n" * len(secrets_) + "no cache\n", 100)])

    assert verdict_of(plane, net)["verdict"] == "AC", "no network at all: only a loopback with nothing on it"
    assert verdict_of(plane, write)["verdict"] == "AC", "nothing outside the sandbox is writable"
    assert verdict_of(plane, read)["verdict"] == "AC", "the credential file, the cache and host secrets are invisible"
    for path in targets:
        assert not Path(path).exists(), path


FORK_BOMB = "#include <unistd.h>\nint main(){ while (true) fork(); }\n"
MEMORY_BOMB = ("#include <cstdlib>\n#include <cstring>\n"
               "int main(){ while (true) { char* p = (char*) std::malloc(1 << 24); if (p) std::memset(p, 7, 1 << 24); } }\n")
CPP_AC = '#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}\n'


def test_a_fork_bomb_and_a_memory_bomb_are_contained_and_the_agent_survives(plane, launch):
    need_pool("cpp")
    before = sandbox_pids()
    agent, _ = launch(plane, "cpp", slots=2)
    fork = plane.add_job(pool="cpp", source=FORK_BOMB, cases=SUM_CASES[:1], limits=LIMITS)
    memory = plane.add_job(pool="cpp", source=MEMORY_BOMB, cases=SUM_CASES[:1], limits=LIMITS)

    assert verdict_of(plane, fork)["verdict"] in ("TLE", "RE")
    mem = verdict_of(plane, memory)
    assert mem["verdict"] == "MLE"
    assert mem["memoryKb"] >= LIMITS["memoryLimitMb"] * 1024 * 0.5
    assert agent.alive()
    after = verdict_of(plane, plane.add_job(pool="cpp", source=CPP_AC, cases=SUM_CASES, limits=LIMITS))
    assert after["verdict"] == "AC", "the agent still judges normally afterwards"
    deadline = time.monotonic() + 5
    while sandbox_pids() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_pids() - before == set(), "no process of the bombs outlives its run"
    # The folder goes right after the result is posted: give the agent a moment.
    deadline = time.monotonic() + 10
    while list((agent.workspace / "runs").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list((agent.workspace / "runs").iterdir()) == [], "run folders are swept after each job"
