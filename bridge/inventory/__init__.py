"""GPU inventory: one model, swappable sources (NVML on real nodes, simulated everywhere else).

Usage (the node daemon's composition root)::

    from bridge.inventory import parse_devices_option

    source = parse_devices_option("simulated:8xH100-80GB", node_name="node-1", additional_ignored_xids=[94])
    devices = source.devices()                 # tuple[GpuDevice, ...]; NVML is initialised here for "nvml"
    stop = threading.Event()
    for event in source.health_events(stop):   # blocks; returns within ~0.1 s of stop.set()
        ...                                    # HealthEvent(uuid, healthy, reason, xid)
    source.close()

Tests inject faults into a `SimulatedSource`: `source.inject_xid(uuid, 79)`, `source.set_healthy(uuid)`.
`bridge.inventory.nvml` (the only importer of pynvml) is imported only when "nvml" is asked for.
"""

from bridge.inventory.model import DeviceID, DeviceSource, GpuDevice, HealthEvent, InventoryError
from bridge.inventory.options import parse_devices_option
from bridge.inventory.simulated import SimulatedSource, devices_from_spec
from bridge.inventory.xid import DEFAULT_IGNORED_XIDS, parse_xid_list

__all__ = [
    "DEFAULT_IGNORED_XIDS",
    "DeviceID",
    "DeviceSource",
    "GpuDevice",
    "HealthEvent",
    "InventoryError",
    "SimulatedSource",
    "devices_from_spec",
    "parse_devices_option",
    "parse_xid_list",
]
