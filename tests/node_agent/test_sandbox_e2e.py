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


def judge_attacks(plane, launch, pool: str, sources: list[str], limits: dict):
    """A fresh agent judges each attack on one case: (agent, sandbox pids before, results)."""
    need_pool(pool)
    before = sandbox_pids()
    agent, _ = launch(plane, pool, slots=2)
    jobs = [plane.add_job(pool=pool, source=source, cases=SUM_CASES[:1], limits=limits) for source in sources]
    return agent, before, [verdict_of(plane, job) for job in jobs]


def test_a_fork_bomb_and_a_memory_bomb_are_contained_and_the_agent_survives(plane, launch):
    agent, before, (fork, mem) = judge_attacks(plane, launch, "cpp", [FORK_BOMB, MEMORY_BOMB], LIMITS)
    assert fork["verdict"] in ("TLE", "RE")
    assert mem["verdict"] == "MLE"
    assert mem["memoryKb"] >= LIMITS["memoryLimitMb"] * 1024 * 0.5
    assert agent.alive()
    after = verdict_of(plane, plane.add_job(pool="cpp", source=CPP_AC, cases=SUM_CASES, limits=LIMITS))
    assert after["verdict"] == "AC", "the agent still judges normally afterwards"
    assert_nothing_left(agent, before)


def assert_nothing_left(agent, before: set[str]) -> None:
    """No process of the sandbox uid outlives its run, and every run folder is swept."""
    deadline = time.monotonic() + 5
    while sandbox_pids() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_pids() - before == set(), "no process of a run outlives it"
    # The folder goes right after the result is posted: give the agent a moment.
    deadline = time.monotonic() + 10
    while list((agent.workspace / "runs").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list((agent.workspace / "runs").iterdir()) == [], "run folders are swept after each job"


# Output files may be large here, so only the filesystems and the memory limit stop these.
FILE_LIMITS = {"timeLimitMs": 4000, "memoryLimitMb": 64, "outputLimitKb": 65536}
SHM_FLOOD = """
for i in range(10):
    with open(f"/dev/shm/flood{i}", "wb") as fh:
        for _ in range(60):
            fh.write(bytes(1 << 20))
a, b = map(int, input().split())
print(a + b)
"""
TMP_HOARD = """
with open("/tmp/hoard", "wb") as fh:
    for _ in range(60):
        fh.write(bytes(1 << 20))
a, b = map(int, input().split())
print(a + b)
"""


def test_memory_kept_in_files_counts_against_the_memory_limit(plane, launch):
    """/dev/shm is a bounded tmpfs, and what a program keeps in the sandbox's tmpfs is
    memory it holds: 600 MB of files cannot pass under a 64 MiB limit, nor 60 MB in /tmp."""
    agent, before, (shm, hoard) = judge_attacks(plane, launch, "python", [SHM_FLOOD, TMP_HOARD], FILE_LIMITS)
    assert shm["verdict"] in ("MLE", "RE")
    assert hoard["verdict"] == "MLE"
    assert hoard["memoryKb"] > FILE_LIMITS["memoryLimitMb"] * 1024
    assert_nothing_left(agent, before)


MEMFD_HOARD = """
import os
held = []
for i in range(6):  # 300 MB in memfds never mapped, each under the file size limit
    fd = os.memfd_create(f"hoard{i}")
    for _ in range(50):
        os.write(fd, bytes(1 << 20))
    held.append(fd)
a, b = map(int, input().split())
print(a + b)
"""
SYSV_HOARD = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
size = 32 << 20
for _ in range(8):  # 256 MB in SysV segments, each detached once written
    segment = libc.shmget(0, size, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if segment < 0:
        raise OSError(ctypes.get_errno(), "shmget refused")
    address = libc.shmat(segment, None, 0)
    ctypes.memset(address, 1, size)
    libc.shmdt(ctypes.c_void_p(address))
a, b = map(int, input().split())
print(a + b)
"""


def test_memory_that_no_process_shows_cannot_be_kept_past_the_limit(plane, launch):
    """A memfd written and never mapped, a SysV segment detached once written: neither is in
    any process's resident set nor in a mounted tmpfs, so a run may not make them (without a
    memory cgroup nothing would count them); the program fails, the agent carries on."""
    agent, before, results = judge_attacks(plane, launch, "python", [MEMFD_HOARD, SYSV_HOARD], FILE_LIMITS)
    for result in results:
        assert result["verdict"] in ("RE", "MLE"), result
    assert agent.alive()
    assert_nothing_left(agent, before)


MSGQ_HOARD = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
queue = libc.msgget(0, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600: messages no process holds
if queue < 0:
    raise OSError(ctypes.get_errno(), "msgget refused")
a, b = map(int, input().split())
print(a + b)
"""
TCP_HOARD = """
import socket
server = socket.socket()  # buffers of a connection over the run's own loopback: kernel memory
server.bind(("127.0.0.1", 0))
a, b = map(int, input().split())
print(a + b)
"""
# io_uring_setup(2): the ring through which a socket is opened without socket(2).
IO_URING = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
ring = libc.syscall(425, 8, params)
if ring >= 0:
    raise SystemExit("an io_uring ring was set up")
a, b = map(int, input().split())
print(a + b)
"""
# Prints the answer only if the reservation was refused: 1 GiB held on the agent's disk under
# stdout, its size still 0, past the file size limit.
DISK_RESERVATION = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
reserved = libc.fallocate(1, 1, 0, 1 << 30) == 0  # FALLOC_FL_KEEP_SIZE
a, b = map(int, input().split())
print("reserved" if reserved else a + b)
"""


def test_kernel_memory_and_disk_no_limit_counts_cannot_be_taken(plane, launch):
    """Message queues and TCP buffers are in no resident set and no tmpfs (and io_uring
    opened an IP socket without socket(2)); a reservation under an output file is disk past
    its size limit (it filled the workspace, and other jobs' output failed with it). Each is
    refused; the agent carries on."""
    agent, before, (queues, tcp, disk, ring) = judge_attacks(
        plane, launch, "python", [MSGQ_HOARD, TCP_HOARD, DISK_RESERVATION, IO_URING], FILE_LIMITS)
    assert queues["verdict"] == "RE" and tcp["verdict"] == "RE", (queues, tcp)
    assert disk["verdict"] == "AC", "the reservation was refused: the program printed the answer"
    assert ring["verdict"] == "AC", "io_uring, which opens sockets without socket(2), was refused"
    assert agent.alive()
    assert_nothing_left(agent, before)


# Work done in short-lived grandchildren that "managers", alive until the end, wait for: the
# time is in the managers' cutime, and in no rusage anyone collects. 3 × 250 × 4 ms = 3 s of CPU,
# about half that on the wall over two cores: under the wall limit (2 × 2 s + 1 s), over the CPU
# limit (2 s).
CPU_IN_REAPED_CHILDREN = r"""
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#include <cstdio>
static volatile unsigned long sink;
static void burn_ms(double ms) {
    timespec s, t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &s);
    for (;;) { for (int i = 0; i < 20000; i++) sink = sink * 31 + i;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        if ((t.tv_sec - s.tv_sec) * 1e3 + (t.tv_nsec - s.tv_nsec) / 1e6 >= ms) return; }
}
int main() {
    int done[2]; pipe(done);
    for (int m = 0; m < 3; m++)
        if (fork() == 0) {
            for (int c = 0; c < 250; c++) { pid_t w = fork(); if (w == 0) { burn_ms(4); _exit(0); } waitpid(w, nullptr, 0); }
            char x = 1; write(done[1], &x, 1);
            pause();
        }
    char x; for (int m = 0; m < 3; m++) read(done[0], &x, 1);
    long long a, b; scanf("%lld %lld", &a, &b); printf("%lld\n", a + b); fflush(stdout);
    _exit(0);
}
"""


def test_cpu_time_spent_in_children_a_living_process_reaped_counts(plane, launch):
    agent, before, (split,) = judge_attacks(plane, launch, "cpp", [CPU_IN_REAPED_CHILDREN], LIMITS)
    assert split["verdict"] == "TLE", (split["verdict"], split.get("compileOutput", "")[:600])
    assert agent.alive()
    assert_nothing_left(agent, before)


STDERR_WIPE = """
import os, sys
print("not the answer")
sys.stdout.flush()
os.ftruncate(2, 0)
sys.exit(1)
"""


def test_a_program_that_wipes_its_stderr_gets_a_verdict_not_a_system_error(plane, launch):
    need_pool("python")
    before = sandbox_pids()
    agent, _ = launch(plane, "python", slots=1)
    job = plane.add_job(pool="python", source=STDERR_WIPE, cases=SUM_CASES[:1], limits=LIMITS)
    assert verdict_of(plane, job)["verdict"] == "RE"
    assert len(plane.jobs[job].claims) == 1, "judged at the first attempt, never retried as a sandbox fault"
    assert_nothing_left(agent, before)
