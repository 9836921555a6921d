"""`bridge node` as ONE daemon serving both kubelet APIs from one inventory: the composition of every part.

Build order (`DualNode.start`), each step only after the previous one succeeded:
1. discover the devices (the DRA half needs them at construction; `NodeDaemon` asks the source again and gets the
   same cached tuple);
2. open the node's one checkpoint (`bridge.dra.stores.open_checkpoint`): sides adopted as stored, or every device
   legacy on a fresh node; a corrupt file is logged at ERROR and the daemon goes on from what the kubelet says
   (devices that running containers hold through DRA start on the DRA side) and the API says (the split target);
3. with DRA on: the pods bound to this node (`NodePods`), the holder sources (`HolderSources`), the
   `SplitController` (the ledger's only writer of sides: `bridge.node.split`), the `SlicePublisher`, the `DraNode`;
   the device plugin's ListAndWatch reads `split.side_of`, its Allocate calls `split.guard_allocate`, and
   NodePrepareResources calls `split.guard_prepare`: both halves go through the same ledger under one lock;
4. `NodeDaemon`: adopts PodResources assignments and, in that hook, evaluates the split ONCE before the device
   plugin serves (API down: carry on with the stored sides; the split's Node watch and evaluation loop converge
   later); then the device plugin, then the components in order pods -> split -> publisher -> DRA plugin (stopped
   in reverse).

Wiring (the invariant "one owner per device" depends on every line of it):
* health events fan out from the one device source to the device table (ListAndWatch), `DraNode.on_health`
  (DRAResourceHealth stream) and `SlicePublisher.set_health` (NoSchedule taint or removal from the slice);
* every ownership change reaches `NodeDaemon.ownership_changed()` (fresh ListAndWatch lists) and
  `SlicePublisher.set_dra_devices` (the slice), after the checkpoint recorded it;
* the split's holders are facts from every source the node has (`bridge.node.holders`): PodResources, the
  kubelet's device-manager checkpoint with the pods' init-container states, the claims allocated to this node's
  devices (from the pods bound to it), our prepared claims;
* an unprepare that freed devices, a pod or claim change, a confirmed slice write and a health change kick the
  split, so a device waiting for its holder moves at once;
* each `NotifyRegistrationStatus(registered=True)` republishes the slices (the kubelet wipes them when it starts).

DRA mode: `on`, `off`, or `auto` = on when an API connection is configured (`--kubeconfig`, `KUBECONFIG`) or the
process runs in a cluster (`KUBERNETES_SERVICE_HOST`), else device-plugin only, with a warning. With DRA off the
sides stored in the checkpoint still hold: a device left on the DRA side is NOT handed to the device plugin (a DRA
pod may still be using it); the warning says how to return it.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from prometheus_client import CollectorRegistry, Gauge

from bridge.cdi import DEVICE_PLUGIN_KIND, CdiSpecWriter, NodeCdi, claim_kind
from bridge.cdi.dpspec import legacy_spec_writer
from bridge.deviceplugin.plugin import default_socket_name
from bridge.dra.component import DraConfig, DraNode
from bridge.dra.metrics import SlicePublisherCollector
from bridge.dra.plugin import PluginConfig as DraPluginConfig
from bridge.dra.slicepublisher import SlicePublisher, TaintMode
from bridge.dra.slices import DEFAULT_DRIVER
from bridge.dra.stores import CheckpointClaimStore, ClaimCdi, OpenedCheckpoint, claims_checkpoint, open_checkpoint
from bridge.inventory.model import DeviceID, DeviceSource, GpuDevice
from bridge.kube.api import NODES, KubeAPI
from bridge.kube.errors import KubeError
from bridge.kube.retry import RetryPolicy
from bridge.ledger.checkpoint import BOOT_ID_PATH, Checkpoint, cached_boot_id
from bridge.ledger.holders import Holder
from bridge.ledger.ledger import Ledger, LedgerConfig
from bridge.ledger.sides import Side, device_name
from bridge.node.bindinggrace import auto_grace
from bridge.node.daemon import NodeConfig, NodeDaemon
from bridge.node.holders import HolderSources, prepared_holders
from bridge.node.http import HealthServer
from bridge.node.instance import Instance, InstanceBusy, InstanceLock
from bridge.node.kubeletcheckpoint import CHECKPOINT_FILE
from bridge.node.metrics import SplitMetrics
from bridge.node.nodepods import NodePods
from bridge.node.podresources import PODRESOURCES_SOCKET, Adoption, AdoptionError, Holdings, list_holdings
from bridge.unixsock import SocketPathError, remove_stale_socket
from bridge.node.split import SplitConfig, SplitController, publisher_listener

log = logging.getLogger("bridge.node")

DraMode = Literal["auto", "on", "off"]
DRA_MODES: tuple[DraMode, ...] = ("auto", "on", "off")
# Defaults of the ledger's timings (derived from the kubelet's and the scheduler's periods: see LedgerConfig).
DEFAULT_SPLIT_GRACE_S = LedgerConfig.scheduler_grace_s  # with the scheduler's nomination signal (bindinggrace)
DEFAULT_MOVE_TIMEOUT_S = LedgerConfig.move_timeout_s
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
    # Scheduler grace after a slice without a device is published; None: `auto` (bridge.node.bindinggrace).
    split_grace_s: float | None = None
    move_timeout_s: float = DEFAULT_MOVE_TIMEOUT_S  # a move the scheduler cannot see by then is aborted
    settle_s: float = LedgerConfig.settle_s
    boot_id_path: Path = Path(BOOT_ID_PATH)

    def ledger_config(self, grace_s: float | None = None) -> LedgerConfig:
        """`grace_s`: the resolved grace when `split_grace_s` is auto (else the safe value until it is known)."""
        if self.split_grace_s is not None:
            grace = self.split_grace_s
        else:
            grace = grace_s if grace_s is not None else auto_grace(None).seconds
        return LedgerConfig(scheduler_grace_s=grace, move_timeout_s=self.move_timeout_s, settle_s=self.settle_s)


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


def device_plugin_socket_name(resource_name: str, pod_uid: str | None) -> str | None:
    """With a pod UID the device-plugin socket is per instance too, so a rolling update never deletes the other
    instance's socket (the kubelet keeps the endpoint that registered last)."""
    if not pod_uid:
        return None
    return default_socket_name(resource_name)[:-len(".sock")] + f"-{pod_uid}.sock"


class DualNode:
    def __init__(self, config: NodeConfig, source: DeviceSource, dra: DraOptions, *,
                 environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.source = source
        self.opts = dra
        self.dra_on, self.dra_reason = dra_wanted(dra, environ)
        self.devices: tuple[GpuDevice, ...] = ()
        boot_id = cached_boot_id(dra.boot_id_path)
        self.checkpoint = Checkpoint(config.state_dir, boot_id=boot_id)
        # the prepared-claim records (bridge.dra.stores): on the node's tmpfs when --claims-dir says so (the chart)
        self.claims = claims_checkpoint(config.claims_path, boot_id=boot_id)
        self.opened: OpenedCheckpoint | None = None
        self.kube: KubeAPI | None = None
        self.pods: NodePods | None = None
        self.sources: HolderSources | None = None
        self.split: SplitController | None = None
        self.publisher: SlicePublisher | None = None
        self.dra: DraNode | None = None
        self.daemon: NodeDaemon | None = None
        self._static: Ledger | None = None  # the ledger when DRA is off (never changes then)
        self.instance = InstanceLock(config.state_dir)
        # A claims directory of its own is locked too, once the state directory's lock is held: two daemons with
        # different state directories must not share one claims.json (bridge.dra.stores).
        self.claims_instance = (InstanceLock(config.claims_path)
                                if os.path.abspath(config.claims_path) != os.path.abspath(config.state_dir) else None)
        self.standby_http: HealthServer | None = None
        self._grace_stop = threading.Event()
        self._grace_thread: threading.Thread | None = None

    # ---- seams -------------------------------------------------------------------------------------------------

    def side_of(self, uuid: DeviceID) -> Side | None:
        if self.split is not None:
            return self.split.side_of(uuid)
        if self._static is not None:
            return self._static.side_of(uuid)
        return None

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

    def prepared(self) -> list[tuple[DeviceID, Holder]]:
        """Our prepared-claim records as DRA holders (the claims file: every device this node prepared)."""
        claims = self.claims.read().data.claims.values()
        return prepared_holders((c.namespace, c.name, c.state, [d.uuid for d in c.devices]) for c in claims)

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    def own_sockets(self) -> list[str]:
        """Every socket this instance serves (recorded in the instance lock, for a successor's sweep)."""
        dp_name = self.config.device_plugin_socket_name or default_socket_name(self.config.resource_name)
        dra = DraPluginConfig(driver=self.opts.driver, kubelet_root=str(self.config.kubelet_root),
                              pod_uid=self.opts.pod_uid)
        return [str(self.config.device_plugin_path / dp_name), str(dra.registration_socket),
                str(dra.dra_socket)]

    def me(self) -> Instance:
        return Instance.me(self.opts.pod_uid, self.own_sockets())

    def start(self) -> None:
        """Take the state directory's instance lock (InstanceBusy when another daemon holds it), then start.
        `run()` waits for the lock instead where a rolling update allows it."""
        try:
            if not self.instance.try_acquire(self.me()):
                raise InstanceBusy(self.config.state_dir, self.instance.holder())
            if self.claims_instance is not None and not self.claims_instance.try_acquire(self.me()):
                raise InstanceBusy(self.config.claims_path, self.claims_instance.holder(), claims=True)
            self.instance.sweep_previous(self.own_sockets())
            self._start()
        except BaseException:
            self.stop()
            raise

    def _resolve_grace(self) -> None:
        """`--split-grace auto`: the grace the API server's version calls for (bridge.node.bindinggrace), asked
        until the server answers; the safe (long) grace holds meanwhile."""
        log.info("--split-grace auto: %s", auto_grace(None).why, extra={"node": self.config.node_name})
        delay = 1.0
        while not self._grace_stop.is_set():
            try:
                assert self.kube is not None
                version = self.kube.server_version()
            except KubeError as err:
                log.info("--split-grace auto: the API server's version is not readable yet (%s); retried in %g s",
                         err.message, delay, extra={"node": self.config.node_name})
                self._grace_stop.wait(delay)
                delay = min(delay * 2, 60.0)
                continue
            choice = auto_grace(version)
            log.info("--split-grace auto: %s", choice.why, extra={"node": self.config.node_name})
            if self.split is not None:
                self.split.set_ledger_config(self.opts.ledger_config(choice.seconds))
            return

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
        self.opened = open_checkpoint(self.checkpoint, self.claims)
        initial = self._initial_ownership(self.opened)
        if not self.dra_on:
            self._static = initial
            withheld = [device_name(g) for g in initial.devices if initial.sides[g.uuid] is not Side.LEGACY]
            if withheld:
                log.warning("the checkpoint puts %s on the DRA side; with DRA off they stay withheld from the device "
                            "plugin (a DRA pod may still use them). Run with DRA on and split 0 to return them.",
                            ", ".join(withheld), extra={"node": cfg.node_name})
            self.daemon = NodeDaemon(cfg, self.source, side_of=self.side_of, node_cdi=node_cdi)
            self.daemon.start()
            return
        self.kube = self._connect(API_RETRY_DEADLINE_S)
        self.pods = NodePods(self.kube, cfg.node_name, resource=cfg.resource_name, driver=self.opts.driver,
                             on_change=lambda: self.split.kick("a pod or claim on this node changed")
                             if self.split else None,
                             node_allocatable=lambda: self.split.node_allocatable() if self.split else None)
        self.sources = HolderSources(
            self.devices, resource_name=cfg.resource_name, driver=self.opts.driver, node_name=cfg.node_name,
            podresources_socket=self.podresources_socket,
            kubelet_checkpoint=cfg.device_plugin_path / CHECKPOINT_FILE, pods=self.pods,
            prepared=self.prepared, timeout_s=min(cfg.adopt_timeout_s, 5.0))
        self.publisher = SlicePublisher(
            self.kube, self.devices, node_name=cfg.node_name, driver=self.opts.driver,
            dra_devices=[g.uuid for g in initial.on(Side.DRA)], taints=self.opts.slice_taints,
            on_published=lambda _dra: self.split.kick("a ResourceSlice write was confirmed") if self.split else None)
        publisher = self.publisher
        self.pods.start()  # early, so the first evaluation (before the device plugin serves) can know the holders
        split_metrics = SplitMetrics()
        self.split = SplitController(
            self.devices, SplitConfig(cfg.node_name, cfg.resource_name, flag=self.opts.dra_devices,
                                      ledger=self.opts.ledger_config()),
            sources=self.sources, api=self.kube, checkpoint=self.checkpoint, initial=initial,
            published=publisher.published_dra,
            unhealthy=lambda: self.daemon.table.unhealthy() if self.daemon and self.daemon.table else frozenset(),
            metrics=split_metrics)
        split = self.split
        if self.opts.split_grace_s is None:
            self._grace_thread = threading.Thread(target=self._resolve_grace, name="split-grace", daemon=True)
            self._grace_thread.start()
        # The device plugin hears first: a GPU taken back for a claim goes from legacy to DRA in one step, and its
        # Unhealthy report (a message on the kubelet's local stream) should be on its way before the publisher's
        # API write can show the GPU in the slice. Every other move withdraws the GPU phases before it arrives.
        split.add_listener(lambda _led: self.daemon.ownership_changed() if self.daemon else None)
        split.add_listener(publisher_listener(publisher.set_dra_devices))
        self.dra = DraNode(
            DraConfig(cfg.node_name, DraPluginConfig(driver=self.opts.driver, kubelet_root=str(cfg.kubelet_root),
                                                     pod_uid=self.opts.pod_uid),
                      cdi_root=cfg.cdi_root, boot_id_path=self.opts.boot_id_path),
            self.kube, self.devices, split.side_of, CheckpointClaimStore(self.claims, lock_dir=cfg.state_dir),
            on_registered=lambda: publisher.republish("DRA plugin (re)registered"),
            recover_claims=self._claims_in_use if self.opened.claims_lost else None,
            on_released=lambda: split.kick("an unprepare freed devices"),
            ownership=split,
            cdi=node_cdi,
        )
        self.daemon = NodeDaemon(cfg, self.source, side_of=split.side_of, allocate_guard=split.guard_allocate,
                                 on_adopted=self._adopted, on_socket_moved=self.instance.add_socket,
                                 components=[self.pods, split, publisher, self.dra],
                                 health_listeners=[self.dra.on_health, publisher.set_health,
                                                   lambda _ev: split.kick("device health changed")],
                                 node_cdi=node_cdi)
        # The DRA half's and the split's metrics on the daemon's /metrics (its registry is created with the daemon).
        self.daemon.metrics.registry.register(self.dra.metrics.registry)
        self.daemon.metrics.registry.register(split_metrics.registry)
        self.daemon.metrics.registry.register(SlicePublisherCollector(lambda: publisher.stats,
                                                                      lambda: publisher.generation))
        self.daemon.start()

    def _connect(self, deadline_s: float) -> KubeAPI:
        from bridge.kube import connect

        return connect(self.opts.kubeconfig, self.opts.context, timeout=API_TIMEOUT_S,
                       retry=RetryPolicy(deadline=deadline_s))

    def _initial_ownership(self, opened: OpenedCheckpoint) -> Ledger:
        if opened.exists and opened.data.sides:
            return Ledger.adopt(self.devices, opened.data.sides, opened.data.moves, now=time.monotonic())
        own = Ledger.all_legacy(self.devices)
        if opened.corrupt is None or not self.dra_on:
            return own
        # The stored sides are lost: a device a running container uses through DRA must not be offered to the
        # device plugin. Start it on the DRA side; the split then converges with its usual holder checks.
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
        return Ledger(own.devices, {**own.sides, **{u: Side.DRA for u in held}})

    def _claims_in_use(self) -> Sequence[tuple[str, str]]:
        seen: dict[tuple[str, str], None] = {}
        for d in self.holdings().dynamic:
            if d.pool == self.config.node_name:
                seen[(d.claim_namespace, d.claim_name)] = None
        return list(seen)

    def _adopted(self, adoption: Adoption) -> None:
        """Before the device plugin serves: one evaluation from a fresh read of the Node (moves that can start do;
        they finish later, once the scheduler can see them)."""
        assert self.split is not None
        if self.pods is not None:
            self.pods.informer.wait_synced(STARTUP_NODE_READ_DEADLINE_S)
        try:
            node = self._connect(STARTUP_NODE_READ_DEADLINE_S).get(NODES, self.config.node_name)
        except KubeError as err:
            log.warning("cannot read Node %s to evaluate the DRA split (%s); carrying on with the stored sides: "
                        "%d device(s) on the DRA side", self.config.node_name, err,
                        len(self.split.dra_uuids()), extra={"node": self.config.node_name})
            return
        self.split.evaluate(node)

    def stop(self) -> None:
        """Stop serving and remove our sockets, THEN release the instance lock (a successor in standby starts only
        once nothing of ours is served any more)."""
        self._grace_stop.set()
        try:
            if self.daemon is not None:
                self.daemon.stop()
        finally:
            if self.sources is not None:
                self.sources.close()
            if self._grace_thread is not None:
                self._grace_thread.join(5)
            if self.claims_instance is not None:
                self.claims_instance.release()  # before the state directory's: a successor takes that one first
            self.instance.release()

    def run(self, stop: threading.Event) -> None:
        """Take the instance lock (in a rolling update: wait in standby for the previous instance to exit), start,
        serve until `stop` is set (the CLI's SIGTERM/SIGINT handler sets it), then stop."""
        try:
            acquired = self.instance.acquire(self.me(), stop=stop, on_standby=self._standby)
        finally:
            self._end_standby()
        if not acquired:
            return
        self.start()
        try:
            wait_for_stop(stop)
        finally:
            self.stop()

    def _standby(self, holder: Instance) -> None:
        """While the previous instance serves: initialise the device source (NVML can take seconds; read-only, so
        safe beside the holder) and import the Kubernetes client so the take-over is quick, and answer /healthz and /readyz so the DaemonSet
        controller sees this pod ready and deletes the old one (with maxSurge it waits for that)."""
        try:
            self.source.devices()
            if self.dra_on:  # the Kubernetes client takes most of a second to import: not at take-over
                import bridge.kube.client  # noqa: F401
                import bridge.kube.config  # noqa: F401
        except Exception as err:  # noqa: BLE001 - the real start reports it with its usual exit code
            log.warning("preparing in standby failed (%s); retried at take-over", err,
                        extra={"node": self.config.node_name})
        address = self.config.http_address
        if address is None:
            return
        registry = CollectorRegistry()
        Gauge("dra_bridge_node_standby", "1 while this instance waits for the previous one of a rolling update to "
              "exit", registry=registry).set(1)
        check = {f"standby: this instance takes over when the previous one ({holder.describe()}) exits": _ok}
        self.standby_http = HealthServer(address, registry, check, check)
        self.standby_http.start()
        log.info("standby: health on http://%s:%d/ reports ready so the rollout can proceed",
                 self.standby_http.host, self.standby_http.port, extra={"node": self.config.node_name})

    def _end_standby(self) -> None:
        if self.standby_http is not None:
            self.standby_http.stop()
            self.standby_http = None


def _ok() -> str | None:
    return None


# How often the main thread wakes while serving: CPython runs signal handlers only in the main thread, when it
# executes bytecode. A signal may be delivered to any of the daemon's threads (gRPC's C threads included); an
# untimed `Event.wait()` then never returns and SIGTERM is ignored until the kubelet's SIGKILL.
STOP_POLL_S = 0.5


def wait_for_stop(stop: threading.Event, poll_s: float = STOP_POLL_S) -> None:
    """Block until `stop` is set, waking every `poll_s` so the main thread runs pending signal handlers."""
    while not stop.wait(poll_s):
        pass


# Every stop step is bounded (gRPC grace + abandon, joins with timeouts), yet their sum is not, and one stuck lock
# would make it infinite. The kubelet SIGKILLs after terminationGracePeriodSeconds (30 s in the chart) and the log
# then says nothing. Past this deadline the daemon says so, writes every thread's stack and exits itself: what a
# SIGKILL would leave (sockets, specs) the next instance clears at its start, and the checkpoint is crash-safe.
STOP_DEADLINE_S = 20.0
EXIT_STOP_STUCK = 1


def _stack_file() -> TextIO | None:
    """Where stacks go: stderr (the pod log), or the process's own fd 2 when stderr was replaced by an object
    without a file descriptor (faulthandler writes to a descriptor, from C)."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return sys.__stderr__


def enable_stack_dumps(signum: int = signal.SIGUSR1) -> None:
    """`kill -USR1 <pid>` writes every thread's stack to stderr and the process carries on."""
    out = _stack_file()
    if out is not None:  # no stderr at all (a detached interpreter): nowhere to write them
        faulthandler.register(signum, file=out, all_threads=True)


def arm_stop_deadline(seconds: float = STOP_DEADLINE_S, *, exit_code: int = EXIT_STOP_STUCK) -> threading.Timer:
    """Start the stop deadline (call once SIGTERM arrived): if the process still runs `seconds` later, log an
    error, dump every thread's stack to stderr and `os._exit(exit_code)`."""
    def expired() -> None:
        log.error("stopping took longer than %.0fs: exiting now with status %d (every thread's stack follows on "
                  "stderr); the next start removes what is left", seconds, exit_code)
        for handler in logging.getLogger().handlers:
            handler.flush()
        out = _stack_file()
        if out is not None:
            faulthandler.dump_traceback(file=out, all_threads=True)
            out.flush()
        os._exit(exit_code)

    timer = threading.Timer(seconds, expired)
    timer.name, timer.daemon = "stop-deadline", True
    timer.start()
    return timer


@dataclass(frozen=True)
class CleanupReport:
    slices_deleted: int
    cdi_specs_removed: tuple[str, ...]
    sockets_removed: tuple[str, ...]


def cleanup(config: NodeConfig, opts: DraOptions, kube: KubeAPI | None) -> CleanupReport:
    """Uninstall: delete this node's ResourceSlices of our driver (when an API is given), remove our CDI specs
    (per-claim and the device-plugin spec) and our sockets (any pod UID). The checkpoint is left in place.
    Refused (InstanceBusy) while a daemon holds the state directory: it would lose its sockets and specs."""
    lock = InstanceLock(config.state_dir)
    if config.state_dir.is_dir() and not lock.try_acquire(Instance.me(None, ())):
        raise InstanceBusy(config.state_dir, lock.holder())
    try:
        return _cleanup(config, opts, kube)
    finally:
        lock.release()


def _cleanup(config: NodeConfig, opts: DraOptions, kube: KubeAPI | None) -> CleanupReport:
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
    dp_stem = default_socket_name(config.resource_name)[:-len(".sock")]
    candidates = [*config.device_plugin_path.glob(f"{dp_stem}*.sock"),
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
