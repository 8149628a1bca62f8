"""A small real disk for tests of what a program does when it fills up: a tmpfs of a few
KiB mounted on a folder (the tests run as root), always unmounted afterwards."""

import contextlib
import os
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(folder: Path, *, size_kb: int):
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k,mode=0700", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        why = f"mounting a tmpfs failed (root needed): {mounted.stderr.strip()}"
        if os.environ.get("KECE_REQUIRE_SERVICES") == "1":
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            # Something still has a file open in it: detach it now, it goes when released.
            subprocess.run(["umount", "--lazy", str(folder)], check=True)
