"""The lab's network: one network namespace per host, each joined by a veth pair to a bridge
that lives in a namespace of the lab's own (never the root namespace's network), and the
faults put on those links: netem delay, jitter and loss per direction, a link cut.

Every namespace the lab makes is named `kece-lab-*`; the addresses (10.213.0.0/24) exist
only inside them. Nothing here touches another namespace, interface or address.
"""

import ctypes
import os
import signal
import subprocess
import time

PREFIX = "kece-lab-"
BRIDGE_NS = PREFIX + "br"
NETWORK = "10.213.0"
HOSTS = {  # host -> last octet
    "lb": 10, "db": 2, "db2": 3, "web1": 11, "web2": 12, "worker": 20,
    "a1": 31, "a2": 32, "a3": 33, "a4": 34, "users": 50,
}
CLEAN_COMMAND = ".venv/bin/python -m bench.lab clean"


class LabError(RuntimeError):
    pass


def ns(host: str) -> str:
    return PREFIX + host


def address(host: str) -> str:
    return f"{NETWORK}.{HOSTS[host]}"


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True)
    if check and done.returncode:
        raise LabError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def leftovers() -> list[str]:
    names = run("ip", "netns", "list").stdout.split()
    return sorted({name for name in names if name.startswith(PREFIX)})


def refuse_leftovers() -> None:
    left = leftovers()
    if left:
        raise LabError(f"namespaces of an earlier lab are still there ({', '.join(left)}): the lab does not start"
                       f" over them. Clean them (their processes are killed) with:\n  {CLEAN_COMMAND}")


def build() -> None:
    """The bridge namespace and every host, addressed and up."""
    run("ip", "netns", "add", BRIDGE_NS)
    run("ip", "-n", BRIDGE_NS, "link", "set", "lo", "up")
    run("ip", "-n", BRIDGE_NS, "link", "add", "br0", "type", "bridge")
    run("ip", "-n", BRIDGE_NS, "link", "set", "br0", "up")
    for host in HOSTS:
        run("ip", "netns", "add", ns(host))
        run("ip", "-n", ns(host), "link", "set", "lo", "up")
        # The bridge's end is named after the host; the host's end is its eth0.
        run("ip", "-n", BRIDGE_NS, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns(host))
        run("ip", "-n", BRIDGE_NS, "link", "set", host, "master", "br0")
        run("ip", "-n", BRIDGE_NS, "link", "set", host, "up")
        run("ip", "-n", ns(host), "addr", "add", f"{address(host)}/24", "dev", "eth0")
        run("ip", "-n", ns(host), "link", "set", "eth0", "up")


def pids_in(namespace: str) -> list[int]:
    """The processes in a namespace but this one (which may have entered the `users` host)."""
    out = run("ip", "netns", "pids", namespace, check=False).stdout
    return [int(pid) for pid in out.split() if int(pid) != os.getpid()]


def teardown() -> list[str]:
    """Kill every process left in a lab namespace, then delete the namespaces. Returns what
    it could not do (empty when all is gone)."""
    problems = []
    for namespace in leftovers():
        for sig in (signal.SIGCONT, signal.SIGKILL):  # a paused process dies only once resumed
            for pid in pids_in(namespace):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while pids_in(namespace) and time.monotonic() < deadline:
            time.sleep(0.05)
    for namespace in leftovers():
        done = run("ip", "netns", "del", namespace, check=False)
        if done.returncode:
            problems.append(f"{namespace}: {done.stderr.strip()}")
    return problems


# --- faults --------------------------------------------------------------------------------

def cut(host: str) -> None:
    """The host's link down at the bridge: nothing passes either way."""
    run("ip", "-n", BRIDGE_NS, "link", "set", host, "down")


def restore(host: str) -> None:
    run("ip", "-n", BRIDGE_NS, "link", "set", host, "up")


def netem_available() -> bool:
    """Whether this kernel has `tc netem` (some VM kernels are built without it)."""
    probe = run("ip", "-n", BRIDGE_NS, "link", "add", "netem-probe", "type", "veth", "peer", "name", "netem-peer",
                check=False)
    if probe.returncode:
        return False
    try:
        return run("tc", "-n", BRIDGE_NS, "qdisc", "add", "dev", "netem-probe", "root", "netem", "delay", "1ms",
                   check=False).returncode == 0
    finally:
        run("ip", "-n", BRIDGE_NS, "link", "del", "netem-probe", check=False)


def netem(host: str, spec: str, direction: str = "both") -> None:
    """`tc netem` on the host's link: `spec` such as "delay 50ms 20ms loss 5%". Outbound is
    the host's eth0, inbound the bridge's end of the pair."""
    sides = {"out": [("-n", ns(host), "eth0")], "in": [("-n", BRIDGE_NS, host)]}
    for flag, namespace, dev in sides["out"] * (direction in ("out", "both")) + sides["in"] * (direction in ("in", "both")):
        run("tc", flag, namespace, "qdisc", "replace", "dev", dev, "root", "netem", *spec.split())


def drop_randomly(host: str, percent: int, direction: str = "both") -> None:
    """Packet loss without netem: nft drops `percent` % of the host's packets at random, on
    its way out (output), in (input) or both."""
    hooks = {"out": ["output"], "in": ["input"], "both": ["output", "input"]}[direction]
    device = {"output": "oifname", "input": "iifname"}  # the link only, not the host's loopback
    chains = "".join(f"  chain {hook} {{ type filter hook {hook} priority 0; policy accept;"
                     f" {device[hook]} \"eth0\" numgen random mod 100 < {percent} drop; }}\n" for hook in hooks)
    done = subprocess.run(["ip", "netns", "exec", ns(host), "nft", "-f", "-"], text=True, capture_output=True,
                          input=f"table inet kece_lab {{\n{chains}}}\n")
    if done.returncode:
        raise LabError(f"nft on {host}: {done.stderr.strip()}")


def clear_faults(host: str) -> None:
    run("tc", "-n", ns(host), "qdisc", "del", "dev", "eth0", "root", check=False)
    run("tc", "-n", BRIDGE_NS, "qdisc", "del", "dev", host, "root", check=False)
    run("ip", "netns", "exec", ns(host), "nft", "delete", "table", "inet", "kece_lab", check=False)


def enter(host: str) -> None:
    """Move this process (its calling thread, before any other starts) into the host's
    network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open(f"/run/netns/{ns(host)}") as handle:
        if libc.setns(handle.fileno(), 0x40000000) != 0:  # CLONE_NEWNET
            raise LabError(f"setns into {ns(host)}: {os.strerror(ctypes.get_errno())}")


def exec_argv(host: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns(host), *argv]
