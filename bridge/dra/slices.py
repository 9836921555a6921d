"""Desired ResourceSlices: inventory + sides + health + driver + node -> the slice dicts to publish. PURE.

No I/O and no clock here: the publisher (`slicepublisher.py`) lists what exists, asks this module what should
exist, and writes the difference. Same inputs, same output, byte for byte, so "nothing changed" is decidable.

The contract (shared with the webhook, which writes CEL over these attributes, and with migrate-report):

* driver `gpu.dra-bridge.io` (configurable), one pool per node named after the node, `spec.nodeName` set, an
  ownerReference to the v1 Node (so the slices die with the Node object);
* one device per **DRA-side** GPU, named `gpu-<index>`; legacy-side and withdrawn GPUs are never in a slice (the
  one-owner rule, docs/architecture.md);
* attributes, in the driver's domain (no prefix; the names GPU Feature Discovery selectors are translated onto are
  bridge.kvalues.gfd's `ATTR_*` constants): `uuid`, `productName`, `architecture` (strings),
  `cudaComputeCapability`, `driverVersion` (semantic versions: "9.0" -> "9.0.0", "535.104" -> "535.104.0",
  leading zeros dropped as semver demands: "535.104.05" -> "535.104.5"), `index`, `minor` (ints), `pciBusID`
  (string), `numaNode` (int, omitted when unknown), `migCapable` (bool); capacity `memory` (a quantity);
* an unhealthy device either carries the taint `{key: <driver>/unhealthy, value: <reason as a label value>,
  effect: NoSchedule}` (when the server keeps device taints: `taints=True`) or is left out of the slice;
* a pool holds any number of devices: a slice takes at most 128 devices, or 64 when any of its devices carries a
  taint (`ResourceSliceMaxDevicesWithAdvancedFeatures`); every slice of the pool carries the same generation and
  `resourceSliceCount`; slices are named `<node>-<driver>-<n>` (deterministic, so reconcile is by name);
* a node with no DRA-side device still publishes one empty slice: the pool exists and says "0 devices", which is
  what migrate-report and the scheduler should see on a node whose split is `0`.

Shapes per served `resource.k8s.io` version: v1 and v1beta2 put `attributes`/`capacity`/`taints` directly on the
device; v1beta1 nests them under `device.basic`. Capacity values are `{"value": <quantity>}` in all three.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.inventory.model import DeviceID, GpuDevice
from bridge.kvalues.gfd import ATTR_COMPUTE, ATTR_PRODUCT, CAPACITY_MEMORY
from bridge.kvalues.quantity import QuantityError, parse_quantity
from bridge.ledger.sides import device_name as ledger_device_name

Obj = dict[str, Any]

DEFAULT_DRIVER = "gpu.dra-bridge.io"
SUPPORTED_VERSIONS = ("v1", "v1beta2", "v1beta1")

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_TAINTS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUE_LENGTH = 64
MAX_NAME_LENGTH = 253
_LABEL_VALUE_MAX = 63

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_VERSION = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*$")


class SliceError(ValueError):
    """The inputs cannot form a valid slice (bad driver or node name, a device index that cannot be named)."""


@dataclass(frozen=True)
class NodeRef:
    """The Node the pool belongs to: name for `spec.nodeName` and the pool, uid for the ownerReference."""

    name: str
    uid: str


@dataclass(frozen=True)
class SliceInputs:
    """Everything the desired slices depend on. `dra_devices` are the GPUs on the DRA side (sorted by index on
    output, whatever the order here); `unhealthy` maps a UUID to a human reason; `generation` is stamped into every
    slice (the publisher picks it)."""

    node: NodeRef
    dra_devices: tuple[GpuDevice, ...]
    unhealthy: Mapping[DeviceID, str] = field(default_factory=dict)
    driver: str = DEFAULT_DRIVER
    version: str = "v1"
    taints: bool = True
    generation: int = 1


def validate_driver_name(driver: str) -> str:
    """A driver name is a lower-case DNS subdomain of at most 63 characters; returns it or raises SliceError."""
    if not driver or len(driver) > 63 or not _DNS_SUBDOMAIN.match(driver):
        raise SliceError(
            f"invalid DRA driver name {driver!r}: must be a lower-case DNS subdomain of at most 63 characters, "
            f"e.g. {DEFAULT_DRIVER}")
    return driver


def validate_node_name(node: str) -> str:
    if not node or len(node) > MAX_NAME_LENGTH or not _DNS_SUBDOMAIN.match(node):
        raise SliceError(f"invalid node name {node!r}: must be a lower-case DNS subdomain of at most 253 characters")
    return node


# kube-apiserver 1.38 refuses a version attribute with a number of more than 18 digits ("must be a string compatible
# with semver.org spec 2.0.0, with at most 18 digits in numbers": pkg/apis/resource/validation/validation.go
# `numericIdentifier` `(0|[1-9]\d{0,17})`, v1.38.0-beta.0; 1.37 had no limit), and one bad attribute refuses the
# whole slice: such a version is left out instead, as a non-numeric one is.
MAX_VERSION_DIGITS = 18


def semver(raw: str) -> str | None:
    """"9.0" -> "9.0.0", "535.104" -> "535.104.0", "535.104.05" -> "535.104.5"; None when not numeric or when a
    number has more than 18 digits."""
    m = _VERSION.match(raw or "")
    if m is None:
        return None
    parts = [str(int(part)) if part is not None else "0" for part in m.groups()]
    if any(len(part) > MAX_VERSION_DIGITS for part in parts):
        return None
    return ".".join(parts)


def quantity_bytes(n: int) -> str:
    """Canonical Kubernetes quantity for a byte count: the largest binary suffix that divides it exactly ("80Gi"),
    else the plain number. Canonical, so the server stores exactly what we sent."""
    if n < 0:
        raise SliceError(f"negative memory size {n}")
    for suffix, factor in (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20),
                           ("Ki", 1 << 10)):
        if n and n % factor == 0:
            return f"{n // factor}{suffix}"
    return str(n)


def _quantity(q: object) -> object:
    """A capacity value compared by what it means ("1k" == "1000"; bridge.kvalues.quantity), or as given when it
    is not a quantity (then only an identical value compares equal)."""
    try:
        return parse_quantity(q)
    except QuantityError:
        return q


def taint_value(reason: str) -> str:
    """A health reason squeezed into a label value (<=63 chars of [A-Za-z0-9._-], alphanumeric at both ends)."""
    value = _LABEL_VALUE_BAD.sub("-", reason.strip())
    value = re.sub(r"-{2,}", "-", value)[:_LABEL_VALUE_MAX]
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
    return value or "unhealthy"


def unhealthy_taint_key(driver: str) -> str:
    return f"{driver}/unhealthy"


def slice_name(node: str, driver: str, n: int) -> str:
    """`<node>-<driver>-<n>`; when that exceeds 253 characters the node part is shortened and a hash of the full
    node name keeps names unique and stable."""
    name = f"{node}-{driver}-{n}"
    if len(name) <= MAX_NAME_LENGTH:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    keep = MAX_NAME_LENGTH - len(f"-{digest}-{driver}-{n}")
    head = node[:keep].rstrip(".-")
    return f"{head}-{digest}-{driver}-{n}"


def device_name(dev: GpuDevice) -> str:
    """The ledger's device name (`gpu-<index>`), refused for an index a slice cannot carry."""
    if dev.index < 0:
        raise SliceError(f"device {dev.uuid} has a negative index {dev.index}")
    return ledger_device_name(dev)


def _string(value: str) -> dict[str, str]:
    return {"string": value[:MAX_ATTRIBUTE_VALUE_LENGTH]}


def device_attributes(dev: GpuDevice) -> dict[str, dict[str, Any]]:
    attrs: dict[str, dict[str, Any]] = {
        "uuid": _string(dev.uuid),
        ATTR_PRODUCT: _string(dev.product_name),
        "architecture": _string(dev.architecture),
        "index": {"int": dev.index},
        "minor": {"int": dev.minor},
        "pciBusID": _string(dev.pci_bus_id),
        "migCapable": {"bool": dev.mig_capable},
    }
    cc = semver(dev.compute_capability)
    if cc is not None:
        attrs[ATTR_COMPUTE] = {"version": cc}
    drv = semver(dev.driver_version)
    if drv is not None:
        attrs["driverVersion"] = {"version": drv}
    if dev.numa_node is not None and dev.numa_node >= 0:
        attrs["numaNode"] = {"int": dev.numa_node}
    return dict(sorted(attrs.items()))


def device_entry(dev: GpuDevice, version: str, taint: Obj | None) -> Obj:
    """One `spec.devices[]` entry in the shape of `version`."""
    body: Obj = {
        "attributes": device_attributes(dev),
        "capacity": {CAPACITY_MEMORY: {"value": quantity_bytes(dev.memory_bytes)}},
    }
    if len(body["attributes"]) + len(body["capacity"]) > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise SliceError(f"device {dev.uuid} has more than {MAX_ATTRIBUTES_AND_CAPACITIES} attributes+capacities")
    if taint is not None:
        body["taints"] = [taint]
    if version == "v1beta1":
        return {"name": device_name(dev), "basic": body}
    if version in ("v1", "v1beta2"):
        return {"name": device_name(dev), **body}
    raise SliceError(f"unsupported resource.k8s.io version {version!r}; supported: {', '.join(SUPPORTED_VERSIONS)}")


def device_has_taints(entry: Obj) -> bool:
    return bool(entry.get("taints") or (entry.get("basic") or {}).get("taints"))


def chunk_devices(entries: Sequence[Obj]) -> list[list[Obj]]:
    """Pack devices in order: a slice closes at 128 devices, or at 64 once it holds a tainted device. At least one
    (possibly empty) chunk."""
    chunks: list[list[Obj]] = [[]]
    tainted = False
    for entry in entries:
        has = device_has_taints(entry)
        current = chunks[-1]
        limit = MAX_DEVICES_PER_SLICE_WITH_TAINTS if (tainted or has) else MAX_DEVICES_PER_SLICE
        if len(current) >= limit:
            chunks.append([])
            tainted = False
        chunks[-1].append(entry)
        tainted = tainted or has
    return chunks


def owner_reference(node: NodeRef) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid, "controller": True}


def desired_slices(inp: SliceInputs) -> list[Obj]:
    """The complete list of ResourceSlice objects for the pool, in name order (the order is allocation preference)."""
    driver = validate_driver_name(inp.driver)
    node = validate_node_name(inp.node.name)
    if inp.generation < 0:
        raise SliceError(f"pool generation must be >= 0, got {inp.generation}")
    if inp.version not in SUPPORTED_VERSIONS:
        raise SliceError(
            f"unsupported resource.k8s.io version {inp.version!r}; supported: {', '.join(SUPPORTED_VERSIONS)}")
    devices = sorted(inp.dra_devices, key=lambda d: d.index)
    seen: set[int] = set()
    entries: list[Obj] = []
    key = unhealthy_taint_key(driver)
    for dev in devices:
        if dev.index in seen:
            raise SliceError(f"two DRA-side devices share index {dev.index}; device names must be unique")
        seen.add(dev.index)
        reason = inp.unhealthy.get(dev.uuid)
        if reason is not None and not inp.taints:
            continue  # no taints on this server: an unhealthy device is withdrawn from DRA instead
        taint = None if reason is None else {"key": key, "value": taint_value(reason), "effect": "NoSchedule"}
        entries.append(device_entry(dev, inp.version, taint))
    chunks = chunk_devices(entries)
    out: list[Obj] = []
    for n, chunk in enumerate(chunks):
        out.append({
            "apiVersion": f"resource.k8s.io/{inp.version}",
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node, driver, n), "ownerReferences": [owner_reference(inp.node)]},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": inp.generation, "resourceSliceCount": len(chunks)},
                "devices": chunk,
            },
        })
    return out


# --- comparing desired against what the server holds ------------------------------------------------------------

def _comparable_device(entry: Obj) -> Obj:
    body = entry.get("basic") if isinstance(entry.get("basic"), dict) else entry
    assert isinstance(body, dict)
    capacity = {k: _quantity((v or {}).get("value") if isinstance(v, dict) else v)
                for k, v in (body.get("capacity") or {}).items()}
    taints = [(t.get("key"), t.get("value") or "", t.get("effect")) for t in (body.get("taints") or [])]
    return {"name": entry.get("name"), "attributes": body.get("attributes") or {}, "capacity": capacity,
            "taints": taints, "shape": "basic" if "basic" in entry else "flat"}


def comparable(slice_obj: Obj) -> Obj:
    """The fields this driver owns, with server-side additions dropped (taint `timeAdded`) and quantities compared
    by value, so an object read back from the server equals the one we would write. Generation is left out: the
    publisher decides it from the pool as a whole."""
    spec = slice_obj.get("spec") or {}
    pool = spec.get("pool") or {}
    owners = [(o.get("apiVersion"), o.get("kind"), o.get("name"), o.get("uid"))
              for o in (slice_obj.get("metadata") or {}).get("ownerReferences") or []]
    return {
        "name": (slice_obj.get("metadata") or {}).get("name"),
        "owners": owners,
        "driver": spec.get("driver"),
        "nodeName": spec.get("nodeName"),
        "pool": pool.get("name"),
        "count": pool.get("resourceSliceCount"),
        "devices": [_comparable_device(d) for d in spec.get("devices") or []],
    }


def pool_generation(slices: Iterable[Obj]) -> int:
    return max((int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0) for s in slices), default=0)


def pool_unchanged(desired: Sequence[Obj], existing: Sequence[Obj]) -> bool:
    """True when the server already holds exactly the desired pool: same slice names, same content, and one
    generation across all of them (a half-applied earlier change has mixed generations and must be redone)."""
    if len(desired) != len(existing):
        return False
    by_name = {(s.get("metadata") or {}).get("name"): s for s in existing}
    if set(by_name) != {s["metadata"]["name"] for s in desired}:
        return False
    generations = {((s.get("spec") or {}).get("pool") or {}).get("generation") for s in existing}
    if len(generations) != 1:
        return False
    return all(comparable(d) == comparable(by_name[d["metadata"]["name"]]) for d in desired)


__all__ = [
    "DEFAULT_DRIVER",
    "MAX_DEVICES_PER_SLICE",
    "MAX_DEVICES_PER_SLICE_WITH_TAINTS",
    "NodeRef",
    "SliceError",
    "SliceInputs",
    "chunk_devices",
    "comparable",
    "desired_slices",
    "device_attributes",
    "device_entry",
    "pool_generation",
    "pool_unchanged",
    "quantity_bytes",
    "semver",
    "slice_name",
    "taint_value",
    "unhealthy_taint_key",
    "validate_driver_name",
]
