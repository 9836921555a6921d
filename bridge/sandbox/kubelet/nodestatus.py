"""The kubelet's Node registration and status loop, simulated.

Written from kubernetes/kubernetes pkg/kubelet/kubelet_node_status.go (`registerWithAPIServer`,
`tryRegisterWithAPIServer`, `initialNode`, `reconcileExtendedResource`, `updateDefaultLabels`,
`tryUpdateNodeStatus`), pkg/kubelet/nodestatus/setters.go (`MachineInfo`, `ReadyCondition`, the pressure
conditions) and pkg/kubelet/apis/config/v1beta1/defaults.go (`nodeStatusUpdateFrequency` 10 s,
`nodeStatusReportFrequency` 5 min). What it reproduces:

* Registration: create the Node (default labels `kubernetes.io/hostname|os|arch` and their `beta.` twins, the
  configured labels and taints, the attach-detach annotation); retried every 100 ms doubling to 7 s. When the Node
  exists already, its default labels are reconciled and, when this kubelet starts with no device state (the
  kubelet's `ShouldResetExtendedResourceCapacity`: an empty device-plugin directory), its extended resources are zeroed
  until the device plugins report again. Nothing else of an existing Node (annotations, other labels) is touched.
* Status, every `update_frequency` (the kubelet's `nodeStatusUpdateFrequency`): capacity = the machine (cpu,
  memory, pods, ephemeral-storage, hugepages) plus, per device-plugin resource, **all** its devices; allocatable =
  capacity, then per device-plugin resource only its **healthy** devices; a resource past the 5-minute grace gets
  capacity 0 (kept, not deleted); extended resources gone from capacity leave allocatable; other extended
  resources already on the Node are kept. Conditions MemoryPressure/DiskPressure/PIDPressure False and Ready True
  last, heartbeat times bumped, transition times kept while a condition's status holds. The PATCH is sent only when
  the status changed (heartbeats aside) or `report_frequency` passed since the last one.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.deviceplugin.registration import is_extended_resource_name
from bridge.kube.api import NODES, KubeAPI, Obj
from bridge.kube.errors import AlreadyExists, KubeError
from bridge.sandbox.kubelet.devicemanager import Capacity
from bridge.sandbox.kubelet.version import KubeletVersion
from bridge.sandbox.threads import Worker

log = logging.getLogger(__name__)

UPDATE_FREQUENCY_S = 10.0
REPORT_FREQUENCY_S = 300.0
CMAD_ANNOTATION = "volumes.kubernetes.io/controller-managed-attach-detach"
DEFAULT_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os",
                  "beta.kubernetes.io/arch")


@dataclass(frozen=True)
class MachineInfo:
    """What cAdvisor would report for the simulated machine, plus the kubelet's registration flags."""

    cpu: str = "64"
    memory: str = "527672488Ki"
    pods: int = 110
    ephemeral_storage: str = "1023Gi"
    labels: Mapping[str, str] = field(default_factory=dict)  # --node-labels
    taints: tuple[Obj, ...] = ()  # --register-with-taints
    address: str = "127.0.0.1"
    container_runtime: str = "containerd://2.1.3"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uuidish(node_name: str, salt: str) -> str:
    h = hashlib.sha256(f"{salt}/{node_name}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def initial_node(node_name: str, machine: MachineInfo) -> Obj:
    labels = {"kubernetes.io/hostname": node_name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", **machine.labels}
    node: Obj = {"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": node_name, "labels": labels, "annotations": {CMAD_ANNOTATION: "true"}},
                 "spec": {}}
    if machine.taints:
        node["spec"]["taints"] = [dict(t) for t in machine.taints]
    return node


_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),  # Ready stays last (issue #16961)
)


def node_status(node_name: str, current: Obj, devices: Capacity, machine: MachineInfo, version: KubeletVersion,
                now: str) -> Obj:
    """The status the kubelet's setters produce from the Node's current status (pure)."""
    status = copy.deepcopy(current.get("status") or {})
    cap: dict[str, Any] = dict(status.get("capacity") or {})
    cap.update({"cpu": machine.cpu, "memory": machine.memory, "pods": str(machine.pods),
                "ephemeral-storage": machine.ephemeral_storage, "hugepages-1Gi": "0", "hugepages-2Mi": "0"})
    for name, count in devices.capacity.items():
        cap[name] = str(count)
    for name in devices.removed:
        cap[name] = "0"  # removed device-plugin resources keep an explicit 0
    alloc: dict[str, Any] = {k: v for k, v in (status.get("allocatable") or {}).items()
                             if k in cap or not is_extended_resource_name(k)}
    alloc.update(cap)
    for name, count in devices.allocatable.items():
        alloc[name] = str(count)
    old = {c.get("type"): c for c in status.get("conditions") or []}
    conditions = []
    for ctype, cstatus, reason, message in _CONDITIONS:
        prev = old.get(ctype) or {}
        transition = prev.get("lastTransitionTime") if prev.get("status") == cstatus else now
        conditions.append({"type": ctype, "status": cstatus, "reason": reason, "message": message,
                           "lastHeartbeatTime": now, "lastTransitionTime": transition or now})
    conditions += [c for t, c in old.items() if t not in {x[0] for x in _CONDITIONS}]
    status.update({
        "capacity": cap,
        "allocatable": alloc,
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": machine.address}, {"type": "Hostname", "address": node_name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": _uuidish(node_name, "machine").replace("-", ""),
            "systemUUID": _uuidish(node_name, "system"),
            "bootID": _uuidish(node_name, "boot"),
            "kernelVersion": "6.8.0-sandbox",
            "osImage": "dra-bridge sandbox (simulated)",
            "containerRuntimeVersion": machine.container_runtime,
            "kubeletVersion": version.git_version,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    })
    return status


def status_changed(old: Obj, new: Obj) -> bool:
    """`nodeStatusHasChanged`: any difference except the conditions' heartbeat times."""
    def strip(status: Obj) -> Obj:
        s = copy.deepcopy(status)
        for c in s.get("conditions") or []:
            c.pop("lastHeartbeatTime", None)
        return s

    return strip(old) != strip(new)


class NodeStatusReporter:
    """Registers the Node, then posts its status every `update_frequency` seconds (a thread)."""

    def __init__(self, kube: KubeAPI, node_name: str, capacity: Callable[[], Capacity], *,
                 version: KubeletVersion, machine: MachineInfo | None = None,
                 update_frequency: float = UPDATE_FREQUENCY_S, report_frequency: float | None = None,
                 fresh_device_state: Callable[[], bool] = lambda: True) -> None:
        self.kube = kube
        self.node_name = node_name
        self.capacity = capacity
        self.version = version
        self.machine = machine or MachineInfo()
        self.update_frequency = update_frequency
        # defaults.go: 5 min when the update frequency is left at its default, else the update frequency.
        if report_frequency is None:
            report_frequency = REPORT_FREQUENCY_S if update_frequency == UPDATE_FREQUENCY_S else update_frequency
        self.report_frequency = report_frequency
        self.fresh_device_state = fresh_device_state
        self.registered = threading.Event()
        self.patches = 0
        self.last_error: str = ""
        self._last_report = float("-inf")
        self._worker = Worker(f"node-status-{node_name}")
        self._stop = self._worker.stopping

    def start(self) -> None:
        """A kubelet process starting: it registers again (kubelet_node_status.go `registerWithAPIServer` runs until
        `registrationCompleted`, which a new process starts without), so an existing Node is reconciled at every
        start, a restart's included."""
        self.registered.clear()
        self._worker.start(self._run)

    def stop(self) -> None:
        self._worker.stop()

    def wait_registered(self, timeout: float) -> bool:
        return self.registered.wait(timeout)

    def _run(self) -> None:
        step = 0.1
        while not self.registered.is_set():
            if self.register_once():
                break
            if self._stop.wait(step):
                return
            step = min(step * 2, 7.0)
        while not self._stop.is_set():
            try:
                self.sync_once()
            except KubeError as err:
                self.last_error = str(err)
                log.warning("error updating node status, will retry", extra={"node": self.node_name,
                                                                            "error": str(err)})
            if self._stop.wait(self.update_frequency):
                return

    def register_once(self) -> bool:
        node = initial_node(self.node_name, self.machine)
        node["status"] = node_status(self.node_name, node, self.capacity(), self.machine, self.version, _now())
        try:
            self.kube.create(NODES, node)
            log.info("successfully registered node", extra={"node": self.node_name})
            self.registered.set()
            return True
        except AlreadyExists:
            pass
        except KubeError as err:
            self.last_error = str(err)
            log.warning("unable to register node with API server", extra={"node": self.node_name, "error": str(err)})
            return False
        try:
            self._reconcile_existing(node)
        except KubeError as err:
            self.last_error = str(err)
            log.warning("unable to reconcile existing node", extra={"node": self.node_name, "error": str(err)})
            return False
        log.info("node was previously registered", extra={"node": self.node_name})
        self.registered.set()
        return True

    def _reconcile_existing(self, initial: Obj) -> None:
        existing = self.kube.get(NODES, self.node_name)
        labels = (existing.get("metadata") or {}).get("labels") or {}
        wanted = {k: initial["metadata"]["labels"][k] for k in DEFAULT_LABELS if labels.get(k) !=
                  initial["metadata"]["labels"][k]}
        meta_patch: Obj = {}
        if wanted:
            meta_patch["labels"] = wanted
        if ((existing.get("metadata") or {}).get("annotations") or {}).get(CMAD_ANNOTATION) != "true":
            meta_patch["annotations"] = {CMAD_ANNOTATION: "true"}
        if meta_patch:
            self.kube.patch(NODES, self.node_name, {"metadata": meta_patch})
        if self.fresh_device_state():
            status = existing.get("status") or {}
            zero = {k: "0" for k in status.get("capacity") or {} if is_extended_resource_name(k)}
            if zero:
                log.info("zero out extended resource capacity in existing node",
                         extra={"node": self.node_name, "resources": sorted(zero)})
                self.kube.patch(NODES, self.node_name, {"status": {"capacity": zero, "allocatable": zero}},
                                subresource="status")

    def sync_once(self) -> bool:
        """One `tryUpdateNodeStatus`; True when a PATCH was sent."""
        node = self.kube.get(NODES, self.node_name)
        new = node_status(self.node_name, node, self.capacity(), self.machine, self.version, _now())
        now = time.monotonic()
        if now < self._last_report + self.report_frequency and not status_changed(node.get("status") or {}, new):
            return False
        patch = copy.deepcopy(new)
        for gone in set((node.get("status") or {}).get("allocatable") or {}) - set(new["allocatable"]):
            patch["allocatable"][gone] = None  # a merge patch deletes a key only when told to
        self.kube.patch(NODES, self.node_name, {"status": patch}, subresource="status")
        self._last_report = now
        self.patches += 1
        return True
