"""`KubeletSimulator`: one object playing the kubelet for a node daemon under test or in `bridge demo`.

It owns the kubelet root layout (`device-plugins/`, `plugins/`, `plugins_registry/`, `pod-resources/`) and
composes the simulated device manager (legacy device plugins), the PodResources server and, when given an API
client and a node name, the DRA manager (plugin watcher on `plugins_registry`, NodePrepare/Unprepare caller,
health-stream consumer), whose prepared claims PodResources reports as `dynamic_resources`.

Lifecycle like the kubelet's: `start()` wipes the node's ResourceSlices (DRA side), serves PodResources and
`kubelet.sock`, and watches `plugins_registry`; `restart()` drops every plugin connection, deletes the device-plugin
sockets, serves a fresh `kubelet.sock`, forgets which claims are prepared (so Prepare is called again), wipes the
node's ResourceSlices again and rediscovers the DRA registration sockets. Further parts join through `add_component`.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Protocol

from bridge.kube.api import KubeAPI
from bridge.sandbox.kubelet.devicemanager import DeviceManager
from bridge.sandbox.kubelet.dramanager import DraManager
from bridge.sandbox.kubelet.podresources import PodResourcesServer

SUBDIRS = ("device-plugins", "plugins", "plugins_registry", "pod-resources")


class Component(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class KubeletSimulator:
    def __init__(self, root: Path, *, kube: KubeAPI | None = None, node_name: str | None = None,
                 dra_call_timeout: float = 45.0, dra_health_retry: float = 5.0) -> None:
        if (kube is None) != (node_name is None):
            raise ValueError("the DRA side needs both an API client and the node name")
        self.root = Path(root)
        self.devices = DeviceManager(self.root / "device-plugins")
        self.podresources = PodResourcesServer(self.root, self.devices)
        self.dra: DraManager | None = None
        if kube is not None and node_name is not None:
            self.dra = DraManager(kube, node_name, str(self.root / "plugins_registry"),
                                  call_timeout=dra_call_timeout, health_retry=dra_health_retry)
            self.podresources.add_dynamic_source(self.dra)
        self._extra: list[Component] = []
        self.restarts = 0
        self._running = False

    @property
    def device_plugin_dir(self) -> Path:
        return self.root / "device-plugins"

    @property
    def kubelet_socket(self) -> Path:
        return self.devices.socket_path

    @property
    def podresources_socket(self) -> Path:
        return self.podresources.socket_path

    def add_component(self, component: Component) -> None:
        """Add a part (e.g. the DRA plugin watcher) that starts after and stops before the device manager."""
        self._extra.append(component)
        if self._running:
            component.start()

    def start(self, *, podresources: bool = True) -> KubeletSimulator:
        for d in SUBDIRS:
            (self.root / d).mkdir(parents=True, exist_ok=True)
        if podresources:
            self.podresources.start()
        self.devices.start()
        if self.dra is not None:
            self.dra.start()
        for c in self._extra:
            c.start()
        self._running = True
        return self

    def stop(self) -> None:
        for c in reversed(self._extra):
            c.stop()
        if self.dra is not None:
            self.dra.stop()
        self.devices.stop()
        self.podresources.stop()
        self._running = False

    def restart(self) -> None:
        """A kubelet restart: plugin clients dropped, plugin sockets deleted, a fresh kubelet.sock served."""
        for c in reversed(self._extra):
            c.stop()
        if self.dra is not None:
            self.dra.stop()
        self.devices.restart()
        if self.dra is not None:
            self.dra.restart()
        for c in self._extra:
            c.start()
        self.restarts += 1

    def __enter__(self) -> KubeletSimulator:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
