"""GPU inventory: one model, swappable sources (NVML on real nodes, simulated everywhere else)."""

from bridge.inventory.model import DeviceID, DeviceSource, GpuDevice, HealthEvent, InventoryError

__all__ = ["DeviceID", "DeviceSource", "GpuDevice", "HealthEvent", "InventoryError"]
