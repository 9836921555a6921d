"""Tests on the real backend: Kubernetes components built from source by `scripts/build_real.py`.

Without the binaries these tests skip with the command that builds them; `.ci/run` builds them first and sets
`BRIDGE_REQUIRE_REAL=1`, which turns a missing binary into a failure (a CI machine with Go must run them, never
skip them). `BRIDGE_REAL_LINES` (default "1.37") names the lines to run where a test is parametrised by line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from bridge.sandbox.real.binaries import Binaries

REQUIRE = os.environ.get("BRIDGE_REQUIRE_REAL") == "1"


def require_binaries(line: str, programs: tuple[str, ...]) -> Binaries:
    """The line's binaries, or skip (fail under BRIDGE_REQUIRE_REAL=1) with the command that builds them."""
    binaries = Binaries(line)
    missing = binaries.missing(programs)
    if missing:
        message = binaries.missing_message(missing)
        if REQUIRE:
            pytest.fail(f"BRIDGE_REQUIRE_REAL=1 but {message}")
        pytest.skip(message)
    return binaries


CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@pytest.fixture(scope="session")
def real_137() -> Iterator[Binaries]:
    yield require_binaries("1.37", CONTROL_PLANE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/real is marked `real`: `pytest -m "not real"` is the fast tier."""
    for item in items:
        if "/tests/real/" in str(item.fspath):
            item.add_marker(pytest.mark.real)
