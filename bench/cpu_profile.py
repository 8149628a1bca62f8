"""Run a Python module under cProfile timed by each thread's own CPU clock, so that waits
(the database, the network, an idle pool thread) cost nothing and what is left is where the
CPU goes: every thread of the process, merged into one pstats file when it exits.

    python bench/cpu_profile.py OUT.pstats python -m uvicorn …   (`acceptance.py --profile`)

A Celery worker so started runs its tasks in its own process (`--pool solo`).

(py-spy cannot attach to a process it did not start here, and samples waiting threads as
busy: it cannot tell a thread blocked in C from one running.)
"""

import cProfile
import runpy
import signal
import sys
import threading
import time

profiles = []
_lock = threading.Lock()


def _start_in_this_thread(*_args):
    """The first profile event of a new thread: give it a profiler of its own."""
    profile = cProfile.Profile(time.thread_time)
    with _lock:
        profiles.append(profile)
    sys.setprofile(None)
    profile.enable()


def _dump(path: str) -> None:
    import pstats

    for profile in profiles:
        profile.disable()
    found = [p for p in profiles if p.getstats()]
    if found:
        stats = pstats.Stats(found[0])
        for profile in found[1:]:
            stats.add(profile)
        stats.dump_stats(path)


def main():
    out = sys.argv[1]
    command = sys.argv[2:]
    module = command[command.index("-m") + 1]
    sys.argv = [module, *command[command.index("-m") + 2:]]
    if module == "celery" and "worker" in sys.argv:
        sys.argv += ["--pool", "solo"]  # its tasks in this process, where they are profiled
    threading.setprofile(_start_in_this_thread)
    # Before the interpreter joins the threads that are left (a server's pools may not end):
    # threading's own exit hooks run first.
    threading._register_atexit(_dump, out)
    # A server that shut down gracefully on SIGTERM raises it again with the handler it found:
    # this one exits through the exit hooks, which write the profile.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    main_profile = cProfile.Profile(time.thread_time)
    profiles.append(main_profile)
    main_profile.enable()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
