"""Specs built from a discovered driver inventory (fake 570.x hosts in temp dirs): what a container gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.cdi import CdiBuildError, CdiOptions, NodeCdi, build_claim_spec, build_device_plugin_spec, validate_spec
from bridge.cdi.driver import DriverFiles, DriverInventory, HostFile
from bridge.cdi.edits import hooks
from bridge.inventory import devices_from_spec
from tests.fakedriver import LIBDIR, VERSION, make_dev, make_host

GPUS = devices_from_spec("4xH100-80GB", "node-a", driver_version=VERSION)
LIB = f"/{LIBDIR}"
UID = "c0ffee00-0000-4000-8000-000000000001"


def node_cdi(host: Path, **options: Any) -> NodeCdi:
    opts = {"driver_root": "/", "check_device_nodes": True, "host_root": host, **options}
    return NodeCdi(CdiOptions(**opts), GPUS, kernel_release="6.8.0", firmware_class_path="")


def mounts(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["containerPath"]: m for m in doc["containerEdits"].get("mounts", [])}


def test_a_claim_spec_from_a_real_looking_driver_root_gives_the_container_a_cuda_user_space(tmp_path: Path) -> None:
    host = make_host(tmp_path, [GPUS[0].minor, GPUS[1].minor])  # nvidiactl and nvidia-uvm only
    doc = dict(build_claim_spec(UID, [GPUS[1]], inventory=node_cdi(host).inventory([GPUS[1]])).document)
    validate_spec(doc)
    m = mounts(doc)
    for lib in (f"libcuda.so.{VERSION}", f"libnvidia-ml.so.{VERSION}", f"libnvidia-ptxjitcompiler.so.{VERSION}",
                f"libnvidia-nvvm.so.{VERSION}"):
        assert m[f"{LIB}/{lib}"]["hostPath"] == f"{LIB}/{lib}"
        assert m[f"{LIB}/{lib}"]["options"] == ["ro", "nosuid", "nodev", "rbind", "rprivate"]
    assert m["/usr/bin/nvidia-smi"]["options"][0] == "ro"
    assert f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin" in m
    assert m["/run/nvidia-persistenced/socket"]["options"] == ["nosuid", "nodev", "rbind", "rprivate", "noexec"]
    assert doc["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]
    assert doc["devices"][0]["containerEdits"] == {"deviceNodes": [{"path": f"/dev/nvidia{GPUS[1].minor}"}]}
    assert doc["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    symlinks, ldcache = doc["containerEdits"]["hooks"]
    assert symlinks["hookName"] == ldcache["hookName"] == "createContainer"
    assert symlinks["path"] == "/usr/bin/nvidia-cdi-hook" and symlinks["env"] == ["NVIDIA_CTK_DEBUG=false"]
    assert symlinks["args"][:2] == ["nvidia-cdi-hook", "create-symlinks"]
    assert f"libcuda.so.{VERSION}::{LIB}/libcuda.so.1" in symlinks["args"]
    assert f"libcuda.so.1::{LIB}/libcuda.so" in symlinks["args"]
    assert ldcache["args"] == ["nvidia-cdi-hook", "update-ldcache", "--folder", LIB, "--folder", f"{LIB}/vdpau"]


def test_without_the_hook_binary_there_are_no_hooks_and_the_soname_links_are_mounted_as_files(
        tmp_path: Path) -> None:
    host = make_host(tmp_path, [GPUS[0].minor], hook=False)
    doc = dict(build_claim_spec(UID, [GPUS[0]], inventory=node_cdi(host).inventory([GPUS[0]])).document)
    validate_spec(doc)
    assert "hooks" not in doc["containerEdits"]
    m = mounts(doc)
    assert m[f"{LIB}/libcuda.so.1"]["hostPath"] == f"{LIB}/libcuda.so.{VERSION}"
    assert m[f"{LIB}/libcuda.so"]["hostPath"] == f"{LIB}/libcuda.so.{VERSION}"  # libcuda.so -> .so.1 -> .so.<v>
    assert m[f"{LIB}/libnvidia-ml.so"]["hostPath"] == f"{LIB}/libnvidia-ml.so.{VERSION}"


def test_a_dev_root_other_than_slash_puts_host_paths_on_the_device_nodes(tmp_path: Path) -> None:
    make_dev(tmp_path / "run/nvidia/driver", [GPUS[2].minor], control=("nvidiactl",))
    inv = node_cdi(tmp_path, driver_root=None, dev_root="/run/nvidia/driver").inventory([GPUS[2]])
    doc = dict(build_claim_spec("b-uid", [GPUS[2]], inventory=inv).document)
    validate_spec(doc)
    assert doc["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": f"/dev/nvidia{GPUS[2].minor}", "hostPath": f"/run/nvidia/driver/dev/nvidia{GPUS[2].minor}"}]
    assert doc["cdiVersion"] == "0.5.0"  # hostPath on a device node needs 0.5.0


def test_a_gpu_whose_device_node_is_missing_fails_the_claim_spec_naming_it(tmp_path: Path) -> None:
    host = make_dev(tmp_path, [GPUS[0].minor])
    with pytest.raises(CdiBuildError, match=f"device node /dev/nvidia{GPUS[3].minor} of GPU 3 \\({GPUS[3].uuid}\\) "
                                            "does not exist"):
        build_claim_spec(UID, [GPUS[3]], inventory=node_cdi(host, driver_root=None).inventory([GPUS[3]]))


def test_the_device_plugin_spec_leaves_out_gpus_without_a_node_and_says_which(tmp_path: Path) -> None:
    host = make_host(tmp_path, [GPUS[0].minor, GPUS[1].minor])
    spec = build_device_plugin_spec(GPUS, inventory=node_cdi(host).inventory())
    validate_spec(spec.document)
    names = [d["name"] for d in spec.document["devices"]]
    assert names == [GPUS[0].uuid, "0", GPUS[1].uuid, "1", "all"]
    assert set(spec.missing) == {GPUS[2].uuid, GPUS[3].uuid}
    assert f"{LIB}/libcuda.so.{VERSION}" in mounts(dict(spec.document))


def test_the_toolkit_cli_as_hook_path_gets_the_hook_subcommand() -> None:
    inv = DriverInventory(files=DriverFiles("/", VERSION, libraries=(HostFile("/l/libcuda.so.1.2", "/l/libcuda.so.1.2"),)),
                          hook_path="/usr/local/bin/nvidia-ctk")
    assert hooks(inv)[0]["args"] == ["nvidia-ctk", "hook", "update-ldcache", "--folder", "/l"]
