"""The DRA half of the node daemon as one component: prepare core + plugin sockets + health board.

It implements the node daemon's `NodeComponent` protocol (start/stop/liveness/readiness), so the composition
root (`bridge/node/daemon.py`) starts it after the device plugin and stops it before. Start order:
1. read the boot ID (injectable path, so tests can simulate a reboot);
2. sweep: undo half-finished prepares and leaked CDI specs from a crash, BEFORE the kubelet can call us;
3. serve the DRA socket, then the registration socket.
Health events reach the board through `on_health` (the root fans its device-source events out to it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bridge.dra.health import HealthBoard
from bridge.dra.metrics import DraMetrics
from bridge.dra.plugin import DraPlugin, PluginConfig
from bridge.dra.prepare import ClaimStore, Preparer, SweepReport
from bridge.dra.slices import device_name
from bridge.dra.stores import ClaimCdi
from bridge.inventory.model import DeviceID, GpuDevice, HealthEvent
from bridge.kube.api import KubeAPI

log = logging.getLogger(__name__)

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
Check = Callable[[], str | None]


def read_boot_id(path: str | os.PathLike[str] = BOOT_ID_PATH) -> str:
    try:
        value = Path(path).read_text().strip()
    except OSError as err:
        raise RuntimeError(f"cannot read the node boot ID from {path}: {err}") from err
    if not value:
        raise RuntimeError(f"the node boot ID file {path} is empty")
    return value


@dataclass(frozen=True)
class DraConfig:
    node_name: str
    plugin: PluginConfig
    cdi_root: Path = Path("/var/run/cdi")
    boot_id_path: Path = Path(BOOT_ID_PATH)
    lock_timeout_s: float = 10.0


class DraNode:
    def __init__(
        self,
        config: DraConfig,
        kube: KubeAPI,
        devices: Sequence[GpuDevice],
        side_of: Callable[[DeviceID], str],
        store: ClaimStore,
        metrics: DraMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or DraMetrics()
        dra_devices = {d.uuid: device_name(d) for d in devices}
        self.board = HealthBoard(config.node_name, dra_devices)
        self.preparer = Preparer(
            kube=kube,
            driver=config.plugin.driver,
            pool=config.node_name,
            devices=devices,
            device_name=device_name,
            side_of=side_of,
            store=store,
            cdi=ClaimCdi(config.cdi_root, config.plugin.driver),
            boot_id=read_boot_id(config.boot_id_path),
            metrics=self.metrics,
            lock_timeout=config.lock_timeout_s,
        )
        self.plugin = DraPlugin(config.plugin, self.preparer, self.board)
        self.sweep_report: SweepReport | None = None

    def start(self) -> None:
        self.sweep_report = self.preparer.sweep()
        if self.sweep_report.undone or self.sweep_report.leaked_specs:
            log.warning(
                "start-up sweep undid crash leftovers",
                extra={"undone": ",".join(self.sweep_report.undone), "leaked": ",".join(self.sweep_report.leaked_specs)},
            )
        self.plugin.start()

    def stop(self) -> None:
        self.plugin.stop()

    def on_health(self, event: HealthEvent) -> None:
        self.board.apply(event)

    def liveness(self) -> Mapping[str, Check]:
        def sockets() -> str | None:
            for sock in (self.config.plugin.dra_socket, self.config.plugin.registration_socket):
                if not sock.is_socket():
                    return f"{sock} is missing"
            return None

        return {"dra-sockets": sockets}

    def readiness(self) -> Mapping[str, Check]:
        def registered() -> str | None:
            status = self.plugin.registration.status
            if status is None:
                return "the kubelet has not confirmed the DRA registration yet"
            return None if status.registered else f"the kubelet rejected the DRA registration: {status.error}"

        return {"dra-registered": registered}
