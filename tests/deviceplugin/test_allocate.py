"""What a container gets for its GPUs under each device-list strategy (pure)."""

from __future__ import annotations

import pytest

from bridge.deviceplugin.allocate import (
    CDI_ANNOTATIONS,
    CDI_CRI,
    CONTROL_DEVICE_NODES,
    ENVVAR,
    VOLUME_MOUNTS,
    AllocationConfig,
    StrategyError,
    container_allocation,
    parse_strategies,
)
from bridge.inventory.simulated import devices_from_spec

GPUS = devices_from_spec("8xH100-80GB", "node-a")


@pytest.mark.parametrize("count", [1, 2, 8])
def test_envvar_lists_the_uuids_and_passes_the_device_nodes(count: int) -> None:
    devs = GPUS[:count]
    got = container_allocation(devs, AllocationConfig())
    assert got.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(d.uuid for d in devs)}
    paths = [s.container_path for s in got.devices]
    assert paths == [f"/dev/nvidia{i}" for i in range(count)] + list(CONTROL_DEVICE_NODES)
    assert all(s.host_path == s.container_path and s.permissions == "rw" for s in got.devices)
    assert got.mounts == () and got.annotations == {} and got.cdi_devices == ()


def test_volume_mounts_hide_the_list_from_the_env() -> None:
    devs = GPUS[:2]
    got = container_allocation(devs, AllocationConfig(strategies=frozenset({VOLUME_MOUNTS})))
    assert got.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.container_path, m.host_path, m.read_only) for m in got.mounts] == [
        (f"/var/run/nvidia-container-devices/{d.uuid}", "/dev/null", True) for d in devs]


def test_volume_mounts_win_over_envvar_when_both_are_asked() -> None:
    got = container_allocation(GPUS[:1], AllocationConfig(strategies=frozenset({ENVVAR, VOLUME_MOUNTS})))
    assert got.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
    assert len(got.mounts) == 1


def test_cdi_cri_fills_the_cdi_field_and_voids_the_legacy_env() -> None:
    devs = GPUS[:8]
    got = container_allocation(devs, AllocationConfig(strategies=frozenset({CDI_CRI})))
    assert got.cdi_devices == tuple(f"k8s.device-plugin.dra-bridge.io/gpu={d.uuid}" for d in devs)
    assert got.envs == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert got.annotations == {}


def test_cdi_annotations_use_a_valid_cdi_annotation_key() -> None:
    devs = GPUS[:2]
    got = container_allocation(devs, AllocationConfig(strategies=frozenset({CDI_ANNOTATIONS})))
    assert got.annotations == {
        "cdi.k8s.io/dra-bridge_nvidia.com-gpu": ",".join(f"k8s.device-plugin.dra-bridge.io/gpu={d.uuid}" for d in devs)}
    assert got.cdi_devices == ()


def test_strategies_combine_and_use_the_configured_cdi_names() -> None:
    cfg = AllocationConfig(strategies=frozenset({ENVVAR, CDI_CRI, CDI_ANNOTATIONS}),
                           cdi_devices=lambda ds: [f"example.com/gpu=gpu{d.index}" for d in ds])
    got = container_allocation(GPUS[:2], cfg)
    assert got.envs["NVIDIA_VISIBLE_DEVICES"] == f"{GPUS[0].uuid},{GPUS[1].uuid}"
    assert got.cdi_devices == ("example.com/gpu=gpu0", "example.com/gpu=gpu1")
    assert list(got.annotations.values()) == ["example.com/gpu=gpu0,example.com/gpu=gpu1"]


def test_on_a_real_node_control_nodes_the_host_lacks_are_left_out_but_the_gpu_node_never_is() -> None:
    present = {"/dev/nvidiactl", "/dev/nvidia-uvm"}  # nvidia-uvm-tools not created yet; no /dev/nvidia0 either
    got = container_allocation(GPUS[:1], AllocationConfig(host_has=present.__contains__))
    assert [s.host_path for s in got.devices] == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]


def test_device_specs_name_host_paths_under_the_dev_root() -> None:
    got = container_allocation(GPUS[:1], AllocationConfig(host_has={"/dev/nvidiactl"}.__contains__,
                                                          dev_root="/run/nvidia/driver"))
    assert [(s.container_path, s.host_path) for s in got.devices] == [
        ("/dev/nvidia0", "/run/nvidia/driver/dev/nvidia0"), ("/dev/nvidiactl", "/run/nvidia/driver/dev/nvidiactl")]


def test_device_specs_can_be_left_to_the_runtime() -> None:
    assert container_allocation(GPUS[:1], AllocationConfig(pass_device_specs=False)).devices == ()


def test_strategy_parsing_accepts_lists_and_rejects_unknown_names() -> None:
    assert parse_strategies("envvar, cdi-cri") == {ENVVAR, CDI_CRI}
    assert parse_strategies(["volume-mounts"]) == {VOLUME_MOUNTS}
    with pytest.raises(StrategyError, match="unknown device list strategy cdi"):
        parse_strategies("envvar,cdi")
    with pytest.raises(StrategyError, match="empty"):
        parse_strategies(" , ")
