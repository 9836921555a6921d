"""Prometheus metrics of the device-plugin half, registered on the daemon's own CollectorRegistry.

No metric lives in prometheus_client's global registry: two daemons in one test process (or the bench) must not
share counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class DevicePluginMetrics:
    def __init__(self, registry: CollectorRegistry, resource_name: str) -> None:
        self.resource = resource_name
        self.allocations = Counter(
            "bridge_deviceplugin_allocations",
            "Allocate container requests by outcome (ok, refused-unknown, refused-unhealthy, refused-not-legacy, "
            "invalid)",
            ["resource", "outcome"],
            registry=registry,
        )
        self.registrations = Counter(
            "bridge_deviceplugin_registrations",
            "Register calls to the kubelet by outcome (ok, error)",
            ["resource", "outcome"],
            registry=registry,
        )
        self.kubelet_restarts = Counter(
            "bridge_deviceplugin_kubelet_restarts_seen",
            "Times kubelet.sock was re-created or our socket deleted (each triggers a re-registration)",
            ["resource"],
            registry=registry,
        )
        self.listandwatch_updates = Counter(
            "bridge_deviceplugin_listandwatch_updates",
            "ListAndWatch messages sent (all streams)",
            ["resource"],
            registry=registry,
        )
        self.device_health = Gauge(
            "bridge_device_healthy",
            "1 if the device is reported Healthy to the kubelet, else 0",
            ["resource", "device"],
            registry=registry,
        )
        self.registered = Gauge(
            "bridge_deviceplugin_registered",
            "1 while registered with the kubelet",
            ["resource"],
            registry=registry,
        )
        self.adopted = Gauge(
            "bridge_deviceplugin_adopted_devices",
            "Devices found assigned to running containers through PodResources at start",
            ["resource"],
            registry=registry,
        )
