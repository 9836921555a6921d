"""Guide 01 with NVIDIA's standalone device-plugin chart instead of the GPU Operator: its device plugin's DaemonSet
carries the node affinity of charts/dra-bridge/examples/nvidia-device-plugin-values.yaml (the effect of the guide's
`helm upgrade nvdp ...`, which tests/guides/test_real_cluster.py runs on the real backend against a stand-in of
NVIDIA's chart), the chart is installed with standalone-device-plugin.yaml, and the node moves in the same two steps
as under the GPU Operator: the label `nvidia.com/gpu.deploy.device-plugin=false` takes NVIDIA's plugin off, and only
once its pod is gone the opt-in label brings the bridge. The steps after Verify (the daemon restart) are the same as
with the GPU Operator and run in tests/guides/test_guides.py."""

from __future__ import annotations

import pytest

from tests.guides import checks, markdown
from tests.guides.checks import no_gpu_shared
from tests.guides.world import GuideWorld

GPU = "nvidia.com/gpu"
NODE, NODE2 = "gpu-a", "gpu-b"
pytestmark = pytest.mark.timeout(300)


def test_the_standalone_plugin_leaves_first_then_the_bridge_takes_the_node_without_being_cut_off(
        standalone_world: GuideWorld) -> None:
    world = standalone_world
    world.run("01-first-node", through="before")
    assert set(world.workloads.vendor) == {NODE, NODE2}  # the values file's affinity matches both GPU nodes
    gpus_before = checks.legacy_devices(world, NODE)
    pods_before = {k: p["metadata"]["uid"] for k, p in checks.running_gpu_pods(world).items()
                   if p["spec"].get("nodeName") == NODE}
    assert len(pods_before) == 2

    ran = world.run("01-first-node", through="verify")
    assert "install" not in ran and "STATUS: deployed" in ran["install-standalone"].stdout
    # the same two labels as under the GPU Operator: the bridge needs the vendor plugin switched off
    assert "dra-bridge.io/node=true,nvidia.com/gpu.deploy.device-plugin=false" in ran["installed"].stdout
    assert set(world.workloads.vendor) == {NODE2} and set(world.workloads.running("node")) == {NODE}
    # NVIDIA's plugin was gone before the bridge registered: the kubelet never cut the bridge off
    logs = "".join(p.read_text() for p in world.workloads.dir.glob(f"node-{NODE}-*.log"))
    assert "registered" in logs and "the kubelet ended our ListAndWatch stream" not in logs
    assert {k: p["metadata"]["uid"] for k, p in checks.running_gpu_pods(world).items()
            if p["spec"].get("nodeName") == NODE} == pods_before
    assert checks.legacy_devices(world, NODE) == gpus_before
    status = checks.split_status(world, NODE)
    assert status["state"] == "converged" and status["counts"]["legacy"] == 8
    assert checks.allocatable_gpus(world, NODE) == 8
    no_gpu_shared(world)
    standalone_only = {b.line for b in markdown.load("01-first-node").commands()
                       if b.variant == "standalone" and b.runs_in("standalone")}
    assert standalone_only and standalone_only <= {line for (_, line) in world.ran}


def test_why_the_vendor_plugin_must_be_gone_before_the_bridge_registers(standalone_world: GuideWorld) -> None:
    """Guide 01's ordering and its Troubleshooting entry, shown on gpu-b (still on NVIDIA's plugin): a bridge that
    registers while the vendor plugin still serves, and then sees that plugin stop, is cut off by a 1.34 kubelet
    (the kubelet's device manager through 1.36 disconnects whatever is registered when an older stream ends), so the
    node's allocatable drops to 0 for a moment (why the guide takes the vendor plugin off first); the daemon notices
    its stream ended and registers again by itself, with every running pod's GPU where it was; and the guide's remedy,
    restarting the node daemon, is safe as well."""
    from bridge.kube.api import DAEMON_SETS
    from bridge.sandbox.cluster.processes import ChildProcess

    world = standalone_world
    assert NODE2 in world.workloads.vendor and checks.allocatable_gpus(world, NODE2) == 8
    gpus_before = checks.legacy_devices(world, NODE2)
    ds = world.api.get(DAEMON_SETS, "dra-bridge-node", "dra-bridge")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    sn = world.cluster.node(NODE2)
    argv = world.workloads._node_argv(container, sn)
    env = world.workloads._env(container, node=NODE2, pod_namespace="dra-bridge")

    def start() -> ChildProcess:
        proc = ChildProcess("bridge node (by hand)", argv, world.workloads.dir / "by-hand.log", env=env).start()
        checks.eventually(lambda: _assert(world.workloads._node_serving(sn)), "the bridge registered")
        return proc

    first = start()  # registers while NVIDIA's plugin still serves: the kubelet's endpoint is now the bridge
    registrations = sn.kubelet.devices.resource(GPU).registrations
    try:
        world.workloads.vendor[NODE2].stop()  # ... then the vendor's stream ends
        # The kubelet drops the bridge (allocatable 0 until its next registration: too short for the Node's
        # periodic status to show reliably, so the daemon's own account is the evidence) ...
        checks.eventually(lambda: _assert("the kubelet ended our ListAndWatch stream while we are serving"
                                          in first.log_tail(200)), "the bridge cut off")
        # ... and the bridge registers again by itself: a new registration, connected, every GPU healthy again.
        def back() -> bool:
            state = sn.kubelet.devices.resource(GPU)
            return _assert(state.registrations > registrations and state.connected and state.allocatable == 8)

        checks.eventually(back, "the bridge back by itself")
        checks.eventually(lambda: _assert(checks.allocatable_gpus(world, NODE2) == 8), "the Node's allocatable back")
        assert checks.legacy_devices(world, NODE2) == gpus_before
    finally:
        first.stop(10)
    second = start()  # the remedy: restart the node daemon
    try:
        checks.eventually(lambda: _assert(checks.allocatable_gpus(world, NODE2) == 8), "the bridge back")
        assert checks.legacy_devices(world, NODE2) == gpus_before
        no_gpu_shared(world)
    finally:
        second.stop(10)


def _assert(cond: bool) -> bool:
    assert cond
    return True
