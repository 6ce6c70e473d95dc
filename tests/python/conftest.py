"""Shared fixtures of the Python package's tests (run by scripts/test.sh; docs/python.md)."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"


@pytest.fixture(scope="session")
def samples():
    return SAMPLES


@pytest.fixture(scope="session")
def cli():
    """The flashot program the Python results are compared with: $FLASHOT_CLI, else build*/apps/flashot here.
    FLASHOT_REQUIRE_CLI=1 (CI) turns its absence into a failure instead of a skip."""
    path = os.environ.get("FLASHOT_CLI")
    candidates = [pathlib.Path(path)] if path else sorted(ROOT.glob("build*/apps/flashot"))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    message = f"no flashot program (FLASHOT_CLI={path!r}; build*/apps/flashot under {ROOT})"
    if os.environ.get("FLASHOT_REQUIRE_CLI") == "1":
        pytest.fail(message)
    pytest.skip(message)
