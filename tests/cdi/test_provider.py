"""`NodeCdi`: the node's inventory cache, the `--cdi-source` policy, and the start-up explanation."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from bridge.cdi import CdiConfigError, CdiOptions, NodeCdi
from bridge.inventory import devices_from_spec
from tests.fakedriver import VERSION, make_dev, make_driver_files, make_host, mknod, toolkit_spec
from tests.fakedriver import put_spec as put

GPUS = devices_from_spec("2xH100-80GB", "node-a", driver_version=VERSION)


def make(host: Path, clock: Any = None, **options: Any) -> NodeCdi:
    opts = {"driver_root": "/", "check_device_nodes": True, "host_root": host, **options}
    kwargs = {"clock": clock} if clock else {}
    return NodeCdi(CdiOptions(**opts), GPUS, kernel_release="6.8.0", firmware_class_path="", **kwargs)


def text(lines: list[tuple[int, str]]) -> str:
    return "\n".join(f"{logging.getLevelName(level)} {msg}" for level, msg in lines)


def test_the_start_up_log_explains_files_nodes_hooks_and_the_source(tmp_path: Path) -> None:
    log = text(make(make_host(tmp_path, [g.minor for g in GPUS])).describe())
    assert f"INFO CDI: driver {VERSION} at driver root / (read at {tmp_path}): 14 libraries" in log
    assert "present /dev/nvidiactl, /dev/nvidia-uvm; missing /dev/nvidia-uvm-tools, /dev/nvidia-modeset; 2/2 GPU" in log
    assert "INFO CDI: nvidia-cdi-hook at /usr/bin/nvidia-cdi-hook" in log
    assert "INFO CDI source: own (--cdi-source auto): no toolkit spec names these GPUs" in log


def test_a_missing_driver_root_or_hook_is_loud(tmp_path: Path) -> None:
    make_dev(tmp_path, [GPUS[0].minor], control=())
    log = text(make(tmp_path, driver_root="/run/nvidia/driver").describe())
    assert "ERROR CDI: driver root /run/nvidia/driver does not exist" in log
    assert "containers get NO CUDA user space under runc + CDI" in log
    assert "ERROR CDI: device nodes under dev root /: present none; missing /dev/nvidiactl" in log
    assert f"/dev/nvidia{GPUS[1].minor}; 1/2 GPU nodes" in log
    make_driver_files(tmp_path / "run/nvidia/driver")
    log = text(make(tmp_path, driver_root="/run/nvidia/driver").describe())
    assert "WARNING CDI: nvidia-cdi-hook not found at /usr/bin/nvidia-cdi-hook" in log


def test_simulated_gpus_get_device_nodes_only_and_the_log_says_so(tmp_path: Path) -> None:
    node = NodeCdi(CdiOptions(host_root=tmp_path), GPUS)
    assert "no driver root (simulated GPUs, --driver-root not given)" in text(node.describe())
    inv = node.inventory()
    assert inv.files.libraries == () and inv.hook_path is None
    assert [n.path for n in inv.control_nodes][:1] == ["/dev/nvidiactl"] and len(inv.gpu_nodes) == 2


def test_auto_takes_the_toolkits_names_when_its_spec_names_the_gpus_and_says_so(tmp_path: Path) -> None:
    put(tmp_path, "/var/run/cdi/nvidia.yaml", toolkit_spec(GPUS))
    node = make(tmp_path)
    assert node.toolkit_names(GPUS[:1]) == {GPUS[0].uuid: f"nvidia.com/gpu={GPUS[0].uuid}"}
    assert ("INFO CDI source: toolkit (--cdi-source auto): /var/run/cdi/nvidia.yaml names all 2 GPU(s)"
            in text(node.describe()))
    own = make(tmp_path, source="own")
    assert own.toolkit_names(GPUS[:1]) is None
    assert "CDI source: own (--cdi-source own); toolkit specs on the node: /var/run/cdi/nvidia.yaml" in text(
        own.describe())


def test_auto_with_a_toolkit_spec_naming_some_gpus_warns_which(tmp_path: Path) -> None:
    put(tmp_path, "/etc/cdi/nvidia.yaml", toolkit_spec(GPUS[:1]))
    node = make(tmp_path)
    assert "WARNING CDI source: auto: /etc/cdi/nvidia.yaml names 1 of 2 GPUs (not GPU 1)" in text(node.describe())
    assert node.toolkit_names(GPUS) is None and node.toolkit_names(GPUS[:1]) is not None


def test_source_toolkit_without_a_spec_naming_the_gpus_is_a_configuration_error(tmp_path: Path) -> None:
    node = make(tmp_path, source="toolkit")
    with pytest.raises(CdiConfigError, match="--cdi-source toolkit: no spec of kind nvidia.com/gpu in /etc/cdi, "
                                             "/var/run/cdi names GPU 0 .*nvidia-ctk cdi generate"):
        node.check()
    put(tmp_path, "/var/run/cdi/nvidia.yaml", toolkit_spec(GPUS))
    node.check()


def test_device_nodes_are_checked_on_every_call_and_driver_files_after_the_refresh_interval(
        tmp_path: Path) -> None:
    now = [0.0]
    node = make(tmp_path, clock=lambda: now[0], driver_root="/run/nvidia/driver", files_ttl_s=60.0)
    assert node.inventory().gpu_nodes == () and not node.inventory().files.found
    mknod(tmp_path / "dev" / f"nvidia{GPUS[0].minor}", GPUS[0].minor)  # the module created the node
    make_driver_files(tmp_path / "run/nvidia/driver")  # the GPU Operator's driver container is ready
    assert [m for m, _ in node.inventory().gpu_nodes] == [GPUS[0].minor]  # at once
    assert not node.inventory().files.found  # files: cached ...
    now[0] = 61.0
    assert node.inventory().files.found  # ... until the refresh interval passed
