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
  containers are sent SIGTERM (a `Killing` event each) and stopped within the pod's grace period, then the DRA
  claims are unprepared (a failure is a sync error, retried
  after the worker's `backOffPeriod`, 10 s jittered by 0.5: resources must be unprepared after the containers
  stopped and before the status changes), the device-plugin devices go back (`UpdateAllocatedDevices`), the
  terminal status is written, and a pod being deleted is deleted for good: with `gracePeriodSeconds: 0` and the
  pod's uid as precondition (status_manager.go `syncPod`), the only delete the API server acts on once a graceful
  deletion is under way (a plain DELETE of a pod with a deletionTimestamp changes nothing: k8s.io/apiserver
  pkg/registry/rest/delete.go `BeforeDelete`; the pods stayed there on a real kube-apiserver v1.37.2 until this
  was so).
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
* A kubelet restart (`resync`): the new kubelet syncs every pod at once, but a pod whose sandbox exists (a
  running pod) is NOT prepared again: NodePrepareResources is called only on the way to creating a sandbox
  (kuberuntime_manager.go `SyncPod`). The DRA manager forgets its "prepared" flags (`DraManager.restart`), so a pod
  that had not started yet is prepared again at that first sync. A plugin that lost state cannot count on a
  second prepare for running pods: it must recover from its own checkpoint.
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


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    state: str = "new"  # new -> admitted -> running -> terminating -> done | rejected
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
                 reconcile_period: float = RECONCILE_PERIOD_S, rng: random.Random | None = None) -> None:
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

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        if self.dra is not None:
            self.dra.on_pod_updates = self._sync_pods
        self.devices.on_pod_updates = self._sync_pods
        self._informer = Informer(self.kube, PODS, field_selector=f"spec.nodeName={self.node_name}",
                                  on_event=self._on_event)
        self._informer_thread = self._informer.start(self._stop)
        self._reconciler = threading.Thread(target=self._reconcile, name="dra-reconcile", daemon=True)
        self._reconciler.start()

    def _reconcile(self) -> None:
        """The DRA manager's `reconcileLoop`: claims still referenced by pods that are no longer active (a
        termination whose unprepare kept failing, a pod deleted while the kubelet was down) are unprepared."""
        while not self._stop.wait(self.reconcile_period):
            if self.dra is None:
                continue
            with self._lock:
                active = {r.uid for r in self._pods.values() if r.state in ("admitted", "running", "terminating")}
            self.dra.unprepare_inactive(active)

    def stop(self) -> None:
        """The kubelet going away: workers stop, the pods' "containers" keep running (nothing is torn down)."""
        self._stop.set()
        with self._lock:
            records, workers = list(self._pods.values()), list(self._workers.values())
        for r in records:
            r.wake.set()
        if self._informer_thread is not None:
            self._informer_thread.join(timeout=15)
        if self._reconciler is not None:
            self._reconciler.join(timeout=15)
        for w in workers:
            w.join(timeout=15)

    def wait_synced(self, timeout: float) -> bool:
        return self._informer is not None and self._informer.wait_synced(timeout)

    def resync(self) -> None:
        """After a kubelet restart: every pod is synced at once; only those not started yet reach the prepare
        (a running pod has its sandbox)."""
        with self._lock:
            for r in self._pods.values():
                r.wake.set()

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
        """The kubelet's active pods: admitted and not yet torn down."""
        with self._lock:
            return [r.obj for r in self._pods.values() if r.state in ("admitted", "running", "terminating")]

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
            worker = threading.Thread(target=self._work, args=(rec,), name=f"pod-{rec.name}", daemon=True)
            self._workers[uid] = worker
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
            verdict = self._verdict(rec)
            if not verdict.admit:
                self.devices.remove_pod(rec.uid)
                rec.state = "rejected"
            else:
                rec.state = "admitted"
                rec.run = RunState(start_time=_now())
        if not verdict.admit:
            log.info("pod rejected", extra={"pod": f"{rec.namespace}/{rec.name}", "reason": verdict.reason,
                                            "message": verdict.message})
            self._event(rec, "Warning", verdict.reason, verdict.message)
            self._patch_status(rec, rejected_status(rec.obj, verdict))
            return
        assert rec.run is not None
        self._write_status(rec)

    def _verdict(self, rec: PodRecord) -> Verdict:
        pod = rec.obj
        spec = pod.get("spec") or {}
        known = set(self.devices.resource_names())
        try:
            for c in spec.get("initContainers") or []:
                for res, count in device_limits(c).items():
                    if res in known:
                        self.devices.allocate(rec.uid, c["name"], res, count, namespace=rec.namespace,
                                              pod_name=rec.name, init=True,
                                              restartable=c.get("restartPolicy") == "Always")
            for c in spec.get("containers") or []:
                for res, count in device_limits(c).items():
                    if res in known:
                        self.devices.allocate(rec.uid, c["name"], res, count, namespace=rec.namespace,
                                              pod_name=rec.name)
        except AllocationFailed as err:
            return unexpected(err)
        node = self._node()
        if node is None:
            return Verdict(False, INVALID_NODE_INFO, "Kubelet cannot get node info.")
        allocated = {r: len(self.devices.allocated_ids(r)) for r in known}
        with self._lock:
            others = [r.obj for r in self._pods.values()
                      if r.uid != rec.uid and r.state in ("admitted", "running", "terminating")]
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
            rec.state = "done"
            active = [r.uid for r in self._pods.values() if r.state in ("admitted", "running", "terminating")]
        self.devices.update_allocated(active)
        if rec.gone:
            return None
        if rec.run.started_at is None:
            rec.run.started_at = rec.run.start_time
        rec.run.finished_at = _now()
        self._write_status(rec)
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
