"""The device plugin's CDI side: the node's static spec file and the names `Allocate` hands out (I/O shell).

Used when `--device-list-strategy` includes `cdi-annotations` or `cdi-cri` (the names go into the CDI annotation
or the CRI `CDIDevices` field, honoured by the kubelet under `DevicePluginCDIDevices`, GA in 1.31):

* at start: remove the spec earlier builds wrote under kind `nvidia.com/gpu` (`nvidia.com-gpu_node.json`, which
  collided with the NVIDIA Container Toolkit's names), sweep our crash leftovers, and write
  `k8s.device-plugin.dra-bridge.io-gpu_node.json` (kind `k8s.device-plugin.dra-bridge.io/gpu`; one device per GPU
  by UUID and by index, plus `all`) from the node's current inventory. It stays in place at stop: running
  containers are re-created from it;
* `cdi_devices(gpus)` for one container: the toolkit's names when `--cdi-source` allows it and its spec names every
  GPU of the container, else our own `k8s.device-plugin.dra-bridge.io/gpu=<uuid>`. Before handing out our own
  names the spec is rebuilt from the current inventory and rewritten if it changed (a device node that appeared
  since start, a hook installed later), so the container is created from what the node has now;
* a GPU whose device node is missing is left out of the spec and `cdi_devices` raises `CdiBuildError` for it: the
  kubelet's Allocate fails loudly instead of creating a container that cannot start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bridge.cdi.edits import CdiBuildError
from bridge.cdi.names import qualified_name
from bridge.cdi.provider import NodeCdi
from bridge.cdi.spec import DEVICE_PLUGIN_KIND, LEGACY_DEVICE_PLUGIN_KIND, DevicePluginSpec, build_device_plugin_spec
from bridge.cdi.writer import CdiSpecWriter
from bridge.inventory.model import GpuDevice

log = logging.getLogger(__name__)

SPEC_KEY = "node"


def legacy_spec_writer(root: Path | str) -> CdiSpecWriter:
    return CdiSpecWriter(root, LEGACY_DEVICE_PLUGIN_KIND)


class DevicePluginCdi:
    def __init__(self, root: Path | str, node_cdi: NodeCdi, gpus: Sequence[GpuDevice]) -> None:
        self.writer = CdiSpecWriter(root, DEVICE_PLUGIN_KIND)
        self.node_cdi = node_cdi
        self.gpus = tuple(gpus)
        self._lock = threading.Lock()
        self._written: Mapping[str, Any] | None = None
        self._spec: DevicePluginSpec | None = None

    @property
    def path(self) -> Path:
        return self.writer.path_for(SPEC_KEY)

    def start(self) -> Path | None:
        """Write the node's spec; None (logged at ERROR) when no GPU has a device node."""
        legacy = legacy_spec_writer(self.writer.root)
        if legacy.remove(SPEC_KEY):
            log.warning("removed %s, written by an earlier dra-bridge under kind %s (it collided with the NVIDIA "
                        "Container Toolkit's names)", legacy.path_for(SPEC_KEY), LEGACY_DEVICE_PLUGIN_KIND)
        self.writer.sweep_temp_files()
        try:
            spec = self.refresh()
        except CdiBuildError as err:
            log.error("device-plugin CDI spec not written: %s", err)
            return None
        for uuid, why in spec.missing.items():
            log.error("GPU %s left out of the device-plugin CDI spec: %s", uuid, why)
        log.info("wrote the device-plugin CDI spec %s", self.path)
        return self.path

    def refresh(self) -> DevicePluginSpec:
        """Rebuild the spec from the current inventory; rewrite the file only when it changed."""
        with self._lock:
            spec = build_device_plugin_spec(self.gpus, inventory=self.node_cdi.inventory(self.gpus))
            if spec.document != self._written or not self.path.is_file():
                self.writer.write(SPEC_KEY, spec.document)
                if self._written is not None:
                    log.info("rewrote the device-plugin CDI spec %s: the node's driver files or device nodes changed",
                             self.path)
                self._written = spec.document
            self._spec = spec
            return spec

    def cdi_devices(self, gpus: Sequence[GpuDevice]) -> tuple[str, ...]:
        """The fully qualified CDI names for one container's GPUs."""
        names = self.node_cdi.toolkit_names(gpus)
        if names is not None:
            return tuple(names[g.uuid] for g in gpus)
        spec = self.refresh()
        for g in gpus:
            if not spec.defines(g.uuid):
                raise CdiBuildError(spec.missing[g.uuid])
        return tuple(qualified_name(DEVICE_PLUGIN_KIND, g.uuid) for g in gpus)
