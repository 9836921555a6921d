"""Tests on the real backend: Kubernetes components built from source by `scripts/build_real.py`.

Without the binaries these tests skip with the command that builds them; `.ci/run` builds them first and sets
`BRIDGE_REQUIRE_REAL=1`, which turns a missing binary into a failure (a CI machine with Go must run them, never
skip them).

`BRIDGE_REAL_LINES` names the Kubernetes lines the tests run on, comma-separated, newest first (default "1.37,1.35";
each must be a line `scripts/build_real.py` pins). A test of one line runs on the first (`REAL_LINE`), against the
stand-ins of the same minor where it compares them; a test parametrised by line runs on each. So
`BRIDGE_REAL_LINES=1.38 pytest tests/real` runs the whole real tier on the 1.38 binaries alone.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from bridge.kube.api import NAMESPACES, KubeAPI, Resource
from bridge.kube.errors import NotFound
from bridge.sandbox.cluster import SandboxCluster
from bridge.sandbox.real.binaries import Binaries, line_of
from tests.polling import wait_until

REQUIRE = os.environ.get("BRIDGE_REQUIRE_REAL") == "1"
REAL_LINES = tuple(line_of(v) for v in os.environ.get("BRIDGE_REAL_LINES", "1.37,1.35").split(",") if v.strip())
REAL_LINE = REAL_LINES[0]


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
def real_line() -> Iterator[Binaries]:
    yield require_binaries(REAL_LINE, CONTROL_PLANE)


@pytest.fixture(scope="module", params=REAL_LINES)
def gpu_node(request: pytest.FixtureRequest) -> Iterator[SandboxCluster]:
    """One per test module and line: a real cluster whose one node, `gpu-node` (4 GPUs split 2/2), runs a pod of
    each API (`tests.real.realnodes.node_with_a_pod_of_each_api`): the start of the node lifecycle tests."""
    from bridge.sandbox.real.binaries import NODE
    from tests.real.realnodes import gpu_node_spec, node_with_a_pod_of_each_api

    line = request.param
    require_binaries(line, CONTROL_PLANE + NODE + ("kubelet", "kubectl"))
    with node_with_a_pod_of_each_api(gpu_node_spec(line)) as cluster:
        yield cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/real is marked `real`: `pytest -m "not real"` is the fast tier."""
    for item in items:
        if "/tests/real/" in str(item.fspath):
            item.add_marker(pytest.mark.real)


SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)


def wait_default_service_account(api: KubeAPI, namespace: str, timeout: float = 60.0) -> None:
    """Wait until kube-controller-manager's serviceaccount controller has made the namespace's `default`
    ServiceAccount: until then the real API server refuses every pod there (the ServiceAccount admission plugin,
    `error looking up service account <ns>/default`). The emulator has no such step."""
    wait_until(lambda: _exists(api, namespace), timeout, f"ServiceAccount {namespace}/default")


def _exists(api: KubeAPI, namespace: str) -> bool:
    try:
        api.get(SERVICE_ACCOUNTS, "default", namespace)
    except NotFound:
        return False
    return True


def create_namespace(api: KubeAPI, name: str, labels: dict[str, str] | None = None) -> None:
    """A namespace that pods can be created in at once (its default ServiceAccount exists)."""
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": name, "labels": labels or {}}})
    wait_default_service_account(api, name)


def kubectl(cluster: SandboxCluster, *args: str, stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The line's real kubectl against the cluster (admin credentials); the caller checks the outcome."""
    assert cluster.plane is not None
    binary = require_binaries(cluster.plane.bin.line, ("kubectl",)).path("kubectl")
    return subprocess.run([str(binary), "--kubeconfig", str(cluster.kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout)
