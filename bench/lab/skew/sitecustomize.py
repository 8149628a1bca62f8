"""Loaded (PYTHONPATH) only by the lab's processes whose wall clock libfaketime skews: libfaketime
0.9.10 with the monotonic clock left alone answers Python's sleep (clock_nanosleep on an
absolute monotonic deadline) with EINVAL, which would kill the agent's judging and Celery
beat, and its timed waits on a condition variable may never end. They sleep in select()
instead, whose timeout is relative and left alone."""

import select
import time


def _sleep(seconds: float) -> None:
    if seconds > 0:
        select.select([], [], [], seconds)


time.sleep = _sleep
