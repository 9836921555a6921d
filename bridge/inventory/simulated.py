"""The simulated device source: GPUs from a spec string or a YAML file, with health faults injected on demand.

Used by tests, `bridge demo` and any node without GPUs. The devices look like what NVML reports on real machines
(see `catalog`), and they are deterministic: the same node name and spec give the same UUIDs, PCI bus IDs, NUMA
nodes and NVLink peers on every start, so a restarted daemon finds its checkpoint and the kubelet's assignments
still valid, while two simulated nodes never share a UUID.

Layout rules for specs (`8xH100-80GB`, `4xA100-40GB,2xL4`):

* index = minor = position in the spec; PCI bus IDs follow a DGX H100's slots (18, 2a, 3a, 5d, 9a, ab, ba, db),
  one PCI domain per group of 8;
* NUMA: with 2 or more GPUs, the first half is on node 0 and the second half on node 1 (two-socket servers put
  half the GPUs behind each CPU); a single GPU is on node 0;
* NVLink: consecutive GPUs of the same SXM model form boards of up to 8 wired as the model's `topology` says;
  PCIe models have no NVLink.

Health: `inject_xid` applies NVIDIA's ignore list (an ignored XID is only logged), `set_unhealthy`/`set_healthy`
flip a device directly. Events queue up until the single consumer of `health_events` takes them. Another process
injects them through a faults file (`faults`, `bridge node --simulated-faults`; `bridge.inventory.faults`), which
`health_events` reads every 100 ms.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import uuid as uuidlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bridge.inventory.catalog import GpuModel, group_links, lookup, model_names
from bridge.inventory.faults import FaultsFile
from bridge.inventory.model import DeviceID, GpuDevice, HealthEvent, InventoryError
from bridge.inventory.xid import describe, ignored_xids, is_critical

log = logging.getLogger(__name__)

DEFAULT_DRIVER_VERSION = "550.54.15"
DEFAULT_CUDA_VERSION = "12.4"
MAX_SIMULATED_GPUS = 1024
_BOARD_SIZE = 8
_DGX_PCI_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
# A fixed namespace so UUIDs are stable across releases; changing it would orphan every simulated checkpoint.
_UUID_NAMESPACE = uuidlib.UUID("5f0c6f7e-2b8e-4c8e-9a51-0d7a1b1e9c42")
_SPEC_ITEM = re.compile(r"^\s*(?:(\d+)\s*[xX]\s*)?([A-Za-z0-9][A-Za-z0-9_.-]*)\s*$")
SPEC_EXAMPLE = "8xH100-80GB or 4xA100-40GB,2xL4"


def simulated_uuid(node_name: str, index: int) -> DeviceID:
    """`GPU-` + a UUID derived from node name and index, formatted like NVIDIA's (8-4-4-4-12 hex)."""
    return DeviceID(f"GPU-{uuidlib.uuid5(_UUID_NAMESPACE, f'{node_name}/gpu/{index}')}")


def simulated_pci_bus_id(index: int) -> str:
    domain, slot = divmod(index, _BOARD_SIZE)
    return f"{domain:04x}:{_DGX_PCI_BUSES[slot]}:00.0"


def simulated_numa_node(index: int, count: int) -> int:
    if count < 2:
        return 0
    return 0 if index < (count + 1) // 2 else 1


def parse_spec(spec: str) -> list[GpuModel]:
    """`"4xA100-40GB,2xL4"` -> one model per GPU, in order. Raises InventoryError with a valid example."""
    if not spec.strip():
        raise InventoryError(f"empty simulated device spec; expected e.g. {SPEC_EXAMPLE}")
    models: list[GpuModel] = []
    for item in spec.split(","):
        m = _SPEC_ITEM.match(item)
        if m is None:
            raise InventoryError(
                f"invalid simulated device spec item {item.strip()!r} in {spec!r}: expected COUNTxMODEL, "
                f"e.g. {SPEC_EXAMPLE}")
        count = int(m.group(1)) if m.group(1) is not None else 1
        model = lookup(m.group(2))
        if model is None:
            raise InventoryError(
                f"unknown GPU model {m.group(2)!r} in {spec!r}; known models: {', '.join(model_names())} "
                f"(e.g. {SPEC_EXAMPLE})")
        if count < 1:
            raise InventoryError(f"GPU count must be at least 1 in {item.strip()!r}; e.g. {SPEC_EXAMPLE}")
        models.extend([model] * count)
    if len(models) > MAX_SIMULATED_GPUS:
        raise InventoryError(f"simulated device spec {spec!r} asks for {len(models)} GPUs; "
                             f"at most {MAX_SIMULATED_GPUS} are supported")
    return models


def auto_nvlink(models: Sequence[GpuModel]) -> dict[tuple[int, int], int]:
    """NVLink pairs for GPUs laid out as `models` (see module docstring), keyed (a, b) with a < b."""
    links: dict[tuple[int, int], int] = {}
    start = 0
    while start < len(models):
        model = models[start]
        end = start
        while end < len(models) and models[end] == model and end - start < _BOARD_SIZE:
            end += 1
        if model.form_factor == "SXM":
            for (a, b), n in group_links(model.topology, model.nvlinks, end - start).items():
                links[(start + a, start + b)] = n
        start = end
    return links


@dataclass(frozen=True)
class DeviceDraft:
    """One GPU before UUIDs are resolved into NVLink peers (shared by the spec and YAML loaders)."""

    model: GpuModel
    uuid: DeviceID
    pci_bus_id: str
    numa_node: int | None
    mig_enabled: bool = False
    mig_capable: bool | None = None  # None: from the model


def finish_devices(drafts: Sequence[DeviceDraft], links: dict[tuple[int, int], int], driver_version: str,
                   cuda_version: str) -> tuple[GpuDevice, ...]:
    peers: dict[int, list[tuple[DeviceID, int]]] = {i: [] for i in range(len(drafts))}
    for (a, b), n in sorted(links.items()):
        peers[a].append((drafts[b].uuid, n))
        peers[b].append((drafts[a].uuid, n))
    out = []
    for i, d in enumerate(drafts):
        out.append(GpuDevice(
            index=i, uuid=d.uuid, minor=i, product_name=d.model.product_name, memory_bytes=d.model.memory_bytes,
            compute_capability=d.model.compute_capability, architecture=d.model.architecture,
            driver_version=driver_version, cuda_version=cuda_version, pci_bus_id=d.pci_bus_id,
            numa_node=d.numa_node,
            mig_capable=d.model.mig_capable if d.mig_capable is None else d.mig_capable,
            mig_enabled=d.mig_enabled, nvlink_peers=tuple(sorted(peers[i], key=lambda p: p[0]))))
    return tuple(out)


def devices_from_spec(spec: str, node_name: str, *, driver_version: str = DEFAULT_DRIVER_VERSION,
                      cuda_version: str = DEFAULT_CUDA_VERSION) -> tuple[GpuDevice, ...]:
    if not node_name:
        raise InventoryError("simulated devices need a node name (their UUIDs are derived from it)")
    models = parse_spec(spec)
    drafts = [DeviceDraft(model=m, uuid=simulated_uuid(node_name, i), pci_bus_id=simulated_pci_bus_id(i),
                          numa_node=simulated_numa_node(i, len(models))) for i, m in enumerate(models)]
    return finish_devices(drafts, auto_nvlink(models), driver_version, cuda_version)


class SimulatedSource:
    """A `DeviceSource` over a fixed device list, with injectable health faults (thread-safe)."""

    def __init__(self, devices: Sequence[GpuDevice], *, name: str = "simulated",
                 additional_ignored_xids: Iterable[int] = (), faults: Path | None = None) -> None:
        if not devices:
            raise InventoryError("a simulated source needs at least one device")
        self._faults = FaultsFile(faults) if faults is not None else None
        self.name = name
        self._devices = tuple(devices)
        self._by_uuid = {d.uuid: d for d in self._devices}
        if len(self._by_uuid) != len(self._devices):
            raise InventoryError("simulated devices have duplicate UUIDs")
        self._ignored = ignored_xids(additional_ignored_xids)
        self._lock = threading.Lock()
        self._healthy = {d.uuid: True for d in self._devices}
        self._events: queue.Queue[HealthEvent] = queue.Queue()
        self._closed = False

    @classmethod
    def from_spec(cls, spec: str, node_name: str, *, additional_ignored_xids: Iterable[int] = (),
                  faults: Path | None = None) -> SimulatedSource:
        return cls(devices_from_spec(spec, node_name), name=f"simulated:{spec}",
                   additional_ignored_xids=additional_ignored_xids, faults=faults)

    @property
    def ignored_xids(self) -> frozenset[int]:
        return self._ignored

    def devices(self) -> tuple[GpuDevice, ...]:
        return self._devices

    def is_healthy(self, uuid: str) -> bool:
        self._require(uuid)
        with self._lock:
            return self._healthy[DeviceID(uuid)]

    def inject_xid(self, uuid: str, xid: int) -> bool:
        """Simulate an NVML XID event. Returns True when it marked the device unhealthy, False when ignored."""
        dev = self._require(uuid)
        if not is_critical(xid, self._ignored):
            log.info("ignoring %s on %s (in the ignore list)", describe(xid), dev.uuid,
                     extra={"device": dev.uuid, "xid": xid})
            return False
        self._set(dev.uuid, False, f"{describe(xid)} on {dev.uuid}", xid)
        return True

    def set_unhealthy(self, uuid: str, reason: str = "marked unhealthy by the simulator") -> None:
        self._set(self._require(uuid).uuid, False, reason, None)

    def set_healthy(self, uuid: str, reason: str = "marked healthy by the simulator") -> None:
        self._set(self._require(uuid).uuid, True, reason, None)

    def health_events(self, stop: threading.Event) -> Iterator[HealthEvent]:
        """Yield queued events until `stop` is set (checked every 100 ms, when the faults file is read too).
        Single consumer."""
        while not stop.is_set():
            self._apply_faults()
            try:
                event = self._events.get(timeout=0.1)
            except queue.Empty:
                continue
            yield event

    def _apply_faults(self) -> None:
        if self._faults is None:
            return
        for fault in self._faults.read():
            try:
                dev = self._resolve(fault.gpu)
                if fault.xid is not None:
                    self.inject_xid(dev.uuid, fault.xid)
                elif fault.healthy:
                    self.set_healthy(dev.uuid, fault.reason or "marked healthy in the simulated faults file")
                else:
                    self.set_unhealthy(dev.uuid, fault.reason or "marked unhealthy in the simulated faults file")
            except InventoryError as err:
                log.warning("simulated faults file %s line %d: %s; skipped", self._faults.path, fault.line, err)

    def _resolve(self, gpu: str | int) -> GpuDevice:
        """A GPU by UUID or minor number."""
        if isinstance(gpu, int):
            dev = next((d for d in self._devices if d.minor == gpu), None)
            if dev is None:
                raise InventoryError(f"no simulated GPU with minor number {gpu} (0 to {len(self._devices) - 1})")
            return dev
        return self._require(gpu)

    def close(self) -> None:
        self._closed = True

    def _require(self, uuid: str) -> GpuDevice:
        dev = self._by_uuid.get(DeviceID(uuid))
        if dev is None:
            known = ", ".join(d.uuid for d in self._devices[:4]) + (", ..." if len(self._devices) > 4 else "")
            raise InventoryError(f"unknown device {uuid!r} in simulated source; known: {known}")
        return dev

    def _set(self, uuid: DeviceID, healthy: bool, reason: str, xid: int | None) -> None:
        with self._lock:
            self._healthy[uuid] = healthy
        log.info("simulated health change: %s %s (%s)", uuid, "healthy" if healthy else "unhealthy", reason,
                 extra={"device": uuid})
        self._events.put(HealthEvent(uuid=uuid, healthy=healthy, reason=reason, xid=xid))
