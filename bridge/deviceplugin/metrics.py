"""Prometheus metrics of the device-plugin half, registered on the daemon's own CollectorRegistry.

No metric lives in prometheus_client's global registry: two daemons in one test process (or the bench) must not
share counters.

Device health is read from the live `DeviceTable` at scrape time (`DeviceTableCollector`), not set as a side
effect of sending a ListAndWatch message: with no kubelet connected (or between a kubelet restart and the
re-registration) a GPU that fails must still show up as unhealthy on /metrics, and no series is ever stale.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from bridge.deviceplugin.state import DeviceTable


class DeviceTableCollector(Collector):
    """`dra_bridge_device_healthy` (what the device source says about each GPU) and
    `dra_bridge_deviceplugin_advertised_devices` (how many IDs ListAndWatch reports Healthy / Unhealthy right now: the
    Healthy count is the kubelet's allocatable), computed from the table on every scrape."""

    def __init__(self, table: DeviceTable, resource_name: str) -> None:
        self._table = table
        self._resource = resource_name

    def collect(self) -> Iterator[GaugeMetricFamily]:
        _, reports = self._table.snapshot()
        health = GaugeMetricFamily(
            "dra_bridge_device_healthy", "1 if the GPU is healthy (device source: NVML events or simulation), else 0",
            labels=["resource", "device", "index"])
        by_index = {str(d.uuid): d.index for d in self._table.devices}
        for r in reports:
            health.add_metric([self._resource, r.id, str(by_index[r.id])], float(r.physically_healthy))
        yield health
        advertised = GaugeMetricFamily(
            "dra_bridge_deviceplugin_advertised_devices",
            "Devices ListAndWatch reports to the kubelet, by health (Unhealthy includes GPUs on the DRA side)",
            labels=["resource", "health"])
        healthy = sum(r.healthy for r in reports)
        advertised.add_metric([self._resource, "Healthy"], float(healthy))
        advertised.add_metric([self._resource, "Unhealthy"], float(len(reports) - healthy))
        yield advertised


class DevicePluginMetrics:
    def __init__(self, registry: CollectorRegistry, resource_name: str) -> None:
        self.resource = resource_name
        self._registry = registry
        self._table_collector: DeviceTableCollector | None = None
        self.allocations = Counter(
            "dra_bridge_deviceplugin_allocations",
            "Allocate container requests by outcome (ok, refused-unknown, refused-unhealthy, refused-not-legacy, "
            "invalid)",
            ["resource", "outcome"],
            registry=registry,
        )
        self.registrations = Counter(
            "dra_bridge_deviceplugin_registrations",
            "Register calls to the kubelet by outcome (ok, error)",
            ["resource", "outcome"],
            registry=registry,
        )
        self.kubelet_restarts = Counter(
            "dra_bridge_deviceplugin_kubelet_restarts_seen",
            "Times kubelet.sock was re-created or our socket deleted (each triggers a re-registration)",
            ["resource"],
            registry=registry,
        )
        self.kubelet_disconnects = Counter(
            "dra_bridge_deviceplugin_kubelet_disconnects",
            "Times the kubelet dropped our registration while we kept serving (our ListAndWatch stream ended or was "
            "never opened), each followed by a re-registration",
            ["resource"],
            registry=registry,
        )
        self.socket_moves = Counter(
            "dra_bridge_deviceplugin_socket_moves",
            "Times the kubelet refused our socket path because it still held an endpoint there ('device plugin "
            "already connected', kubelet 1.37+), and we served and registered a fresh socket instead",
            ["resource"],
            registry=registry,
        )
        self.listandwatch_updates = Counter(
            "dra_bridge_deviceplugin_listandwatch_updates",
            "ListAndWatch messages sent (all streams)",
            ["resource"],
            registry=registry,
        )
        self.registered = Gauge(
            "dra_bridge_deviceplugin_registered",
            "1 while registered with the kubelet",
            ["resource"],
            registry=registry,
        )
        self.streams_open = Gauge(
            "dra_bridge_deviceplugin_streams_open",
            "ListAndWatch streams open right now (a kubelet keeps one per registration)",
            ["resource"],
            registry=registry,
        )
        self.streams_refused = Counter(
            "dra_bridge_deviceplugin_streams_refused",
            "ListAndWatch streams refused because the stream limit was reached (RESOURCE_EXHAUSTED)",
            ["resource"],
            registry=registry,
        )
        self.preferred_cut_short = Counter(
            "dra_bridge_deviceplugin_preferred_allocation_cut_short",
            "GetPreferredAllocation searches ended by the call's time budget, deadline or cancellation",
            ["resource"],
            registry=registry,
        )
        self.adopted = Gauge(
            "dra_bridge_deviceplugin_adopted_devices",
            "Devices found assigned to running containers through PodResources at start",
            ["resource"],
            registry=registry,
        )

    def watch_table(self, table: DeviceTable) -> None:
        """Expose `table`'s device health on this registry (once per daemon: the table is built at start)."""
        if self._table_collector is not None:
            self._registry.unregister(self._table_collector)
        self._table_collector = DeviceTableCollector(table, self.resource)
        self._registry.register(self._table_collector)
