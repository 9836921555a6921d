"""The report's view of a cluster, built once from `ClusterData` in linear time.

* Workloads: every pod is resolved to its top owner (Pod -> ReplicaSet -> Deployment, Pod -> Job -> CronJob,
  StatefulSet, DaemonSet; an owner of another kind stands as itself; a pod without owner is its own workload), so
  one row stands for all replicas. Controllers found without pods (scaled to zero, a CronJob between runs) get a
  row from their template. Only GPU-relevant workloads are kept (GPU requests, claims, GFD selectors, /dev/nvidia
  host paths, NVIDIA_VISIBLE_DEVICES). A row counts GPUs through either API: `nvidia.com/gpu`, or the bridge
  DeviceClass's devices its claims request (a pod the webhook translated; `bridge.report.podspec.dra_gpus`), and
  notes which API its live pods use (`pods_by_api`: a Deployment's template still says `nvidia.com/gpu` while the
  pods created after a flip are translated).
* Namespaces: mode from the `dra-bridge.io/mode` label (absent = legacy), demand summed over workloads.
* Nodes: which backends serve GPUs today (vendor device plugin; the bridge: its ResourceSlices, even the empty one it
  publishes with every GPU on the legacy side, or its DaemonSet's pods; another DRA driver), capacity and
  allocatable `nvidia.com/gpu`, the split the node asks for (label or annotation, read by the node daemon's own
  parser: `bridge.ledger.requested_split`) and the daemon's split status annotation, the devices published in
  ResourceSlices, and what the scheduler's node filters read (labels, taints, cordon).

Everything is indexed by name or owner before use; no step is quadratic in pods or nodes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from bridge.kvalues.placement import Constraints, Taint, taints_of
from bridge.ledger.status import SplitStatus, StatusError, status_of
from bridge.ledger.target import SplitRequest, TargetResult, evaluate_request, requested_split
from bridge.report.features import (
    BRIDGE_DRIVER,
    BRIDGE_DS_LABELS,
    GPU,
    MODE_LABEL,
    MODES,
)
from bridge.report.podspec import (
    VENDOR_PREFIX,
    SpecInfo,
    analyse,
    desired_replicas,
    dra_gpus,
    opted_out,
    template_metadata,
    template_spec,
)
from bridge.kvalues.quantity import QuantityError, parse_quantity, quantity_int
from bridge.report.sources import ClusterData, ServerVersion

Obj = dict[str, Any]
Ref = tuple[str, str, str]  # (kind, namespace, name); namespace "" for cluster-scoped objects

_OWNER_KINDS = ("ReplicaSet", "Job")  # intermediate owners that are themselves owned
_CONTROLLER_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicaSet")
_DONE_PHASES = ("Succeeded", "Failed")


class VersionValue(str):
    """A DRA `version` attribute value (semver string); CEL sees it as a semver, not a string."""


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    node: str
    # domain -> id -> str | int | bool | VersionValue
    attributes: dict[str, dict[str, Any]]
    capacity: dict[str, dict[str, Any]]  # domain -> id -> Fraction
    source: str  # "slice" (published) or "gfd" (derived from node labels for a simulated split)


@dataclass
class Workload:
    kind: str
    namespace: str
    name: str
    spec: SpecInfo
    replicas: int  # desired where the controller says, else live pods
    pods: int = 0  # live (not Succeeded/Failed) pods seen
    nodes: set[str] = field(default_factory=set)
    pods_by_api: dict[str, int] = field(default_factory=dict)  # live GPU pods per API ("legacy", "dra", "both")
    opted_out: bool = False  # its pods carry dra-bridge.io/translate: "false": the webhook keeps them legacy

    @property
    def ref(self) -> Ref:
        return (self.kind, self.namespace, self.name)

    @property
    def gpus_per_pod(self) -> int:
        """Whole GPUs per pod through either API."""
        return self.spec.gpus

    @property
    def api(self) -> str:
        """The API its live pods get GPUs through (legacy, dra, mixed), or its spec's when no pod runs; "" when it
        asks no whole GPU."""
        seen = {a for a, n in self.pods_by_api.items() if n}
        if not seen:
            seen = {self.spec.api} - {""}
        if not seen:
            return ""
        return seen.pop() if len(seen) == 1 and "both" not in seen else "mixed"

    @property
    def demand(self) -> dict[str, int]:
        return {k: v * self.replicas for k, v in self.spec.per_pod.items()}


@dataclass
class Namespace:
    name: str
    mode: str  # legacy | shadow | dra
    labels: dict[str, str]
    exists: bool  # Namespace object present in the input
    workloads: list[Workload] = field(default_factory=list)
    bad_mode: str = ""  # the label value when it is not one of MODES

    @property
    def demand(self) -> dict[str, int]:
        total: dict[str, int] = defaultdict(int)
        for w in self.workloads:
            for k, v in w.demand.items():
                total[k] += v
        return dict(total)


@dataclass
class Node:
    name: str
    labels: dict[str, str]
    capacity: dict[str, int]  # nvidia.com/* extended resources only
    allocatable: dict[str, int]
    runtime: str  # status.nodeInfo.containerRuntimeVersion, e.g. "containerd://2.0.4"
    kubelet: str = ""  # status.nodeInfo.kubeletVersion, e.g. "v1.35.2"
    backends: set[str] = field(default_factory=set)  # "device-plugin", "bridge", "dra:<driver>"
    devices: list[Device] = field(default_factory=list)  # published in ResourceSlices
    split: str = ""  # the requested split ("0", "N", "all", "gpu-7", ...) from the annotation or label, or ""
    split_request: SplitRequest | None = None  # None when the node says nothing
    split_status: SplitStatus | None = None  # the node daemon's dra-bridge.io/split-status annotation
    split_status_error: str = ""  # why that annotation could not be read
    taints: tuple[Taint, ...] = ()  # spec.taints (the scheduler's TaintToleration filter reads them)
    unschedulable: bool = False  # spec.unschedulable (cordoned)

    def admits(self, constraints: Constraints) -> bool:
        """Whether the scheduler's node filters let a pod with these constraints onto this node
        (`bridge.kvalues.placement`)."""
        return constraints.allows(self.name, self.labels, self.taints, self.unschedulable)

    def split_inventory(self) -> list[tuple[str, str]]:
        """(name, UUID) of the node's GPUs as well as the report knows them: the daemon's own list when it wrote a
        status, else gpu-0..gpu-<total-1> with the UUIDs the ResourceSlices publish."""
        if self.split_status is not None and self.split_status.devices:
            return [(d.name, d.uuid) for d in self.split_status.devices]
        uuids = {d.name: str(d.attributes.get(BRIDGE_DRIVER, {}).get("uuid", "")) for d in self.devices
                 if d.driver == BRIDGE_DRIVER}
        return [(f"gpu-{i}", uuids.get(f"gpu-{i}", "")) for i in range(self.gpu_total)]

    def split_result(self) -> TargetResult | None:
        """What the daemon makes of the request on this node (the same parser and fit), None without a request."""
        if self.split_request is None:
            return None
        return evaluate_request(self.split_request, self.split_inventory())

    @property
    def gpu_total(self) -> int:
        """Physical GPUs as best known: device-plugin capacity, published full-GPU devices, or the GFD count."""
        published = sum(1 for d in self.devices if d.driver == BRIDGE_DRIVER or _is_full_gpu(d))
        label = quantity_int(self.labels.get("nvidia.com/gpu.count"))
        return max(self.capacity.get(GPU, 0), published, label)

    def dra_devices(self, driver: str | None = None) -> list[Device]:
        return [d for d in self.devices if driver is None or d.driver == driver]


def _is_full_gpu(d: Device) -> bool:
    attrs = d.attributes.get(d.driver, {})
    return attrs.get("type", "gpu") == "gpu" and "profile" not in attrs


@dataclass(frozen=True)
class DaemonSetRole:
    ref: Ref
    role: str  # "bridge", "device-plugin", "dra-driver", "dcgm-exporter", "gfd", ""


@dataclass
class ClusterModel:
    data: ClusterData
    version: ServerVersion
    resource_versions: tuple[str, ...]
    namespaces: dict[str, Namespace]
    nodes: dict[str, Node]
    workloads: list[Workload]
    device_classes: list[Obj]
    daemonsets: list[DaemonSetRole]
    ignored_pods: int  # pods that are not GPU-relevant
    unbound_pods: int = 0  # pods without spec.nodeName (pending for the scheduler, or not yet bound)


def classify_daemonset(ds: Obj) -> str:
    labels = (ds.get("metadata") or {}).get("labels") or {}
    if all(labels.get(k) == v for k, v in BRIDGE_DS_LABELS.items()):
        return "bridge"
    name = str((ds.get("metadata") or {}).get("name", ""))
    spec = template_spec("DaemonSet", ds) or {}
    images = " ".join(str(c.get("image", "")) for c in (spec.get("containers") or []) + (spec.get("initContainers") or []))
    hay = f"{name} {images}".lower()
    if "dcgm-exporter" in hay:
        return "dcgm-exporter"
    if "gpu-feature-discovery" in hay:
        return "gfd"
    if "dra-driver" in hay or "kubelet-plugin" in hay:
        return "dra-driver"
    if "device-plugin" in hay:
        return "device-plugin"
    return ""


def _meta(o: Obj) -> Obj:
    return o.get("metadata") or {}


def _controller_ref(o: Obj) -> tuple[str, str] | None:
    refs = (o.get("metadata") or {}).get("ownerReferences")
    if not refs:
        return None
    chosen = refs[0]
    if len(refs) > 1:
        chosen = next((r for r in refs if r.get("controller")), chosen)
    return (chosen.get("kind", ""), chosen.get("name", ""))


def _attr_value(v: Any) -> Any:
    if isinstance(v, dict):
        for key in ("string", "int", "bool"):
            if key in v:
                return v[key]
        if "version" in v:
            return VersionValue(v["version"])
    return v


def _slice_devices(s: Obj) -> list[Device]:
    spec = s.get("spec") or {}
    driver = str(spec.get("driver", ""))
    pool = str((spec.get("pool") or {}).get("name", ""))
    node = str(spec.get("nodeName") or "")
    out = []
    for d in spec.get("devices") or ():
        body = d.get("basic") or d  # v1beta1 nests attributes under `basic`
        attrs: dict[str, dict[str, Any]] = defaultdict(dict)
        for qname, val in (body.get("attributes") or {}).items():
            domain, _, ident = qname.rpartition("/")
            attrs[domain or driver][ident] = _attr_value(val)
        caps: dict[str, dict[str, Any]] = defaultdict(dict)
        for qname, val in (body.get("capacity") or {}).items():
            domain, _, ident = qname.rpartition("/")
            raw = val.get("value") if isinstance(val, dict) else val
            try:
                caps[domain or driver][ident] = parse_quantity(raw)
            except QuantityError:
                continue
        out.append(Device(driver, pool, str(d.get("name", "")), node, dict(attrs), dict(caps), "slice"))
    return out


def _extended(values: Obj | None) -> dict[str, int]:
    return {k: quantity_int(v) for k, v in (values or {}).items() if k.startswith("nvidia.com/")}


def _matches_selector(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def build_model(data: ClusterData) -> ClusterModel:
    # --- namespaces
    namespaces: dict[str, Namespace] = {}
    for ns_obj in data.of("Namespace"):
        m = _meta(ns_obj)
        labels = m.get("labels") or {}
        raw = labels.get(MODE_LABEL, "legacy")
        namespaces[m.get("name", "")] = Namespace(
            m.get("name", ""), raw if raw in MODES else "legacy", labels, True, bad_mode="" if raw in MODES else raw
        )

    # --- owner indexes: (namespace, name) -> owner (kind, name)
    owner_of: dict[str, dict[tuple[str, str], tuple[str, str] | None]] = {k: {} for k in _OWNER_KINDS}
    for kind in _OWNER_KINDS:
        idx = owner_of[kind]
        for o in data.of(kind):
            m = _meta(o)
            idx[(m.get("namespace", ""), m.get("name", ""))] = _controller_ref(o)
    controllers: dict[tuple[str, str, str], Obj] = {}
    for kind in _CONTROLLER_KINDS:
        for o in data.of(kind):
            m = _meta(o)
            controllers[(kind, m.get("namespace", ""), m.get("name", ""))] = o

    def top_owner(ns: str, kind: str, name: str) -> tuple[str, str]:
        for _ in range(4):  # ReplicaSet -> Deployment, Job -> CronJob; bounded against cycles
            idx = owner_of.get(kind)
            if idx is None:
                break
            up = idx.get((ns, name))
            if not up:
                break
            kind, name = up
        return kind, name

    # --- claim objects, for GPUs asked through DRA (translated pods)
    templates = {(_meta(o).get("namespace", ""), _meta(o).get("name", "")): o for o in data.of("ResourceClaimTemplate")}
    claims = {(_meta(o).get("namespace", ""), _meta(o).get("name", "")): o for o in data.of("ResourceClaim")}

    # --- workloads from pods (one pass; DaemonSet-owned pods are also remembered for the node-backend pass)
    rows: dict[Ref, Workload | None] = {}
    ignored = 0
    ds_pods: list[tuple[str, str, str]] = []  # (namespace, daemonset, node)
    unbound = 0
    for pod in data.of("Pod"):
        m = pod.get("metadata") or {}
        ns = m.get("namespace", "")
        if not (pod.get("spec") or {}).get("nodeName"):
            unbound += 1
        ref = _controller_ref(pod)
        if ref is not None and ref[0] == "DaemonSet":
            ds_pods.append((ns, ref[1], (pod.get("spec") or {}).get("nodeName") or ""))
        kind, name = top_owner(ns, *ref) if ref else ("Pod", str(m.get("name", "")))
        key: Ref = (kind, ns, name)
        row: Workload | None | Literal[False] = rows.get(key, False)  # False: not seen yet (one lookup per pod)
        if row is False:
            ctrl = controllers.get(key)
            tmpl = template_spec(kind, ctrl) if ctrl is not None else None
            info = analyse(tmpl, ns, None, templates, claims) if tmpl is not None else \
                analyse(pod.get("spec") or {}, ns, pod.get("status"), templates, claims)
            if info.relevant:
                desired = desired_replicas(kind, ctrl) if ctrl is not None else None
                out = opted_out(template_metadata(kind, ctrl) if ctrl is not None else m)
                row = Workload(kind, ns, name, info, desired if desired is not None else -1, opted_out=out)
            else:
                row = None
            rows[key] = row
        if row is None:
            ignored += 1
            continue
        if (pod.get("status") or {}).get("phase") in _DONE_PHASES:
            continue
        row.pods += 1
        pod_spec = pod.get("spec") or {}
        node = pod_spec.get("nodeName")
        if node:
            row.nodes.add(node)
        api = _pod_api(pod_spec, ns, pod.get("status"), templates, claims) if row.spec.api else ""
        if api:
            row.pods_by_api[api] = row.pods_by_api.get(api, 0) + 1

    # --- controllers without pods (top-level only: Deployments/StatefulSets/DaemonSets/CronJobs, Jobs without owner)
    for (kind, ns, name), ctrl in controllers.items():
        if (kind, ns, name) in rows or kind == "ReplicaSet" or (kind == "Job" and _controller_ref(ctrl)):
            continue
        tmpl = template_spec(kind, ctrl)
        if tmpl is None:
            continue
        info = analyse(tmpl, ns, None, templates, claims)
        if not info.relevant:
            continue
        desired = desired_replicas(kind, ctrl)
        if kind == "Job" and desired == 0:
            continue  # a finished Job holds no GPUs
        rows[(kind, ns, name)] = Workload(kind, ns, name, info, desired if desired is not None else 0,
                                          opted_out=opted_out(template_metadata(kind, ctrl)))

    workloads = [w for w in rows.values() if w is not None]
    for w in workloads:
        if w.replicas < 0:
            w.replicas = w.pods
        home = namespaces.get(w.namespace)
        if home is None:
            home = namespaces[w.namespace] = Namespace(w.namespace, "legacy", {}, False)
        home.workloads.append(w)
    workloads.sort(key=lambda w: (w.namespace, w.kind, w.name))

    # --- nodes
    nodes: dict[str, Node] = {}
    for n in data.of("Node"):
        m = _meta(n)
        st = n.get("status") or {}
        labels = m.get("labels") or {}
        request = requested_split(n)
        try:
            split_status, status_error = status_of(n), ""
        except StatusError as err:
            split_status, status_error = None, str(err)
        nodes[m.get("name", "")] = Node(
            m.get("name", ""),
            labels,
            _extended(st.get("capacity")),
            _extended(st.get("allocatable")),
            str((st.get("nodeInfo") or {}).get("containerRuntimeVersion", "")),
            str((st.get("nodeInfo") or {}).get("kubeletVersion", "")),
            split=request.text if request.source != "default" else "",
            split_request=request if request.source != "default" else None,
            split_status=split_status,
            split_status_error=status_error,
            taints=taints_of(n),
            unschedulable=bool((n.get("spec") or {}).get("unschedulable")),
        )
    for s in data.of("ResourceSlice"):
        for d in _slice_devices(s):
            node = nodes.get(d.node) or nodes.get(d.pool)
            if node is None:
                continue
            node.devices.append(d)
            node.backends.add("bridge" if d.driver == BRIDGE_DRIVER else f"dra:{d.driver}")
        spec = s.get("spec") or {}
        if spec.get("driver") == BRIDGE_DRIVER and not spec.get("devices"):
            # The bridge publishes its pool even with every GPU on the legacy side (an empty slice).
            node = nodes.get(str(spec.get("nodeName") or "")) or nodes.get(str((spec.get("pool") or {}).get("name", "")))
            if node is not None:
                node.backends.add("bridge")

    # --- daemonsets: which GPU agents run where (by their pods; by nodeSelector when no pods were captured)
    roles: list[DaemonSetRole] = []
    role_by_ds: dict[tuple[str, str], str] = {}
    for ds in data.of("DaemonSet"):
        m = _meta(ds)
        role = classify_daemonset(ds)
        roles.append(DaemonSetRole(("DaemonSet", m.get("namespace", ""), m.get("name", "")), role))
        if role:
            role_by_ds[(m.get("namespace", ""), m.get("name", ""))] = role
    ds_with_pods: set[tuple[str, str]] = set()
    for ns_name, ds_name, node_name in ds_pods:
        pod_role = role_by_ds.get((ns_name, ds_name))
        if pod_role is None:
            continue
        ds_with_pods.add((ns_name, ds_name))
        node = nodes.get(node_name)
        if node is not None:
            _add_backend(node, pod_role)
    for ds in data.of("DaemonSet"):
        m = _meta(ds)
        key2 = (m.get("namespace", ""), m.get("name", ""))
        selected_role = role_by_ds.get(key2)
        if not selected_role or key2 in ds_with_pods:
            continue
        selector = (template_spec("DaemonSet", ds) or {}).get("nodeSelector") or {}
        for node in nodes.values():
            if _matches_selector(selector, node.labels) and (node.capacity.get(GPU) or node.gpu_total):
                _add_backend(node, selected_role)
    for node in nodes.values():
        if node.allocatable.get(GPU, 0) > 0 and not node.backends & {"device-plugin", "bridge"}:
            node.backends.add("device-plugin")  # something registers nvidia.com/gpu; no DaemonSet identified

    return ClusterModel(
        data=data,
        version=data.version,
        resource_versions=data.resource_versions(),
        namespaces=dict(sorted(namespaces.items())),
        nodes=dict(sorted(nodes.items())),
        workloads=workloads,
        device_classes=sorted(data.of("DeviceClass"), key=lambda o: _meta(o).get("name", "")),
        daemonsets=roles,
        ignored_pods=ignored,
        unbound_pods=unbound,
    )


def _asks_vendor(spec: Obj) -> bool:
    """Whether some container asks a positive count of an `nvidia.com/*` resource (the device plugin's). A per-pod
    check on the report's hot path: stops at the first hit instead of computing the pod's counts."""
    for kind in ("containers", "initContainers"):
        for c in spec.get(kind) or ():
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue
            for part in ("limits", "requests"):
                values = res.get(part)
                if isinstance(values, dict):
                    for k, v in values.items():
                        if isinstance(k, str) and k.startswith(VENDOR_PREFIX) and quantity_int(v) > 0:
                            return True
    return False


def _pod_api(spec: Obj, ns: str, status: Obj | None, templates: dict[tuple[str, str], Obj],
             claims: dict[tuple[str, str], Obj]) -> str:
    """legacy, dra, both, or "" for one live pod (its own spec: a Deployment's pods may be translated while its
    template is not)."""
    legacy = _asks_vendor(spec)
    dra = False
    if spec.get("resourceClaims") or not legacy:
        asked = dra_gpus(spec, ns, status, templates, claims)
        # A claim that cannot be read (its template missing from the input) on a pod asking no device-plugin GPU:
        # the pod gets its GPUs through DRA, the count is what is unknown.
        dra = asked.count > 0 or (bool(asked.unknown) and not legacy)
    return "both" if legacy and dra else "legacy" if legacy else "dra" if dra else ""


def _add_backend(node: Node, role: str) -> None:
    if role == "bridge":
        node.backends.add("bridge")
    elif role == "device-plugin":
        node.backends.add("device-plugin")
