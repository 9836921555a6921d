"""The DRA half of the node daemon as one component: prepare core + plugin sockets + health board.

It implements the node daemon's `NodeComponent` protocol (start/stop/liveness/readiness), so the composition
root (`bridge/node/daemon.py`) starts it after the device plugin and stops it before. Start order:
1. read the boot ID (injectable path, so tests can simulate a reboot);
2. sweep: undo half-finished prepares and leaked CDI specs from a crash, BEFORE the kubelet can call us;
3. after a corrupt checkpoint only (`recover_claims` given): prepare again, through the normal guarded path, the
   claims the kubelet says running containers use (PodResources), so their records and CDI specs exist again;
4. serve the DRA socket, then the registration socket.
Health events reach the board through `on_health` (the root fans its device-source events out to it);
`on_registered` is called after every `NotifyRegistrationStatus(registered=True)` (the root republishes slices).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bridge.cdi import NodeCdi
from bridge.dra.claims import ClaimRef
from bridge.dra.health import HealthBoard
from bridge.dra.metrics import DraMetrics
from bridge.dra.plugin import DraPlugin, PluginConfig
from bridge.dra.prepare import ClaimStore, PrepareGuard, Preparer, SweepReport
from bridge.dra.registration import RegistrationStatus
from bridge.dra.slices import device_name
from bridge.dra.stores import ClaimCdi
from bridge.inventory.model import DeviceID, GpuDevice, HealthEvent
from bridge.kube.api import KubeAPI
from bridge.kube.errors import KubeError
from bridge.ledger.checkpoint import BOOT_ID_PATH, read_boot_id
from bridge.ledger.sides import Side

log = logging.getLogger(__name__)

Check = Callable[[], str | None]
# (namespace, name) of the claims running containers use, as the kubelet reports them
ClaimsInUse = Callable[[], Sequence[tuple[str, str]]]


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
        side_of: Callable[[DeviceID], Side | None],
        store: ClaimStore,
        metrics: DraMetrics | None = None,
        *,
        on_registered: Callable[[], None] | None = None,
        recover_claims: ClaimsInUse | None = None,
        on_released: Callable[[], None] | None = None,
        ownership: PrepareGuard | None = None,
        cdi: NodeCdi | None = None,
    ) -> None:
        """`cdi`: the node's CDI inventory and source policy (None: device-node-only specs, for tests)."""
        self.config = config
        self.kube = kube
        self._on_registered = on_registered
        self._recover_claims = recover_claims
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
            cdi=ClaimCdi(config.cdi_root, config.plugin.driver, cdi),
            boot_id=read_boot_id(config.boot_id_path),
            metrics=self.metrics,
            lock_timeout=config.lock_timeout_s,
            on_released=on_released,
            ownership=ownership,
        )
        self.plugin = DraPlugin(config.plugin, self.preparer, self.board, on_status=self._status)
        self.sweep_report: SweepReport | None = None
        self.recovered: dict[str, str] = {}  # claim UID -> "" or the error, after a corrupt checkpoint

    def start(self) -> None:
        self.sweep_report = self.preparer.sweep()
        if self.sweep_report.undone or self.sweep_report.leaked_specs:
            log.warning(
                "start-up sweep undid crash leftovers",
                extra={"undone": ",".join(self.sweep_report.undone), "leaked": ",".join(self.sweep_report.leaked_specs)},
            )
        if self._recover_claims is not None:
            self._recover()
        self.plugin.start()

    def _status(self, status: RegistrationStatus) -> None:
        if status.registered and self._on_registered is not None:
            self._on_registered()

    def _recover(self) -> None:
        """Re-prepare (guarded, idempotent) the claims running containers use, after the checkpoint was lost."""
        assert self._recover_claims is not None
        try:
            in_use = list(self._recover_claims())
        except Exception as err:  # noqa: BLE001 - recovery is best effort; the kubelet re-prepares on its restart
            log.error("cannot list the claims in use from the kubelet to rebuild the lost checkpoint: %s", err)
            return
        refs = []
        for namespace, name in in_use:
            try:
                claim = self.kube.get(self.kube.resource_api().claims, name, namespace)
            except KubeError as err:
                log.error("cannot read ResourceClaim %s/%s to rebuild its record: %s", namespace, name, err)
                continue
            refs.append(ClaimRef(namespace, name, str(claim["metadata"]["uid"])))
        if refs:
            outcomes = self.preparer.prepare(refs)
            self.recovered = {uid: o.error for uid, o in outcomes.items()}
            log.warning("rebuilt %d prepared claim record(s) from the kubelet and the API after the checkpoint "
                        "was lost", sum(1 for e in self.recovered.values() if not e),
                        extra={"failed": ",".join(u for u, e in self.recovered.items() if e)})

    def stop(self) -> None:
        self.plugin.stop()
        self.preparer.syncer.flush(timeout=2.0)  # the last call's records on disk before we go (bounded wait)
        self.preparer.syncer.close()
        self.preparer.reader.close()

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
