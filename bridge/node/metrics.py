"""The node daemon's metrics registry: one `CollectorRegistry` per daemon, never the process-global one.

Each half of the daemon registers its own metric families on it (the device plugin's `DevicePluginMetrics`; the
DRA half adds its own), and `/metrics` serves the registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, Info

from bridge.deviceplugin.metrics import DevicePluginMetrics


class NodeMetrics:
    def __init__(self, node_name: str, resource_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.info = Info("bridge_node", "The node daemon's identity", registry=self.registry)
        self.info.info({"node": node_name, "resource": resource_name})
        self.devices = Gauge("bridge_node_devices", "GPUs discovered at start", registry=self.registry)
        self.deviceplugin = DevicePluginMetrics(self.registry, resource_name)
