"""The pod status the kubelet writes, built from what the simulated runtime did (pure).

Written from kubernetes/kubernetes pkg/kubelet/kubelet_pods.go (`generateAPIPodStatus`, `getPhase`) and
pkg/kubelet/status/generate.go (`GeneratePodReadyToStartContainersCondition`, `GeneratePodInitializedCondition`,
`GeneratePodReadyCondition`, `GenerateContainersReadyCondition`):

* phase: Pending until the containers start, Running while they run, then (for a pod that will not restart them)
  Succeeded when every container exited 0, else Failed;
* conditions, in the kubelet's order: PodReadyToStartContainers (the sandbox exists: False until the containers
  start, while DRA resources are prepared, and again once the pod finished; from 1.37 with reason
  `PodSandboxNotReady` and the message `runtimeutil.PodSandboxChanged` gives: "no pod sandbox exists" before, "pod
  sandbox is not ready" after), Initialized (init containers done; `ContainersNotInitialized` before;
  `PodCompleted` for a Succeeded pod, with or without init containers), Ready and ContainersReady
  (`ContainersNotReady`; once the pod finished `PodCompleted` when it Succeeded, `PodFailed` when it Failed:
  `generate*ConditionForTerminalPhase`), PodScheduled True;
* conditions the kubelet does not own (`DisruptionTarget` from a preempting scheduler or an eviction, a readiness
  gate's) are kept as the pod has them, before the kubelet's own: pkg/kubelet/status/status_manager.go
  `mergePodStatus` (v1.37.2) copies the old status's conditions not `PodConditionByKubelet` first, then appends the
  kubelet's (`KUBELET_CONDITIONS`); the real kubelet sends a strategic merge patch, this one a merge patch of the whole
  list, so the list it writes must carry them;
* from 1.34 (PodObservedGenerationTracking, beta on; GA 1.35) `status.observedGeneration` and each condition's
  `observedGeneration` are the pod's `metadata.generation` (`podutil.CalculatePod*ObservedGeneration`);
* container statuses: waiting `ContainerCreating` (`PodInitializing`, for init and app containers alike, in a pod
  with init containers: `convertToAPIContainerStatuses`' default waiting state), then running with `startedAt`,
  `ready`/`started` true, then terminated with the exit code and `Completed` (0) or `Error`; restarts count up
  with the previous termination in `lastState`; ordinary init containers are terminated `Completed` before the app
  containers start, and ready once they exited 0 (prober/prober_manager.go `UpdatePodStatus`), sidecars run beside
  them; each lists the container's `volumeMounts`; `hostIP`, `podIP`, `startTime` and `qosClass` are set;
* with ResourceHealthStatus (1.36+), app containers carry `allocatedResourcesStatus`, the health of the devices
  they hold through either API (`bridge.sandbox.kubelet.resourcestatus`).

Each of these was seen on a real kubelet v1.37.2 (tests/real/test_kubelet_differential.py compares the two).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.sandbox.kubelet.admission import qos_class
from bridge.sandbox.kubelet.version import KubeletVersion

Obj = dict[str, Any]
# pkg/kubelet/types/pod_status.go `PodConditionsByKubelet` (v1.37.2), plus PodReadyToStartContainers (its gate is on
# in every release simulated); AllContainersRestarting's gate is off by default.
KUBELET_CONDITIONS = frozenset({"PodScheduled", "Ready", "Initialized", "ContainersReady", "PodResizeInProgress",
                                "PodResizePending", "PodReadyToStartContainers"})


@dataclass
class RunState:
    """What the simulated runtime did with one pod."""

    start_time: str  # when the kubelet admitted the pod (status.startTime)
    started_at: str | None = None  # app containers started
    finished_at: str | None = None  # app containers exited for good
    exit_codes: dict[str, int] = field(default_factory=dict)
    restart_count: int = 0
    last_termination: Obj | None = None
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""


def _container_id(pod_uid: str, name: str, restart: int) -> str:
    return "containerd://" + hashlib.sha256(f"{pod_uid}/{name}/{restart}".encode()).hexdigest()


def _image_id(image: str) -> str:
    return f"{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _cond(ctype: str, ok: bool, now: str, reason: str = "", message: str = "", old: Obj | None = None,
          generation: int | None = None) -> Obj:
    status = "True" if ok else "False"
    prev = (old or {}).get(ctype) or {}
    c: Obj = {"type": ctype, "status": status,
              "lastTransitionTime": prev.get("lastTransitionTime") if prev.get("status") == status else now}
    if generation is not None:
        c["observedGeneration"] = generation
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def _volume_mounts(container: Obj) -> list[Obj]:
    """`status.volumeMounts` (RecursiveReadOnlyMounts, on in every simulated release): the container's mounts, a
    read-only one with its recursive read-only mode as resolved for a runtime that supports it
    (`resolveRecursiveReadOnly`)."""
    out = []
    for m in container.get("volumeMounts") or []:
        v: Obj = {"name": m.get("name", ""), "mountPath": m.get("mountPath", "")}
        if m.get("readOnly"):
            v["readOnly"] = True
            v["recursiveReadOnly"] = ("Enabled" if m.get("recursiveReadOnly") in ("Enabled", "IfPossible")
                                      else "Disabled")
        out.append(v)
    return out


def build_status(pod: Obj, run: RunState, *, host_ip: str, pod_ip: str, now: str,
                 version: KubeletVersion | None = None,
                 resources_status: Mapping[str, list[Obj]] | None = None) -> Obj:
    """`version`: the kubelet release whose status shape to write (None: the oldest simulated, without the fields
    later releases added). `resources_status`: app container name -> its `allocatedResourcesStatus`
    (`bridge.sandbox.kubelet.resourcestatus`; none given: the field is not written)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    minor = version.minor if version is not None else 0
    generation = meta.get("generation") if minor >= 34 and isinstance(meta.get("generation"), int) else None
    uid = meta.get("uid", "")
    inits = spec.get("initContainers") or []
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    containers = spec.get("containers") or []
    running, finished = run.started_at is not None, run.finished_at is not None
    started = running or run.restart_count > 0  # the pod got past its init containers at least once
    old = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}

    def app_status(c: Obj, restart: int, running_since: str | None) -> Obj:
        name = c["name"]
        cs: Obj = {"name": name, "image": c.get("image", ""), "imageID": "", "ready": False, "started": False,
                   "restartCount": restart, "lastState": {}}
        if run.last_termination is not None and restart:
            cs["lastState"] = {"terminated": run.last_termination}
        mounts = _volume_mounts(c)
        if mounts:
            cs["volumeMounts"] = mounts
        if finished:
            code = run.exit_codes.get(name, 0)
            cs["state"] = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                          "startedAt": run.started_at, "finishedAt": run.finished_at,
                                          "containerID": _container_id(uid, name, restart)}}
            cs["containerID"] = _container_id(uid, name, restart)
            cs["imageID"] = _image_id(c.get("image", ""))
        elif running_since is not None:
            cs["state"] = {"running": {"startedAt": running_since}}
            cs.update(ready=True, started=True, containerID=_container_id(uid, name, restart),
                      imageID=_image_id(c.get("image", "")))
        else:
            reason = run.waiting_reason
            if reason == "ContainerCreating" and inits:
                reason = "PodInitializing"
            waiting: Obj = {"reason": reason}
            if run.waiting_message:
                waiting["message"] = run.waiting_message
            cs["state"] = {"waiting": waiting}
        return cs

    init_statuses = []
    for c in inits:
        if c.get("restartPolicy") == "Always":
            init_statuses.append(app_status(c, 0, run.start_time if started else None))
            continue
        cs = app_status(c, 0, None)
        if started:
            cs["state"] = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": run.start_time,
                                          "finishedAt": run.started_at,
                                          "containerID": _container_id(uid, c["name"], 0)}}
            cs.update(containerID=_container_id(uid, c["name"], 0), imageID=_image_id(c.get("image", "")),
                      ready=True)
        init_statuses.append(cs)
    statuses = [app_status(c, run.restart_count, run.started_at) for c in containers]
    for cs in statuses:
        if (resources_status or {}).get(cs["name"]):
            cs["allocatedResourcesStatus"] = (resources_status or {})[cs["name"]]

    if finished:
        phase = "Succeeded" if all(run.exit_codes.get(c["name"], 0) == 0 for c in containers) else "Failed"
    else:
        phase = "Running" if started else "Pending"
    not_ready = [s["name"] for s in statuses + [s for s in init_statuses if s["name"] in {c["name"] for c in sidecars}]
                 if not s["ready"]]
    pending_inits = [c["name"] for c in inits if c.get("restartPolicy") != "Always"] if not started else []
    if finished:
        ready_reason, ready_msg = ("PodCompleted" if phase == "Succeeded" else "PodFailed"), ""
    elif not_ready:
        ready_reason, ready_msg = "ContainersNotReady", f"containers with unready status: [{' '.join(not_ready)}]"
    else:
        ready_reason, ready_msg = "", ""
    sandbox = started and not finished
    sandbox_reason, sandbox_msg = "", ""
    if not sandbox and minor >= 37:
        sandbox_reason = "PodSandboxNotReady"
        sandbox_msg = "pod sandbox is not ready" if finished else "no pod sandbox exists"
    conditions = [c for t, c in old.items() if t not in KUBELET_CONDITIONS] + [
        _cond("PodReadyToStartContainers", sandbox, now, sandbox_reason, sandbox_msg, old, generation),
        _cond("Initialized", not pending_inits, now,
              "ContainersNotInitialized" if pending_inits else ("PodCompleted" if phase == "Succeeded" else ""),
              f"containers with incomplete status: [{' '.join(pending_inits)}]" if pending_inits else "", old,
              generation),
        _cond("Ready", not ready_msg and not finished, now, ready_reason, ready_msg, old, generation),
        _cond("ContainersReady", not ready_msg and not finished, now, ready_reason, ready_msg, old, generation),
        _cond("PodScheduled", True, now, old=old, generation=generation),
    ]
    status: Obj = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": run.start_time,
        "containerStatuses": statuses,
        "qosClass": qos_class(pod),
    }
    if started:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    if inits:
        status["initContainerStatuses"] = init_statuses
    if generation is not None:
        status["observedGeneration"] = generation
    return status
