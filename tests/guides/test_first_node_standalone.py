"""Guide 01 with NVIDIA's standalone device-plugin chart instead of the GPU Operator: its device plugin's DaemonSet
carries the node affinity of charts/dra-bridge/examples/nvidia-device-plugin-values.yaml (the effect of the guide's
`helm upgrade nvdp ...`, which needs NVIDIA's Helm repository), the chart is installed with
standalone-device-plugin.yaml, and the one opt-in label moves the node. The steps after Verify (the daemon restart)
are the same as with the GPU Operator and run in tests/guides/test_guides.py."""

from __future__ import annotations

from tests.guides import checks
from tests.guides.checks import no_gpu_shared
from tests.guides.world import GuideWorld

NODE, NODE2 = "gpu-a", "gpu-b"


def test_the_opt_in_label_alone_moves_the_node_from_the_standalone_plugin_to_the_bridge(
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
    assert "dra-bridge.io/node=true" in ran["installed"].stdout.replace(" ", "")
    assert "nvidia.com/gpu.deploy.device-plugin" not in ran["installed"].stdout  # no GPU Operator label needed
    assert set(world.workloads.vendor) == {NODE2} and set(world.workloads.running("node")) == {NODE}
    assert {k: p["metadata"]["uid"] for k, p in checks.running_gpu_pods(world).items()
            if p["spec"].get("nodeName") == NODE} == pods_before
    assert checks.legacy_devices(world, NODE) == gpus_before
    status = checks.split_status(world, NODE)
    assert status["state"] == "converged" and status["counts"]["legacy"] == 8
    assert checks.allocatable_gpus(world, NODE) == 8
    no_gpu_shared(world)
