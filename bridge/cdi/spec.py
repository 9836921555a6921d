"""CDI spec building for both APIs (pure: devices in, JSON-ready dicts and CDI IDs out; no files).

DRA claims (one spec file per prepared claim):

* kind `k8s.<driver>/claim` (e.g. `k8s.gpu.dra-bridge.io/claim`), the same shape NVIDIA's DRA driver uses, so the
  vendor part says which driver owns the file and the class says it is per claim;
* one CDI device per prepared GPU, named `<claimUID>-gpu-<index>`: the claim UID is in every name so a runtime's
  spec cache can never hand a new claim a stale entry of an earlier one (the DRA helper's advice); the index
  keeps names short and readable;
* per-device edits: the GPU's device node `/dev/nvidia<minor>`; spec-level edits (applied when any device of the
  spec is used): `/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools` and
  `NVIDIA_VISIBLE_DEVICES=<uuids of the claim>`. Env edits are appended, so a per-device
  `NVIDIA_VISIBLE_DEVICES` would yield duplicate keys; the spec-level value lists the claim's GPUs. Caveat: a
  container consuming only one request of a multi-request claim still sees every claim UUID in that variable,
  though it gets only its own device nodes.

Device plugin (one static spec for the node): kind `nvidia.com/gpu` by default (as NVIDIA's `cdi-annotations` /
`cdi-cri` device-list strategies expect), one device per GPU named by UUID and/or by index, plus `all`.

`cdiVersion` is always the lowest that covers the fields used (`version.minimum_cdi_version`); with these
fields that is 0.3.0, or 0.5.0 when a device name starts with a digit (a claim UID or an index name may).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bridge.cdi.names import CdiNameError, parse_kind, qualified_name, validate_device_name
from bridge.cdi.version import minimum_cdi_version
from bridge.inventory.model import DeviceID, GpuDevice

DEFAULT_DRIVER_NAME = "gpu.dra-bridge.io"
DEFAULT_DEVICE_PLUGIN_KIND = "nvidia.com/gpu"
COMMON_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
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


def _device_nodes(paths: Sequence[str]) -> list[dict[str, str]]:
    return [{"path": p} for p in paths]


def _finish(kind: str, devices: list[dict[str, Any]], edits: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {"cdiVersion": "", "kind": kind, "devices": devices}
    if edits:
        doc["containerEdits"] = edits
    doc["cdiVersion"] = minimum_cdi_version(doc)
    return doc


def build_claim_spec(claim_uid: str, gpus: Sequence[GpuDevice], *, kind: str | None = None) -> ClaimSpec:
    """The CDI spec for one prepared claim. `gpus` in the claim's result order; duplicates are an error."""
    if not claim_uid:
        raise CdiNameError("a claim spec needs the claim UID")
    if not gpus:
        raise CdiNameError(f"claim {claim_uid}: a CDI spec needs at least one device")
    uuids = [g.uuid for g in gpus]
    if len(set(uuids)) != len(uuids):
        raise CdiNameError(f"claim {claim_uid}: the same GPU appears twice: {', '.join(uuids)}")
    kind = kind or claim_kind()
    parse_kind(kind)
    devices = []
    ids: dict[DeviceID, str] = {}
    for g in gpus:
        name = claim_device_name(claim_uid, g.index)
        devices.append({"name": name, "containerEdits": {"deviceNodes": _device_nodes([g.device_node])}})
        ids[g.uuid] = qualified_name(kind, name)
    edits = {"env": [f"NVIDIA_VISIBLE_DEVICES={','.join(uuids)}"],
             "deviceNodes": _device_nodes(COMMON_DEVICE_NODES)}
    return ClaimSpec(claim_uid=claim_uid, kind=kind, document=_finish(kind, devices, edits), cdi_ids=ids)


def device_plugin_names(gpu: GpuDevice, strategy: NameStrategy) -> list[str]:
    if strategy == "uuid":
        return [gpu.uuid]
    if strategy == "index":
        return [str(gpu.index)]
    if strategy == "both":
        return [gpu.uuid, str(gpu.index)]
    raise ValueError(f"unknown CDI name strategy {strategy!r}; expected 'uuid', 'index' or 'both'")


def build_device_plugin_spec(gpus: Sequence[GpuDevice], *, kind: str = DEFAULT_DEVICE_PLUGIN_KIND,
                             names: NameStrategy = "both", include_all: bool = True) -> dict[str, Any]:
    """The node's static spec for the device-plugin side: `nvidia.com/gpu=<uuid>`, `=<index>`, `=all`."""
    parse_kind(kind)
    devices: list[dict[str, Any]] = []
    for g in gpus:
        for name in device_plugin_names(g, names):
            devices.append({"name": validate_device_name(name),
                            "containerEdits": {"deviceNodes": _device_nodes([g.device_node])}})
    if include_all and gpus:
        devices.append({"name": "all",
                        "containerEdits": {"deviceNodes": _device_nodes([g.device_node for g in gpus])}})
    if not devices:
        raise CdiNameError("a device-plugin CDI spec needs at least one GPU")
    return _finish(kind, devices, {"deviceNodes": _device_nodes(COMMON_DEVICE_NODES)})


def device_plugin_cdi_ids(device_ids: Sequence[str], gpus: Sequence[GpuDevice], *,
                          kind: str = DEFAULT_DEVICE_PLUGIN_KIND, strategy: Literal["uuid", "index"] = "uuid"
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
