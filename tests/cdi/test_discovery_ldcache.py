"""Driver libraries that only the driver root's /etc/ld.so.cache names (the H200 machine of the real-hardware
finding: `ldconfig -p` shows `libcuda.so.1 (libc6,x86-64) => /lib/libcuda.so.1`, and NVIDIA's standard search dirs
hold nothing), with caches written by the real ldconfig (tests/fakeldcache.py)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from bridge.cdi import CdiOptions, NodeCdi
from bridge.cdi.discovery import discover_driver_files
from bridge.cdi.driver import HostFile, Root, Symlink
from bridge.inventory.simulated import devices_from_spec
from tests.fakedriver import LIBDIR, make_driver_files
from tests.fakeldcache import H200_VERSION, ldconfig_listing, make_cache_only_driver, make_h200_layout

V = H200_VERSION


def files_at(root: Path, host: str = "/", version: str = V):  # type: ignore[no-untyped-def]
    return discover_driver_files(Root(host, root), version, kernel_release="6.8.0")


def test_the_h200_machines_layout_is_found_through_the_ld_so_cache(tmp_path: Path) -> None:
    cache = make_h200_layout(tmp_path)
    listed = {(soname, path) for soname, _, path in ldconfig_listing(cache)}  # as `ldconfig -p` said there:
    assert {("libcuda.so.1", "/lib/libcuda.so.1"), ("libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1")} <= listed
    files = files_at(tmp_path)
    # /lib/libcuda.so.1 -> /usr/local/nvidia/lib64/libcuda.so.580.159.04: the real directory, as on the machine
    assert files.library_dirs == ("/usr/local/nvidia/lib64",) and files.ld_cache == "/etc/ld.so.cache"
    assert HostFile(f"/usr/local/nvidia/lib64/libcuda.so.{V}", f"/usr/local/nvidia/lib64/libcuda.so.{V}") in \
        files.libraries
    assert len(files.libraries) == 4 and files.found


def test_a_driver_only_in_lib_is_found_through_the_ld_so_cache(tmp_path: Path) -> None:
    make_cache_only_driver(tmp_path)  # /lib/lib*.so.580.159.04, soname links by ldconfig, nothing elsewhere
    files = files_at(tmp_path)
    assert files.found and files.library_dirs == ("/lib",) and files.ld_cache == "/etc/ld.so.cache"
    assert sorted(f.container_path for f in files.libraries) == [
        f"/lib/libcuda.so.{V}", f"/lib/libcudadebugger.so.{V}", f"/lib/libnvidia-ml.so.{V}",
        f"/lib/libnvidia-ptxjitcompiler.so.{V}"]
    assert Symlink(f"libcuda.so.{V}", "/lib/libcuda.so.1") in files.symlinks  # the link ldconfig made
    assert Symlink("libcuda.so.1", "/lib/libcuda.so") in files.symlinks
    assert [p for p in files.problems if "ld.so.cache" in p] == []


def test_the_start_up_explanation_says_the_libraries_came_from_the_cache(tmp_path: Path) -> None:
    make_cache_only_driver(tmp_path)
    gpus = devices_from_spec("1xH100-80GB", "n1", driver_version=V)
    lines = NodeCdi(CdiOptions(driver_root="/", host_root=tmp_path), gpus, kernel_release="6",
                    firmware_class_path="").describe()
    assert (logging.INFO, f"CDI: driver {V} at driver root / (read at {tmp_path}): 4 libraries in /lib (found "
                          f"through /etc/ld.so.cache: the standard library directories hold no lib*.so.{V}), 0 "
                          "binaries, 0 GSP firmware file(s), 5 library link(s)") in lines


def test_with_merged_usr_the_cache_path_is_resolved_to_the_real_directory(tmp_path: Path) -> None:
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")  # ldconfig still records /lib/libcuda.so.1
    make_cache_only_driver(tmp_path, libdir="usr/lib")
    files = files_at(tmp_path)
    assert files.library_dirs == ("/usr/lib",)  # the real directory, as NVIDIA's evaluated symlinks give it
    assert HostFile(f"/usr/lib/libcuda.so.{V}", f"/usr/lib/libcuda.so.{V}") in files.libraries


def test_under_a_driver_container_root_the_caches_paths_never_leave_the_root(tmp_path: Path) -> None:
    """/lib in the driver container's rootfs is an ABSOLUTE link to /usr/lib: the kernel would follow it into the
    daemon's own /usr/lib; resolved inside the root it is the driver's."""
    root = tmp_path / "run/nvidia/driver"
    (root / "usr/lib").mkdir(parents=True)
    (root / "lib").symlink_to("/usr/lib")
    make_cache_only_driver(root, libdir="usr/lib")
    files = discover_driver_files(Root.on_host("/run/nvidia/driver", tmp_path), V, kernel_release="6")
    assert files.ld_cache == "/run/nvidia/driver/etc/ld.so.cache" and files.library_dirs == ("/usr/lib",)
    assert HostFile(f"/run/nvidia/driver/usr/lib/libcuda.so.{V}", f"/usr/lib/libcuda.so.{V}") in files.libraries


def test_a_cache_entry_linking_out_of_the_root_is_resolved_inside_it(tmp_path: Path) -> None:
    outside = tmp_path / "daemon-fs"
    make_cache_only_driver(outside)  # a real driver install: the daemon's own filesystem
    root = tmp_path / "root"
    (root / "lib").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc/ld.so.cache").write_bytes((outside / "etc/ld.so.cache").read_bytes())
    (root / "lib/libcuda.so.1").symlink_to(outside / f"lib/libcuda.so.{V}")  # absolute, to outside the root
    files = files_at(root)
    assert not files.found and files.libraries == ()
    assert "and the libraries of /etc/ld.so.cache: 4 64-bit libraries)" in files.problems[0]


def test_the_cache_is_not_consulted_when_the_search_dirs_hold_the_driver(tmp_path: Path) -> None:
    """NVIDIA's order (`First(search dirs, ldcache)`): a same-version copy that only the cache names is not added."""
    make_cache_only_driver(tmp_path)
    make_driver_files(tmp_path, V)
    files = files_at(tmp_path)
    assert files.library_dirs == (f"/{LIBDIR}",) and files.ld_cache == ""
    assert not any(f.container_path.startswith("/lib/") for f in files.libraries)


def test_a_cache_naming_another_version_says_which(tmp_path: Path) -> None:
    make_cache_only_driver(tmp_path, "550.54.15")
    files = files_at(tmp_path)
    assert not files.found
    assert files.problems[0].startswith(f"driver root / holds driver 550.54.15, but the GPUs report driver {V}")


def test_when_nothing_is_found_the_message_says_what_the_cache_was(tmp_path: Path) -> None:
    empty = files_at(tmp_path)
    assert empty.problems[0].endswith(", and the libraries of /etc/ld.so.cache: absent): is --driver-root right?")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.cache").write_bytes(b"\0" * 100)
    corrupt = files_at(tmp_path)
    assert ("and the libraries of /etc/ld.so.cache: unusable (not an ld.so.cache (no glibc-ld.so.cache1.1 or "
            "ld.so-1.7.0 magic))): is --driver-root right?") in corrupt.problems[0]
    os.unlink(tmp_path / "etc/ld.so.cache")
    os.mkfifo(tmp_path / "etc/ld.so.cache")
    assert "/etc/ld.so.cache: unusable (not a regular file)" in files_at(tmp_path).problems[0]
