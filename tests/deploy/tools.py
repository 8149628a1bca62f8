"""The command-line tools the deployment's tests run: found on PATH, or a failure where the
suite must have everything (KECE_REQUIRE_SERVICES=1, as in CI) and a skip elsewhere."""

from __future__ import annotations

import os
import shutil

import pytest


def program(name: str, installed_by: str, *, found: str | None = None) -> str:
    found = found or shutil.which(name)
    if found is None:
        if os.environ.get("KECE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{name} is required ({installed_by})")
        pytest.skip(f"{name} is not installed")
    return found
