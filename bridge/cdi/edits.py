"""CDI `containerEdits` from a `DriverInventory` (pure: values in, JSON-ready dicts out).

What a container gets, under runc + CDI (containerd 2.x, CRI-O) and under the NVIDIA runtime alike:

* spec-level (common) edits, applied once when any device of the spec is requested:
  - `NVIDIA_VISIBLE_DEVICES=void`: CUDA images bake `NVIDIA_VISIBLE_DEVICES=all` into their env; a node whose
    default runtime is the NVIDIA runtime would otherwise inject every GPU on top of ours. CDI replaces an existing
    variable in place (cncf-tags/container-device-interface `internal/ociedit/spec_editor.go` `addEnv`), so `void`
    wins, and the runtime then treats the container as a non-GPU one (NVIDIA/nvidia-container-toolkit
    `pkg/nvcdi/wrapper.go` `GetCommonEdits` appends the same; `container_config.go` `getNvidiaConfig`);
  - the control device nodes present (`/dev/nvidiactl`, `/dev/nvidia-uvm`, ...);
  - read-only bind mounts (`ro,nosuid,nodev,rbind,rprivate`, NVIDIA's `internal/discover/mounts.go`) of the
    driver libraries, GSP firmware and utility binaries, and the IPC sockets (`nosuid,nodev,rbind,rprivate,
    noexec`, writable: clients talk through them; `internal/discover/ipc.go`), at their container paths;
  - when `nvidia-cdi-hook` exists on the host: two `createContainer` hooks in NVIDIA's order
    (`internal/discover/hooks.go`): `create-symlinks --link <target>::<link> ...` (soname and `.so` links, so
    `dlopen("libcuda.so.1")` works) and `update-ldcache --folder <dir> ...` (the image's loader cache learns the
    mounted directories). We emit only these two: `enable-cuda-compat` (NCT v1.17.5), `disable-device-node-
    modification` (v1.17.8) and `update-application-profile` (v1.20.0) are subcommands an older hook binary does
    not have, and a hook that fails fails the container;
  - without the hook binary: the soname links cannot be made in the container, so each one is bind-mounted as a
    file of its own (the library again, at the link's path). That keeps `dlopen("libcuda.so.1")` working on
    images whose loader searches the library directory by default (Debian/Ubuntu multiarch, RHEL `/usr/lib64`);
    the start-up log says hooks are missing.
* per-GPU edits: the GPU's own `/dev/nvidia<minor>`. A GPU whose node is missing is an error
  (`CdiBuildError`) rather than a device without edits, which the CDI cache would reject with every other device
  of the file ("invalid device, empty device edits", `pkg/cdi/device.go`).

A device node's `hostPath` is written only when it differs from `path` (a dev root other than `/`), so specs
stay at the lowest `cdiVersion` (`hostPath` needs 0.5.0).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Any

from bridge.cdi.driver import DeviceNode, DriverInventory, HostFile, Symlink
from bridge.inventory.model import GpuDevice

READ_ONLY_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
IPC_MOUNT_OPTIONS = ("nosuid", "nodev", "rbind", "rprivate", "noexec")
HOOK_NAME = "createContainer"
HOOK_ENV = ("NVIDIA_CTK_DEBUG=false",)
VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"


class CdiBuildError(ValueError):
    """A spec cannot be built from what the node has (e.g. a GPU whose device node is missing)."""


def device_node_entry(node: DeviceNode) -> dict[str, str]:
    entry = {"path": node.path}
    if node.host_path != node.path:
        entry["hostPath"] = node.host_path
    return entry


def mount_entry(f: HostFile, options: Sequence[str] = READ_ONLY_MOUNT_OPTIONS) -> dict[str, Any]:
    return {"hostPath": f.host_path, "containerPath": f.container_path, "options": list(options)}


def hook_args(hook_path: str, name: str, args: Sequence[str]) -> list[str]:
    """`args[0]` is the binary's name, or `nvidia-ctk hook` for the toolkit CLI (`getFixedArgsForCDIHookCLI`)."""
    base = posixpath.basename(hook_path)
    fixed = [base, "hook"] if base == "nvidia-ctk" else [base]
    return [*fixed, name, *args]


def hooks(inv: DriverInventory) -> list[dict[str, Any]]:
    if inv.hook_path is None:
        return []
    out: list[dict[str, Any]] = []
    files = inv.files
    if files.symlinks:
        links = [a for s in files.symlinks for a in ("--link", s.arg())]
        out.append({"hookName": HOOK_NAME, "path": inv.hook_path,
                    "args": hook_args(inv.hook_path, "create-symlinks", links), "env": list(HOOK_ENV)})
    dirs = list(dict.fromkeys(posixpath.dirname(f.container_path) for f in files.libraries))
    if dirs:  # every directory a library is mounted in (NVIDIA's `uniqueFolders`, internal/discover/ldconfig.go)
        folders = [a for d in dirs for a in ("--folder", d)]
        out.append({"hookName": HOOK_NAME, "path": inv.hook_path,
                    "args": hook_args(inv.hook_path, "update-ldcache", folders), "env": list(HOOK_ENV)})
    return out


def _link_target(link: Symlink) -> str:
    target = link.target
    return posixpath.normpath(target if target.startswith("/") else posixpath.join(posixpath.dirname(link.link), target))


def link_mounts(inv: DriverInventory) -> list[HostFile]:
    """Without the hook: each symlink as a bind mount of the library it ends at."""
    libs = {f.container_path: f for f in inv.files.libraries}
    links = {s.link: s for s in inv.files.symlinks}
    out: list[HostFile] = []
    for s in inv.files.symlinks:
        here, seen = s.link, set()
        while here not in libs and here in links and here not in seen:
            seen.add(here)
            here = _link_target(links[here])
        if here in libs:
            out.append(HostFile(libs[here].host_path, s.link))
    return out


def common_edits(inv: DriverInventory) -> dict[str, Any]:
    files = inv.files
    mounts = [mount_entry(f) for f in files.libraries]
    if inv.hook_path is None:
        mounts += [mount_entry(f) for f in link_mounts(inv)]
    mounts += [mount_entry(f, IPC_MOUNT_OPTIONS) for f in inv.ipc_sockets]
    mounts += [mount_entry(f) for f in (*files.firmware, *files.binaries)]
    edits: dict[str, Any] = {"env": [VISIBLE_DEVICES_VOID]}
    if inv.control_nodes:
        edits["deviceNodes"] = [device_node_entry(n) for n in inv.control_nodes]
    if mounts:
        edits["mounts"] = mounts
    hook_list = hooks(inv)
    if hook_list:
        edits["hooks"] = hook_list
    return edits


def gpu_node(gpu: GpuDevice, inv: DriverInventory) -> DeviceNode:
    node = inv.gpu_node(gpu.minor)
    if node is None:
        where = "" if inv.dev_root in ("", "/") else f" under dev root {inv.dev_root}"
        raise CdiBuildError(f"device node {gpu.device_node} of GPU {gpu.index} ({gpu.uuid}) does not exist{where}: "
                            "the container runtime would refuse the container; is the NVIDIA driver loaded, and "
                            "--dev-root right?")
    return node


def gpu_edits(gpu: GpuDevice, inv: DriverInventory) -> dict[str, Any]:
    return {"deviceNodes": [device_node_entry(gpu_node(gpu, inv))]}


def gpus_edits(gpus: Sequence[GpuDevice], inv: DriverInventory) -> dict[str, Any]:
    return {"deviceNodes": [device_node_entry(gpu_node(g, inv)) for g in gpus]}
