"""The NVML source against a fake pynvml: discovery, degraded optional queries, clear errors, XID health."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import fake_pynvml as fake
from bridge.inventory import HealthEvent, InventoryError
from bridge.inventory.nvml import NvmlCallError, NvmlSource, format_cuda_version, normalize_bus_id
from fake_pynvml import FakeGpu, FakeNvml, hgx_h100

REAL_PYNVML = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
    "site-packages" / "pynvml.py"


def test_fake_nvml_constants_match_the_real_binding() -> None:
    """The fake's codes and event types must be pynvml's, read from its source (never imported here)."""
    tree = ast.parse(REAL_PYNVML.read_text())
    real = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    names = [n for n in vars(fake) if n.startswith(("NVML_", "nvmlEventType"))]
    assert len(names) > 20
    for name in names:
        assert getattr(fake, name) == real[name], name


def test_fake_errors_map_codes_to_subclasses_like_pynvml() -> None:
    err = fake.NVMLError(3)
    assert isinstance(err, fake.NVMLError_NotSupported) and err.value == 3 and str(err) == "Not Supported"
    assert isinstance(fake.NVMLError(15), fake.NVMLError_GpuIsLost)


def test_cuda_versions_and_bus_ids_are_formatted_like_kubernetes_expects() -> None:
    assert format_cuda_version(12040) == "12.4"
    assert format_cuda_version(11080) == "11.8"
    assert format_cuda_version(13000) == "13.0"
    assert normalize_bus_id(b"00000000:9A:00.0") == "0000:9a:00.0"
    assert normalize_bus_id("00000001:18:00.0") == "0001:18:00.0"


def test_importing_the_inventory_never_loads_pynvml() -> None:
    code = "import sys, bridge.inventory, bridge.inventory.nvml; print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_construction_makes_no_nvml_call() -> None:
    nvml = FakeNvml(hgx_h100())
    NvmlSource(nvml_module=nvml)
    assert nvml.init_calls == 0


def test_discovers_an_hgx_h100_board() -> None:
    nvml = FakeNvml(hgx_h100())
    src = NvmlSource(nvml_module=nvml)
    devs = src.devices()
    assert len(devs) == 8
    d = devs[5]
    assert d.uuid == "GPU-00000005-1111-2222-3333-444455556666"
    assert (d.index, d.minor, d.device_node) == (5, 5, "/dev/nvidia5")
    assert (d.product_name, d.memory_bytes) == ("NVIDIA H100 80GB HBM3", 81559 * 1024 * 1024)
    assert (d.compute_capability, d.architecture) == ("9.0", "Hopper")
    assert (d.driver_version, d.cuda_version) == ("550.54.15", "12.4")
    assert d.pci_bus_id == "0000:ab:00.0"
    assert d.numa_node == 1
    assert (d.mig_capable, d.mig_enabled) == (True, False)
    # every link ends on an NVSwitch: all eight are peers with their 18 links
    assert len(d.nvlink_peers) == 7 and all(n == 18 for _, n in d.nvlink_peers)
    assert src.devices() is devs and nvml.init_calls == 1  # cached


def test_direct_gpu_to_gpu_links_are_counted_per_peer() -> None:
    a = FakeGpu(uuid="GPU-a", bus_id="00000000:18:00.0", links=[("00000000:2A:00.0", 0)] * 2)
    b = FakeGpu(uuid="GPU-b", bus_id="00000000:2A:00.0", minor=1, links=[("00000000:18:00.0", 0)] * 2)
    c = FakeGpu(uuid="GPU-c", bus_id="00000000:3A:00.0", minor=2)
    devs = NvmlSource(nvml_module=FakeNvml([a, b, c])).devices()
    assert devs[0].nvlink_peers == (("GPU-b", 2),)
    assert devs[1].nvlink_peers == (("GPU-a", 2),)
    assert devs[2].nvlink_peers == ()


def test_unsupported_optional_queries_degrade_instead_of_failing(tmp_path: Path) -> None:
    gpu = FakeGpu(uuid="GPU-t4", bus_id="00000000:3B:00.0", name="Tesla T4", cc=(7, 5), arch=None, numa=None)
    sysfs = tmp_path / "sys"
    (sysfs / "bus/pci/devices/0000:3b:00.0").mkdir(parents=True)
    (sysfs / "bus/pci/devices/0000:3b:00.0/numa_node").write_text("1\n")
    (d,) = NvmlSource(nvml_module=FakeNvml([gpu]), sysfs_root=sysfs).devices()
    assert d.architecture == "Turing"  # from compute capability 7.5
    assert d.numa_node == 1  # from sysfs
    assert (d.mig_capable, d.mig_enabled, d.nvlink_peers) == (False, False, ())


def test_numa_minus_one_in_sysfs_means_unknown(tmp_path: Path) -> None:
    gpu = FakeGpu(uuid="GPU-x", bus_id="00000000:3B:00.0", numa=None)
    (tmp_path / "bus/pci/devices/0000:3b:00.0").mkdir(parents=True)
    (tmp_path / "bus/pci/devices/0000:3b:00.0/numa_node").write_text("-1\n")
    assert NvmlSource(nvml_module=FakeNvml([gpu]), sysfs_root=tmp_path).devices()[0].numa_node is None


def test_an_older_binding_without_numa_and_architecture_calls_still_works(tmp_path: Path) -> None:
    nvml = FakeNvml(hgx_h100(1), missing={"nvmlDeviceGetNumaNodeId", "nvmlDeviceGetArchitecture"})
    (d,) = NvmlSource(nvml_module=nvml, sysfs_root=tmp_path).devices()
    assert (d.architecture, d.numa_node) == ("Hopper", None)


def test_mig_mode_enabled_is_reported() -> None:
    gpus = hgx_h100(1)
    gpus[0].mig_mode = (1, 1)
    (d,) = NvmlSource(nvml_module=FakeNvml(gpus)).devices()
    assert d.mig_capable and d.mig_enabled


@pytest.mark.parametrize(("code", "hint"), [
    (fake.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 was not found"),
    (fake.NVML_ERROR_DRIVER_NOT_LOADED, "kernel driver is not loaded"),
    (fake.NVML_ERROR_NO_PERMISSION, "no permission"),
])
def test_init_failures_name_the_call_the_code_and_the_likely_cause(code: int, hint: str) -> None:
    src = NvmlSource(nvml_module=FakeNvml([], init_error=code))
    with pytest.raises(InventoryError) as err:
        src.devices()
    text = str(err.value)
    assert "nvmlInit" in text and f"={code}" in text and hint in text
    assert isinstance(err.value, NvmlCallError) and err.value.code == code


def test_a_lost_gpu_during_discovery_is_an_error_not_a_missing_feature() -> None:
    nvml = FakeNvml(hgx_h100(2))
    nvml.fail["nvmlDeviceGetNvLinkState"] = fake.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(NvmlCallError) as err:
        NvmlSource(nvml_module=nvml).devices()
    assert "nvmlDeviceGetNvLinkState" in str(err.value)
    assert "NVML_ERROR_GPU_IS_LOST=15" in str(err.value)
    assert "fell off the bus" in str(err.value)


def test_close_shuts_nvml_down_once() -> None:
    nvml = FakeNvml(hgx_h100(1))
    src = NvmlSource(nvml_module=nvml)
    src.devices()
    src.close()
    src.close()
    assert nvml.shutdown_calls == 1 and not nvml.initialized


# -- health ---------------------------------------------------------------------------------------------------

class Watch:
    """Consume health_events in a thread, collecting events, as the daemon does."""

    def __init__(self, src: NvmlSource) -> None:
        self.src = src
        self.stop = threading.Event()
        self.events: list[HealthEvent] = []
        self.cond = threading.Condition()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for ev in self.src.health_events(self.stop):
            with self.cond:
                self.events.append(ev)
                self.cond.notify_all()
        self.done.set()

    def wait_for(self, n: int, timeout: float = 20) -> list[HealthEvent]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.events) >= n, timeout), f"got {self.events}"
            return list(self.events)


@pytest.fixture
def board() -> Iterator[tuple[FakeNvml, NvmlSource, Watch]]:
    nvml = FakeNvml(hgx_h100(4))
    src = NvmlSource(nvml_module=nvml, wait_timeout_ms=100)
    watch = Watch(src)
    yield nvml, src, watch
    watch.stop.set()
    assert watch.done.wait(10)
    src.close()


def _wait_registered(nvml: FakeNvml, count: int) -> None:
    for _ in range(400):
        if len(nvml.registered_masks()) == count and nvml.wait_calls:
            return
        threading.Event().wait(0.05)
    raise AssertionError("events were never registered")


def test_registers_xid_and_ecc_events_for_every_device(board: tuple[FakeNvml, NvmlSource, Watch]) -> None:
    nvml, _, _ = board
    _wait_registered(nvml, 4)
    want = fake.nvmlEventTypeXidCriticalError | fake.nvmlEventTypeDoubleBitEccError \
        | fake.nvmlEventTypeSingleBitEccError
    assert set(nvml.registered_masks().values()) == {want}


def test_a_critical_xid_makes_only_that_device_unhealthy(board: tuple[FakeNvml, NvmlSource, Watch]) -> None:
    nvml, _, watch = board
    _wait_registered(nvml, 4)
    nvml.emit_xid(2, 79)
    (ev,) = watch.wait_for(1)
    assert (ev.uuid, ev.healthy, ev.xid) == ("GPU-00000002-1111-2222-3333-444455556666", False, 79)
    assert "XID 79" in ev.reason


def test_ignored_xids_and_corrected_ecc_leave_devices_healthy(board: tuple[FakeNvml, NvmlSource, Watch]) -> None:
    nvml, _, watch = board
    _wait_registered(nvml, 4)
    for xid in (13, 31, 43, 45, 68, 109):
        nvml.emit_xid(0, xid)
    nvml.emit(0, fake.nvmlEventTypeSingleBitEccError)
    nvml.emit(1, fake.nvmlEventTypeDoubleBitEccError)  # a marker that must be the first event seen
    (ev,) = watch.wait_for(1)
    assert (ev.uuid, ev.healthy) == ("GPU-00000001-1111-2222-3333-444455556666", False)
    assert "double-bit ECC" in ev.reason


def test_additional_ignored_xids_are_honoured() -> None:
    nvml = FakeNvml(hgx_h100(1))
    src = NvmlSource(nvml_module=nvml, additional_ignored_xids=[79], wait_timeout_ms=100)
    watch = Watch(src)
    try:
        _wait_registered(nvml, 1)
        nvml.emit_xid(0, 79)
        nvml.emit_xid(0, 48)
        (ev,) = watch.wait_for(1)
        assert ev.xid == 48
    finally:
        watch.stop.set()
        src.close()


def test_a_hard_wait_failure_marks_every_device_unhealthy_once(board: tuple[FakeNvml, NvmlSource, Watch]) -> None:
    nvml, _, watch = board
    _wait_registered(nvml, 4)
    nvml.fail["nvmlEventSetWait"] = fake.NVML_ERROR_GPU_IS_LOST
    events = watch.wait_for(4)
    assert {e.uuid for e in events} == {g.uuid for g in nvml.gpus}
    assert all(not e.healthy and "nvmlEventSetWait" in e.reason and "GPU_IS_LOST" in e.reason for e in events)
    calls = nvml.wait_calls
    for _ in range(100):  # a few more failing waits happen, but no new events
        if nvml.wait_calls >= calls + 2:
            break
        threading.Event().wait(0.05)
    assert len(watch.events) == 4


def test_a_device_whose_events_cannot_be_registered_is_unhealthy() -> None:
    nvml = FakeNvml(hgx_h100(2))
    nvml.fail["nvmlDeviceRegisterEvents"] = fake.NVML_ERROR_NOT_SUPPORTED
    src = NvmlSource(nvml_module=nvml, wait_timeout_ms=100)
    watch = Watch(src)
    try:
        events = watch.wait_for(2)
        assert all(not e.healthy and "cannot watch NVML events" in e.reason for e in events)
    finally:
        watch.stop.set()
        src.close()


def test_stop_returns_promptly_and_close_frees_the_event_set() -> None:
    nvml = FakeNvml(hgx_h100(1))
    src = NvmlSource(nvml_module=nvml, wait_timeout_ms=1000)  # the C call blocks much longer than the poll
    watch = Watch(src)
    _wait_registered(nvml, 1)
    watch.stop.set()
    assert watch.done.wait(10)
    src.close()
    assert nvml.free_calls == 1 and nvml.shutdown_calls == 1


def test_the_watcher_blocks_in_nvml_at_most_a_second_so_close_never_waits_longer() -> None:
    """close() must join the watcher before nvmlShutdown, and nothing interrupts nvmlEventSetWait: with NVIDIA's
    5 s wait a real H200 took 2.01 s to close after a 3 s watch, and the daemon holds its instance lock until then."""
    nvml = FakeNvml(hgx_h100(1))
    src = NvmlSource(nvml_module=nvml)  # the default wait
    watch = Watch(src)
    _wait_registered(nvml, 1)
    watch.stop.set()
    assert watch.done.wait(10)
    src.close()
    assert nvml.free_calls == 1 and nvml.shutdown_calls == 1  # the watcher was joined before the shutdown
    assert nvml.wait_timeouts and max(nvml.wait_timeouts) == 1000
