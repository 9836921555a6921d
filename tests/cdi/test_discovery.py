"""Driver-root discovery against fake driver installs in temp dirs (tests/fakedriver.py: a 570.x layout)."""

from __future__ import annotations

import os
from pathlib import Path

from bridge.cdi.discovery import (
    discover_device_nodes,
    discover_driver_files,
    discover_ipc_sockets,
    find_hook,
    resolve_in_root,
)
from bridge.cdi.driver import DeviceNode, HostFile, Root, Symlink
from tests.fakedriver import LIBDIR, LIBRARIES, VERSION, make_dev, make_driver_files, make_hook, make_socket

LIB = f"/{LIBDIR}"


def files_at(root: Path, host: str = "/"):  # type: ignore[no-untyped-def]
    return discover_driver_files(Root(host, root), VERSION, kernel_release="6.8.0-45-generic")


def test_every_library_of_the_reported_version_is_found_and_nothing_else(tmp_path: Path) -> None:
    files = files_at(make_driver_files(tmp_path))
    names = sorted(f.container_path.rsplit("/", 1)[1] for f in files.libraries)
    expected = sorted([f"{stem}.{VERSION}" for stem in LIBRARIES] + [f"libvdpau_nvidia.so.{VERSION}",
                                                                       "libnvidia-nvvm70.so.4"])
    assert names == expected  # libz, libstdc++ and the .bak of an old libcuda are not driver files of 570
    assert HostFile(f"{LIB}/libcuda.so.{VERSION}", f"{LIB}/libcuda.so.{VERSION}") in files.libraries
    assert HostFile(f"{LIB}/libnvidia-ml.so.{VERSION}", f"{LIB}/libnvidia-ml.so.{VERSION}") in files.libraries
    assert files.library_dirs == (LIB,)
    assert files.problems == ()


def test_the_hosts_soname_and_dev_links_are_recreated_plus_libcuda_so(tmp_path: Path) -> None:
    files = files_at(make_driver_files(tmp_path))
    links = {s.link: s.target for s in files.symlinks}
    assert links[f"{LIB}/libcuda.so.1"] == f"libcuda.so.{VERSION}"
    assert links[f"{LIB}/libnvidia-ml.so.1"] == f"libnvidia-ml.so.{VERSION}"
    assert links[f"{LIB}/libnvidia-ml.so"] == "libnvidia-ml.so.1"  # a chain: dev link -> soname link
    assert links[f"{LIB}/libcuda.so"] == "libcuda.so.1"  # not on the host: NVIDIA always adds it
    assert links[f"{LIB}/vdpau/libvdpau_nvidia.so.1"] == f"libvdpau_nvidia.so.{VERSION}"
    assert f"{LIB}/libnvidia-gpucomp.so.1" not in links  # no such link on the host: none invented


def test_binaries_are_the_executable_utilities_and_firmware_the_versions_gsp_files(tmp_path: Path) -> None:
    files = files_at(make_driver_files(tmp_path))
    assert [b.container_path for b in files.binaries] == [
        "/usr/bin/nvidia-smi", "/usr/bin/nvidia-persistenced", "/usr/bin/nvidia-cuda-mps-control",
        "/usr/bin/nvidia-cuda-mps-server"]  # nvidia-debugdump is there but not executable
    assert [f.container_path for f in files.firmware] == [
        f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin", f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin"]


def test_under_a_driver_container_root_host_paths_carry_the_root_and_absolute_links_stay_inside_it(
        tmp_path: Path) -> None:
    """GPU Operator layout: the driver container's rootfs at /run/nvidia/driver, with merged-usr links (/lib ->
    usr/lib) and an ABSOLUTE soname link; none of them may be followed into the daemon's own filesystem."""
    root = tmp_path / "run/nvidia/driver"
    make_driver_files(root)
    os.replace(root / "lib/firmware", root / "usr/lib/firmware")  # merged /usr: /lib -> usr/lib
    (root / "lib").rmdir()
    (root / "lib").symlink_to("usr/lib")
    (root / LIBDIR / "libcuda.so.1").unlink()
    (root / LIBDIR / "libcuda.so.1").symlink_to(f"/{LIBDIR}/libcuda.so.{VERSION}")  # absolute, inside the root
    files = discover_driver_files(Root.on_host("/run/nvidia/driver", tmp_path), VERSION, kernel_release="6.8.0")
    cuda = next(f for f in files.libraries if f.container_path.endswith(f"libcuda.so.{VERSION}"))
    assert cuda == HostFile(f"/run/nvidia/driver{LIB}/libcuda.so.{VERSION}", f"{LIB}/libcuda.so.{VERSION}")
    assert Symlink(f"/{LIBDIR}/libcuda.so.{VERSION}", f"{LIB}/libcuda.so.1") in files.symlinks
    # firmware: found through /lib/firmware, mounted from the real file, at the path the kernel looks up
    assert files.firmware[0] == HostFile(f"/run/nvidia/driver/usr/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
                                         f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin")
    assert all(f.host_path.startswith("/run/nvidia/driver/") for f in (*files.libraries, *files.binaries,
                                                                       *files.firmware))


def test_resolve_in_root_treats_the_root_as_slash() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "usr/lib").mkdir(parents=True)
        (root / "usr/lib/real.so").write_text("x")
        (root / "lib").symlink_to("usr/lib")
        (root / "usr/lib/abs.so").symlink_to("/usr/lib/real.so")
        (root / "usr/lib/up.so").symlink_to("../../../../../usr/lib/real.so")  # `..` stops at the root
        (root / "loop").symlink_to("loop")
        assert resolve_in_root(root, "/lib/abs.so") == "/usr/lib/real.so"
        assert resolve_in_root(root, "/usr/lib/up.so") == "/usr/lib/real.so"
        assert resolve_in_root(root, "/loop") is None
        assert resolve_in_root(root, "/usr/lib/missing.so") is None


def test_a_driver_root_of_another_version_says_so(tmp_path: Path) -> None:
    make_driver_files(tmp_path, "550.54.15")
    files = files_at(tmp_path)
    assert files.libraries == () and not files.found
    assert "holds driver 550.54.15, but the GPUs report driver 570.124.06" in files.problems[0]


def test_a_missing_or_empty_driver_root_gives_no_files_and_a_reason(tmp_path: Path) -> None:
    missing = discover_driver_files(Root.on_host("/run/nvidia/driver", tmp_path), VERSION, kernel_release="6")
    assert missing.problems == (f"driver root /run/nvidia/driver does not exist (looked at {tmp_path}/run/nvidia/driver)",)
    empty = files_at(tmp_path)
    assert not empty.found and "no libcuda.so.570.124.06 or libnvidia-ml.so.570.124.06" in empty.problems[0]


def test_ipc_sockets_are_found_only_when_they_exist(tmp_path: Path) -> None:
    root = Root("/", tmp_path)
    assert discover_ipc_sockets(root) == ()
    make_socket(tmp_path / "var/run/nvidia-fabricmanager/socket")
    make_socket(tmp_path / "run/nvidia-persistenced/socket")
    assert discover_ipc_sockets(root) == (
        HostFile("/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket"),
        HostFile("/var/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket"))


def test_only_character_devices_that_exist_under_the_dev_root_are_listed(tmp_path: Path) -> None:
    make_dev(tmp_path / "run/nvidia/driver", [0, 2], control=("nvidiactl",))
    (tmp_path / "run/nvidia/driver/dev/nvidia-uvm").write_text("")  # a regular file is not a device node
    dev_root = Root.on_host("/run/nvidia/driver", tmp_path)
    control, gpus = discover_device_nodes(dev_root, [0, 1, 2])
    assert control == (DeviceNode("/dev/nvidiactl", "/run/nvidia/driver/dev/nvidiactl"),)
    assert gpus == ((0, DeviceNode("/dev/nvidia0", "/run/nvidia/driver/dev/nvidia0")),
                    (2, DeviceNode("/dev/nvidia2", "/run/nvidia/driver/dev/nvidia2")))
    unchecked_control, unchecked = discover_device_nodes(Root("/", tmp_path / "nowhere"), [1], check=False)
    assert [n.path for n in unchecked_control] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                                   "/dev/nvidia-modeset"]
    assert unchecked == ((1, DeviceNode("/dev/nvidia1", "/dev/nvidia1")),)


def test_the_hook_is_the_first_executable_candidate(tmp_path: Path) -> None:
    candidates = ("/usr/bin/nvidia-cdi-hook", "/usr/local/nvidia/toolkit/nvidia-cdi-hook")
    assert find_hook(candidates, tmp_path) is None
    make_hook(tmp_path, "/usr/local/nvidia/toolkit/nvidia-cdi-hook")
    assert find_hook(candidates, tmp_path) == "/usr/local/nvidia/toolkit/nvidia-cdi-hook"


def test_host_paths_are_read_through_the_host_root_with_its_symlinks_resolved_inside_it(tmp_path: Path) -> None:
    from bridge.cdi.discovery import host_root_path

    (tmp_path / "run/nvidia").mkdir(parents=True)
    (tmp_path / "opt/driver").mkdir(parents=True)
    (tmp_path / "run/nvidia/driver").symlink_to("/opt/driver")  # absolute: the host's /opt, not ours
    assert host_root_path(tmp_path, "/run/nvidia/driver") == Root("/run/nvidia/driver", tmp_path / "opt/driver")
    assert host_root_path("/", "/run/nvidia/driver") == Root("/run/nvidia/driver", Path("/run/nvidia/driver"))
    make_hook(tmp_path, "/opt/toolkit/nvidia-cdi-hook")
    (tmp_path / "usr/local/nvidia").mkdir(parents=True)
    (tmp_path / "usr/local/nvidia/toolkit").symlink_to("/opt/toolkit")
    assert find_hook(["/usr/local/nvidia/toolkit/nvidia-cdi-hook"], tmp_path) == \
        "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
