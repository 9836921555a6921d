"""The kubelet's pod lifecycle, simulated: pods bound to this node are admitted, get their devices, run, finish.

Written from kubernetes/kubernetes pkg/kubelet/kubelet.go (`HandlePodAdditions`/`canAdmitPod`/`rejectPod`,
`SyncPod`, `SyncTerminatingPod`), pkg/kubelet/pod_workers.go (one worker per pod, `completeWork`),
pkg/kubelet/kuberuntime/kuberuntime_manager.go (`SyncPod`), pkg/kubelet/config/config.go (`checkAndUpdatePod`,
`podsDifferSemantically`), pkg/kubelet/status/status_manager.go (a terminal pod that is being deleted is deleted for
good by the kubelet, with grace 0 and its UID as a precondition) and pkg/kubelet/cm/dra/manager.go. What it
reproduces:

* Source: a watch of the pods with `spec.nodeName=<node>` (all namespaces). Pods already terminal are ignored. An
  update of a known pod wakes its worker only when it differs *semantically* (spec, labels, annotations,
  `deletionTimestamp`, `deletionGracePeriodSeconds`): a status-only change (the kubelet's own status writes, a
  scheduler's or a controller's) is a RECONCILE, which does not sync the pod.
* Admission, one pod at a time: the device manager allocates each init container, then each container (its
  extended-resource limits); then the predicate handler checks the pod against the Node's allocatable and the
  pods admitted before (`admission.fits`). A rejected pod gets phase Failed with the kubelet's reason and message
  and a Warning Event; the devices it got are released.
* Start: status Pending (`ContainerCreating`) is written, then the DRA manager prepares the pod's claims (one
  NodePrepareResources per driver, `DraManager.prepare_pod`) before the sandbox would be created. A failure leaves
  the pod Pending with a Warning Event `FailedPrepareDynamicResources` ("Failed to prepare dynamic resources:
  ..."). The runtime manager's `SyncPod` returns *without* an error for it (kuberuntime_manager.go: it records the
  Event and returns before `createPodSandbox`, with no failed sync result), so the pod worker requeues the pod at
  its regular resync, `wait.Jitter(resyncInterval, 0.5)`: `syncFrequency` 1 min, i.e. 60-90 s
  (`resync_interval`), not at the 10 s error backoff; only a semantic update of the pod (or a DRA health change of a
  device its claims use, `retry_pod`) syncs it sooner. Then the containers "run": status Running with ready
  container statuses, and the kubelet's Normal events for each container (`Pulled`, `Created`, `Started`:
  `podevents`; `Killing` when a running pod is deleted).
* Finish: a pod annotated `sandbox.dra-bridge.io/run-seconds: "N"` has its containers exit after N seconds with
  `sandbox.dra-bridge.io/exit-code` (default 0). restartPolicy Never ends the pod, OnFailure ends it on exit 0,
  otherwise the container restarts after the kubelet's crash-loop backoff (10 s doubling to 5 min).
* Termination (the pod finished, or it was deleted: `deletionTimestamp` set, or the object gone): the running
  containers are sent SIGTERM (a `Killing` event each) and stopped within the pod's grace period, then the DRA claims
  are unprepared (a failure is a sync error, retried after the worker's `backOffPeriod`, 10 s jittered by 0.5:
  resources must be unprepared after the containers stopped and before the status changes), the terminal status is
  written twice as kubelet.go writes it (`SyncTerminatingPod`, then `SyncTerminatedPod`: generated again, written if
  it differs), and a pod being deleted is deleted for good. The device-plugin devices do NOT go back at termination:
  the device manager keeps them until its next `UpdateAllocatedDevices` (an admission's allocation, or a PodResources
  `List`), so the first terminal status still shows their health, and the second does not when the node daemon listed
  in between (its holder checks list after a pod event; what a real v1.37.2 kubelet wrote, about 0.5 s apart). The
  delete: with `gracePeriodSeconds: 0` and the pod's uid as precondition (status_manager.go `syncPod`), the only
  delete the API server acts on once a graceful deletion is under way (a plain DELETE of a pod with a
  deletionTimestamp changes nothing: k8s.io/apiserver pkg/registry/rest/delete.go `BeforeDelete`; the pods stayed
  there on a real kube-apiserver v1.37.2 until this was so).
* Stopping takes time, and the pod keeps its devices all that time: PodResources still lists it (the kubelet's active
  pods include a pod whose termination was requested, kubelet_pods.go `filterOutInactivePods`), its claims stay
  prepared and its device-plugin devices allocated. The containers exit `sandbox.dra-bridge.io/stop-seconds` after
  SIGTERM (default 0: at once, exit code 143, an ordinary process without a handler); if that is longer than the kill
  grace they are killed at its end (SIGKILL, exit code 137: a container whose PID 1 has no SIGTERM handler, which
  the kernel then does not deliver, or a program busy saving its work). The kill grace is the pod worker's effective
  grace period (pod_workers.go `calculateEffectiveGracePeriod`: the API server's `deletionGracePeriodSeconds`, else
  `spec.terminationGracePeriodSeconds`, at least 1 s, and it only ever shrinks) but at least 2 s
  (kuberuntime_container.go `killContainer`, `minimumGracePeriodInSeconds`). A second DELETE with a shorter grace
  period is a semantic update: the worker cancels the kill and kills again with the shorter grace, so the SIGKILL
  comes at the earlier of the old deadline and the update's time plus the new grace. A pod deleted outright (the
  object gone) is stopped with the grace of its last version. Neither preStop hooks nor sidecar ordering are
  modelled.
* A kubelet restart: the new kubelet syncs every pod at once, but a pod whose sandbox exists (a running pod) is
  NOT prepared again: NodePrepareResources is called only on the way to creating a sandbox (kuberuntime_manager.go
  `SyncPod`). The DRA manager forgets its "prepared" flags (`DraManager.forget_prepared`), so a pod that had not
  started yet is prepared again at that first sync. A plugin that lost state cannot count on a second prepare for
  running pods: it must recover from its own checkpoint. In detail:
* A kubelet that stops (`stop`) forgets its pods; their containers run on in the runtime, and nothing on the node
  reacts to the API until it starts again. A kubelet that starts (`start`, read at v1.37.2 in kubelet.go
  `syncLoop`/`syncLoopIteration`/`HandlePodAdditions`, kubelet_pods.go `HandlePodCleanups`, devicemanager/
  manager.go, cm/dra/manager.go `reconcileLoop`): its first listing of the pods is admitted as ONE batch, oldest
  first, after the start-up's wait (`first_sync_delay`, 1 s: see FIRST_SYNC_DELAY_S), and the pod source counts
  as seen only after that batch (`AddSource` follows the handler). While the sources are not ready, the device
  manager frees no devices (`UpdateAllocatedDevices` returns at once) and a container the runtime still runs needs
  no allocation ("scenario 2"); so a pod the scheduler bound, while the kubelet was down, to the devices of a pod
  force-deleted meanwhile is rejected ("requested number of devices unavailable ... Available: 0"), as on real
  kubelets. A pod in the listing whose containers still run is taken over as it was (no allocation, no prepare);
  one whose deletion was requested meanwhile is terminated by its worker. Housekeeping (every 2 s once the
  sources are ready) kills the containers of pods the API no longer has ("Clean up containers for orphaned pod we
  had not seen before", grace 1 s raised to the 2 s minimum), and writes nothing; their claims are unprepared only
  by the reconcile loop below (after, typically, the next pod's claim for the same device was asked for), their
  device-plugin devices at the next allocation once the sources are ready.
* Every `reconcile_period` (60 s) claims still referenced by pods that are no longer active are unprepared
  (cm/dra/manager.go `reconcileLoop`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bridge.kube.api import NODES, PODS, KubeAPI, Obj, WatchEvent
from bridge.kube.errors import Conflict, KubeError, NotFound
from bridge.kube.events import record_event
from bridge.kube.watch import Informer
from bridge.kvalues.quantity import QuantityError, parse_quantity
from bridge.sandbox.kubelet.admission import (
    INVALID_NODE_INFO,
    Verdict,
    device_limits,
    fits,
    rejected_status,
    unexpected,
)
from bridge.sandbox.kubelet.devicemanager import AllocationFailed, DeviceManager
from bridge.sandbox.kubelet.dramanager import DraManager, PodPrepareError, PodUnprepareError
from bridge.sandbox.kubelet.nodestatus import MachineInfo, initial_node, node_status
from bridge.sandbox.kubelet.podclaims import ClaimNotReady, pod_claims
from bridge.sandbox.kubelet.podevents import ContainerEvent, kill_events, start_events
from bridge.sandbox.kubelet.podstatus import RunState, build_status
from bridge.sandbox.kubelet.resourcestatus import container_status
from bridge.sandbox.kubelet.version import KubeletVersion

log = logging.getLogger(__name__)

RUN_SECONDS_ANNOTATION = "sandbox.dra-bridge.io/run-seconds"
EXIT_CODE_ANNOTATION = "sandbox.dra-bridge.io/exit-code"
SYNC_RETRY_S = 10.0  # pod_workers.go backOffPeriod (after a sync error)
RESYNC_INTERVAL_S = 60.0  # the kubelet's syncFrequency: pod_workers.go resyncInterval (after a sync without error)
JITTER_FACTOR = 0.5  # workerResyncIntervalJitterFactor, workerBackOffPeriodJitterFactor
RECONCILE_PERIOD_S = 60.0  # cm/dra/manager.go defaultReconcilePeriod
RESTART_BACKOFF_S = 10.0
RESTART_BACKOFF_MAX_S = 300.0
STOP_SECONDS_ANNOTATION = "sandbox.dra-bridge.io/stop-seconds"
KILLED_EXIT_CODE = 143  # 128 + SIGTERM
SIGKILLED_EXIT_CODE = 137  # 128 + SIGKILL: still running at the end of the grace period
MINIMUM_KILL_GRACE_S = 2  # kuberuntime_manager.go minimumGracePeriodInSeconds
HOUSEKEEPING_PERIOD_S = 2.0  # kubelet.go housekeepingPeriod
# kubelet/types/pod_status.go PodConditionsByKubelet
KUBELET_CONDITIONS = ("PodScheduled", "Ready", "Initialized", "ContainersReady", "PodResizeInProgress",
                      "PodResizePending")
# A starting kubelet admits its first batch a while after it starts: kubelet.go syncLoop's first iteration waits for
# the runtime's first status (`runtimeErrors`, backing off from 100 ms) while the pods listed wait in the config
# channel, and the device manager starts in that status update (`initializeRuntimeDependentModules`). On the real
# kubelets here (v1.37.2) the first batch's pod asked for its prepare about 1.5 s after the process started, so a
# device plugin that is running registers first. The simulator starts in milliseconds: it waits 1 s.
FIRST_SYNC_DELAY_S = 1.0
_ACTIVE = ("admitting", "admitted", "running", "terminating")  # the pod states GetActivePods keeps (see `active_pods`)
# What a pod's record holds of its containers' state: a kubelet started again takes these over from the runtime.
_RUNTIME_STATE = ("state", "run", "finish_at", "restart_at", "restart_delay", "running_since", "grace", "sigterm_at",
                  "kill_at", "health_written")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _created(rec: PodRecord) -> str:
    """HandlePodAdditions admits the pods oldest first (RFC 3339 timestamps sort as strings)."""
    return str((rec.obj.get("metadata") or {}).get("creationTimestamp", ""))


def semantic_key(pod: Obj) -> str:
    """What `podsDifferSemantically` compares: spec, labels, annotations, deletionTimestamp, deletion grace."""
    meta = pod.get("metadata") or {}
    return json.dumps([pod.get("spec"), meta.get("labels") or {}, meta.get("annotations") or {},
                       meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds")], sort_keys=True)


def effective_grace(pod: Obj, current: int) -> int:
    """The pod worker's grace period for a pod being terminated (pod_workers.go `calculateEffectiveGracePeriod`, no
    eviction override): `current` is the worker's value so far (0 before termination began); the API server's
    `deletionGracePeriodSeconds` replaces it when shorter; without either, the spec's
    `terminationGracePeriodSeconds`; never below 1."""
    grace, overridden = current, False
    override = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
    if override is not None and (grace == 0 or int(override) < grace):
        grace, overridden = int(override), True
    spec_grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    if not overridden and grace == 0 and spec_grace is not None:
        grace = int(spec_grace)
    return max(grace, 1)


def _seconds_annotation(pod: Obj, name: str) -> float | None:
    """A duration the pod's annotation `name` sets (a quantity of seconds, at least 0); None when absent or
    unreadable (logged)."""
    meta = pod.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(name)
    if value is None:
        return None
    try:
        return max(0.0, float(parse_quantity(value)))
    except (QuantityError, ValueError):
        log.warning("ignoring an unreadable %s annotation", name, extra={"pod": meta.get("name"), "value": value})
        return None


@dataclass(frozen=True)
class PrepareFailure:
    """One failed start because NodePrepareResources failed (for measurements: what a user waited for)."""

    pod: str  # namespace/name
    message: str
    at: float  # monotonic
    retry_in: float  # seconds until the worker syncs the pod again (unless a semantic update comes first)


@dataclass
class PodRecord:
    """One pod's worker state."""

    uid: str
    namespace: str
    name: str
    obj: Obj
    state: str = "new"  # new -> admitting -> admitted -> running -> terminating -> done | rejected
    run: RunState | None = None
    gone: bool = False  # the API object was deleted
    semantic: str = ""  # semantic_key of the last version seen
    finish_at: float | None = None
    restart_at: float | None = None
    restart_delay: float = RESTART_BACKOFF_S
    last_warning: str = ""
    wake: threading.Event = field(default_factory=threading.Event)
    running_since: float | None = None  # monotonic, when the containers started (benchmarks)
    grace: int = 0  # the worker's effective grace period once the containers were sent SIGTERM (it only shrinks)
    sigterm_at: float | None = None  # monotonic: when the running containers were sent SIGTERM; None: not stopping
    kill_at: float = 0.0  # monotonic: when the containers still running get SIGKILL
    health_written: dict[str, list[Obj]] = field(default_factory=dict)  # the allocatedResourcesStatus last written
    created_seen: float = field(default_factory=time.monotonic)


class PodRunner:
    def __init__(self, kube: KubeAPI, node_name: str, devices: DeviceManager, dra: DraManager | None, *,
                 version: KubeletVersion, machine: MachineInfo | None = None, sync_retry: float = SYNC_RETRY_S,
                 resync_interval: float = RESYNC_INTERVAL_S, restart_backoff: float = RESTART_BACKOFF_S,
                 reconcile_period: float = RECONCILE_PERIOD_S, first_sync_delay: float = FIRST_SYNC_DELAY_S,
                 rng: random.Random | None = None) -> None:
        self.kube = kube
        self.node_name = node_name
        self.devices = devices
        self.dra = dra
        self.version = version
        self.machine = machine or MachineInfo()
        self.sync_retry = sync_retry
        self.resync_interval = resync_interval
        self.rng = rng or random.Random()
        self.prepare_failures: list[PrepareFailure] = []
        self.restart_backoff = restart_backoff
        self.reconcile_period = reconcile_period
        self._reconciler: threading.Thread | None = None
        self._lock = threading.RLock()
        self._admit_lock = threading.Lock()
        self._pods: dict[str, PodRecord] = {}
        self._workers: dict[str, threading.Thread] = {}
        self._stop = threading.Event()
        self._informer: Informer | None = None
        self._informer_thread: threading.Thread | None = None
        self.housekeeping_period = HOUSEKEEPING_PERIOD_S
        self.first_sync_delay = first_sync_delay
        # The container runtime's pods that this kubelet process has not taken over (yet): the pods that ran when
        # an earlier process stopped. `start` adopts those still in the API; housekeeping kills the rest.
        self._runtime: dict[str, PodRecord] = {}
        self._first_batch: list[PodRecord] | None = None  # the pod source's first listing, while it is collected
        self._housekeeper: threading.Thread | None = None
        # `sourcesReady.AllReady()`: set once the first listing's pods were admitted (and cleared by `stop`)
        self.sources_ready = threading.Event()
        self.orphans_killed: list[str] = []  # "namespace/name (uid)" of each orphan housekeeping killed

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> None:
        """The kubelet process starting, the first time or where an earlier one ran (`stop`). The pods of the pod
        source's first listing are admitted as one batch, oldest first, before the sources count as ready; a pod
        whose containers the runtime still runs is taken over (no new allocation, no prepare). Then pods come one
        by one, and housekeeping kills the runtime's pods that are gone from the API (see the module docstring)."""
        self._stop.clear()
        self.sources_ready.clear()
        self.devices.sources_ready = self.sources_ready.is_set
        self.devices.active_pods = self._active_uids
        if self.dra is not None:
            self.dra.on_pod_updates = self._sync_pods
        self.devices.on_pod_updates = self._sync_pods
        with self._lock:
            self._first_batch = []
        self._informer = Informer(self.kube, PODS, field_selector=f"spec.nodeName={self.node_name}",
                                  on_event=self._on_event)
        self._informer_thread = self._informer.start(self._stop)
        self._housekeeper = threading.Thread(target=self._housekeeping, name="kubelet-housekeeping", daemon=True)
        self._housekeeper.start()
        self._reconciler = threading.Thread(target=self._reconcile, name="dra-reconcile", daemon=True)
        self._reconciler.start()

    def _reconcile(self) -> None:
        """The DRA manager's `reconcileLoop`: claims still referenced by pods that are no longer active (a
        termination whose unprepare kept failing, a pod deleted while the kubelet was down) are unprepared. A pass
        before the sources are ready does nothing (`wait.Until` runs one at once, which returns)."""
        while not self._stop.wait(self.reconcile_period):
            if self.dra is None or not self.sources_ready.is_set():
                continue
            self.dra.unprepare_inactive(set(self._active_uids()))

    def _active_uids(self) -> list[str]:
        """`GetActivePods` (see `active_pods`), by UID: what the device manager and the DRA reconcile loop keep."""
        return [(r.get("metadata") or {}).get("uid", "") for r in self.active_pods()]

    def _housekeeping(self) -> None:
        """The sync loop: the first listing admitted as a batch, then, every `housekeeping_period` once the sources
        are ready, `HandlePodCleanups`: containers of pods the API no longer has are killed ("Clean up containers
        for orphaned pod we had not seen before", grace 1 s raised to the 2 s minimum)."""
        informer = self._informer
        assert informer is not None
        while not informer.wait_synced(0.1):
            if self._stop.is_set():
                return
        if self._stop.wait(self.first_sync_delay):
            return
        self._admit_first_batch()
        delay = self.housekeeping_period
        while not self._stop.wait(delay):
            delay = self._kill_orphans()

    def _admit_first_batch(self) -> None:
        with self._admit_lock:
            with self._lock:
                batch = sorted(self._first_batch or [], key=_created)
                self._first_batch = None  # later pods start their own workers, which wait for this lock
            verdicts = [self._admission(rec) for rec in batch]
            self.sources_ready.set()  # syncLoopIteration: AddSource after the handler
        for rec, verdict in zip(batch, verdicts):
            self._report_admission(rec, verdict)
            self._spawn(rec)

    def _kill_orphans(self) -> float:
        """Kill the runtime's pods this kubelet does not know; returns the seconds to the next pass (sooner while
        a killed orphan's containers are stopping)."""
        now = time.monotonic()
        with self._lock:
            orphans = list(self._runtime.values())
        delay = self.housekeeping_period
        for rec in orphans:
            if rec.sigterm_at is None:
                log.info("Clean up containers for orphaned pod we had not seen before",
                         extra={"pod": f"{rec.namespace}/{rec.name}", "podUID": rec.uid})
                rec.sigterm_at, rec.grace = now, 1
                rec.kill_at = now + MINIMUM_KILL_GRACE_S
            exits_at = rec.sigterm_at + (_seconds_annotation(rec.obj, STOP_SECONDS_ANNOTATION) or 0.0)
            gone_at = min(exits_at, rec.kill_at)
            if now < gone_at:
                delay = min(delay, gone_at - now)
                continue
            with self._lock:  # its containers are gone: nothing else to do (no API pod to write)
                self._runtime.pop(rec.uid, None)
                self.orphans_killed.append(f"{rec.namespace}/{rec.name} ({rec.uid})")
        return delay

    def power_off(self) -> None:
        """The node losing power while this kubelet is stopped: every container the runtime ran is gone."""
        with self._lock:
            self._runtime.clear()

    def runtime_orphans(self) -> list[str]:
        """"namespace/name (uid)" of the runtime's pods this kubelet has not taken over and not yet killed."""
        with self._lock:
            return [f"{r.namespace}/{r.name} ({r.uid})" for r in self._runtime.values()]

    def stop(self) -> None:
        """The kubelet process going away: its workers stop and it forgets its pods, whose containers keep running
        in the runtime (nothing is torn down); a later `start` finds them there. Its sources are no longer ready: a
        new kubelet process starts without them, and until its first batch is admitted the device manager keeps
        every device of its checkpoint (a PodResources List as the new device manager serves, before this runner
        starts again, must not free them as though no pod were active)."""
        self._stop.set()
        self.sources_ready.clear()
        with self._lock:
            records, workers = list(self._pods.values()), list(self._workers.values())
        for r in records:
            r.wake.set()
        for thread in (self._informer_thread, self._housekeeper, self._reconciler):
            if thread is not None:
                thread.join(timeout=15)
        for w in workers:
            w.join(timeout=15)
        with self._lock:
            for r in self._pods.values():
                if r.state in ("running", "terminating"):
                    self._runtime[r.uid] = r
            self._pods, self._workers, self._first_batch = {}, {}, None

    def wait_synced(self, timeout: float) -> bool:
        return self._informer is not None and self._informer.wait_synced(timeout)

    def retry_pod(self, uid: str) -> bool:
        """Sync one pod now (`HandlePodSyncs`: a DRA resource-health update for a device its claims use)."""
        with self._lock:
            rec = self._pods.get(uid)
        if rec is None:
            return False
        rec.wake.set()
        return True

    def _sync_pods(self, uids: list[str]) -> None:
        for uid in uids:
            self.retry_pod(uid)

    def _jitter(self, period: float) -> float:
        """`wait.Jitter(period, 0.5)`: uniformly between the period and 1.5 times it."""
        return period + self.rng.random() * JITTER_FACTOR * period

    # -- queries ----------------------------------------------------------------------------------------------------

    def active_pods(self) -> list[Obj]:
        """`GetActivePods`: the pods not yet torn down, including the one being admitted (HandlePodAdditions adds a
        pod to the pod manager just before it admits it; pods still queued behind it are not there yet). So a
        PodResources List during an admission lists that pod (without the devices its Allocate is still fetching)
        and keeps the devices the admission allocates."""
        with self._lock:
            return [r.obj for r in self._pods.values() if r.state in _ACTIVE]

    def record(self, namespace: str, name: str) -> PodRecord | None:
        with self._lock:
            return next((r for r in self._pods.values() if (r.namespace, r.name) == (namespace, name)), None)

    # -- events -----------------------------------------------------------------------------------------------------

    def _on_event(self, ev: WatchEvent) -> None:
        meta = ev.object.get("metadata") or {}
        uid = meta.get("uid", "")
        with self._lock:
            rec = self._pods.get(uid)
            if ev.type == "DELETED":
                if rec is not None:
                    rec.gone = True
                    rec.wake.set()
                return
            if rec is not None:
                rec.obj = ev.object
                key = semantic_key(ev.object)
                if key != rec.semantic:  # an UPDATE; a status-only change is a RECONCILE and syncs nothing
                    rec.semantic = key
                    rec.wake.set()
                return
            if (ev.object.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return  # terminal pods are not run again
            rec = self._pods[uid] = PodRecord(uid, meta.get("namespace", ""), meta.get("name", ""), ev.object,
                                              semantic=semantic_key(ev.object))
            if self._first_batch is not None:
                self._first_batch.append(rec)  # admitted with the whole first listing
                return
        self._spawn(rec)

    def _spawn(self, rec: PodRecord) -> None:
        worker = threading.Thread(target=self._work, args=(rec,), name=f"pod-{rec.name}", daemon=True)
        with self._lock:
            self._workers[rec.uid] = worker
        worker.start()

    # -- the pod worker ---------------------------------------------------------------------------------------------

    def _work(self, rec: PodRecord) -> None:
        try:
            while not self._stop.is_set():
                timeout = self._step(rec)
                if rec.state in ("done", "rejected"):
                    return
                rec.wake.wait(timeout)
                rec.wake.clear()
        except Exception:  # a simulator bug must be loud, never a silently stuck pod
            log.exception("pod worker failed", extra={"pod": f"{rec.namespace}/{rec.name}"})
        finally:
            with self._lock:
                self._workers.pop(rec.uid, None)
                if rec.state in ("done", "rejected"):
                    self._pods.pop(rec.uid, None)

    def _step(self, rec: PodRecord) -> float | None:
        """Advance the pod one step; returns how long to sleep before the next (None: until woken)."""
        if rec.state == "new":
            if rec.gone or (rec.obj.get("metadata") or {}).get("deletionTimestamp"):
                rec.state = "done"
                return None
            self._admit(rec)
            return 0
        if rec.gone or (rec.obj.get("metadata") or {}).get("deletionTimestamp"):
            return self._terminate(rec, killed=True)
        if rec.state == "terminating":
            return self._terminate(rec, killed=False)
        if rec.state == "admitted":
            return self._start(rec)
        if rec.state == "running":
            return self._run(rec)
        return None

    def _admit(self, rec: PodRecord) -> None:
        with self._admit_lock:
            verdict = self._admission(rec)
        self._report_admission(rec, verdict)

    def _admission(self, rec: PodRecord) -> Verdict | None:
        """HandlePodAdditions for one pod (the admit lock held): the verdict, or None when there is none (a pod
        whose termination was requested is not admitted: its worker terminates it). A pod the runtime still runs
        is taken over with its containers' state, and admitted as running containers are."""
        with self._lock:
            kept = self._runtime.pop(rec.uid, None)
        deleting = rec.gone or bool((rec.obj.get("metadata") or {}).get("deletionTimestamp"))
        if kept is not None:
            for name in _RUNTIME_STATE:
                setattr(rec, name, getattr(kept, name))
        if deleting:
            return None
        if kept is None:
            rec.state = "admitting"  # in the pod manager from here (HandlePodAdditions): active while it is admitted
        verdict = self._verdict(rec, running=kept is not None)
        if not verdict.admit:
            self.devices.remove_pod(rec.uid)
            rec.state = "rejected"
        elif kept is None:
            rec.state = "admitted"
            rec.run = RunState(start_time=_now())
        return verdict

    def _report_admission(self, rec: PodRecord, verdict: Verdict | None) -> None:
        if verdict is not None and verdict.admit and rec.state != "admitted":
            self._resync_taken_over(rec)
            return
        if verdict is None:
            return  # not admitted now
        if not verdict.admit:
            log.info("pod rejected", extra={"pod": f"{rec.namespace}/{rec.name}", "reason": verdict.reason,
                                            "message": verdict.message})
            self._event(rec, "Warning", verdict.reason, verdict.message)
            self._patch_status(rec, rejected_status(rec.obj, verdict))
            return
        assert rec.run is not None
        self._write_status(rec)

    def _verdict(self, rec: PodRecord, *, running: bool = False) -> Verdict:
        pod = rec.obj
        spec = pod.get("spec") or {}
        known = set(self.devices.resource_names())
        try:
            for c in spec.get("initContainers") or []:
                for res, count in device_limits(c).items():
                    if res in known:
                        self.devices.allocate(rec.uid, c["name"], res, count, namespace=rec.namespace,
                                              pod_name=rec.name, init=True,
                                              restartable=c.get("restartPolicy") == "Always",
                                              # an init container that ran to completion runs no more
                                              running=running and c.get("restartPolicy") == "Always")
            for c in spec.get("containers") or []:
                for res, count in device_limits(c).items():
                    if res in known:
                        self.devices.allocate(rec.uid, c["name"], res, count, namespace=rec.namespace,
                                              pod_name=rec.name, running=running)
        except AllocationFailed as err:
            return unexpected(err)
        node = self._node()
        if node is None:
            return Verdict(False, INVALID_NODE_INFO, "Kubelet cannot get node info.")
        allocated = {r: len(self.devices.allocated_ids(r)) for r in known}
        with self._lock:
            # allocationManager.AddPod(GetActivePods(), pod), the pod itself left out (admissions are serialised)
            others = [r.obj for r in self._pods.values() if r.uid != rec.uid and r.state in _ACTIVE]
        return fits(pod, node, others, allocated, dra_extended=self.version.dra_extended_resource)

    def _node(self) -> Obj | None:
        """`getNodeAnyWay`: the Node from the API, else the node this kubelet would register."""
        try:
            return self.kube.get(NODES, self.node_name)
        except KubeError:
            node = initial_node(self.node_name, self.machine)
            node["status"] = node_status(self.node_name, node, self.devices.capacity(), self.machine, self.version,
                                         _now())
            return node

    def _start(self, rec: PodRecord) -> float | None:
        """SyncPod on the way to creating the sandbox: prepare the pod's claims, then start its containers."""
        assert rec.run is not None
        self._refresh_health(rec)  # SyncPod writes the pod's status first: a retry shows the claims cached since
        if self.dra is not None and self._has_claims(rec.obj):
            try:
                self.dra.prepare_pod(rec.obj)
            except (PodPrepareError, KubeError) as err:
                message = f"Failed to prepare dynamic resources: prepare dynamic resources: {err}"
                if message != rec.last_warning:
                    rec.last_warning = message
                    self._event(rec, "Warning", "FailedPrepareDynamicResources", message)
                retry_in = self._jitter(self.resync_interval)  # SyncPod returned no error: the regular resync
                with self._lock:
                    self.prepare_failures.append(PrepareFailure(f"{rec.namespace}/{rec.name}", str(err),
                                                                time.monotonic(), retry_in))
                log.info("pod start failed, will retry at the next pod sync",
                         extra={"pod": f"{rec.namespace}/{rec.name}", "error": str(err), "retry_in": round(retry_in, 1)})
                return retry_in
        rec.state = "running"
        rec.run.started_at = _now()
        rec.running_since = time.monotonic()
        rec.finish_at = self._finish_time(rec.obj)
        self._write_status(rec)
        self._container_events(rec, start_events(rec.obj, self.version))
        return 0

    def _has_claims(self, pod: Obj) -> bool:
        try:
            return bool(pod_claims(pod, extended_resources=self.version.dra_extended_resource))
        except ClaimNotReady:
            return True  # a template claim not created yet: prepare_pod reports why the pod cannot start

    @staticmethod
    def _finish_time(pod: Obj) -> float | None:
        seconds = _seconds_annotation(pod, RUN_SECONDS_ANNOTATION)
        return None if seconds is None else time.monotonic() + seconds

    def _run(self, rec: PodRecord) -> float | None:
        assert rec.run is not None
        self._refresh_health(rec)
        now = time.monotonic()
        if rec.restart_at is not None:
            if now < rec.restart_at:
                return rec.restart_at - now
            rec.restart_at = None
            rec.run.started_at = _now()
            rec.finish_at = self._finish_time(rec.obj)
            self._write_status(rec)
            self._container_events(rec, start_events(rec.obj, self.version, init_containers=False))
            return 0
        if rec.finish_at is None:
            return None
        if now < rec.finish_at:
            return rec.finish_at - now
        annotations = (rec.obj.get("metadata") or {}).get("annotations") or {}
        try:
            code = int(annotations.get(EXIT_CODE_ANNOTATION, "0"))
        except ValueError:
            code = 1
        policy = (rec.obj.get("spec") or {}).get("restartPolicy", "Always")
        if policy == "Never" or (policy == "OnFailure" and code == 0):
            rec.run.exit_codes = {c["name"]: code for c in (rec.obj.get("spec") or {}).get("containers") or []}
            rec.state = "terminating"
            return 0
        rec.run.restart_count += 1
        rec.run.last_termination = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                    "startedAt": rec.run.started_at, "finishedAt": _now()}
        rec.run.started_at = None
        rec.run.waiting_reason = "CrashLoopBackOff"
        rec.restart_at = now + rec.restart_delay
        rec.restart_delay = min(rec.restart_delay * 2, RESTART_BACKOFF_MAX_S)
        self._write_status(rec)
        return rec.restart_at - now

    def _terminate(self, rec: PodRecord, *, killed: bool) -> float | None:
        assert rec.run is not None
        if rec.state != "terminating":
            rec.state = "terminating"
            if killed:
                rec.run.exit_codes = {c["name"]: KILLED_EXIT_CODE
                                      for c in (rec.obj.get("spec") or {}).get("containers") or []}
                if rec.run.started_at is not None:  # running containers: SIGTERM now, SIGKILL at the grace's end
                    self._container_events(rec, kill_events(rec.obj))
                    rec.sigterm_at = time.monotonic()
                    rec.grace = effective_grace(rec.obj, 0)
                    rec.kill_at = rec.sigterm_at + max(rec.grace, MINIMUM_KILL_GRACE_S)
        if rec.sigterm_at is not None:
            left = self._stopping(rec)
            if left > 0:
                return left
        if self.dra is not None and self.dra.has_pod_reference(rec.uid):
            try:
                self.dra.unprepare_pod(rec.obj)
            except (PodUnprepareError, KubeError) as err:
                log.info("unpreparing pod resources failed, will retry",
                         extra={"pod": f"{rec.namespace}/{rec.name}", "error": str(err)})
                return self._jitter(self.sync_retry)  # a sync error: the worker's backOffPeriod
        with self._lock:
            rec.state = "done"  # no longer active: the next UpdateAllocatedDevices gives its devices back
        if rec.gone:
            return None
        if rec.run.started_at is None:
            rec.run.started_at = rec.run.start_time
        rec.run.finished_at = _now()
        # SyncTerminatingPod's status: the device manager still holds the pod's devices, so their health is in it.
        # They go back only at the next UpdateAllocatedDevices (an admission's allocation, or a PodResources List:
        # the node daemon's holder checks list after a pod event), not at termination.
        self._write_status(rec)
        # SyncTerminatedPod's status: generated again and written if it differs (without the device-plugin health
        # once a List or an admission in between took the devices back)
        self._refresh_health(rec)
        if (rec.obj.get("metadata") or {}).get("deletionTimestamp"):
            try:  # status_manager.go: grace 0, with the pod's UID as a precondition
                self.kube.delete(PODS, rec.name, rec.namespace, grace_period_seconds=0, uid=rec.uid)
            except (NotFound, Conflict):  # gone, or a new pod of the same name (not ours to delete)
                pass
            except KubeError as err:
                log.warning("deleting the terminated pod failed", extra={"pod": f"{rec.namespace}/{rec.name}",
                                                                         "error": str(err)})
        return None

    def _stopping(self, rec: PodRecord) -> float:
        """Seconds until the containers sent SIGTERM have stopped (0: stopped now, with their exit codes)."""
        assert rec.run is not None and rec.sigterm_at is not None
        now = time.monotonic()
        grace = effective_grace(rec.obj, rec.grace)
        if grace != rec.grace:  # a shorter grace period: the worker cancels the kill and kills again with it
            rec.grace = grace
            rec.kill_at = min(rec.kill_at, now + max(grace, MINIMUM_KILL_GRACE_S))
        exits_at = rec.sigterm_at + (_seconds_annotation(rec.obj, STOP_SECONDS_ANNOTATION) or 0.0)
        if now < min(exits_at, rec.kill_at):
            return min(exits_at, rec.kill_at) - now
        code = KILLED_EXIT_CODE if exits_at <= rec.kill_at else SIGKILLED_EXIT_CODE
        rec.run.exit_codes = {c["name"]: code for c in (rec.obj.get("spec") or {}).get("containers") or []}
        rec.sigterm_at = None
        return 0.0

    # -- API writes -------------------------------------------------------------------------------------------------

    def _write_status(self, rec: PodRecord, health: dict[str, list[Obj]] | None = None) -> None:
        """`health`: the pod's `_resources_status`, when the caller has it already."""
        assert rec.run is not None
        rec.health_written = self._resources_status(rec.obj) if health is None else health
        self._patch_status(rec, build_status(rec.obj, rec.run, host_ip=self.machine.address,
                                             pod_ip=self.machine.address, now=_now(), version=self.version,
                                             resources_status=rec.health_written))

    def _resync_taken_over(self, rec: PodRecord) -> None:
        """Containers taken over from the runtime keep their status, unless someone else changed a condition the
        kubelet owns (the node lifecycle controller marks the pods of a Node that stopped posting not Ready): a new
        kubelet process's status manager has no cached status, so its first sync writes the status it generates
        wherever the API's differs (status_manager.go `syncPod`, `PodConditionsByKubelet`); the changed conditions'
        transition time is now."""
        assert rec.run is not None
        health = self._resources_status(rec.obj)
        status = build_status(rec.obj, rec.run, host_ip=self.machine.address, pod_ip=self.machine.address,
                              now=_now(), version=self.version, resources_status=health)

        def owned(s: Obj) -> dict[str, Any]:
            return {c.get("type"): c.get("status") for c in s.get("conditions") or [] if c.get("type") in
                    KUBELET_CONDITIONS}

        if owned(status) != owned(rec.obj.get("status") or {}):
            rec.health_written = health
            self._patch_status(rec, status)

    def _resources_status(self, pod: Obj) -> dict[str, list[Obj]]:
        """Each app container's `allocatedResourcesStatus` now (`resourcestatus`; ResourceHealthStatus, 1.36+)."""
        if not self.version.resource_health_status:
            return {}
        uid = (pod.get("metadata") or {}).get("uid", "")
        out: dict[str, list[Obj]] = {}
        for c in (pod.get("spec") or {}).get("containers") or []:
            claims = self.dra.claim_status_entries(pod, c) if self.dra is not None else {}
            entries = container_status(self.devices.container_health(uid, c["name"]), claims)
            if entries:
                out[c["name"]] = entries
        return out

    def _refresh_health(self, rec: PodRecord) -> None:
        """A sync of a pod that writes nothing else: its status again when its devices' health changed (the status
        manager writes only a status that differs)."""
        if not self.version.resource_health_status:
            return
        health = self._resources_status(rec.obj)
        if health != rec.health_written:
            self._write_status(rec, health)

    def _patch_status(self, rec: PodRecord, status: Obj) -> None:
        try:
            self.kube.patch(PODS, rec.name, {"status": status}, rec.namespace, subresource="status")
        except NotFound:
            rec.gone = True
        except KubeError as err:
            log.warning("writing pod status failed", extra={"pod": f"{rec.namespace}/{rec.name}", "error": str(err)})

    def _event(self, rec: PodRecord, type_: str, reason: str, message: str, field_path: str | None = None) -> None:
        try:
            record_event(self.kube, {**rec.obj, "apiVersion": "v1", "kind": "Pod"}, reason, message,
                         "Warning" if type_ == "Warning" else "Normal", component="kubelet", host=self.node_name,
                         field_path=field_path)
        except (KubeError, ValueError) as err:
            log.debug("recording an event failed: %s", err)

    def _container_events(self, rec: PodRecord, events: list[ContainerEvent]) -> None:
        """Pulled/Created/Started and Killing, as the real kubelet records them (`podevents`)."""
        for e in events:
            self._event(rec, "Normal", e.reason, e.message, e.field_path)
