"""One scheduling cycle for one pod against a snapshot of the cluster (pure): which node, which devices, or why not.

Written from kubernetes/kubernetes pkg/scheduler/schedule_one.go (`schedulePod`: PreFilter, Filter on every node,
PostFilter when none fits, Score, selectHost) and the default plugins' Filter order (NodeUnschedulable,
TaintToleration, NodeAffinity, NodeResourcesFit, DynamicResources; pkg/scheduler/apis/config/v1/default_plugins.go),
with the DynamicResources plugin from pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go and
extendeddynamicresources.go:
* PreEnqueue: every claim of `spec.resourceClaims` must exist, not be being deleted, and (for template claims,
  named by `status.resourceClaimStatuses`) be owned by the pod; otherwise the pod waits *without* an event
  (`Gated`), as a PreEnqueue rejection does. `pod "ns/p": ResourceClaim not created yet` is the usual reason.
* PreFilter: an allocated claim that cannot be reserved any more (reservedFor full) and is not reserved for the pod
  -> "resourceclaim in use"; an unallocated claim whose allocation another cycle has in flight -> "resource claim
  ns/c is in the process of being allocated"; a request whose DeviceClass does not exist -> "request r: device class
  c does not exist"; `firstAvailable` with DRAPrioritizedList off -> "... has subrequests, but the
  DRAPrioritizedList feature is disabled". A PreFilter rejection applies to every node.
* Filter: an allocated claim whose `nodeSelector` does not match -> "resourceclaim not available on the node";
  claims that the allocator cannot place -> "cannot allocate all claims"; an allocator *error* (CEL runtime error,
  missing class, invalid pool) aborts the cycle as an error: `running "DynamicResources" filter plugin: <error>`.
* PostFilter (DynamicResources, then DefaultPreemption): without claims "no new claims to deallocate"; with an
  unavailable allocated claim reserved by nobody or only this pod, it is deallocated ("deallocation of
  ResourceClaim completed"); a stale extended-resource claim is deleted ("deletion of ResourceClaim completed");
  otherwise "still not schedulable" (from 1.37 neither of the two "nothing done" reasons is given:
  `Profile.dra_postfilter_reasons`). Then DefaultPreemption (preemption.py: eligibility, victims per node, the
  node): the nodes whose filters failed resolvably are tried (unresolvable: the node-only filters, DRA's, and from
  1.34 NodeResourcesFit when a request exceeds the node's whole allocatable, `Profile.unresolvable_fit`); the
  lower-priority pods on a node are evicted in the simulation, as few as needed. DRA devices are never freed by it
  (DynamicResources has no PreFilterExtensions), so a DRA pod preempts only for what NodeResourcesFit counts (cpu,
  memory, pods, legacy extended resources). With a candidate the pod is nominated to its node (`nominate`) and its
  victims are returned for the scheduler to evict (`victims`); without one each node answers "Preemption is not
  helpful for scheduling", "No preemption victims found for incoming pod" or the filters' reasons with its
  victims gone, and the nomination is cleared; `preemptionPolicy: Never` or a victim still terminating on the
  nominated node -> "not eligible ..." and the nomination stays.
* Filters count the pods nominated to a node with at least the incoming pod's priority as running there, the pod
  itself excepted (framework/runtime/framework.go `addGENominatedPods`), and a pod's own nominated node is tried
  first and taken when it fits (schedule_one.go `evaluateNominatedNode`).
* The message (framework/types.go `FitError.Error`): "0/N nodes are available: <PreFilter message>." or
  "0/N nodes are available: <count reason, ...>." (sorted), then " <PostFilter messages joined by ', '>" as they
  are (no period added) — e.g. on 1.36 "0/2 nodes are available: 2 cannot allocate all claims. still not
  schedulable, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.", on 1.37 the same
  without "still not schedulable, "; a successful preemption's status is the only PostFilter message kept: on 1.37
  "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: found a potential placement for pod on node
  n1, preempting 1 victims" (no period), through 1.36 nothing after the filters' reasons
  (tests/real/test_scheduler_differential.py compares the stand-in's words with kube-scheduler v1.37.2's).
* Score: NodeResourcesFit LeastAllocated on cpu/memory (requests of 0 count as 100m / 200Mi) plus preferred node
  affinity weights; the highest score wins, ties at random (selectHost). The real default profile also scores
  BalancedAllocation, ImageLocality, PodTopologySpread and InterPodAffinity, which have no inputs in the sandbox.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import extended as ext
from . import preemption
from .allocator import AllocatedState, AllocatorError, Features, MatchCache, NodeAllocationError, allocate
from .nodefilters import (
    insufficient,
    least_allocated_score,
    node_affinity,
    node_selector_matches,
    node_unschedulable,
    preferred_affinity_score,
    taint_toleration,
)
from .podresources import allocatable, pod_requests
from .preemption import NO_VICTIMS, NOT_HELPFUL, PlacedPod

Obj = dict[str, Any]
RESERVED_FOR_MAX = 256  # ResourceClaimReservedForMaxSize
FINALIZER = "resource.kubernetes.io/delete-protection"
NO_NODES = "no nodes available to schedule pods"


@dataclass
class NodeUsage:
    requested: dict[str, int] = field(default_factory=dict)
    nonzero: dict[str, int] = field(default_factory=dict)  # cpu/memory with the scoring defaults
    pods: int = 0

    def add(self, requests: Mapping[str, int], sign: int = 1) -> None:
        for k, v in requests.items():
            self.requested[k] = self.requested.get(k, 0) + sign * v
        for name, default in (("cpu", 100), ("memory", 200 * 1024 * 1024)):
            self.nonzero[name] = self.nonzero.get(name, 0) + sign * (requests.get(name, 0) or default)
        self.pods += sign

    def copy(self) -> NodeUsage:
        return NodeUsage(dict(self.requested), dict(self.nonzero), self.pods)


@dataclass
class Snapshot:
    nodes: list[Obj]
    usage: dict[str, NodeUsage]
    claims: dict[tuple[str, str], Obj]
    classes: dict[str, Obj]
    slices: list[Obj]
    allocated: AllocatedState
    pending_allocation: set[str] = field(default_factory=set)  # claim uids with an allocation in flight
    # Parsed node allocatable by node name (optional: computed from the nodes when absent).
    allocatable: dict[str, dict[str, int]] = field(default_factory=dict)
    # What `usage` adds up, pod by pod (bound or assumed, not finished): DefaultPreemption's victims come from here.
    pods: dict[str, list[PlacedPod]] = field(default_factory=dict)
    # The scheduler's nominator: pods nominated to each node, neither bound nor assumed.
    nominated: dict[str, list[PlacedPod]] = field(default_factory=dict)

    def slices_for(self, node_name: str) -> list[Obj]:
        """The slices that can serve a node: its own (spec.nodeName) and every slice not bound to one node; the
        allocator's GatherPools still checks each (an index, not a decision)."""
        if self._by_node is None:
            self._by_node, self._shared = {}, []
            for s in self.slices:
                owner = (s.get("spec") or {}).get("nodeName")
                if owner:
                    self._by_node.setdefault(str(owner), []).append(s)
                else:
                    self._shared.append(s)
        return self._by_node.get(node_name, []) + self._shared

    _by_node: dict[str, list[Obj]] | None = None
    _shared: list[Obj] = field(default_factory=list)

    def node_allocatable(self, node: Mapping[str, Any]) -> dict[str, int]:
        name = str((node.get("metadata") or {}).get("name"))
        found = self.allocatable.get(name)
        if found is None:
            found = self.allocatable[name] = allocatable(node)
        return found


@dataclass(frozen=True)
class Profile:
    """What the cycle needs from the KubernetesProfile (kept small so the cycle stays pure)."""

    features: Features
    extended_resources: bool
    detailed_taint_reason: bool
    unresolvable_fit: bool = True  # 1.34+: a request over the node's whole allocatable is unresolvable
    dra_postfilter_reasons: bool = False  # through 1.36: "no new claims to deallocate" / "still not schedulable"
    preemption_placement_message: bool = True  # 1.37+: "preemption: found a potential placement for pod on ..."


@dataclass
class ClaimPlan:
    claim: Obj  # as read (for the extended claim: the object to create, without a name yet)
    allocation: Obj | None  # to write; None: allocated already, only reserve
    extended: bool = False
    mappings: list[Obj] = field(default_factory=list)


@dataclass
class Scheduled:
    node: str
    claims: list[ClaimPlan]


@dataclass
class Unschedulable:
    message: str
    error: bool = False  # an error (retried with backoff; condition reason SchedulerError), not unschedulable
    gated: bool = False  # rejected before scheduling (PreEnqueue): no event, no condition
    deallocate: Obj | None = None  # PostFilter: the claim to deallocate
    delete_claim: Obj | None = None  # PostFilter: the stale extended-resource claim to delete
    # The nominating info written with the condition: a node to nominate, "" to clear status.nominatedNodeName (what
    # the scheduler does on most failures), None to leave it (preemption not eligible).
    nominate: str | None = ""
    victims: list[Obj] = field(default_factory=list)  # DefaultPreemption: the pods to evict for `nominate`


class Reject(Exception):
    def __init__(self, message: str, *, gated: bool = False) -> None:
        super().__init__(message)
        self.message, self.gated = message, gated


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _kobj(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"{meta.get('namespace')}/{meta.get('name')}"


def is_reserved_for(pod: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    uid = _meta(pod).get("uid")
    return any(r.get("uid") == uid for r in (claim.get("status") or {}).get("reservedFor") or [])


def can_be_reserved(claim: Mapping[str, Any]) -> bool:
    return len((claim.get("status") or {}).get("reservedFor") or []) < RESERVED_FOR_MAX


def claim_name(pod: Mapping[str, Any], pod_claim: Mapping[str, Any]) -> tuple[str | None, bool]:
    """resourceclaim.Name: (name or None when intentionally not created, whether the owner must be checked).
    Raises Reject(gated) when a template claim has not been created yet."""
    if pod_claim.get("resourceClaimName"):
        return str(pod_claim["resourceClaimName"]), False
    if pod_claim.get("resourceClaimTemplateName"):
        for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            if st.get("name") == pod_claim.get("name"):
                name = st.get("resourceClaimName")
                return (str(name) if name else None), True
        raise Reject(f'pod "{_kobj(pod)}": ResourceClaim not created yet', gated=True)
    raise Reject(f'pod "{_kobj(pod)}", spec.resourceClaim "{pod_claim.get("name")}": none of the supported fields '
                  "are set", gated=True)


def is_owned_by(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    return any(r.get("controller") and r.get("uid") == _meta(pod).get("uid")
               for r in _meta(claim).get("ownerReferences") or [])


def pod_claims(pod: Mapping[str, Any], claims: Mapping[tuple[str, str], Obj]) -> list[Obj]:
    """foreachPodResourceClaim (PreEnqueue and PreFilter): the pod's claims, or Reject(gated)."""
    ns = str(_meta(pod).get("namespace"))
    out: list[Obj] = []
    for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
        name, check_owner = claim_name(pod, pc)
        if name is None:
            continue
        claim = claims.get((ns, name))
        if claim is None:
            raise Reject(f'resourceclaim.resource.k8s.io "{name}" not found', gated=True)
        if _meta(claim).get("deletionTimestamp"):
            raise Reject(f'resourceclaim "{name}" is being deleted', gated=True)
        if check_owner and not is_owned_by(claim, pod):
            raise Reject(f"ResourceClaim {ns}/{name} was not created for pod {_kobj(pod)} (pod is not owner)",
                          gated=True)
        out.append(claim)
    return out


def _check_classes(claim: Mapping[str, Any], classes: Mapping[str, Obj], features: Features) -> None:
    for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        name = str(req.get("name"))
        if isinstance(req.get("exactly"), dict):
            cls = req["exactly"].get("deviceClassName") or ""
            if not cls:
                raise AllocatorError(f"request {name}: unsupported request type")
            if cls not in classes:
                raise Reject(f"request {name}: device class {cls} does not exist")
        elif req.get("firstAvailable"):
            if not features.prioritized_list:
                raise Reject(f"resource claim {_kobj(claim)}, request {name}: has subrequests, but the "
                              "DRAPrioritizedList feature is disabled")
            for sub in req["firstAvailable"]:
                cls = (sub or {}).get("deviceClassName") or ""
                qual = f"{name}/{(sub or {}).get('name')}"
                if not cls:
                    raise AllocatorError(f"request {qual}: unsupported request type")
                if cls not in classes:
                    raise Reject(f"request {qual}: device class {cls} does not exist")
        else:
            raise Reject(f"resource claim {_kobj(claim)}, request {name}: unknown request type")


def _fit_error(total: int, reasons: Mapping[str, list[str]], prefilter: str, postfilter: list[str]) -> str:
    msg = f"0/{total} nodes are available:"
    if prefilter:
        msg += f" {prefilter}."
    else:
        counts: dict[str, int] = {}
        for rs in reasons.values():
            for r in rs:
                counts[r] = counts.get(r, 0) + 1
        hist = sorted(f"{n} {r}" for r, n in counts.items())
        if hist:
            msg += f" {', '.join(hist)}."
    if postfilter:
        # As it is: DefaultPreemption's refusals are FitError texts ending in "." themselves, its success message
        # ("... preempting 1 victims") has no period, and FitError.Error adds none.
        msg += f" {', '.join(postfilter)}"
    return msg


@dataclass
class _DraState:
    claims: list[Obj]  # user claims, then the extended claim (if any)
    extended: Obj | None
    ext_requests: dict[str, int]
    mapping: dict[str, Obj]
    to_allocate: list[int]  # indices into claims

    @property
    def empty(self) -> bool:
        return not self.claims


def _prefilter(pod: Obj, snap: Snapshot, profile: Profile, requests: Mapping[str, int]) -> _DraState:
    user = pod_claims(pod, snap.claims)
    mapping: dict[str, Obj] = {}
    ext_reqs: dict[str, int] = {}
    extended: Obj | None = None
    if profile.extended_resources:
        mapping = ext.class_mapping(snap.classes.values())
        ext_reqs = ext.mapped_requests(requests, mapping)
        if ext_reqs:
            extended = ext.find_extended_claim(pod, snap.claims.values()) or ext.new_claim(pod)
    claims = user + ([extended] if extended is not None else [])
    to_allocate: list[int] = []
    for i, claim in enumerate(claims):
        status = claim.get("status") or {}
        if status.get("allocation"):
            if not can_be_reserved(claim) and not is_reserved_for(pod, claim):
                raise Reject("resourceclaim in use")
            continue
        to_allocate.append(i)
        if _meta(claim).get("uid") and _meta(claim)["uid"] in snap.pending_allocation:
            raise Reject(f"resource claim {_kobj(claim)} is in the process of being allocated")
        if claim is extended:
            continue
        _check_classes(claim, snap.classes, profile.features)
    return _DraState(claims, extended, ext_reqs, mapping, to_allocate)


_Feasible = tuple[list[Obj] | None, Obj | None, list[Obj]]  # the DRA filter's allocations, extended claim, mappings


@dataclass
class _Refused:
    reasons: list[str]
    unresolvable: bool


def _node_filters(pod: Obj, node: Obj, profile: Profile) -> str | None:
    return (node_unschedulable(pod, node) or taint_toleration(pod, node, detailed=profile.detailed_taint_reason)
            or node_affinity(pod, node))


def _fit(requests: Mapping[str, int], alloc: Mapping[str, int], usage: NodeUsage, dra: _DraState,
         profile: Profile) -> _Refused | None:
    left_to_dra = {r for r in dra.ext_requests if alloc.get(r, 0) == 0}
    short = insufficient(requests, alloc, usage.requested, usage.pods, left_to_dra=left_to_dra)
    if not short:
        return None
    return _Refused([reason for reason, _ in short], profile.unresolvable_fit and any(bad for _, bad in short))


def _with_nominated(pod: Obj, snap: Snapshot, name: str) -> NodeUsage:
    """addGENominatedPods: the node's usage plus every pod nominated to it with at least this pod's priority, other
    than the pod itself (they are treated as running there, so this pod does not take the room kept for them)."""
    usage = snap.usage.get(name) or NodeUsage()
    own, uid = preemption.priority(pod), str(_meta(pod).get("uid"))
    extra = [p for p in snap.nominated.get(name, ()) if p.priority >= own and p.uid != uid]
    if not extra:
        return usage
    usage = usage.copy()
    for p in extra:
        usage.add(p.requests)
    return usage


def _filter(pod: Obj, node: Obj, requests: Mapping[str, int], dra: _DraState, snap: Snapshot, profile: Profile,
            cache: MatchCache | None, unavailable: set[int]) -> _Refused | _Feasible:
    """The Filter plugins on one node, in order, stopping at the first that refuses (RunFilterPluginsWithNominatedPods;
    the second pass without the nominated pods cannot change a resource verdict). AllocatorError propagates."""
    reason = _node_filters(pod, node, profile)
    if reason:
        return _Refused([reason], True)
    alloc = snap.node_allocatable(node)
    refused = _fit(requests, alloc, _with_nominated(pod, snap, str(node["metadata"]["name"])), dra, profile)
    if refused is not None:
        return refused
    result = _filter_dra(pod, node, alloc, dra, snap, profile, cache, unavailable)
    return _Refused([result], True) if isinstance(result, str) else result


def _fit_check(pod: Obj, node: Obj, requests: Mapping[str, int], dra: _DraState, snap: Snapshot, profile: Profile,
               cache: MatchCache | None) -> preemption.FitCheck:
    """The filters of a preemption simulation on `node`, given the pods that stay on it (the others are removed from
    its usage). DynamicResources' verdict does not depend on them (no PreFilterExtensions): computed once."""
    name = str(node["metadata"]["name"])
    on_node = snap.pods.get(name, [])
    alloc = snap.node_allocatable(node)
    dra_verdict: list[str] = []

    def check(staying: Sequence[preemption.PlacedPod]) -> list[str]:
        reason = _node_filters(pod, node, profile)
        if reason:
            return [reason]
        kept = {p.uid for p in staying}
        usage = _with_nominated(pod, snap, name).copy()
        for p in on_node:
            if p.uid not in kept:
                usage.add(p.requests, -1)
        refused = _fit(requests, alloc, usage, dra, profile)
        if refused is not None:
            return refused.reasons
        if not dra_verdict:
            try:
                result = _filter_dra(pod, node, alloc, dra, snap, profile, cache, set())
            except AllocatorError as err:
                raise preemption.FilterError(f'running "DynamicResources" filter plugin: {err}') from err
            dra_verdict.append(result if isinstance(result, str) else "")
        return [dra_verdict[0]] if dra_verdict[0] else []

    return check


def schedule(pod: Obj, snap: Snapshot, profile: Profile, *, cache: MatchCache | None = None,
             rng: random.Random | None = None) -> Scheduled | Unschedulable:
    rng = rng or random.Random()
    total = len(snap.nodes)
    requests = pod_requests(pod)
    names = [str(n["metadata"]["name"]) for n in snap.nodes]
    try:
        dra = _prefilter(pod, snap, profile, requests)
    except Reject as rej:
        if rej.gated:
            return Unschedulable(rej.message, gated=True)
        if total == 0:
            return Unschedulable(NO_NODES)
        # Every node gets the PreFilter status (unresolvable): no preemption candidate; the PostFilter of
        # DynamicResources finds no claims in its state yet.
        outcome = preemption.preempt(pod, names, {}, snap.pods, lambda _: lambda _: [],
                                     placement_message=profile.preemption_placement_message, rng=rng)
        post = ["no new claims to deallocate" if profile.dra_postfilter_reasons else "", outcome.message]
        return Unschedulable(_fit_error(total, {}, rej.message, [m for m in post if m]), nominate=outcome.nominate)
    except AllocatorError as err:
        return Unschedulable(f'running PreFilter plugin "DynamicResources": {err}', error=True)
    if total == 0:
        return Unschedulable(NO_NODES)

    by_name = dict(zip(names, snap.nodes, strict=True))
    unavailable: set[int] = set()
    nominated = by_name.get(str((pod.get("status") or {}).get("nominatedNodeName") or ""))
    try:
        if nominated is not None:  # evaluateNominatedNode: tried first, taken when it fits
            first = _filter(pod, nominated, requests, dra, snap, profile, cache, unavailable)
            if not isinstance(first, _Refused):
                return Scheduled(str(nominated["metadata"]["name"]), _plans(pod, dra, *first))
        refusals: dict[str, _Refused] = {}
        feasible: list[tuple[Obj, list[Obj] | None, Obj | None, list[Obj]]] = []
        for name, node in by_name.items():
            result = _filter(pod, node, requests, dra, snap, profile, cache, unavailable)
            if isinstance(result, _Refused):
                refusals[name] = result
            else:
                feasible.append((node, *result))
    except AllocatorError as err:
        return Unschedulable(f'running "DynamicResources" filter plugin: {err}', error=True)
    if not feasible:
        return _post_filter(pod, snap, profile, requests, dra, refusals, unavailable, cache, rng)
    scored = []
    for node, allocations, node_ext, mappings in feasible:
        name = str(node["metadata"]["name"])
        usage = snap.usage.get(name) or NodeUsage()
        score = least_allocated_score(requests, snap.node_allocatable(node), usage.nonzero) + preferred_affinity_score(pod, node)
        scored.append((score, node, allocations, node_ext, mappings))
    best = max(s[0] for s in scored)
    _, node, allocations, node_ext, mappings = rng.choice([s for s in scored if s[0] == best])
    return Scheduled(str(node["metadata"]["name"]), _plans(pod, dra, allocations, node_ext, mappings))


def _post_filter(pod: Obj, snap: Snapshot, profile: Profile, requests: Mapping[str, int], dra: _DraState,
                 refusals: Mapping[str, _Refused], unavailable: set[int], cache: MatchCache | None,
                 rng: random.Random) -> Unschedulable:
    """RunPostFilterPlugins: DynamicResources, then DefaultPreemption; a successful preemption's status is the
    only one kept (the plugins' reasons are joined only when none succeeds)."""
    total = len(snap.nodes)
    reasons = {name: r.reasons for name, r in refusals.items()}
    dra_reason = _dra_postfilter(pod, dra, unavailable, profile)
    by_name = {str(n["metadata"]["name"]): n for n in snap.nodes}
    outcome = preemption.preempt(
        pod, list(by_name), {name: r.unresolvable for name, r in refusals.items()}, snap.pods,
        lambda name: _fit_check(pod, by_name[name], requests, dra, snap, profile, cache),
        placement_message=profile.preemption_placement_message, rng=rng)
    post = [outcome.message] if outcome.victims or outcome.error else [dra_reason, outcome.message]
    out = Unschedulable(_fit_error(total, reasons, "", [m for m in post if m]), nominate=outcome.nominate,
                        victims=outcome.victims)
    if dra_reason == "deallocation of ResourceClaim completed":
        out.deallocate = _deallocatable(pod, dra, unavailable)
    elif dra_reason == "deletion of ResourceClaim completed":
        out.delete_claim = dra.extended
    return out


def _filter_dra(pod: Obj, node: Obj, alloc: Mapping[str, int], dra: _DraState, snap: Snapshot, profile: Profile,
                cache: MatchCache | None, unavailable: set[int]) -> str | tuple[list[Obj] | None, Obj | None, list[Obj]]:
    if dra.empty:
        return (None, None, [])
    node_ext: Obj | None = None
    mappings: list[Obj] = []
    has_user = len(dra.claims) > (1 if dra.extended is not None else 0)
    if dra.extended is not None:
        if ((dra.extended.get("spec") or {}).get("devices") or {}).get("requests") is not None:
            return "cannot schedule extended resource claim"
        served, why = ext.node_decision(dra.ext_requests, dra.mapping, alloc)
        if why:
            return why
        if served and not (dra.extended.get("status") or {}).get("allocation"):
            node_ext = copy.deepcopy(dra.extended)
            reqs, mappings = ext.requests_and_mappings(pod, served, dra.mapping)
            node_ext["spec"] = {"devices": {"requests": reqs}}
        if node_ext is None and not has_user:
            return (None, None, [])
    node_unavailable: list[int] = []
    for i, claim in enumerate(dra.claims):
        selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector")
        if selector and not node_selector_matches(selector, node):
            node_unavailable.append(i)
    to_allocate = []
    for i in dra.to_allocate:
        claim = dra.claims[i]
        if claim is dra.extended:
            if node_ext is None:
                continue
            claim = node_ext
        to_allocate.append(claim)
    allocations = None
    if to_allocate:
        try:
            allocations = allocate(node, to_allocate, classes=snap.classes,
                                   slices=snap.slices_for(str(node["metadata"]["name"])), allocated=snap.allocated,
                                   features=profile.features, cache=cache)
        except NodeAllocationError as err:  # dynamicresources.go Filter: ErrFailedAllocationOnNode, this node only
            return str(err)
        if allocations is None or len(allocations) != len(to_allocate):
            return "cannot allocate all claims"
    if node_unavailable:
        unavailable.update(node_unavailable)
        return "resourceclaim not available on the node"
    return (allocations, node_ext, mappings)


def _deallocatable(pod: Obj, dra: _DraState, unavailable: Iterable[int]) -> Obj | None:
    uid = _meta(pod).get("uid")
    for i in sorted(unavailable):
        claim = dra.claims[i]
        if claim is dra.extended:
            continue
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        if not reserved or (len(reserved) == 1 and reserved[0].get("uid") == uid):
            return claim
    return None


def _dra_postfilter(pod: Obj, dra: _DraState, unavailable: set[int], profile: Profile) -> str:
    """The DynamicResources PostFilter's reason ("": none, as from 1.37 when it does nothing)."""
    if dra.empty:
        return "no new claims to deallocate" if profile.dra_postfilter_reasons else ""
    if _deallocatable(pod, dra, unavailable) is not None:
        return "deallocation of ResourceClaim completed"
    if dra.extended is not None and _meta(dra.extended).get("name"):
        return "deletion of ResourceClaim completed"
    return "still not schedulable" if profile.dra_postfilter_reasons else ""


def _plans(pod: Obj, dra: _DraState, allocations: list[Obj] | None, node_ext: Obj | None,
           mappings: list[Obj]) -> list[ClaimPlan]:
    plans: list[ClaimPlan] = []
    it = iter(allocations or [])
    for i, claim in enumerate(dra.claims):
        is_ext = claim is dra.extended
        if i in dra.to_allocate:
            if is_ext and node_ext is None:
                continue  # served by the device plugin on this node: nothing to allocate or create
            allocation = next(it)
            plans.append(ClaimPlan(node_ext if is_ext and node_ext is not None else claim, allocation, is_ext,
                                   mappings if is_ext else []))
        elif not is_reserved_for(pod, claim):
            plans.append(ClaimPlan(claim, None, is_ext))
    return plans


__all__ = [
    "NO_VICTIMS", "NOT_HELPFUL", "ClaimPlan", "FINALIZER", "Reject", "NodeUsage", "PlacedPod", "Profile", "Scheduled",
    "Snapshot", "Unschedulable", "can_be_reserved", "is_reserved_for", "pod_claims", "schedule",
]
