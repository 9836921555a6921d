"""CDI spec building for both APIs (pure: GPUs and a `DriverInventory` in, JSON-ready dicts and CDI IDs out).

DRA claims (one spec file per prepared claim):

* kind `k8s.<driver>/claim` (e.g. `k8s.gpu.dra-bridge.io/claim`), the same shape NVIDIA's DRA driver uses
  (kubernetes-sigs/dra-driver-nvidia-gpu `cmd/gpu-kubelet-plugin/cdi.go`), so the vendor part says which driver
  owns the file and the class says it is per claim;
* one CDI device per prepared GPU, named `<claimUID>-gpu-<index>`: the claim UID is in every name so a runtime's
  spec cache can never hand a new claim a stale entry of an earlier one; the index keeps names readable;
* per-device edits: the GPU's device node; spec-level edits: everything else a CUDA process needs, from the
  driver inventory (`bridge.cdi.edits`: control nodes, driver libraries, firmware, binaries, IPC sockets, hooks,
  `NVIDIA_VISIBLE_DEVICES=void`).

Device plugin (one static spec for the node, for the `cdi-annotations` / `cdi-cri` strategies): kind
`k8s.device-plugin.dra-bridge.io/gpu`, our own vendor, NEVER `nvidia.com/gpu`: that kind belongs to the NVIDIA
Container Toolkit's spec (`/etc/cdi/nvidia.yaml`, `/var/run/cdi/nvidia.yaml`), and two files of one directory
defining the same qualified name make the CDI cache drop the name from both (cncf-tags/container-device-interface
`pkg/cdi/cache.go` `refresh`), which breaks every GPU container on the node. One device per GPU named by UUID
and/or index, plus `all`; GPUs whose device node is missing are left out (and reported).

Without an inventory (`inventory=None`) a spec carries device nodes only, listed unchecked: simulated GPUs.

`cdiVersion` is always the lowest that covers the fields used (`version.minimum_cdi_version`): 0.3.0, or 0.5.0
when a device name starts with a digit (a claim UID or an index name may) or device nodes have a `hostPath`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bridge.cdi.driver import DriverInventory
from bridge.cdi.edits import CdiBuildError, common_edits, gpu_edits, gpus_edits
from bridge.cdi.names import CdiNameError, parse_kind, qualified_name, validate_device_name
from bridge.cdi.version import minimum_cdi_version
from bridge.inventory.model import DeviceID, GpuDevice

DEFAULT_DRIVER_NAME = "gpu.dra-bridge.io"
DEVICE_PLUGIN_KIND = "k8s.device-plugin.dra-bridge.io/gpu"
# The kind earlier builds of dra-bridge used for the device-plugin spec (file `nvidia.com-gpu_node.json`). It
# defined nvidia.com/gpu=<uuid> beside the toolkit's own spec; the daemon removes that file at start and cleanup.
LEGACY_DEVICE_PLUGIN_KIND = "nvidia.com/gpu"
NameStrategy = Literal["uuid", "index", "both"]


def claim_kind(driver_name: str = DEFAULT_DRIVER_NAME) -> str:
    """The CDI kind of per-claim specs for a DRA driver: `k8s.<driver>/claim`."""
    kind = f"k8s.{driver_name}/claim"
    parse_kind(kind)
    return kind


def claim_device_name(claim_uid: str, index: int) -> str:
    return validate_device_name(f"{claim_uid}-gpu-{index}")


@dataclass(frozen=True)
class ClaimSpec:
    """A built per-claim spec: the document to write and, per GPU UUID, its fully qualified CDI device ID."""

    claim_uid: str
    kind: str
    document: Mapping[str, Any]
    cdi_ids: Mapping[DeviceID, str]


def _finish(kind: str, devices: list[dict[str, Any]], edits: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {"cdiVersion": "", "kind": kind, "devices": devices}
    if edits:
        doc["containerEdits"] = edits
    doc["cdiVersion"] = minimum_cdi_version(doc)
    return doc


def _inventory(gpus: Sequence[GpuDevice], inventory: DriverInventory | None) -> DriverInventory:
    return inventory if inventory is not None else DriverInventory.device_nodes_only(g.minor for g in gpus)


def build_claim_spec(claim_uid: str, gpus: Sequence[GpuDevice], *, kind: str | None = None,
                     inventory: DriverInventory | None = None) -> ClaimSpec:
    """The CDI spec for one prepared claim. `gpus` in the claim's result order; duplicates are an error, and so is
    a GPU whose device node the inventory does not have (`CdiBuildError`)."""
    if not claim_uid:
        raise CdiNameError("a claim spec needs the claim UID")
    if not gpus:
        raise CdiNameError(f"claim {claim_uid}: a CDI spec needs at least one device")
    uuids = [g.uuid for g in gpus]
    if len(set(uuids)) != len(uuids):
        raise CdiNameError(f"claim {claim_uid}: the same GPU appears twice: {', '.join(uuids)}")
    kind = kind or claim_kind()
    parse_kind(kind)
    inv = _inventory(gpus, inventory)
    devices = []
    ids: dict[DeviceID, str] = {}
    for g in gpus:
        name = claim_device_name(claim_uid, g.index)
        devices.append({"name": name, "containerEdits": gpu_edits(g, inv)})
        ids[g.uuid] = qualified_name(kind, name)
    return ClaimSpec(claim_uid=claim_uid, kind=kind, document=_finish(kind, devices, common_edits(inv)), cdi_ids=ids)


def device_plugin_names(gpu: GpuDevice, strategy: NameStrategy) -> list[str]:
    if strategy == "uuid":
        return [gpu.uuid]
    if strategy == "index":
        return [str(gpu.index)]
    if strategy == "both":
        return [gpu.uuid, str(gpu.index)]
    raise ValueError(f"unknown CDI name strategy {strategy!r}; expected 'uuid', 'index' or 'both'")


@dataclass(frozen=True)
class DevicePluginSpec:
    """The node's device-plugin spec and the GPUs left out of it because their device node is missing."""

    document: Mapping[str, Any]
    missing: Mapping[DeviceID, str]  # uuid -> why

    def defines(self, uuid: DeviceID) -> bool:
        return uuid not in self.missing


def build_device_plugin_spec(gpus: Sequence[GpuDevice], *, inventory: DriverInventory | None = None,
                             kind: str = DEVICE_PLUGIN_KIND, names: NameStrategy = "both",
                             include_all: bool = True) -> DevicePluginSpec:
    """The node's static spec for the device-plugin side: `<kind>=<uuid>`, `=<index>`, `=all`."""
    parse_kind(kind)
    inv = _inventory(gpus, inventory)
    devices: list[dict[str, Any]] = []
    usable: list[GpuDevice] = []
    missing: dict[DeviceID, str] = {}
    for g in gpus:
        try:
            edits = gpu_edits(g, inv)
        except CdiBuildError as err:
            missing[g.uuid] = str(err)
            continue
        usable.append(g)
        for name in device_plugin_names(g, names):
            devices.append({"name": validate_device_name(name), "containerEdits": edits})
    if include_all and usable:
        devices.append({"name": "all", "containerEdits": gpus_edits(usable, inv)})
    if not devices:
        why = "; ".join(missing.values()) or "no GPUs"
        raise CdiBuildError(f"a device-plugin CDI spec needs at least one GPU with a device node: {why}")
    return DevicePluginSpec(_finish(kind, devices, common_edits(inv)), missing)


def device_plugin_cdi_ids(device_ids: Sequence[str], gpus: Sequence[GpuDevice], *,
                          kind: str = DEVICE_PLUGIN_KIND, strategy: Literal["uuid", "index"] = "uuid"
                          ) -> list[str]:
    """CDI IDs for an Allocate response (`ContainerAllocateResponse.cdi_devices` or the CDI annotation)."""
    by_uuid = {g.uuid: g for g in gpus}
    out = []
    for device_id in device_ids:
        gpu = by_uuid.get(DeviceID(device_id))
        if gpu is None:
            raise CdiNameError(f"unknown device {device_id!r}: no such GPU on this node")
        out.append(qualified_name(kind, device_plugin_names(gpu, strategy)[0]))
    return out
