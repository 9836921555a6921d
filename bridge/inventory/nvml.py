"""The NVML device source: real GPUs through `pynvml` (the only module of the project that touches NVML).

Invariants:

* No NVML call at import time, and `pynvml` itself is imported only in `NvmlSource.__init__` when no module is
  injected. `devices()` initialises NVML once and caches the snapshot; `close()` shuts NVML down.
* Every NVML failure becomes an `InventoryError` naming the call and the NVML code (`NVML_ERROR_GPU_IS_LOST=15`)
  with a hint for the usual causes. Optional queries (NUMA node, MIG mode, NVLink, architecture) degrade to
  "unknown / none" when NVML says NOT_SUPPORTED or FUNCTION_NOT_FOUND (or the binding lacks the function); any
  other error on them is still raised, since a lost GPU must not look like a GPU without NVLink.
* Health follows NVIDIA's device plugin: register XID-critical and ECC events, wait for them, ignore
  XIDs 13, 31, 43, 45, 68, 109 (+ operator additions); a device whose events cannot be registered is reported
  unhealthy; when the wait itself fails hard, every device is reported unhealthy. Unlike NVIDIA (which skips
  non-XID events), a double-bit ECC event also marks the device unhealthy: it is uncorrectable by definition.
  Single-bit (corrected) ECC events are logged only.
* The blocking `nvmlEventSetWait` runs in a watcher thread, so `health_events` returns within ~100 ms of `stop`
  even while the C call waits out its timeout; `close()` joins the watchers before `nvmlShutdown` (freeing NVML
  under a thread still inside it is not safe), and nothing interrupts the C call, so `close()` can take up to one
  wait. NVIDIA's device plugin waits 5 s per call; we wait 1 s (`DEFAULT_WAIT_MS`): on a real H200 `close()`
  took 2.01 s after a 3 s watch, the daemon releases its instance lock (the successor of a rolling update starts
  then) only after `close()`, and a shorter wait loses nothing (the event set queues events between calls; a
  call returns at once when one is pending). The cost is one NVML call per second.
* MIG: only the parent GPU is modelled here; an XID raised inside a MIG instance marks the whole GPU unhealthy.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bridge.inventory.model import DeviceID, GpuDevice, HealthEvent, InventoryError
from bridge.inventory.xid import describe, ignored_xids, is_critical

log = logging.getLogger(__name__)

DEFAULT_WAIT_MS = 1000  # per nvmlEventSetWait: bounds how long close() waits for a watcher (module docstring)

# nvmlDeviceArchitecture_t values (nvml.h) -> the names NVIDIA's DRA driver publishes.
ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada Lovelace",
                 9: "Hopper", 10: "Blackwell", 13: "Rubin"}

_HINTS = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "libnvidia-ml.so.1 was not found: run on a node with the NVIDIA driver, in a "
                                    "container started with the NVIDIA runtime, or use --devices simulated:SPEC",
    "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded (check `lsmod | grep nvidia`, dmesg)",
    "NVML_ERROR_NO_PERMISSION": "no permission to open /dev/nvidia*: run privileged or mount the device nodes",
    "NVML_ERROR_GPU_IS_LOST": "the GPU fell off the bus or needs a reset (look for XID 79 in dmesg)",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "NVML library and kernel driver versions differ (driver upgraded without "
                                          "a reboot?)",
    "NVML_ERROR_UNINITIALIZED": "NVML was not initialised",
}
_DEGRADABLE = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")


class NvmlCallError(InventoryError):
    """An NVML call failed. `call` is the pynvml function, `code` the NVML return code."""

    def __init__(self, call: str, code: int, code_name: str, text: str) -> None:
        hint = _HINTS.get(code_name)
        super().__init__(f"NVML call {call} failed: {text} ({code_name}={code})" + (f"; {hint}" if hint else ""))
        self.call = call
        self.code = code
        self.code_name = code_name


def format_cuda_version(value: int) -> str:
    """NVML's CUDA driver version integer -> "major.minor" (12040 -> "12.4", 11080 -> "11.8")."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def architecture_from_cc(major: int, minor: int) -> str:
    """Fallback when nvmlDeviceGetArchitecture is unsupported: the architecture implied by compute capability."""
    if major == 7:
        return "Turing" if minor >= 5 else "Volta"
    if major == 8:
        return "Ada Lovelace" if minor == 9 else "Ampere"
    return {3: "Kepler", 5: "Maxwell", 6: "Pascal", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}.get(major,
                                                                                                       "Unknown")


def normalize_bus_id(raw: str | bytes) -> str:
    """NVML's "00000000:18:00.0" -> the sysfs/Kubernetes form "0000:18:00.0" (lower case, 4-digit domain)."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    parts = text.strip().split(":")
    if len(parts) != 3:
        raise InventoryError(f"unexpected PCI bus ID {text!r} from NVML")
    return f"{int(parts[0], 16):04x}:{parts[1].lower()}:{parts[2].lower()}"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class _Link:
    remote_bus: str
    remote_is_switch: bool


class NvmlSource:
    """A `DeviceSource` over NVML. Inject `nvml_module` (a pynvml look-alike) in tests."""

    name = "nvml"

    def __init__(self, *, nvml_module: Any = None, additional_ignored_xids: Iterable[int] = (),
                 sysfs_root: str | Path = "/sys", wait_timeout_ms: int = DEFAULT_WAIT_MS) -> None:
        if nvml_module is None:
            try:
                import pynvml  # the only import of pynvml in the project
            except ImportError as err:
                raise InventoryError("the nvml device source needs the nvidia-ml-py (pynvml) package") from err
            nvml_module = pynvml
        self._nvml = nvml_module
        self._codes = {getattr(nvml_module, n): n for n in dir(nvml_module) if n.startswith("NVML_ERROR_")}
        self._ignored = ignored_xids(additional_ignored_xids)
        self._sysfs = Path(sysfs_root)
        self._wait_ms = wait_timeout_ms
        self._lock = threading.Lock()
        self._initialized = False
        self._devices: tuple[GpuDevice, ...] | None = None
        self._handles: dict[DeviceID, Any] = {}
        self._watchers: list[tuple[threading.Thread, threading.Event]] = []

    @property
    def ignored_xids(self) -> frozenset[int]:
        return self._ignored

    # -- discovery -------------------------------------------------------------------------------------------

    def devices(self) -> tuple[GpuDevice, ...]:
        with self._lock:
            if self._devices is None:
                if not self._initialized:
                    self._call("nvmlInit")
                    self._initialized = True
                self._devices = self._discover()
            return self._devices

    def _discover(self) -> tuple[GpuDevice, ...]:
        driver = _text(self._call("nvmlSystemGetDriverVersion"))
        cuda = format_cuda_version(int(self._call("nvmlSystemGetCudaDriverVersion")))
        count = int(self._call("nvmlDeviceGetCount"))
        drafts: list[GpuDevice] = []
        links: list[list[_Link]] = []
        handles: dict[DeviceID, Any] = {}
        for index in range(count):
            h = self._call("nvmlDeviceGetHandleByIndex", index)
            uuid = DeviceID(_text(self._call("nvmlDeviceGetUUID", h)))
            major, cc_minor = self._call("nvmlDeviceGetCudaComputeCapability", h)
            arch_code = self._optional("nvmlDeviceGetArchitecture", h)
            arch = ARCHITECTURES.get(arch_code) if arch_code is not None else None
            bus = normalize_bus_id(self._call("nvmlDeviceGetPciInfo", h).busId)
            mig = self._optional("nvmlDeviceGetMigMode", h)
            drafts.append(GpuDevice(
                index=index, uuid=uuid, minor=int(self._call("nvmlDeviceGetMinorNumber", h)),
                product_name=_text(self._call("nvmlDeviceGetName", h)),
                memory_bytes=int(self._call("nvmlDeviceGetMemoryInfo", h).total),
                compute_capability=f"{major}.{cc_minor}", architecture=arch or architecture_from_cc(major, cc_minor),
                driver_version=driver, cuda_version=cuda, pci_bus_id=bus, numa_node=self._numa_node(h, bus),
                mig_capable=mig is not None, mig_enabled=mig is not None and int(mig[0]) == 1))
            links.append(self._nvlinks(h))
            handles[uuid] = h
        self._handles = handles
        return _resolve_peers(drafts, links)

    def _numa_node(self, handle: Any, bus: str) -> int | None:
        node = self._optional("nvmlDeviceGetNumaNodeId", handle)
        if node is not None and int(node) >= 0:
            return int(node)
        try:
            value = int((self._sysfs / "bus" / "pci" / "devices" / bus / "numa_node").read_text().strip())
        except (OSError, ValueError):
            return None
        return value if value >= 0 else None

    def _nvlinks(self, handle: Any) -> list[_Link]:
        nvml = self._nvml
        out: list[_Link] = []
        for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
            state = self._optional("nvmlDeviceGetNvLinkState", handle, link, extra=("NVML_ERROR_INVALID_ARGUMENT",))
            if state is None or int(state) != int(getattr(nvml, "NVML_FEATURE_ENABLED", 1)):
                continue
            remote = normalize_bus_id(self._call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link).busId)
            kind = self._optional("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            out.append(_Link(remote, kind is not None and int(kind) == int(
                getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2))))
        return out

    # -- health ----------------------------------------------------------------------------------------------

    def health_events(self, stop: threading.Event) -> Iterator[HealthEvent]:
        self.devices()
        out: queue.Queue[HealthEvent] = queue.Queue()
        inner_stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(out, inner_stop), name="nvml-health", daemon=True)
        with self._lock:
            self._watchers.append((watcher, inner_stop))
        watcher.start()
        try:
            while not stop.is_set():
                try:
                    event = out.get(timeout=0.1)
                except queue.Empty:
                    continue
                yield event
        finally:
            inner_stop.set()

    def _watch(self, out: queue.Queue[HealthEvent], stop: threading.Event) -> None:
        nvml = self._nvml

        def all_unhealthy(reason: str) -> None:
            for u in self._handles:
                out.put(HealthEvent(uuid=u, healthy=False, reason=reason))

        try:
            event_set = self._call("nvmlEventSetCreate")
        except NvmlCallError as err:
            log.error("cannot create an NVML event set; marking all devices unhealthy: %s", err)
            all_unhealthy(str(err))
            return
        try:
            wanted = (nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
                      | nvml.nvmlEventTypeSingleBitEccError)
            for uuid, h in self._handles.items():
                try:
                    supported = int(self._call("nvmlDeviceGetSupportedEventTypes", h))
                    self._call("nvmlDeviceRegisterEvents", h, wanted & supported, event_set)
                except NvmlCallError as err:
                    if err.code_name == "NVML_ERROR_NOT_SUPPORTED":
                        log.warning("device %s is too old for NVML health checking", uuid, extra={"device": uuid})
                    log.error("marking device %s unhealthy: cannot watch its events: %s", uuid, err,
                              extra={"device": uuid})
                    out.put(HealthEvent(uuid=uuid, healthy=False, reason=f"cannot watch NVML events: {err}"))
            failing = False
            while not stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait(event_set, self._wait_ms)
                except nvml.NVMLError as err:
                    if self._codes.get(err.value) == "NVML_ERROR_TIMEOUT":
                        failing = False
                        continue
                    if not failing:
                        wrapped = self._wrap("nvmlEventSetWait", err)
                        log.error("NVML event wait failed; marking all devices unhealthy: %s", wrapped)
                        all_unhealthy(str(wrapped))
                        failing = True
                    stop.wait(min(1.0, self._wait_ms / 1000))  # back off; never spin on a broken NVML
                    continue
                failing = False
                self._handle_event(data, out)
        finally:
            try:
                nvml.nvmlEventSetFree(event_set)
            except nvml.NVMLError as err:
                log.warning("nvmlEventSetFree failed: %s", self._wrap("nvmlEventSetFree", err))

    def _handle_event(self, data: Any, out: queue.Queue[HealthEvent]) -> None:
        nvml = self._nvml
        try:
            uuid = DeviceID(_text(self._call("nvmlDeviceGetUUID", data.device)))
        except NvmlCallError as err:
            log.error("NVML event for an unidentifiable device; marking all devices unhealthy: %s", err)
            for u in self._handles:
                out.put(HealthEvent(uuid=u, healthy=False, reason=f"event from an unidentifiable device: {err}"))
            return
        ctx = {"device": uuid}
        if data.eventType == nvml.nvmlEventTypeXidCriticalError:
            xid = int(data.eventData)
            if not is_critical(xid, self._ignored):
                log.info("ignoring %s on %s (in the ignore list)", describe(xid), uuid, extra={**ctx, "xid": xid})
                return
            log.error("%s on %s: marking it unhealthy", describe(xid), uuid, extra={**ctx, "xid": xid})
            out.put(HealthEvent(uuid=uuid, healthy=False, reason=f"{describe(xid)} on {uuid}", xid=xid))
        elif data.eventType == nvml.nvmlEventTypeDoubleBitEccError:
            log.error("double-bit ECC error on %s: marking it unhealthy", uuid, extra=ctx)
            out.put(HealthEvent(uuid=uuid, healthy=False, reason=f"double-bit ECC error on {uuid}"))
        else:
            log.info("NVML event 0x%x on %s (not a health failure)", int(data.eventType), uuid, extra=ctx)

    def close(self) -> None:
        with self._lock:
            watchers, self._watchers = self._watchers, []
        for thread, inner_stop in watchers:
            inner_stop.set()
        for thread, _ in watchers:
            thread.join(timeout=self._wait_ms / 1000 + 2)
        with self._lock:
            if self._initialized:
                self._initialized = False
                self._devices = None
                try:
                    self._call("nvmlShutdown")
                except NvmlCallError as err:
                    log.warning("NVML shutdown failed: %s", err)

    # -- NVML call helpers -----------------------------------------------------------------------------------

    def _wrap(self, call: str, err: Any) -> NvmlCallError:
        code = int(getattr(err, "value", -1))
        return NvmlCallError(call, code, self._codes.get(code, "NVML_ERROR_UNKNOWN"), str(err))

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, name)(*args)
        except self._nvml.NVMLError as err:
            raise self._wrap(name, err) from err

    def _optional(self, name: str, *args: Any, extra: tuple[str, ...] = ()) -> Any:
        """Like `_call`, but None when the query is unsupported (by the GPU, the driver or the binding)."""
        fn = getattr(self._nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._nvml.NVMLError as err:
            wrapped = self._wrap(name, err)
            if wrapped.code_name in _DEGRADABLE or wrapped.code_name in extra:
                return None
            raise wrapped from err


def _resolve_peers(devices: list[GpuDevice], links: list[list[_Link]]) -> tuple[GpuDevice, ...]:
    """Turn per-link remote PCI addresses into peer UUIDs with link counts.

    A link whose far end is another GPU counts toward that pair. Links that end on an NVSwitch join the GPU to
    the switch fabric: GPUs on the fabric are peers of each other with min(their switch link counts), which is
    how HGX boards (every link to NVSwitch, none GPU-to-GPU) appear.
    """
    by_bus = {d.pci_bus_id: d.uuid for d in devices}
    direct: list[dict[DeviceID, int]] = []
    switch: list[int] = []
    for dev, dev_links in zip(devices, links):
        counts: dict[DeviceID, int] = {}
        on_switch = 0
        for link in dev_links:
            peer = by_bus.get(link.remote_bus)
            if peer is not None and peer != dev.uuid:
                counts[peer] = counts.get(peer, 0) + 1
            elif link.remote_is_switch:
                on_switch += 1
        direct.append(counts)
        switch.append(on_switch)
    out = []
    for i, dev in enumerate(devices):
        peers = dict(direct[i])
        if switch[i]:
            for j, other in enumerate(devices):
                if j != i and switch[j]:
                    peers[other.uuid] = peers.get(other.uuid, 0) + min(switch[i], switch[j])
        out.append(replace(dev, nvlink_peers=tuple(sorted(peers.items()))))
    return tuple(out)
