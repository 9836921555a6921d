"""The real control plane behind `SandboxCluster(backend="real")`: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler v1.37.2 built from source, with real TLS, authentication and the Node and RBAC authorizers."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.kube import connect
from bridge.kube.api import NODES, PODS
from bridge.kube.errors import Forbidden
from bridge.sandbox.cluster import SandboxCluster
from bridge.sandbox.real.binaries import LINES, Binaries
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, REAL_LINES, require_binaries
from tests.sandbox_cluster import spec_for_tests


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module", params=REAL_LINES)
def cluster(request: pytest.FixtureRequest) -> Iterator[SandboxCluster]:
    require_binaries(request.param, CONTROL_PLANE)
    with SandboxCluster(spec_for_tests(2, backend="real", version=request.param)).start(timeout=300) as c:
        yield c


def kubectl(cluster: SandboxCluster, *args: str) -> str:
    assert cluster.plane is not None
    kubectl_bin = require_binaries(cluster.plane.bin.line, ("kubectl",)).path("kubectl")
    out = subprocess.run([str(kubectl_bin), "--kubeconfig", str(cluster.kubeconfig), *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_kubectl_get_raw_version_says_the_pinned_release(cluster: SandboxCluster) -> None:
    assert cluster.plane is not None
    version = json.loads(kubectl(cluster, "get", "--raw", "/version"))
    assert version["gitVersion"] == LINES[cluster.plane.bin.line]  # v1.37.2 / v1.35.4, not v0.0.0-master
    assert (version["major"], version["minor"]) == ("1", cluster.plane.bin.line.split(".")[1])


def test_the_nodes_registered_by_the_stand_in_kubelets_are_ready(cluster: SandboxCluster) -> None:
    deadline = time.monotonic() + 30
    while True:
        nodes = cluster.api.list(NODES)["items"]
        ready = {n["metadata"]["name"]: any(c["type"] == "Ready" and c["status"] == "True"
                                             for c in (n.get("status") or {}).get("conditions") or [])
                 for n in nodes}
        if ready == {"node-0": True, "node-1": True} or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ready == {"node-0": True, "node-1": True}


def test_a_kubelet_credential_may_not_touch_another_node(cluster: SandboxCluster) -> None:
    """The Node authorizer and NodeRestriction confine `system:node:node-0` to its own Node, for real."""
    assert cluster.plane is not None
    node0 = connect(str(cluster.plane.kubeconfig_for("probe-node-0", "system:node:node-0", "system:nodes")))
    node0.patch(NODES, "node-0", {"metadata": {"labels": {"probe": "own"}}})  # its own Node: allowed
    with pytest.raises(Forbidden, match="node-1"):
        node0.patch(NODES, "node-1", {"metadata": {"labels": {"probe": "forged"}}})
    with pytest.raises(Forbidden):
        node0.list(PODS)  # a node lists only the pods bound to it (field selector spec.nodeName)


def test_an_anonymous_client_is_refused(cluster: SandboxCluster, tmp_path: Path) -> None:
    import ssl
    import urllib.error
    import urllib.request

    assert cluster.plane is not None and cluster.plane.ca is not None
    ctx = ssl.create_default_context(cafile=str(cluster.plane.ca.pair.cert))
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{cluster.url}/api/v1/pods", context=ctx, timeout=10)
    assert err.value.code == 403
    assert "system:anonymous" in err.value.read().decode()


def test_stopping_leaves_no_process_and_no_file(real_line: Binaries) -> None:
    cluster = SandboxCluster(spec_for_tests(1, backend="real", version=REAL_LINE)).start()
    assert cluster.plane is not None
    pids = [c.pid for c in cluster.plane.components]
    work = cluster.work_dir
    assert pids and all(p is not None and _alive(p) for p in pids)
    cluster.stop()
    assert [p for p in pids if p is not None and _alive(p)] == []
    assert work is not None and not work.exists()


def test_a_plane_without_the_managers_serves_the_api_from_etcd_and_kube_apiserver_alone(
        real_line: Binaries, tmp_path: Path) -> None:
    """`PlaneOptions(managers=False)` (bench/real_claim_get_bench.py: the API server measured without the managers'
    traffic): only etcd and kube-apiserver run, the API answers, and nothing reconciles what is written."""
    from bridge.kube.api import NAMESPACES
    from bridge.sandbox.real.chartrbac import SERVICE_ACCOUNTS
    from bridge.sandbox.real.plane import ControlPlane, PlaneOptions

    plane = ControlPlane(tmp_path / "plane", real_line, PlaneOptions(managers=False)).start()
    try:
        # (a try that lost its port race stays listed, exited: names, not a count)
        assert {c.name for c in plane.components} == {"etcd", "kube-apiserver"}
        admin = connect(str(plane.admin_kubeconfig))
        admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "alone"}})
        assert admin.get(NAMESPACES, "alone")["metadata"]["name"] == "alone"
        time.sleep(2)  # kube-controller-manager's serviceaccount controller makes `default` within a second
        assert admin.list(SERVICE_ACCOUNTS, "alone")["items"] == []
    finally:
        plane.stop()
    assert plane.components == []


def test_the_resource_versions_served_on_request_are_the_profiles(real_line: Binaries, tmp_path: Path) -> None:
    """An administrator asks for both betas (`--runtime-config`): kube-apiserver serves what the emulator's profile
    of the same minor says (from 1.38 v1beta1 is left out: its APILifecycleRemoved is 1.38)."""
    from bridge.sandbox.apiserver.profiles import profile_for
    from bridge.sandbox.real.plane import ControlPlane, PlaneOptions

    betas = {"resource.k8s.io/v1beta1": "true", "resource.k8s.io/v1beta2": "true"}
    plane = ControlPlane(tmp_path / "plane", real_line, PlaneOptions(managers=False, runtime_config=betas)).start()
    try:
        discovery = connect(str(plane.admin_kubeconfig)).discovery()
        served = {gv.split("/", 1)[1] for gv in discovery.resources if gv.startswith("resource.k8s.io/")}
    finally:
        plane.stop()
    assert served == set(profile_for(REAL_LINE).with_resource_versions(("v1", "v1beta2", "v1beta1")).resource_versions)


@pytest.mark.parametrize("gates", [{"DRAPrioritizedList": False}, {"DRADeviceTaints": False},
                                   {"DynamicResourceAllocation": True}])
def test_kube_apiserver_refuses_to_start_with_the_gates_the_profile_refuses(
        real_line: Binaries, tmp_path: Path, gates: dict[str, bool]) -> None:
    """A gate locked to its default, removed (DynamicResourceAllocation from 1.38), or turned off while an enabled gate
    depends on it (DRADeviceTaints in 1.37, which DRADeviceTaintRules needs): the real component does not start, and
    the profile refuses it; a gate it may still turn does not stop it."""
    from bridge.sandbox.apiserver.profiles import profile_for
    from bridge.sandbox.real.plane import ControlPlane, PlaneOptions

    try:
        profile_for(REAL_LINE).with_gates(gates)
        refused = False
    except ValueError:
        refused = True
    plane = ControlPlane(tmp_path / "plane", real_line, PlaneOptions(managers=False, feature_gates=gates))
    try:
        plane.start(timeout=60)
        started = True
    except Exception:  # noqa: BLE001 - whatever the start reports, the log says why
        started = False
    finally:
        plane.stop()
    log = (tmp_path / "plane" / "kube-apiserver.log").read_text(errors="replace") if not started else ""
    assert started is not refused, log[-2000:]
    if refused:
        assert any(why in log for why in ("locked to", "unrecognized feature gate", "depends on features that are "
                                          "disabled")), log[-2000:]
