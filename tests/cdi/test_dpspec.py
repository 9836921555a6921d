"""The device plugin's CDI spec file: written under our own vendor, kept current, the old colliding file removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.cdi import CdiBuildError, CdiOptions, DevicePluginCdi, NodeCdi
from bridge.inventory import devices_from_spec
from tests.fakedriver import VERSION, make_host, mknod, put_spec, toolkit_spec

GPUS = devices_from_spec("2xH100-80GB", "node-a", driver_version=VERSION)
KIND = "k8s.device-plugin.dra-bridge.io/gpu"


def dp(host: Path, cdi_root: Path) -> DevicePluginCdi:
    node = NodeCdi(CdiOptions(driver_root="/", check_device_nodes=True, host_root=host), GPUS,
                   kernel_release="6.8.0", firmware_class_path="")
    return DevicePluginCdi(cdi_root, node, GPUS)


def test_start_removes_the_old_nvidia_com_spec_of_ours_and_nothing_of_the_toolkits(tmp_path: Path) -> None:
    host = make_host(tmp_path / "host", [g.minor for g in GPUS])
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    for name in ("nvidia.com-gpu_node.json", "nvidia.yaml", "nvidia.com-gpu.yaml"):
        (cdi / name).write_text("{}")
    path = dp(host, cdi).start()
    assert path == cdi / "k8s.device-plugin.dra-bridge.io-gpu_node.json"
    assert sorted(p.name for p in cdi.iterdir()) == [
        "k8s.device-plugin.dra-bridge.io-gpu_node.json", "nvidia.com-gpu.yaml", "nvidia.yaml"]
    assert json.loads(path.read_text())["kind"] == KIND


def test_a_device_node_that_appears_later_is_in_the_spec_before_its_gpu_is_handed_out(tmp_path: Path) -> None:
    host = make_host(tmp_path / "host", [GPUS[0].minor])
    plugin = dp(host, tmp_path / "cdi")
    plugin.start()
    with pytest.raises(CdiBuildError, match=f"/dev/nvidia{GPUS[1].minor} of GPU 1"):
        plugin.cdi_devices([GPUS[1]])
    mknod(host / "dev" / f"nvidia{GPUS[1].minor}", GPUS[1].minor)
    assert plugin.cdi_devices([GPUS[1]]) == (f"{KIND}={GPUS[1].uuid}",)
    names = {d["name"] for d in json.loads(plugin.path.read_text())["devices"]}
    assert GPUS[1].uuid in names


def test_with_the_toolkits_spec_the_container_gets_its_names(tmp_path: Path) -> None:
    host = make_host(tmp_path / "host", [g.minor for g in GPUS])
    put_spec(host, "/etc/cdi/nvidia.yaml", toolkit_spec(GPUS))
    plugin = dp(host, tmp_path / "cdi")
    plugin.start()
    assert plugin.cdi_devices(GPUS) == tuple(f"nvidia.com/gpu={g.uuid}" for g in GPUS)
