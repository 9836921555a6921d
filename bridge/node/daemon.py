"""The node daemon's composition root: builds every part from a `NodeConfig` and a `DeviceSource`, and runs them.

Start order (each step only after the previous one succeeded, so a failure leaves nothing half-served):
1. validate every socket path (too long -> `SocketPathError` naming the path and its length);
2. discover devices (the source's `devices()`), build the device table; the node's CDI inventory (`NodeCdi`:
   driver root, device nodes, toolkit spec) is set up and explained in the log, and a CDI configuration that
   cannot work (`--cdi-source toolkit` without a toolkit spec naming the GPUs) fails the start here;
3. adopt existing assignments from the kubelet PodResources API and hand them to the ownership ledger
   (`on_adopted`), so a later split never moves a device a running container holds;
4. write the node's device-plugin CDI spec (`k8s.device-plugin.dra-bridge.io/gpu=<uuid>|<index>|all`,
   `bridge.cdi.DevicePluginCdi`) when a CDI strategy is on (left in place at stop: running containers are
   re-created from it), then start the device plugin (serve, then register; it re-registers after kubelet
   restarts by itself);
5. pump health events from the source into the device table (-> ListAndWatch updates) and to every
   `health_listeners` callback (the DRA half's health board);
6. start further halves (`components`: the DRA half plugs in here) and the HTTP endpoint.
Stop runs in reverse and removes our sockets. `stop()` is idempotent.

The ledger is reached only through narrow seams given to the constructor: `side_of(device) -> Side` (what
ListAndWatch offers), `allocate_guard(ids)` (the ledger's Allocate guard) and `on_adopted(Adoption)`. Without a
ledger everything is legacy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from bridge.cdi import DEVICE_PLUGIN_KIND, CdiOptions, DevicePluginCdi, NodeCdi
from bridge.cdi.discovery import is_char_device
from bridge.deviceplugin.allocate import CDI_ANNOTATIONS, CDI_CRI, ENVVAR, AllocationConfig
from bridge.deviceplugin.plugin import DevicePlugin, PluginConfig
from bridge.deviceplugin.state import AllocateGuard, DeviceTable, SideOf, all_legacy
from bridge.inventory.model import DeviceSource, GpuDevice, HealthEvent
from bridge.logs import ContextLogger
from bridge.node.http import Check, HealthServer
from bridge.node.metrics import NodeMetrics
from bridge.node.podresources import PODRESOURCES_SOCKET, Adoption, adopt
from bridge.unixsock import check_socket_path

log = logging.getLogger("bridge.node")

SLOW_STOP_STEP_S = 2.0  # a stop step at least this slow is logged by name


def _step_name(action: Callable[[], None]) -> str:
    owner = getattr(action, "__self__", None)
    return f"{type(owner).__name__}.{action.__name__}" if owner is not None else getattr(action, "__name__", "?")


@dataclass(frozen=True)
class NodeConfig:
    node_name: str
    kubelet_root: Path = Path("/var/lib/kubelet")
    device_plugin_dir: Path | None = None  # None: <kubelet_root>/device-plugins (see PluginConfig.device_plugin_dir)
    cdi_root: Path = Path("/var/run/cdi")
    state_dir: Path = Path("/var/lib/dra-bridge")
    claims_dir: Path | None = None  # the prepared-claim records (bridge.dra.stores); None: the state directory
    resource_name: str = "nvidia.com/gpu"
    device_list_strategy: frozenset[str] = frozenset({ENVVAR})
    http_address: tuple[str, int] | None = ("127.0.0.1", 8080)
    plugin_poll_interval_s: float = 0.1
    adopt_timeout_s: float = 10.0
    # None: `dra-bridge-<resource>.sock`; a rolling update gives each instance its own (pod UID in the name)
    device_plugin_socket_name: str | None = None
    # Driver root, dev root, host-root view, hook, --cdi-source. `check_device_nodes` (real GPUs) also leaves
    # control nodes the host lacks (/dev/nvidia-uvm before the module loads) out of Allocate's device specs.
    cdi: CdiOptions = CdiOptions()

    @property
    def claims_path(self) -> Path:
        return self.claims_dir if self.claims_dir is not None else self.state_dir

    @property
    def device_plugin_path(self) -> Path:
        """The kubelet's device-plugin directory: kubelet.sock, our plugin socket, its checkpoint."""
        return self.device_plugin_dir if self.device_plugin_dir is not None else self.kubelet_root / "device-plugins"


class NodeComponent(Protocol):
    """A further half of the daemon (the DRA kubelet plugin): started after the device plugin, stopped before."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def liveness(self) -> Mapping[str, Check]: ...

    def readiness(self) -> Mapping[str, Check]: ...


class NodeDaemon:
    def __init__(
        self,
        config: NodeConfig,
        source: DeviceSource,
        *,
        side_of: SideOf = all_legacy,
        allocate_guard: AllocateGuard | None = None,
        on_adopted: Callable[[Adoption], None] | None = None,
        on_socket_moved: Callable[[str], None] | None = None,
        components: Sequence[NodeComponent] = (),
        health_listeners: Sequence[Callable[[HealthEvent], None]] = (),
        node_cdi: NodeCdi | None = None,
    ) -> None:
        """`node_cdi`: the node's CDI inventory when the caller shares it with the DRA half (else built here).
        `on_socket_moved`: told the device plugin's new socket path when it moves to a fresh name."""
        self.config = config
        self.source = source
        self.metrics = NodeMetrics(config.node_name, config.resource_name)
        self._side_of = side_of
        self._allocate_guard = allocate_guard
        self._on_adopted = on_adopted
        self._on_socket_moved = on_socket_moved
        self.components = list(components)
        self.health_listeners = list(health_listeners)
        self.plugin_config = PluginConfig(
            kubelet_root=config.kubelet_root, device_plugin_dir=config.device_plugin_dir,
            resource_name=config.resource_name,
            socket_name=config.device_plugin_socket_name, poll_interval_s=config.plugin_poll_interval_s)
        self.allocation = AllocationConfig(strategies=config.device_list_strategy, resource_name=config.resource_name)
        self.node_cdi = node_cdi
        self.dp_cdi: DevicePluginCdi | None = None
        self.table: DeviceTable | None = None
        self.plugin: DevicePlugin | None = None
        self.http: HealthServer | None = None
        self.adoption = Adoption()
        self._stop = threading.Event()
        self._health_thread: threading.Thread | None = None
        self._started: list[Callable[[], None]] = []  # stop actions, run in reverse
        self._stopped = False
        self._log = ContextLogger(log, {"node": config.node_name})

    def start(self) -> None:
        began = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self._log.info("node daemon serving (started in %.2fs)", time.monotonic() - began)

    def _start(self) -> None:
        cfg = self.config
        # 1. Fail fast on unusable socket paths, before touching the devices.
        for path in (self.plugin_config.socket_path, self.plugin_config.kubelet_socket,
                     cfg.kubelet_root / PODRESOURCES_SOCKET):
            check_socket_path(path)
        # 2. Devices.
        devices = self.source.devices()
        self.metrics.devices.set(len(devices))
        self._setup_cdi(devices)
        self.table = DeviceTable(devices, self._side_of, self._allocate_guard)
        self.metrics.deviceplugin.watch_table(self.table)
        plugin = DevicePlugin(self.table, self.allocation, self.metrics.deviceplugin, self.plugin_config)
        plugin.on_socket_moved = self._on_socket_moved
        self._log.info("discovered %d GPU(s) from %s", len(devices), self.source.name,
                       extra={"devices": ",".join(d.uuid for d in devices)})
        # 3. Adoption before we offer anything.
        self.adoption = adopt(str(cfg.kubelet_root), cfg.resource_name, {d.uuid for d in devices},
                              cfg.adopt_timeout_s)
        self.metrics.deviceplugin.adopted.labels(cfg.resource_name).set(len(self.adoption.in_use))
        if self._on_adopted is not None:
            self._on_adopted(self.adoption)
        # 4. Device plugin: the node's CDI spec first when a strategy hands out CDI names.
        if self.dp_cdi is not None:
            self.dp_cdi.start()
        plugin.start()
        self.plugin = plugin
        self._started.append(plugin.stop)
        # 5. Health pump.
        self._health_thread = threading.Thread(target=self._pump_health, name="node-health", daemon=True)
        self._health_thread.start()
        self._started.append(self._stop_health)
        # 6. Further halves, then HTTP.
        for c in self.components:
            c.start()
            self._started.append(c.stop)
        if cfg.http_address is not None:
            live: dict[str, Check] = {"deviceplugin-socket": plugin.probe}
            ready: dict[str, Check] = {"deviceplugin-registered": plugin.readiness}
            for c in self.components:
                live.update(c.liveness())
                ready.update(c.readiness())
            self.http = HealthServer(cfg.http_address, self.metrics.registry, live, ready)
            self.http.start()
            self._started.append(self.http.stop)
            self._log.info("health and metrics on http://%s:%d/", self.http.host, self.http.port)

    def _setup_cdi(self, devices: Sequence[GpuDevice]) -> None:
        """The node's CDI inventory (explained in the log), and the Allocate settings that depend on it."""
        cfg = self.config
        if self.node_cdi is None:
            self.node_cdi = NodeCdi(cfg.cdi, devices, own_kinds=(DEVICE_PLUGIN_KIND,))
            for level, line in self.node_cdi.describe():
                self._log.log(level, "%s", line)
        self.node_cdi.check()
        node_cdi = self.node_cdi
        dev_root = node_cdi.dev_root
        host_has = (lambda p: is_char_device(node_cdi.dev_root.view_path(p))) if cfg.cdi.check_device_nodes else None
        if self.allocation.strategies & {CDI_ANNOTATIONS, CDI_CRI}:
            self.dp_cdi = DevicePluginCdi(cfg.cdi_root, self.node_cdi, devices)
            self.allocation = replace(self.allocation, cdi_devices=self.dp_cdi.cdi_devices, host_has=host_has,
                                      dev_root=dev_root.host)
        else:
            self.allocation = replace(self.allocation, host_has=host_has, dev_root=dev_root.host)

    def _pump_health(self) -> None:
        assert self.table is not None
        try:
            for event in self.source.health_events(self._stop):
                for listener in self.health_listeners:  # e.g. the DRA half's health board
                    try:
                        listener(event)
                    except Exception:
                        self._log.exception("health listener failed", extra={"device": event.uuid})
                if self.table.set_health(event.uuid, event.healthy, event.reason):
                    level = logging.INFO if event.healthy else logging.WARNING
                    self._log.log(level, "device %s is now %s: %s", event.uuid,
                                  "healthy" if event.healthy else "unhealthy", event.reason,
                                  extra={"device": event.uuid, "xid": event.xid})
        except Exception:
            # A broken health source must not leave devices looking healthy: mark them all unhealthy, as NVIDIA's
            # plugin does when NVML event waiting fails.
            self._log.exception("health source failed; marking every device unhealthy")
            for d in self.table.devices:
                self.table.set_health(d.uuid, False, "health monitoring failed")

    def _stop_health(self) -> None:
        self._stop.set()
        if self._health_thread is not None:
            self._health_thread.join(timeout=10)
            self._health_thread = None

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        while self._started:
            action = self._started.pop()
            began = time.monotonic()
            try:
                action()
            except Exception:
                self._log.exception("error while stopping")
            took = time.monotonic() - began
            if took >= SLOW_STOP_STEP_S:  # the step that eats the kubelet's termination grace period, named
                self._log.warning("stopping %s took %.1fs", _step_name(action), took)
        try:
            self.source.close()
        except Exception:
            self._log.exception("error while closing the device source")
        self._log.info("node daemon stopped")

    def ownership_changed(self) -> None:
        """Call after the ledger moved a device between sides: every ListAndWatch stream gets a fresh list (a
        device now on the dra or withdrawn side is reported Unhealthy; one back on legacy, Healthy)."""
        if self.table is not None:
            self.table.ownership_changed()

    def wait_registered(self, timeout: float) -> bool:
        return self.plugin is not None and self.plugin.wait_registered(timeout)

