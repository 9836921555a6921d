"""The `--devices` option: `nvml`, `simulated:SPEC` or `simulated:/path/to/devices.yaml` -> a DeviceSource.

Nothing is discovered here: the NVML source initialises NVML only when `devices()` is first called, so a bad
option is reported before any driver call, and `--help` never touches a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bridge.inventory.model import DeviceSource, InventoryError
from bridge.inventory.simulated import SPEC_EXAMPLE, SimulatedSource

DEVICES_EXAMPLES = f"'nvml', 'simulated:{SPEC_EXAMPLE.split(' or ')[0]}', 'simulated:/etc/bridge/devices.yaml'"


def parse_devices_option(value: str, node_name: str, *, additional_ignored_xids: Iterable[int] = (),
                         faults: Path | None = None) -> DeviceSource:
    """`faults`: the simulated GPUs' faults file (`bridge.inventory.faults`); refused with real GPUs."""
    text = value.strip()
    if text == "nvml":
        if faults is not None:
            raise InventoryError("--simulated-faults needs simulated GPUs (--devices simulated:...): a real GPU's "
                                 "faults come from NVML")
        from bridge.inventory.nvml import NvmlSource  # deferred: keeps pynvml out of simulated-only processes

        return NvmlSource(additional_ignored_xids=additional_ignored_xids)
    kind, sep, rest = text.partition(":")
    if kind != "simulated" or not sep:
        raise InventoryError(f"invalid --devices value {value!r}; expected one of {DEVICES_EXAMPLES}")
    rest = rest.strip()
    if not rest:
        raise InventoryError(f"--devices {value!r} names no devices; e.g. 'simulated:{SPEC_EXAMPLE.split(' or ')[0]}'")
    if rest.endswith((".yaml", ".yml")) or "/" in rest:
        from bridge.inventory.simulated_yaml import load_yaml_devices

        return SimulatedSource(load_yaml_devices(rest, node_name), name=f"simulated:{rest}",
                               additional_ignored_xids=additional_ignored_xids, faults=faults)
    return SimulatedSource.from_spec(rest, node_name, additional_ignored_xids=additional_ignored_xids, faults=faults)
