"""GPU demand from pods and claims (pure, plain dicts in): who is pending for which API, and what is held where.

A pod is **pending** while the scheduler has not bound it: no `spec.nodeName`, phase Pending, not being deleted, and
no `spec.schedulingGates` (a gated pod is not even in the scheduler's queue, so moving GPUs for it would be waste).

What a pending pod asks for:
* **legacy**: `nvidia.com/gpu` (`--resource-name`) as the scheduler counts it (`PodRequests`), computed by the
  shared `bridge.kvalues.podgpu.pod_devices`: the sum over app containers plus restartable (sidecar) init
  containers, or, when larger, the largest ordinary init container plus the sidecars started before it.
* **DRA**: every claim of the pod (`spec.resourceClaims`: a `resourceClaimName`, or the claim generated from a
  `resourceClaimTemplateName`, found through `status.resourceClaimStatuses`, or the template itself while the claim
  does not exist yet) that is **not allocated** and requests devices of the bridge's DeviceClass
  (`exactly.deviceClassName`, v1beta1's flat `deviceClassName`, or the first `firstAvailable` alternative of that
  class) with `allocationMode: ExactCount` (`count`, default 1). A claim shared by several pending pods is counted
  once, for the first of them the scheduler serves (`pod_rank`: priority, then age, then name; whatever order the
  pods are listed in). `allocationMode: All` has no count the controller could plan with; such a request is skipped
  (logged by the shell). Plus the KEP-5004 extended-resource name `deviceclass.resource.kubernetes.io/<class>`, counted like
  `nvidia.com/gpu` (the scheduler creates that claim itself while binding).
* a count that is not a valid count (`nvidia.com/gpu: "1e400"`: out of range, or above 2^31 - 1; the bounded
  parser refuses it without computing it) makes the pod **invalid** demand: never planned with, reported once as
  blocked (`invalid-count`, a `GPUDemandBlocked` Event), and every other pod is decided as usual.

A pod kube-scheduler has **nominated** to a node (`status.nominatedNodeName` on a pending pod) already has its place
there: the scheduler keeps that node's room for it against pods of lower or equal priority (pkg/scheduler/framework/
runtime/framework.go `addGENominatedPods`, v1.37.2) and tries that node first at the pod's next cycle
(schedule_one.go `evaluateNominatedNode`). Nominations come from preemption (the victims are terminating there:
DefaultPreemption, framework/preemption/preemption.go "found a potential placement for pod on node ..., preempting
N victims") and, from 1.35, from binding cycles that wait (KEP-5278). So such a pod is not demand to move GPUs for:
its `nvidia.com/gpu` counts as held on the nominated node (`legacy_holder_node`; a preemptor's victims hold the
same GPUs until they stop, so the node reads fuller than it is until then, never emptier), and its DRA claims not
allocated yet are demand on that node only (`on_node`). A pod whose nomination the scheduler clears is demand again.
Before this, a preemption made the controller move a second GPU for the preemptor, which the victim's GPU then left
idle (seen with kube-scheduler v1.37.2, tests/real/test_real_preemption.py).

With `tried_only` (what `bridge controller` runs with, `--wait-for-scheduler`), a pending pod is demand only once
kube-scheduler has tried it and could not place it: its `PodScheduled` condition is False with reason
`Unschedulable` (what it writes in `handleSchedulingFailure`, together with any nomination), as cluster-autoscaler
counts "unschedulable pods". A pod just created is the scheduler's first: it may fit as things are, or the scheduler
may preempt for it, nominating it in the same write that marks it Unschedulable. Without this rule a decision that
ran between a pod's creation and its first scheduling cycle moved a GPU for a preemptor (seen on the sandbox under
load, tests/real/test_real_preemption.py).

A pod asking through both APIs yields one demand per API (keys `ns/name#legacy`, `ns/name#dra`); the core places
them independently, which can over-ask but never moves a held GPU.

What is **held** (cannot move), per node:
* legacy: the `nvidia.com/gpu` requests of the pods bound to the node and not finished (the scheduler's own
  accounting; the node daemon's status may not show a just-bound pod yet);
* DRA: the devices of the bridge's driver named in any claim's `status.allocation.devices.results` (pool = node
  name, the bridge publishes one pool per node), prepared or not: the scheduler allocates long before the kubelet
  prepares.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.controller.model import PendingPod
from bridge.kvalues.placement import constraints_of, on_node
from bridge.kvalues.podgpu import count_problems, pod_devices

Obj = dict[str, Any]

LEGACY_RESOURCE = "nvidia.com/gpu"
DEVICE_CLASS = "gpu.dra-bridge.io"
DRIVER = "gpu.dra-bridge.io"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
_FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Names:
    """The names the cluster uses for the bridge's GPUs (flags of `bridge controller`)."""

    resource: str = LEGACY_RESOURCE
    device_class: str = DEVICE_CLASS
    driver: str = DRIVER

    @property
    def extended(self) -> str:
        return IMPLICIT_PREFIX + self.device_class


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def pod_key(pod: Mapping[str, Any]) -> str:
    m = _meta(pod)
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


def pod_requests(spec: Mapping[str, Any], resource: str) -> int:
    """The scheduler's per-pod request of one extended resource (sidecar-aware; bridge.kvalues.podgpu)."""
    return pod_devices(spec, resource)


def is_pending(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or spec.get("schedulingGates"):
        return False
    if _meta(pod).get("deletionTimestamp"):
        return False
    return ((pod.get("status") or {}).get("phase") or "Pending") == "Pending"


def is_bound_and_running(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        (pod.get("status") or {}).get("phase") not in _FINISHED)


def scheduler_refused(pod: Mapping[str, Any]) -> bool:
    """kube-scheduler tried the pod and could not place it: `PodScheduled` False, reason `Unschedulable`."""
    return any(isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False"
               and c.get("reason") == "Unschedulable" for c in (pod.get("status") or {}).get("conditions") or ())


def nominated_node(pod: Mapping[str, Any]) -> str:
    """The node kube-scheduler nominated a pending pod to (`status.nominatedNodeName`); "" for none."""
    if not is_pending(pod):
        return ""
    value = (pod.get("status") or {}).get("nominatedNodeName")
    return value if isinstance(value, str) else ""


def legacy_holder_node(pod: Mapping[str, Any]) -> str:
    """The node whose legacy GPUs the pod's `nvidia.com/gpu` request holds: where it is bound and not finished, or
    where a pending pod is nominated (see the module docstring); "" for none."""
    if is_bound_and_running(pod):
        return str((pod.get("spec") or {})["nodeName"])
    return nominated_node(pod)


def _timestamp(value: Any) -> float:
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def request_count(req: Mapping[str, Any], device_class: str) -> int | None:
    """Devices of `device_class` one claim request asks for; 0 when it asks another class, None for `All`."""
    exact = req.get("exactly") if isinstance(req.get("exactly"), dict) else None
    alternatives = req.get("firstAvailable")
    if exact is None and isinstance(alternatives, list) and alternatives:
        # The scheduler tries the alternatives in order; plan for the first one of our class.
        for sub in alternatives:
            if isinstance(sub, dict) and sub.get("deviceClassName") == device_class:
                exact = sub
                break
        else:
            return 0
    body = exact if exact is not None else req
    if body.get("deviceClassName") != device_class:
        return 0
    if (body.get("allocationMode") or "ExactCount") == "All":
        return None
    count = body.get("count", 1)
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def claim_spec_count(spec: Mapping[str, Any], device_class: str) -> tuple[int, bool]:
    """(devices of our class the claim spec asks for, whether some request was `All` and skipped)."""
    total, skipped = 0, False
    for req in ((spec.get("devices") or {}).get("requests") or ()):
        if not isinstance(req, dict):
            continue
        n = request_count(req, device_class)
        if n is None:
            skipped = True
        else:
            total += n
    return total, skipped


@dataclass(frozen=True)
class Demand:
    pending: tuple[PendingPod, ...]
    skipped: tuple[str, ...]  # human notes: requests the controller cannot plan with (allocationMode All)
    # pending pods whose GPU count is not a valid count ("1e400": bridge.kvalues.quantity.check_count): never
    # planned with, reported as blocked (`invalid-count`) once; (pod key, why)
    invalid: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class PodClaim:
    """One entry of a pod's `spec.resourceClaims`, resolved: the claim it names ("ns/name": `resourceClaimName`, or
    the claim generated for it as `status.resourceClaimStatuses` says; "" while not known) and its template."""

    name: str
    claim: str = ""
    template: str = ""


def pod_claims(pod: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The claims a pod's GPU demand depends on (what `pod_demand` reads of the claims and templates)."""
    ns = str(_meta(pod).get("namespace", ""))
    generated = {s.get("name"): s.get("resourceClaimName")
                 for s in (pod.get("status") or {}).get("resourceClaimStatuses") or () if isinstance(s, dict)}
    out = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or ():
        if not isinstance(ref, dict):
            continue
        claim_name = ref.get("resourceClaimName") or generated.get(ref.get("name"))
        template = ref.get("resourceClaimTemplateName")
        out.append(PodClaim(str(ref.get("name")), f"{ns}/{claim_name}" if claim_name else "",
                            f"{ns}/{template}" if template else ""))
    return tuple(out)


def pod_rank(pod: Mapping[str, Any]) -> tuple[int, float, str]:
    """Where the scheduler's queue serves a pod: higher priority first, then older, then by name."""
    return (-int((pod.get("spec") or {}).get("priority") or 0), _timestamp(_meta(pod).get("creationTimestamp")),
            pod_key(pod))


def claim_owners(pending: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Claim ("ns/name") -> the key of the pending pod it is counted for. A claim several pending pods share is
    allocated once, for the first of them the scheduler serves (`pod_rank`), so it is that pod's demand; whatever
    order the pods come in, the answer is the same."""
    best: dict[str, tuple[tuple[int, float, str], str]] = {}
    for pod in pending:
        rank = pod_rank(pod)
        for ref in pod_claims(pod):
            if ref.claim and (ref.claim not in best or rank < best[ref.claim][0]):
                best[ref.claim] = (rank, rank[2])
    return {claim: key for claim, (_, key) in best.items()}


def pod_demand(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]],
               templates: Mapping[str, Mapping[str, Any]], owners: Mapping[str, str],
               names: Names = Names(), tried_only: bool = False) -> Demand:
    """The demand of one pending pod (`is_pending`); `owners` from `claim_owners` over all pending pods; with
    `tried_only`, none before kube-scheduler refused it (see the module docstring)."""
    if tried_only and not scheduler_refused(pod):
        return Demand((), ())
    spec = pod.get("spec") or {}
    meta = _meta(pod)
    key = pod_key(pod)
    skipped: list[str] = []
    problems = count_problems(spec, names.resource) + count_problems(spec, names.extended)
    if problems:
        return Demand((), (), ((key, "; ".join(problems)),))
    nominated = nominated_node(pod)
    legacy = 0 if nominated else pod_requests(spec, names.resource)  # held on the nominated node instead
    dra = pod_requests(spec, names.extended)
    counted: set[str] = set()
    for ref in pod_claims(pod):
        claim_spec: Mapping[str, Any] | None = None
        ckey = ref.claim
        if ckey:
            claim = claims.get(ckey)
            if claim is not None:
                if (claim.get("status") or {}).get("allocation") or ckey in counted or owners.get(ckey, key) != key:
                    continue
                claim_spec = claim.get("spec") or {}
        if claim_spec is None and ref.template:
            tmpl = templates.get(ref.template)
            if tmpl is not None:
                claim_spec = ((tmpl.get("spec") or {}).get("spec")) or {}
                ckey = ckey or f"{key}#{ref.name}"
        if claim_spec is None:
            continue  # claim not created yet and no template to read: the next decision sees it
        n, skip = claim_spec_count(claim_spec, names.device_class)
        if skip:
            skipped.append(f"{key}: a request with allocationMode All has no count to plan with")
        if n:
            dra += n
            counted.add(ckey)
    if not legacy and not dra:
        return Demand((), tuple(skipped))
    common: dict[str, Any] = {
        "namespace": str(meta.get("namespace", "")),
        "priority": int(spec.get("priority") or 0),
        "since": _timestamp(meta.get("creationTimestamp")),
        "constraints": on_node(constraints_of(spec), nominated) if nominated else constraints_of(spec),
    }
    both = legacy > 0 and dra > 0
    out: list[PendingPod] = []
    if legacy:
        out.append(PendingPod(f"{key}#legacy" if both else key, "legacy", legacy, **common))
    if dra:
        out.append(PendingPod(f"{key}#dra" if both else key, "dra", dra, **common))
    return Demand(tuple(out), tuple(skipped))


def pending_demand(pods: Iterable[Mapping[str, Any]], claims: Mapping[str, Mapping[str, Any]],
                   templates: Mapping[str, Mapping[str, Any]], names: Names = Names(),
                   tried_only: bool = False) -> Demand:
    """Pending GPU demand. `claims` and `templates` are keyed `namespace/name`."""
    pending = [pod for pod in pods if is_pending(pod)]
    owners = claim_owners(pending)
    out: list[PendingPod] = []
    skipped: list[str] = []
    invalid: list[tuple[str, str]] = []
    for pod in pending:
        d = pod_demand(pod, claims, templates, owners, names, tried_only)
        out += d.pending
        skipped += d.skipped
        invalid += d.invalid
    return Demand(tuple(out), tuple(skipped), tuple(invalid))


def legacy_requested_by_node(pods: Iterable[Mapping[str, Any]], names: Names = Names()) -> dict[str, int]:
    """`nvidia.com/gpu` requested by the pods bound to each node and not finished, and by those nominated to it."""
    return {node: sum(gpus) for node, gpus in legacy_bound_by_node(pods, names).items()}


def legacy_bound_by_node(pods: Iterable[Mapping[str, Any]], names: Names = Names()) -> dict[str, tuple[int, ...]]:
    """The `nvidia.com/gpu` of each pod holding GPUs of each node (`legacy_holder_node`: bound and not finished, or
    nominated there), in the scheduler's queue order (`pod_rank`): the order the kubelet admits them in, about
    (`bridge.controller.nodestatus`, unreported bindings)."""
    out: dict[str, list[tuple[tuple[int, float, str], int]]] = defaultdict(list)
    for pod in pods:
        node = legacy_holder_node(pod)
        if node:
            n = pod_requests(pod.get("spec") or {}, names.resource)
            if n:
                out[node].append((pod_rank(pod), n))
    return {node: tuple(n for _, n in sorted(ranked)) for node, ranked in out.items()}


def allocated_by_node(claims: Iterable[Mapping[str, Any]], names: Names = Names()) -> dict[str, set[str]]:
    """Device names of the bridge's driver that allocated claims reference, per node (pool)."""
    out: dict[str, set[str]] = defaultdict(set)
    for claim in claims:
        alloc = (claim.get("status") or {}).get("allocation") or {}
        for r in ((alloc.get("devices") or {}).get("results") or ()):
            if isinstance(r, dict) and r.get("driver") == names.driver and r.get("pool") and r.get("device"):
                out[str(r["pool"])].add(str(r["device"]))
    return dict(out)


__all__ = [
    "DEVICE_CLASS",
    "DRIVER",
    "Demand",
    "LEGACY_RESOURCE",
    "Names",
    "PodClaim",
    "allocated_by_node",
    "claim_owners",
    "claim_spec_count",
    "is_pending",
    "legacy_bound_by_node",
    "legacy_holder_node",
    "legacy_requested_by_node",
    "nominated_node",
    "pending_demand",
    "pod_claims",
    "pod_demand",
    "pod_key",
    "pod_rank",
    "pod_requests",
    "request_count",
    "scheduler_refused",
]
