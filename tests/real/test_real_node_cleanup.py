"""A real-node sandbox leaves nothing behind when it stops: no process (kubelet, containerd, shims, containers, the
node daemon), no mount, no cgroup, no network interface, no file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.real.binaries import NODE
from bridge.sandbox.real.kubelet import v1_hierarchies
from bridge.sandbox.real.namespace import process_alive
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, require_binaries
from tests.real.realnodes import create_pod, ensure_namespace, probe_pod
from tests.sandbox_cluster import spec_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def _pids_with(needle: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle.encode() in (entry / "cmdline").read_bytes():
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def test_stopping_a_real_node_cluster_with_a_running_gpu_pod_leaves_nothing() -> None:
    require_binaries(REAL_LINE, CONTROL_PLANE + NODE + ("kubelet",))
    spec = spec_for_tests((NodeSpec("lone", "2xH100-80GB", split="1"),), backend="real", version=REAL_LINE,
                          real_kubelets=True, bridge=True, node_status_frequency=2.0)
    cluster = SandboxCluster(spec).start(timeout=300)
    work = cluster.work_dir
    assert work is not None
    node = cluster.node("lone")
    assert node.real is not None
    bridge_name, cgroup_root = node.real.containerd.bridge_name, node.real.cgroup_root
    try:
        ensure_namespace(cluster, "legacy")
        create_pod(cluster, "legacy", probe_pod("running", gpus=1))
        cluster.wait_pod_phase("legacy", "running", "Running", timeout=120)
        members = {pid: _started(pid) for pid in node.real.ns.members()}
        assert len(members) >= 5  # holder, containerd, kubelet, daemon, a shim and the pod's processes
    finally:
        cluster.stop()
    # alive and the same process (its start time), not a PID this busy machine gave to another process since
    assert [p for p, start in members.items() if process_alive(p) and _started(p) == start] == []
    assert _pids_with(str(work)) == []
    with open("/proc/self/mountinfo") as f:
        assert [line for line in f if str(work) in line] == []
    assert [h / cgroup_root for h in v1_hierarchies() if (h / cgroup_root).exists()] == []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert bridge_name not in links
    assert not work.exists()


def _started(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]
