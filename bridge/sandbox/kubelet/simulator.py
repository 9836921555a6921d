"""`KubeletSimulator`: one object playing the kubelet for a node daemon under test or in `bridge demo`.

It owns the kubelet root layout (`device-plugins/`, `plugins/`, `plugins_registry/`, `pod-resources/`) and
composes the simulated device manager (legacy device plugins) with the PodResources server. The DRA side (plugin
watcher, prepare/unprepare caller) plugs in as further components: it registers a `DynamicResourcesSource` with
`self.podresources` and is started/stopped/restarted with the rest through `add_component`.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Protocol

from bridge.sandbox.kubelet.devicemanager import DeviceManager
from bridge.sandbox.kubelet.podresources import PodResourcesServer

SUBDIRS = ("device-plugins", "plugins", "plugins_registry", "pod-resources")


class Component(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class KubeletSimulator:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.devices = DeviceManager(self.root / "device-plugins")
        self.podresources = PodResourcesServer(self.root, self.devices)
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
        for c in self._extra:
            c.start()
        self._running = True
        return self

    def stop(self) -> None:
        for c in reversed(self._extra):
            c.stop()
        self.devices.stop()
        self.podresources.stop()
        self._running = False

    def restart(self) -> None:
        """A kubelet restart: plugin clients dropped, plugin sockets deleted, a fresh kubelet.sock served."""
        for c in reversed(self._extra):
            c.stop()
        self.devices.restart()
        for c in self._extra:
            c.start()
        self.restarts += 1

    def __enter__(self) -> KubeletSimulator:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
