"""`bridge node` as ONE daemon serving both kubelet APIs from one inventory: the composition of every part.

Build order (`DualNode.start`), each step only after the previous one succeeded:
1. discover the devices (the DRA half needs them at construction; `NodeDaemon` asks the source again and gets the
   same cached tuple);
2. open the node's one checkpoint (`bridge.dra.stores.open_checkpoint`): sides adopted as stored, or every device
   legacy on a fresh node; a corrupt file is logged at ERROR and the daemon goes on from what the kubelet says
   (devices that running containers hold through DRA start on the DRA side) and the API says (the split target);
3. with DRA on: the `StaticSplit` (the ledger's only writer of sides), the `SlicePublisher`, the `DraNode`;
   `side_of = split.side_of` for BOTH halves, so Allocate and NodePrepareResources read the same ledger;
4. `NodeDaemon`: adopts PodResources assignments and, in that hook, evaluates the split ONCE before the device
   plugin serves (API down: carry on with the stored sides; the split's Node watch and retry loop converge later);
   then the device plugin, then the components in order split -> publisher -> DRA plugin (stopped in reverse).

Wiring (the invariant "one owner per device" depends on every line of it):
* health events fan out from the one device source to the device table (ListAndWatch), `DraNode.on_health`
  (DRAResourceHealth stream) and `SlicePublisher.set_health` (NoSchedule taint or removal from the slice);
* every ownership change reaches `NodeDaemon.ownership_changed()` (fresh ListAndWatch lists) and
  `SlicePublisher.set_dra_devices` (the slice), after the checkpoint recorded it;
* the split's in-use checks read live state: `in_use_legacy` from the kubelet's PodResources `List` (containers
  holding `nvidia.com/gpu` devices), `in_use_dra` from the prepared claims in the checkpoint (every DRA device in
  use on this node was prepared through it), plus, after a corrupt checkpoint only, PodResources' DRA devices of
  our driver (a running container's claim is in use even if its record was lost);
* an unprepare that freed devices kicks the split, so a split refused because of them applies at once;
* each `NotifyRegistrationStatus(registered=True)` republishes the slices (the kubelet wipes them when it starts).

DRA mode: `on`, `off`, or `auto` = on when an API connection is configured (`--kubeconfig`, `KUBECONFIG`) or the
process runs in a cluster (`KUBERNETES_SERVICE_HOST`), else device-plugin only, with a warning. With DRA off the
sides stored in the checkpoint still hold: a device left on the DRA side is NOT handed to the device plugin (a DRA
pod may still be using it); the warning says how to return it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bridge.cdi import DEVICE_PLUGIN_KIND, CdiSpecWriter, NodeCdi, claim_kind
from bridge.cdi.dpspec import legacy_spec_writer
from bridge.dra.component import DraConfig, DraNode
from bridge.dra.metrics import SlicePublisherCollector
from bridge.dra.plugin import PluginConfig as DraPluginConfig
from bridge.dra.slicepublisher import SlicePublisher, TaintMode
from bridge.dra.slices import DEFAULT_DRIVER, device_name
from bridge.dra.split import StaticSplit, ownership_listener_for_publisher
from bridge.dra.stores import CheckpointClaimStore, ClaimCdi, OpenedCheckpoint, open_checkpoint
from bridge.inventory.model import DeviceID, DeviceSource, GpuDevice
from bridge.kube.api import NODES, KubeAPI
from bridge.kube.errors import KubeError
from bridge.kube.retry import RetryPolicy
from bridge.ledger.checkpoint import BOOT_ID_PATH, Checkpoint, read_boot_id
from bridge.ledger.ownership import Ownership
from bridge.node.daemon import NodeConfig, NodeDaemon
from bridge.node.podresources import PODRESOURCES_SOCKET, Adoption, AdoptionError, Holder, Holdings, list_holdings
from bridge.node.sockets import SocketPathError, remove_stale_socket

log = logging.getLogger("bridge.node")

DraMode = Literal["auto", "on", "off"]
DRA_MODES: tuple[DraMode, ...] = ("auto", "on", "off")
# Split grace: a withdrawn device is offered to neither API this long before the in-use check is repeated. 5 s
# covers a ListAndWatch push (< 1 s) and the scheduler's informer seeing a ResourceSlice change.
DEFAULT_SPLIT_GRACE_S = 5.0
# API calls retry transient failures for at most this long each: the publisher, the split's watch/retry loop and
# the kubelet's prepare retries are the long-term retry loops, so a single call must not hold a thread (or the
# kubelet's 45 s prepare deadline) for the client's default 30 s.
API_RETRY_DEADLINE_S = 5.0
API_TIMEOUT_S = 10.0
# The one Node read before the device plugin serves: an API outage must not delay the legacy half.
STARTUP_NODE_READ_DEADLINE_S = 2.0


@dataclass(frozen=True)
class DraOptions:
    mode: DraMode = "auto"
    kubeconfig: str | None = None
    context: str | None = None
    driver: str = DEFAULT_DRIVER
    dra_devices: str | None = None  # the cluster default split (`--dra-devices`); the Node overrides it
    slice_taints: TaintMode = "auto"
    pod_uid: str | None = None
    split_grace_s: float = DEFAULT_SPLIT_GRACE_S
    boot_id_path: Path = Path(BOOT_ID_PATH)


def dra_wanted(opts: DraOptions, environ: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Whether the DRA half runs, and why (for the start-up log)."""
    env = os.environ if environ is None else environ
    if opts.mode == "on":
        return True, "--dra on"
    if opts.mode == "off":
        return False, "--dra off"
    if opts.kubeconfig:
        return True, "--dra auto: a kubeconfig is configured"
    if env.get("KUBECONFIG"):
        return True, "--dra auto: KUBECONFIG is set"
    if env.get("KUBERNETES_SERVICE_HOST"):
        return True, "--dra auto: running in a cluster"
    return False, ("--dra auto: no API connection configured (no --kubeconfig, not in a cluster): serving the "
                   "device-plugin API only; DRA claims, ResourceSlices and the split need the API")


def holder_text(h: Holder) -> str:
    return f"pod {h.namespace}/{h.pod} container {h.container}"


def device_plugin_socket_name(resource_name: str, pod_uid: str | None) -> str | None:
    """With a pod UID the device-plugin socket is per instance too, so a rolling update never deletes the other
    instance's socket (the kubelet keeps the endpoint that registered last)."""
    if not pod_uid:
        return None
    from bridge.deviceplugin.plugin import default_socket_name

    return default_socket_name(resource_name)[:-len(".sock")] + f"-{pod_uid}.sock"


class DualNode:
    def __init__(self, config: NodeConfig, source: DeviceSource, dra: DraOptions, *,
                 environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.source = source
        self.opts = dra
        self.dra_on, self.dra_reason = dra_wanted(dra, environ)
        self.devices: tuple[GpuDevice, ...] = ()
        self.checkpoint = Checkpoint(config.state_dir, boot_id=lambda: read_boot_id(dra.boot_id_path))
        self.opened: OpenedCheckpoint | None = None
        self.kube: KubeAPI | None = None
        self.split: StaticSplit | None = None
        self.publisher: SlicePublisher | None = None
        self.dra: DraNode | None = None
        self.daemon: NodeDaemon | None = None
        self._static: Ownership | None = None  # the ledger when DRA is off (never changes then)

    # ---- seams -------------------------------------------------------------------------------------------------

    def side_of(self, uuid: DeviceID) -> str:
        if self.split is not None:
            return self.split.side_of(uuid)
        if self._static is not None:
            return self._static.side_of(uuid) or "unknown"
        return "unknown"

    @property
    def podresources_socket(self) -> str:
        return str(self.config.kubelet_root / PODRESOURCES_SOCKET)

    def holdings(self) -> Holdings:
        """Live PodResources List (empty when the kubelet has no PodResources socket)."""
        path = self.podresources_socket
        if not os.path.exists(path):
            return Holdings()
        return list_holdings(path, self.config.resource_name, self.opts.driver if self.dra_on else None,
                             self.config.adopt_timeout_s)

    def in_use_legacy(self) -> dict[str, str]:
        return {uuid: "; ".join(holder_text(h) for h in holders) for uuid, holders in self.holdings().legacy.items()}

    def in_use_dra(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for claim in self.checkpoint.read().data.claims.values():
            for d in claim.devices:
                out.setdefault(d.uuid, f"claim {claim.namespace}/{claim.name} ({claim.state})")
        if self.opened is None or self.opened.corrupt is None:
            return out  # the checkpoint records every claim this node prepared: it is the whole truth
        by_name = {device_name(g): g.uuid for g in self.devices}
        for dh in self.holdings().dynamic:
            uuid = by_name.get(dh.device)
            if uuid is not None and dh.pool == self.config.node_name:
                out.setdefault(uuid, f"claim {dh.claim_namespace}/{dh.claim_name} used by {holder_text(dh.holder)}")
        return out

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        cfg = self.config
        log.info("DRA half %s (%s)", "on" if self.dra_on else "OFF", self.dra_reason,
                 extra={"node": cfg.node_name})
        if not self.dra_on and self.opts.mode == "auto":
            log.warning("%s", self.dra_reason, extra={"node": cfg.node_name})
        self.devices = tuple(self.source.devices())
        # One CDI inventory for both halves, explained once; a CDI setup that cannot work fails here (exit 2).
        node_cdi = NodeCdi(cfg.cdi, self.devices, own_kinds=(claim_kind(self.opts.driver), DEVICE_PLUGIN_KIND))
        for level, line in node_cdi.describe():
            log.log(level, "%s", line, extra={"node": cfg.node_name})
        node_cdi.check()
        ignored = getattr(self.source, "ignored_xids", None)  # NVML and simulated sources apply an ignore list
        if ignored is not None:
            log.info("XIDs that do not mark a GPU unhealthy: %s", ",".join(str(x) for x in sorted(ignored)),
                     extra={"node": cfg.node_name})
        self.opened = open_checkpoint(self.checkpoint)
        initial = self._initial_ownership(self.opened)
        if not self.dra_on:
            self._static = initial
            withheld = [device_name(g) for g in initial.devices if initial.sides[g.uuid] != "legacy"]
            if withheld:
                log.warning("the checkpoint puts %s on the DRA side; with DRA off they stay withheld from the device "
                            "plugin (a DRA pod may still use them). Run with DRA on and split 0 to return them.",
                            ", ".join(withheld), extra={"node": cfg.node_name})
            self.daemon = NodeDaemon(cfg, self.source, side_of=self.side_of, node_cdi=node_cdi)
            self.daemon.start()
            return
        self.kube = self._connect(API_RETRY_DEADLINE_S)
        self.split = StaticSplit(self.devices, node_name=cfg.node_name, api=self.kube, flag=self.opts.dra_devices,
                                 initial=initial, checkpoint=self.checkpoint, in_use_legacy=self.in_use_legacy,
                                 in_use_dra=self.in_use_dra, grace_s=self.opts.split_grace_s)
        self.publisher = SlicePublisher(self.kube, self.devices, node_name=cfg.node_name, driver=self.opts.driver,
                                        dra_devices=self.split.dra_uuids(), taints=self.opts.slice_taints)
        self.split.add_listener(ownership_listener_for_publisher(self.publisher.set_dra_devices))
        self.split.add_listener(lambda _own: self.daemon.ownership_changed() if self.daemon else None)
        self.dra = DraNode(
            DraConfig(cfg.node_name, DraPluginConfig(driver=self.opts.driver, kubelet_root=str(cfg.kubelet_root),
                                                     pod_uid=self.opts.pod_uid),
                      cdi_root=cfg.cdi_root, boot_id_path=self.opts.boot_id_path),
            self.kube, self.devices, self.split.side_of, CheckpointClaimStore(self.checkpoint),
            on_registered=lambda: self.publisher.republish("DRA plugin (re)registered") if self.publisher else None,
            recover_claims=self._claims_in_use if self.opened.corrupt is not None else None,
            on_released=self.split.kick,
            cdi=node_cdi,
        )
        self.daemon = NodeDaemon(cfg, self.source, side_of=self.split.side_of, on_adopted=self._adopted,
                                 components=[self.split, self.publisher, self.dra],
                                 health_listeners=[self.dra.on_health, self.publisher.set_health], node_cdi=node_cdi)
        # The DRA half's metrics on the daemon's /metrics (its registry is created with the daemon).
        publisher = self.publisher
        self.daemon.metrics.registry.register(self.dra.metrics.registry)
        self.daemon.metrics.registry.register(SlicePublisherCollector(lambda: publisher.stats,
                                                                      lambda: publisher.generation))
        self.daemon.start()

    def _connect(self, deadline_s: float) -> KubeAPI:
        from bridge.kube import connect

        return connect(self.opts.kubeconfig, self.opts.context, timeout=API_TIMEOUT_S,
                       retry=RetryPolicy(deadline=deadline_s))

    def _initial_ownership(self, opened: OpenedCheckpoint) -> Ownership:
        if opened.exists and opened.data.sides:
            return Ownership.adopt(self.devices, opened.data.sides)
        own = Ownership.all_legacy(self.devices)
        if opened.corrupt is None or not self.dra_on:
            return own
        # The stored sides are lost: a device a running container uses through DRA must not be offered to the
        # device plugin. Start it on the DRA side; the split then converges with its usual in-use checks.
        try:
            by_name = {device_name(g): g.uuid for g in self.devices}
            held = {by_name[d.device] for d in self.holdings().dynamic
                    if d.pool == self.config.node_name and d.device in by_name}
        except AdoptionError as err:
            log.error("checkpoint lost and PodResources unreadable (%s): starting every device on the legacy side",
                      err, extra={"node": self.config.node_name})
            return own
        if held:
            log.warning("checkpoint lost: %d device(s) held by running DRA containers start on the DRA side",
                        len(held), extra={"node": self.config.node_name})
        return own.with_sides({u: "dra" for u in held})

    def _claims_in_use(self) -> Sequence[tuple[str, str]]:
        seen: dict[tuple[str, str], None] = {}
        for d in self.holdings().dynamic:
            if d.pool == self.config.node_name:
                seen[(d.claim_namespace, d.claim_name)] = None
        return list(seen)

    def _adopted(self, adoption: Adoption) -> None:
        """Before the device plugin serves: converge the split once (safe moves only)."""
        assert self.split is not None
        try:
            node = self._connect(STARTUP_NODE_READ_DEADLINE_S).get(NODES, self.config.node_name)
            outcome = self.split.evaluate(node)
            if not outcome.moves and not outcome.refused:  # the split logs moves and refusals itself
                log.info("%s", outcome.message, extra={"node": self.config.node_name})
        except KubeError as err:
            log.warning("cannot read Node %s to evaluate the DRA split (%s); carrying on with the stored sides: "
                        "%d device(s) on the DRA side", self.config.node_name, err,
                        len(self.split.dra_uuids()), extra={"node": self.config.node_name})
        except AdoptionError as err:
            log.error("cannot verify which devices are in use (%s); the split is not applied now and is retried",
                      err, extra={"node": self.config.node_name})

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()

    def run(self, stop: threading.Event) -> None:
        """Start, serve until `stop` is set (the CLI's SIGTERM/SIGINT handler sets it), then stop."""
        self.start()
        try:
            wait_for_stop(stop)
        finally:
            self.stop()


# How often the main thread wakes while serving: CPython runs signal handlers only in the main thread, when it
# executes bytecode. A signal may be delivered to any of the daemon's threads (gRPC's C threads included); an
# untimed `Event.wait()` then never returns and SIGTERM is ignored until the kubelet's SIGKILL.
STOP_POLL_S = 0.5


def wait_for_stop(stop: threading.Event, poll_s: float = STOP_POLL_S) -> None:
    """Block until `stop` is set, waking every `poll_s` so the main thread runs pending signal handlers."""
    while not stop.wait(poll_s):
        pass


@dataclass(frozen=True)
class CleanupReport:
    slices_deleted: int
    cdi_specs_removed: tuple[str, ...]
    sockets_removed: tuple[str, ...]


def cleanup(config: NodeConfig, opts: DraOptions, kube: KubeAPI | None) -> CleanupReport:
    """Uninstall: delete this node's ResourceSlices of our driver (when an API is given), remove our CDI specs
    (per-claim and the device-plugin spec) and our sockets (any pod UID). The checkpoint is left in place."""
    deleted = 0
    if kube is not None:
        deleted = SlicePublisher(kube, (), node_name=config.node_name, driver=opts.driver, watch=False).cleanup()
    removed_specs: list[str] = []
    claim_cdi = ClaimCdi(config.cdi_root, opts.driver)
    for uid, path in claim_cdi.writer.list().items():
        claim_cdi.remove(uid)
        removed_specs.append(str(path))
    for dp_writer in (CdiSpecWriter(config.cdi_root, DEVICE_PLUGIN_KIND), legacy_spec_writer(config.cdi_root)):
        for key, path in dp_writer.list().items():
            if dp_writer.kind != DEVICE_PLUGIN_KIND and key != "node":
                continue  # of the legacy kind only our own old file, never the toolkit's
            dp_writer.remove(key)
            removed_specs.append(str(path))
    sockets: list[str] = []
    dra_cfg = DraPluginConfig(driver=opts.driver, kubelet_root=str(config.kubelet_root))
    from bridge.deviceplugin.plugin import default_socket_name

    dp_stem = default_socket_name(config.resource_name)[:-len(".sock")]
    candidates = [*(config.kubelet_root / "device-plugins").glob(f"{dp_stem}*.sock"),
                  *dra_cfg.registry_dir.glob(f"{opts.driver}*-reg.sock"), *dra_cfg.plugin_dir.glob("dra*.sock")]
    for sock in candidates:
        try:
            if remove_stale_socket(sock):
                sockets.append(str(sock))
        except SocketPathError as err:
            log.warning("not removing %s: %s", sock, err)
    log.info("cleanup: deleted %d ResourceSlice(s), removed %d CDI spec(s) and %d socket(s)", deleted,
             len(removed_specs), len(sockets), extra={"node": config.node_name})
    return CleanupReport(deleted, tuple(removed_specs), tuple(sockets))


__all__ = ["CleanupReport", "DRA_MODES", "DraOptions", "DualNode", "cleanup", "dra_wanted", "wait_for_stop"]
