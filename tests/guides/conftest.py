"""Fixtures for the migration-guide tests: the cluster the guides run against (tests/guides/world.py).

One cluster per module, taken through the guides in order; its stand-ins' errors fail the test that was running."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.guides.world import KUBECTL, GuideWorld, start_world, stop_world


def require_tools() -> None:
    try:
        import helm_sdkpy  # noqa: F401
    except ImportError:
        import os

        hint = "python -m pip install --ignore-requires-python 'helm-sdkpy==0.1.32'"
        if os.environ.get("CI"):
            pytest.fail(f"helm-sdkpy is not installed; .ci/run installs it with: {hint}")
        pytest.skip(f"the guides install the chart with real Helm (helm-sdkpy), not installed: {hint}")
    if KUBECTL is None:
        pytest.skip("kubectl is not installed: the guides' commands need it (Debian: apt-get install kubernetes-client); "
                    "tests/guides/test_bridge_steps.py runs their bridge commands without it")


@pytest.fixture(scope="module")
def world() -> Iterator[GuideWorld]:
    require_tools()
    w = start_world("gpu-operator")
    try:
        yield w
    finally:
        import sys

        print("guide blocks run, with their times:\n" + "\n".join(w.order), file=sys.stderr)
        stop_world(w)


@pytest.fixture(autouse=True)
def _no_standin_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "world" in request.fixturenames or "standalone_world" in request.fixturenames:
        w = request.getfixturevalue("standalone_world" if "standalone_world" in request.fixturenames else "world")
        errors, w.workloads.errors[:] = list(w.workloads.errors), []
        assert not errors, f"the workload stand-ins failed: {errors}"


@pytest.fixture(scope="module")
def standalone_world() -> Iterator[GuideWorld]:
    require_tools()
    w = start_world("standalone")
    try:
        yield w
    finally:
        stop_world(w)
