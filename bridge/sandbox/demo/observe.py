"""What the demo reads back from the sandbox to check what it tells (pure helpers over API objects, plus the few
reads that need the cluster): which API a pod uses, the GPUs it holds, GPUs per side per node, the controller's
decisions. Every number the demo prints comes from here, read from the same places an operator would look
(the API, the node daemons' split status, the kubelets' PodResources), never from what the demo meant to do."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Literal

from bridge.controller.record import DECISION_KEY, DecisionRecord, RecordError, decode
from bridge.kube.api import NODES, PODS, KubeAPI, Obj
from bridge.ledger.status import StatusError, status_of
from bridge.sandbox.cluster import SandboxCluster
from bridge.sandbox.cluster.inspect import holders

GPU_RESOURCE = "nvidia.com/gpu"
DRIVER = "gpu.dra-bridge.io"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"

PodApi = Literal["legacy", "dra"]


def pod_api(pod: Obj) -> PodApi | None:
    """The API a pod gets its GPUs through: `dra` with resource claims (or the DeviceClass's extended-resource
    name), `legacy` with `nvidia.com/gpu`, None for a pod without GPUs."""
    spec = pod.get("spec") or {}
    names: set[str] = set()
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        names |= set(res.get("limits") or {}) | set(res.get("requests") or {})
    if spec.get("resourceClaims") or any(n.startswith(IMPLICIT_PREFIX) for n in names):
        return "dra"
    if GPU_RESOURCE in names:
        return "legacy"
    return None


def phase(pod: Obj | None) -> str:
    return "Gone" if pod is None else str((pod.get("status") or {}).get("phase") or "Pending")


def pods_per_api(api: KubeAPI) -> dict[str, Counter[str]]:
    """API -> phase -> pods, over every GPU pod of the cluster."""
    out: dict[str, Counter[str]] = {"legacy": Counter(), "dra": Counter()}
    for pod in api.list(PODS)["items"]:
        which = pod_api(pod)
        if which is not None:
            out[which][phase(pod)] += 1
    return out


@dataclass(frozen=True)
class Sides:
    legacy: int
    dra: int
    withdrawn: int
    state: str  # converged | converging | refused, as the daemon says


def sides_per_node(api: KubeAPI) -> dict[str, Sides]:
    """Node -> GPUs per side, from the split status each node daemon publishes on its Node (what
    `bridge node status NODE` prints)."""
    out = {}
    for node in api.list(NODES)["items"]:
        name = node["metadata"]["name"]
        try:
            status = status_of(node)
        except StatusError as err:
            raise ValueError(f"node {name}: unreadable split status: {err}") from err
        if status is None:
            continue
        counts = Counter(str(d.side) for d in status.devices)
        out[name] = Sides(counts["legacy"], counts["dra"], counts["withdrawn"], status.state)
    return dict(sorted(out.items()))


def decisions(api: KubeAPI) -> dict[str, DecisionRecord]:
    """Node -> the controller's latest decision recorded on it (annotation dra-bridge.io/split-decision)."""
    out = {}
    for node in api.list(NODES)["items"]:
        text = (node["metadata"].get("annotations") or {}).get(DECISION_KEY)
        if not text:
            continue
        try:
            out[node["metadata"]["name"]] = decode(text)
        except RecordError:
            continue
    return out


def legacy_devices(cluster: SandboxCluster) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """(namespace, pod) -> the (node, GPU UUID)s it holds through the device plugin (the kubelets' PodResources)."""
    out: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    for key, held in holders(cluster).items():
        for h in held:
            kind, _, who = h.partition(" ")
            ns, _, pod = who.partition("/")
            if kind == "legacy":
                out[(ns, pod)].add(key)
    return dict(out)


def claim_devices(api: KubeAPI, pod: Obj) -> list[tuple[str, str]]:
    """(pool = node, device) of every device of the bridge's driver allocated to the pod's claims."""
    meta, status = pod["metadata"], pod.get("status") or {}
    names = [s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []]
    ext = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if ext:
        names.append(ext)
    out = []
    claims = api.resource_api().claims
    for name in names:
        if not name:
            continue
        claim: dict[str, Any] = api.get(claims, name, meta["namespace"])
        alloc = (claim.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            if r.get("driver") == DRIVER:
                out.append((str(r.get("pool", "")), str(r.get("device", ""))))
    return out


@dataclass(frozen=True)
class PodRecord:
    """What must not change about a running pod that the migration leaves alone."""

    uid: str
    node: str
    restarts: int
    started: str
    devices: frozenset[tuple[str, str]]


def record_pod(pod: Obj, devices: set[tuple[str, str]]) -> PodRecord:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(cs.get("restartCount") or 0) for cs in statuses)
    started = ",".join(str(((cs.get("state") or {}).get("running") or {}).get("startedAt", "")) for cs in statuses)
    return PodRecord(pod["metadata"]["uid"], str(pod["spec"].get("nodeName", "")), restarts, started,
                     frozenset(devices))


def differences(before: PodRecord, after: PodRecord) -> list[str]:
    out = []
    if before.uid != after.uid:
        out.append(f"UID {before.uid} -> {after.uid} (recreated)")
    if before.node != after.node:
        out.append(f"node {before.node} -> {after.node}")
    if after.restarts != before.restarts:
        out.append(f"restarted {after.restarts - before.restarts} time(s)")
    if before.started != after.started:
        out.append(f"container start time {before.started} -> {after.started}")
    if before.devices != after.devices:
        out.append(f"GPUs {sorted(u for _, u in before.devices)} -> {sorted(u for _, u in after.devices)}")
    return out
