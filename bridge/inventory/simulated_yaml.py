"""Simulated devices from a YAML file, for layouts a spec string cannot express.

Format (every key but `gpus` optional; unknown keys are errors, so a typo never silently changes a node):

    driverVersion: "550.54.15"
    cudaVersion: "12.4"
    nvlink: auto            # auto: boards from the models, as for specs | none; devices with nvlinkPeers are explicit
    gpus:
      - model: H100-80GB    # a catalog model fills every field below
        count: 4            # several identical GPUs (not with uuid/pciBusID/nvlinkPeers)
      - product: "NVIDIA H100 80GB HBM3"   # or describe a GPU yourself
        memory: 80Gi        # bytes, or Ki/Mi/Gi/Ti (KiB/MiB/GiB/TiB) suffixes
        computeCapability: "9.0"
        architecture: Hopper
        uuid: GPU-8c5a8c24-6f27-4d5b-9c0d-3a0b8e5d1f00
        numa: 1             # or null
        pciBusID: "0000:9a:00.0"
        mig: {capable: true, enabled: false}
        nvlinkPeers: {0: 18, 1: 18}   # peer index (or UUID) -> active links; made symmetric

Missing UUIDs, bus IDs and NUMA nodes are derived exactly as for specs (from the node name and index).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from bridge.inventory.catalog import GpuModel, lookup, model_names
from bridge.inventory.model import DeviceID, GpuDevice, InventoryError
from bridge.inventory.simulated import (
    DEFAULT_CUDA_VERSION,
    DEFAULT_DRIVER_VERSION,
    MAX_SIMULATED_GPUS,
    DeviceDraft,
    auto_nvlink,
    finish_devices,
    simulated_numa_node,
    simulated_pci_bus_id,
    simulated_uuid,
)

YAML_EXAMPLE = "gpus:\n  - model: H100-80GB\n    count: 8"
_TOP_KEYS = {"driverVersion", "cudaVersion", "nvlink", "gpus"}
_GPU_KEYS = {"model", "count", "product", "memory", "computeCapability", "architecture", "uuid", "numa",
             "pciBusID", "mig", "nvlinkPeers"}
_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_PCI_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_CC_RE = re.compile(r"^\d+\.\d+$")
_UNITS = {"": 1, "KI": 1024, "MI": 1024**2, "GI": 1024**3, "TI": 1024**4}


def parse_memory(value: Any, where: str) -> int:
    """A GPU memory size in the device file: bytes, or a whole number with a binary unit as people write GPU memory
    ("80Gi", "81559MiB", "80gi"). Deliberately not a Kubernetes quantity (bridge.kvalues.quantity): it accepts the
    "B" of "MiB" and any letter case, which the quantity grammar refuses, and refuses what a GPU size never is (decimal
    units "80G", fractions "1.5Gi", "500m", zero or negative sizes)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = re.match(r"^\s*(\d+)\s*([KMGT]i)?B?\s*$", str(value), re.IGNORECASE) if isinstance(value, str) else None
    if m is None or int(m.group(1)) <= 0:
        raise InventoryError(f"{where}: invalid memory {value!r}; expected bytes or e.g. '80Gi', '81559MiB'")
    return int(m.group(1)) * _UNITS[(m.group(2) or "").upper()]


def load_yaml_devices(path: str | Path, node_name: str) -> tuple[GpuDevice, ...]:
    """Read and validate a device file; every problem is an InventoryError naming the file and the entry."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as err:
        raise InventoryError(f"cannot read simulated device file {p}: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise InventoryError(f"simulated device file {p} is not valid YAML: {err}") from err
    return devices_from_document(doc, node_name, source=str(p))


def devices_from_document(doc: Any, node_name: str, *, source: str = "<yaml>") -> tuple[GpuDevice, ...]:
    if not node_name:
        raise InventoryError("simulated devices need a node name (their UUIDs are derived from it)")
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list) or not doc["gpus"]:
        raise InventoryError(f"{source}: expected a mapping with a non-empty 'gpus' list, e.g.:\n{YAML_EXAMPLE}")
    _check_keys(doc, _TOP_KEYS, source)
    nvlink_mode = doc.get("nvlink", "auto")
    if nvlink_mode not in ("auto", "none"):
        raise InventoryError(f"{source}: nvlink must be 'auto' or 'none', got {nvlink_mode!r}")

    entries: list[tuple[dict[str, Any], GpuModel, str]] = []
    for n, raw in enumerate(doc["gpus"]):
        where = f"{source}: gpus[{n}]"
        if not isinstance(raw, dict):
            raise InventoryError(f"{where}: expected a mapping, got {raw!r}; e.g.:\n{YAML_EXAMPLE}")
        _check_keys(raw, _GPU_KEYS, where)
        count = raw.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InventoryError(f"{where}: count must be a positive integer, got {count!r}")
        if count > 1 and ({"uuid", "pciBusID", "nvlinkPeers"} & raw.keys()):
            raise InventoryError(f"{where}: count > 1 cannot be combined with uuid, pciBusID or nvlinkPeers")
        model = _model_of(raw, where)
        entries.extend([(raw, model, where)] * count)
    if len(entries) > MAX_SIMULATED_GPUS:
        raise InventoryError(f"{source}: {len(entries)} GPUs; at most {MAX_SIMULATED_GPUS} are supported")

    total = len(entries)
    drafts: list[DeviceDraft] = []
    for i, (raw, model, where) in enumerate(entries):
        uuid = raw.get("uuid", simulated_uuid(node_name, i))
        if not isinstance(uuid, str) or not _UUID_RE.match(uuid):
            raise InventoryError(f"{where}: invalid uuid {uuid!r}; expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
        bus = raw.get("pciBusID", simulated_pci_bus_id(i))
        if not isinstance(bus, str) or not _PCI_RE.match(bus):
            raise InventoryError(f"{where}: invalid pciBusID {bus!r}; expected e.g. '0000:18:00.0'")
        numa = raw.get("numa", simulated_numa_node(i, total))
        if numa is not None and (not isinstance(numa, int) or isinstance(numa, bool) or numa < 0):
            raise InventoryError(f"{where}: numa must be a non-negative integer or null, got {numa!r}")
        mig = raw.get("mig", {})
        if not isinstance(mig, dict) or set(mig) - {"capable", "enabled"} or not all(
                isinstance(v, bool) for v in mig.values()):
            raise InventoryError(f"{where}: mig must be a mapping like {{capable: true, enabled: false}}")
        capable = mig.get("capable", model.mig_capable)
        enabled = mig.get("enabled", False)
        if enabled and not capable:
            raise InventoryError(f"{where}: mig.enabled is true but the GPU is not MIG-capable")
        drafts.append(DeviceDraft(model=model, uuid=DeviceID(uuid), pci_bus_id=bus.lower(), numa_node=numa,
                                  mig_enabled=enabled, mig_capable=capable))
    _check_unique([d.uuid for d in drafts], "uuid", source)
    _check_unique([d.pci_bus_id for d in drafts], "pciBusID", source)

    links = _links(entries, drafts, nvlink_mode, source)
    return finish_devices(drafts, links, _text(doc, "driverVersion", DEFAULT_DRIVER_VERSION, source),
                          _text(doc, "cudaVersion", DEFAULT_CUDA_VERSION, source))


def _model_of(raw: dict[str, Any], where: str) -> GpuModel:
    if "model" in raw:
        model = lookup(str(raw["model"]))
        if model is None:
            raise InventoryError(f"{where}: unknown model {raw['model']!r}; known: {', '.join(model_names())}")
    else:
        missing = [k for k in ("product", "memory", "computeCapability", "architecture") if k not in raw]
        if missing:
            raise InventoryError(f"{where}: give either 'model' (one of {', '.join(model_names())}) or all of "
                                 f"product, memory, computeCapability, architecture (missing: {', '.join(missing)})")
        model = GpuModel(key="custom", product_name="", memory_mib=0, compute_capability="", architecture="",
                         form_factor="PCIe", nvlinks=0, topology="none", mig_capable=False)
    if "product" in raw:
        model = replace(model, key="custom", product_name=_nonempty(raw["product"], "product", where))
    if "memory" in raw:
        mib, rest = divmod(parse_memory(raw["memory"], where), 1024 * 1024)
        if rest or mib == 0:
            raise InventoryError(f"{where}: memory {raw['memory']!r} is not a whole number of MiB")
        model = replace(model, key="custom", memory_mib=mib)
    if "computeCapability" in raw:
        cc = str(raw["computeCapability"])
        if not _CC_RE.match(cc):
            raise InventoryError(f"{where}: invalid computeCapability {raw['computeCapability']!r}; expected e.g. '9.0'"
                                 " (quote it in YAML)")
        model = replace(model, key="custom", compute_capability=cc)
    if "architecture" in raw:
        model = replace(model, key="custom", architecture=_nonempty(raw["architecture"], "architecture", where))
    return model


def _links(entries: list[tuple[dict[str, Any], GpuModel, str]], drafts: list[DeviceDraft], mode: str,
           source: str) -> dict[tuple[int, int], int]:
    explicit = any("nvlinkPeers" in raw for raw, _, _ in entries)
    if not explicit:
        return auto_nvlink([m for _, m, _ in entries]) if mode == "auto" else {}
    by_uuid = {d.uuid: i for i, d in enumerate(drafts)}
    links: dict[tuple[int, int], int] = {}
    for i, (raw, _, where) in enumerate(entries):
        peers = raw.get("nvlinkPeers", {})
        if not isinstance(peers, dict):
            raise InventoryError(f"{where}: nvlinkPeers must map peer index or UUID to a link count, e.g. {{1: 18}}")
        for ref, count in peers.items():
            j = ref if isinstance(ref, int) and not isinstance(ref, bool) else by_uuid.get(DeviceID(str(ref)))
            if j is None or not 0 <= j < len(drafts):
                raise InventoryError(f"{where}: nvlinkPeers refers to unknown GPU {ref!r}")
            if j == i:
                raise InventoryError(f"{where}: a GPU cannot be its own NVLink peer")
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise InventoryError(f"{where}: NVLink link count to {ref!r} must be a positive integer")
            key = (min(i, j), max(i, j))
            if links.get(key, count) != count:
                raise InventoryError(f"{source}: GPUs {key[0]} and {key[1]} list different link counts to each other")
            links[key] = count
    return links


def _check_keys(raw: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        raise InventoryError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")


def _check_unique(values: list[str], what: str, source: str) -> None:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise InventoryError(f"{source}: duplicate {what} {v!r}")
        seen.add(v)


def _nonempty(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InventoryError(f"{where}: {key} must be a non-empty string")
    return value


def _text(doc: dict[str, Any], key: str, default: str, source: str) -> str:
    value = doc.get(key, default)
    if not isinstance(value, str) or not value:
        raise InventoryError(f"{source}: {key} must be a non-empty string (quote versions in YAML), got {value!r}")
    return value
