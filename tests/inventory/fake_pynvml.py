"""A fake NVML binding that behaves like `pynvml` (nvidia-ml-py) for the calls `NvmlSource` makes.

Same function names and argument order, same constants with the real numeric values (checked against
nvidia-ml-py 13.x `pynvml.py` by `test_fake_nvml_constants_match_the_real_binding`), the same `NVMLError` class
trick (`NVMLError(3)` is an instance of `NVMLError_NotSupported`, `.value` holds the code), string results as
`str` and struct fields such as `busId` as `bytes`, NVML's 8-digit PCI domain, and NVML_ERROR_UNINITIALIZED
for device calls before `nvmlInit` or after `nvmlShutdown`. Tests configure GPUs, inject failures per call, and
emit events that a blocked `nvmlEventSetWait` receives.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1
NVML_DEVICE_ARCH_VOLTA = 5
NVML_DEVICE_ARCH_AMPERE = 7
NVML_DEVICE_ARCH_ADA = 8
NVML_DEVICE_ARCH_HOPPER = 9

nvmlEventTypeSingleBitEccError = 0x0000000000000001
nvmlEventTypeDoubleBitEccError = 0x0000000000000002
nvmlEventTypePState = 0x0000000000000004
nvmlEventTypeXidCriticalError = 0x0000000000000008

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    _valClassMapping: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


for _name, _code in list(globals().items()):
    if _name.startswith("NVML_ERROR_"):
        _cls_name = "NVMLError_" + _name[len("NVML_ERROR_"):].title().replace("_", "")
        _cls = type(_cls_name, (NVMLError,), {})
        globals()[_cls_name] = _cls
        NVMLError._valClassMapping[_code] = _cls

MIB = 1024 * 1024


@dataclass
class FakeGpu:
    uuid: str
    bus_id: str  # NVML form, 8-digit domain: "00000000:18:00.0"
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total: int = 81559 * MIB
    cc: tuple[int, int] = (9, 0)
    arch: int | None = NVML_DEVICE_ARCH_HOPPER  # None: not supported
    minor: int = 0
    numa: int | None = None  # None: nvmlDeviceGetNumaNodeId not supported
    mig_mode: tuple[int, int] | None = None  # (current, pending); None: not MIG-capable
    # Active NVLink links: (remote NVML bus id, remote device type). Other links report inactive.
    links: list[tuple[str, int]] = field(default_factory=list)
    supported_events: int = (nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError
                             | nvmlEventTypeSingleBitEccError | nvmlEventTypePState)


@dataclass(frozen=True)
class _Handle:
    index: int


@dataclass(frozen=True)
class FakeEventData:
    device: _Handle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


class FakeNvml:
    """An instance is one 'pynvml module'. Attributes listed in `missing` behave as absent from the binding."""

    def __init__(self, gpus: list[FakeGpu], *, driver: str = "550.54.15", cuda: int = 12040,
                 init_error: int | None = None, missing: set[str] | None = None) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.fail: dict[str, int] = {}  # call name -> NVML error code it raises
        self.missing = missing or set()
        self.initialized = False
        self.init_calls = 0
        self.shutdown_calls = 0
        self.free_calls = 0
        self.wait_calls = 0
        self.wait_timeouts: list[int] = []  # the timeoutms of every nvmlEventSetWait, in call order
        self._cond = threading.Condition()
        self._sets: dict[int, dict[int, int]] = {}  # set id -> {gpu index: registered mask}
        self._pending: list[FakeEventData] = []

    def __getattribute__(self, name: str) -> Any:
        if name != "missing" and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    NVMLError = NVMLError

    def _check(self, call: str, *, needs_init: bool = True) -> None:
        code = self.fail.get(call)
        if code is not None:
            raise NVMLError(code)
        if needs_init and not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: _Handle) -> FakeGpu:
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[handle.index]

    # -- init ------------------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self._check("nvmlInit", needs_init=False)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._check("nvmlShutdown")
        self.shutdown_calls += 1
        self.initialized = False

    # -- system ----------------------------------------------------------------------------------------------
    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    # -- device queries --------------------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        self._check("nvmlDeviceGetUUID")
        return self._gpu(handle).uuid

    def nvmlDeviceGetMinorNumber(self, handle: _Handle) -> int:
        self._check("nvmlDeviceGetMinorNumber")
        return self._gpu(handle).minor

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        self._check("nvmlDeviceGetName")
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: Any = None) -> Any:
        self._check("nvmlDeviceGetMemoryInfo")
        total = self._gpu(handle).memory_total
        return type("c_nvmlMemory_t", (), {"total": total, "free": total, "used": 0})()

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        self._check("nvmlDeviceGetCudaComputeCapability")
        return self._gpu(handle).cc

    def nvmlDeviceGetArchitecture(self, device: _Handle) -> int:
        self._check("nvmlDeviceGetArchitecture")
        arch = self._gpu(device).arch
        if arch is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return arch

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:
        self._check("nvmlDeviceGetPciInfo")
        bus = self._gpu(handle).bus_id
        return type("nvmlPciInfo_t", (), {"busId": bus.encode(), "busIdLegacy": bus[4:].encode()})()

    def nvmlDeviceGetNumaNodeId(self, handle: _Handle) -> int:
        self._check("nvmlDeviceGetNumaNodeId")
        numa = self._gpu(handle).numa
        if numa is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return numa

    def nvmlDeviceGetMigMode(self, device: _Handle) -> list[int]:
        self._check("nvmlDeviceGetMigMode")
        mode = self._gpu(device).mig_mode
        if mode is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return list(mode)

    def nvmlDeviceGetNvLinkState(self, device: _Handle, link: int) -> int:
        self._check("nvmlDeviceGetNvLinkState")
        gpu = self._gpu(device)
        if not gpu.links:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < NVML_NVLINK_MAX_LINKS:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return NVML_FEATURE_ENABLED if link < len(gpu.links) else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: _Handle, link: int) -> Any:
        self._check("nvmlDeviceGetNvLinkRemotePciInfo")
        gpu = self._gpu(device)
        if not 0 <= link < len(gpu.links):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return type("nvmlPciInfo_t", (), {"busId": gpu.links[link][0].encode()})()

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: _Handle, link: int) -> int:
        self._check("nvmlDeviceGetNvLinkRemoteDeviceType")
        gpu = self._gpu(handle)
        if not 0 <= link < len(gpu.links):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.links[link][1]

    # -- events ----------------------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> int:
        self._check("nvmlEventSetCreate")
        with self._cond:
            set_id = len(self._sets) + 1
            self._sets[set_id] = {}
            return set_id

    def nvmlDeviceGetSupportedEventTypes(self, handle: _Handle) -> int:
        self._check("nvmlDeviceGetSupportedEventTypes")
        return self._gpu(handle).supported_events

    def nvmlDeviceRegisterEvents(self, handle: _Handle, eventTypes: int, eventSet: int) -> None:
        self._check("nvmlDeviceRegisterEvents")
        self._gpu(handle)
        with self._cond:
            self._sets[eventSet][handle.index] = eventTypes

    def nvmlEventSetWait(self, eventSet: int, timeoutms: int) -> FakeEventData:
        self.wait_calls += 1
        self.wait_timeouts.append(timeoutms)
        self._check("nvmlEventSetWait")
        with self._cond:
            registered = self._sets[eventSet]

            def ready() -> FakeEventData | None:
                for ev in self._pending:
                    if registered.get(ev.device.index, 0) & ev.eventType:
                        return ev
                return None

            found = self._cond.wait_for(ready, timeout=timeoutms / 1000)
            if found is None:
                raise NVMLError(NVML_ERROR_TIMEOUT)
            self._pending.remove(found)
            return found

    def nvmlEventSetFree(self, eventSet: int) -> None:
        self._check("nvmlEventSetFree")
        with self._cond:
            self._sets.pop(eventSet, None)
        self.free_calls += 1

    # -- test controls ---------------------------------------------------------------------------------------
    def emit(self, index: int, event_type: int, data: int = 0) -> None:
        with self._cond:
            self._pending.append(FakeEventData(_Handle(index), event_type, data))
            self._cond.notify_all()

    def emit_xid(self, index: int, xid: int) -> None:
        self.emit(index, nvmlEventTypeXidCriticalError, xid)

    def registered_masks(self) -> dict[int, int]:
        with self._cond:
            merged: dict[int, int] = {}
            for masks in self._sets.values():
                merged.update(masks)
            return merged


# Like the real module, the fake exposes every constant and error subclass as an attribute.
for _name, _value in list(globals().items()):
    if _name.startswith(("NVML_", "nvmlEventType", "NVMLError_")):
        setattr(FakeNvml, _name, _value)


def hgx_h100(count: int = 8, *, numa: bool = True) -> list[FakeGpu]:
    """An HGX H100 board as NVML shows it: 18 active links per GPU, all ending on NVSwitches."""
    buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    return [FakeGpu(uuid=f"GPU-{i:08x}-1111-2222-3333-444455556666", bus_id=f"00000000:{buses[i].upper()}:00.0",
                    minor=i, numa=(0 if i < count // 2 else 1) if numa else None, mig_mode=(0, 0),
                    links=[(f"00000000:{0xc0 + (k % 4):02X}:00.0", NVML_NVLINK_DEVICE_TYPE_SWITCH)
                           for k in range(18)])
            for i in range(count)]
