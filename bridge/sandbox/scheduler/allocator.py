"""The structured-parameters allocator: which devices of which ResourceSlices satisfy a pod's claims on one node.

Written from kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/structured/
(internal/stable/allocator_stable.go, pools_stable.go; consumable capacity from internal/incubating/
consumable_capacity.go):
* Pools (`GatherPools`): slices whose `nodeName` is the node, `allNodes`, or whose `nodeSelector` matches it
  (per-device node selection with DRAPartitionableDevices); per pool only the slices of the newest
  `pool.generation` count; a pool is *incomplete* when it has fewer slices than `resourceSliceCount` and *invalid*
  when a device name repeats. Neither is allocated from (the search skips them); when nothing fits and a pool was
  invalid, the node is refused with "invalid resource pools were encountered". An "All" request over an incomplete
  or invalid pool is an error for the pod through 1.37 and refuses only this node from 1.38 ("asks for all devices,
  but resource pool ... is currently being updated"): `NodeAllocationError`.
* Requests: `exactly` (`ExactCount` with `count`, or `All` matching devices, at least one) or, with
  DRAPrioritizedList, `firstAvailable` sub-requests tried in order (result names `<request>/<sub-request>`).
  A request with sub-requests while the gate is off, or with admin access while DRAAdminAccess is off, is an error.
* Matching: the DeviceClass selectors, then the request selectors, in CEL (bridge.kvalues.cel). A CEL runtime or
  compile error is an **error** for the pod ("claim ns/name: selector #0: CEL runtime error: ..."), not "no match".
* A device is in use when an allocated claim (not via admin access) or an earlier request of this attempt holds it;
  admin-access requests may share devices except within the same claim. With DRAConsumableCapacity a device with
  `allowMultipleAllocations` is shared by claims while its capacity lasts: each allocation consumes the requested
  capacity, rounded up by the capacity's `requestPolicy`, or its default, or all of it.
* Device taints (DRADeviceTaints): every NoSchedule/NoExecute taint must be tolerated by the request (`None` taints
  are informational). Counters (DRAPartitionableDevices): a device's `consumesCounters` must fit the pool's
  `sharedCounters` minus what allocated and allocating devices consume.
* `matchAttribute` constraints: all devices of the named requests (all requests when none are named) share the
  attribute's value; `distinctAttribute` (consumable capacity): all values differ.
* The search is exhaustive with backtracking and takes the first solution, like the real allocator.
* The result per claim: `devices.results` (request, driver, pool, device, adminAccess, shareID, consumedCapacity),
  `devices.config` (class configs "FromClass", then the claim's "FromClaim" configs that apply) and a
  `nodeSelector` (`metadata.name In [node]` when any device is node-local, else the merged slice selectors, else
  none).
Pure: inputs are plain API dicts, nothing is mutated; `MatchCache` memoises CEL results per (expression, device)
across calls, which is safe because a result depends on nothing else.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from bridge.kvalues import cel
from bridge.kvalues.quantity import QuantityError, parse_quantity

from .nodefilters import node_selector_matches, tolerates

Obj = dict[str, Any]
DeviceID = tuple[str, str, str]  # driver, pool, device
MAX_RESULTS = 32  # AllocationResultsMaxSize


class AllocatorError(Exception):
    """The claims cannot be handled at all (bad class, CEL error, invalid pool): an error for the pod, retried with
    backoff, as the scheduler's statusError."""


class NodeAllocationError(AllocatorError):
    """Allocation failed on this node for a reason that leaves other nodes possible: the real allocator's errors that
    wrap ErrFailedAllocationOnNode, which the DynamicResources Filter turns into this node's
    UnschedulableAndUnresolvable reason (its message, whole) instead of an error for the pod."""


@dataclass(frozen=True)
class Features:
    admin_access: bool = False
    prioritized_list: bool = False
    partitionable_devices: bool = False
    device_taints: bool = False
    consumable_capacity: bool = False
    device_binding: bool = False
    # 1.38+: an "All" request over an incomplete or invalid pool refuses this node only (the allocator wraps
    # ErrFailedAllocationOnNode: structured/internal/stable/allocator_stable.go, v0.38.0-beta.0); through 1.37 it
    # is an error that aborts the pod's scheduling cycle (incubating/allocator_incubating.go, v0.37.2)
    all_mode_pool_errors_per_node: bool = False


@dataclass
class AllocatedState:
    """What existing claims hold: exclusively allocated devices, and for shared (multi-allocatable) devices the
    capacity already consumed."""

    devices: set[DeviceID] = field(default_factory=set)
    consumed: dict[DeviceID, dict[str, Fraction]] = field(default_factory=dict)
    # Counters consumed by allocated devices, per (driver, pool, counterSet, counter).
    counters: dict[tuple[str, str, str, str], Fraction] = field(default_factory=dict)

    def add_claim(self, claim: Mapping[str, Any]) -> None:
        for r in _results(claim):
            dev: DeviceID = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            if r.get("adminAccess"):
                continue
            if r.get("shareID"):
                caps = self.consumed.setdefault(dev, {})
                for name, value in (r.get("consumedCapacity") or {}).items():
                    caps[name] = caps.get(name, Fraction(0)) + _q(value)
            else:
                self.devices.add(dev)


def _results(claim: Mapping[str, Any]) -> list[Obj]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [r for r in ((alloc.get("devices") or {}).get("results") or []) if isinstance(r, dict)]


def _q(value: object) -> Fraction:
    try:
        return parse_quantity(value)
    except QuantityError:
        return Fraction(0)


class MatchCache:
    """CEL results per (expression, slice name, slice resourceVersion, device): a selector's answer for a device
    depends only on the two."""

    def __init__(self, limit: int = 200_000) -> None:
        self._results: dict[tuple[str, str, str, str], bool | AllocatorError] = {}
        self._limit = limit

    def get(self, key: tuple[str, str, str, str], compute: Callable[[], bool]) -> bool:
        hit = self._results.get(key)
        if hit is None:
            try:
                hit = compute()
            except AllocatorError as err:
                hit = err
            if len(self._results) >= self._limit:
                self._results.clear()
            self._results[key] = hit
        if isinstance(hit, AllocatorError):
            raise hit
        return hit


# -- pools -----------------------------------------------------------------------------------------------------------
@dataclass
class Pool:
    driver: str
    name: str
    generation: int
    slices: list[Mapping[str, Any]]
    incomplete: bool = False
    invalid: str = ""


def _node_matches(node: Mapping[str, Any], node_name: str | None, all_nodes: bool, selector: Any) -> bool:
    if node_name:
        return (node.get("metadata") or {}).get("name") == node_name
    if all_nodes:
        return True
    if selector:
        return node_selector_matches(selector, node)
    return False


def gather_pools(slices: Iterable[Mapping[str, Any]], node: Mapping[str, Any], features: Features) -> list[Pool]:
    pools: dict[tuple[str, str], Pool] = {}
    for s in slices:
        spec = s.get("spec") or {}
        per_device = bool(spec.get("perDeviceNodeSelection"))
        if spec.get("perDeviceNodeSelection") is not None and not features.partitionable_devices:
            continue
        if spec.get("nodeName") or spec.get("allNodes") or spec.get("nodeSelector"):
            if not _node_matches(node, spec.get("nodeName"), bool(spec.get("allNodes")), spec.get("nodeSelector")):
                continue
        elif per_device:
            if not any(_node_matches(node, d.get("nodeName"), bool(d.get("allNodes")), d.get("nodeSelector"))
                       for d in spec.get("devices") or [] if isinstance(d, dict)):
                continue
        else:
            continue  # an unknown future way of node selection
        pool_spec = spec.get("pool") or {}
        key = (str(spec.get("driver")), str(pool_spec.get("name")))
        gen = int(pool_spec.get("generation") or 0)
        pool = pools.get(key)
        if pool is None:
            pools[key] = Pool(key[0], key[1], gen, [s])
        elif gen > pool.generation:
            pools[key] = Pool(key[0], key[1], gen, [s])
        elif gen == pool.generation:
            pool.slices.append(s)
    for pool in pools.values():
        want = int(((pool.slices[0].get("spec") or {}).get("pool") or {}).get("resourceSliceCount") or 0)
        pool.incomplete = len(pool.slices) != want
        seen: set[str] = set()
        for s in pool.slices:
            for d in (s.get("spec") or {}).get("devices") or []:
                name = str((d or {}).get("name"))
                if name in seen:
                    pool.invalid = f"duplicate device name {name}"
                seen.add(name)
    return sorted(pools.values(), key=lambda p: (p.driver, p.name))


# -- requests ----------------------------------------------------------------------------------------------------------
@dataclass
class _Req:
    """One request or sub-request to satisfy."""

    claim_index: int
    name: str  # as in results: "req" or "req/sub"
    base: str  # the request name (for constraints)
    sub: str  # the sub-request name or ""
    spec: Obj  # the exact request fields (deviceClassName, selectors, allocationMode, count, ...)
    cls: Obj
    count: int = 0
    all_devices: list[tuple[Pool, Mapping[str, Any], Obj]] = field(default_factory=list)


@dataclass
class _Candidate:
    pool: Pool
    slice: Mapping[str, Any]
    device: Obj

    @property
    def id(self) -> DeviceID:
        return (self.pool.driver, self.pool.name, str(self.device.get("name")))


def _attr_value(attr: Mapping[str, Any]) -> Any:
    for kind in ("int", "bool", "string"):
        if attr.get(kind) is not None:
            return attr[kind]
    if attr.get("version") is not None:
        return cel.Semver(str(attr["version"]))
    raise AllocatorError(f"unsupported attribute value {attr!r}")


def _by_domain(names: Mapping[str, Any], driver: str, convert: Callable[[Any], Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for qualified, value in names.items():
        domain, sep, ident = str(qualified).partition("/")
        if not sep:
            domain, ident = driver, str(qualified)
        out.setdefault(domain, {})[ident] = convert(value)
    return out


def device_activation(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """The CEL `device` variable for a v1 device (compile.go DeviceMatches: unqualified names go under the
    driver's domain)."""
    attrs = _by_domain(device.get("attributes") or {}, driver, lambda a: _attr_value(a if isinstance(a, dict) else {}))
    caps = _by_domain(device.get("capacity") or {}, driver,
                      lambda c: (c or {}).get("value") if isinstance(c, dict) else c)
    return cel.device_activation(driver, attrs, caps, bool(device.get("allowMultipleAllocations")))


def _lookup_attribute(device: Mapping[str, Any], driver: str, qualified: str) -> Any:
    attrs = device.get("attributes") or {}
    if qualified in attrs:
        return attrs[qualified]
    domain, _, ident = qualified.partition("/")
    if domain == driver and ident in attrs:
        return attrs[ident]
    return None


class _Constraint:
    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.requests = set(spec.get("requests") or [])
        self.attribute = str(spec.get("matchAttribute") or spec.get("distinctAttribute") or "")
        self.distinct = bool(spec.get("distinctAttribute"))
        self.values: list[Any] = []

    def applies(self, req: _Req) -> bool:
        return not self.requests or req.base in self.requests or (bool(req.sub) and req.name in self.requests)

    def add(self, req: _Req, cand: _Candidate) -> bool:
        if not self.applies(req):
            return True
        value = _lookup_attribute(cand.device, cand.pool.driver, self.attribute)
        if value is None:
            return False
        if self.distinct:
            if value in self.values:
                return False
        elif self.values and value != self.values[0]:
            return False
        self.values.append(value)
        return True

    def remove(self, req: _Req) -> None:
        if self.applies(req):
            self.values.pop()


class _Search:
    def __init__(self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], classes: Mapping[str, Obj],
                 pools: list[Pool], allocated: AllocatedState, features: Features, cache: MatchCache) -> None:
        self.node, self.claims, self.classes, self.pools = node, claims, classes, pools
        self.allocated, self.features, self.cache = allocated, features, cache
        self.allocating: dict[DeviceID, set[int]] = {}
        self.consuming: dict[DeviceID, dict[str, Fraction]] = {}
        self.counters: dict[tuple[str, str, str, str], Fraction] = {}
        self.results: list[list[tuple[_Req, _Candidate, dict[str, Fraction] | None]]] = [[] for _ in claims]
        self.constraints: list[list[_Constraint]] = []
        self.plan: list[list[list[_Req]]] = []  # per claim, per request: alternatives (one unless firstAvailable)
        self.chosen: dict[tuple[int, int], int] = {}

    # -- preparation (validateDeviceRequest) ---------------------------------------------------------------------
    def prepare(self) -> None:
        for ci, claim in enumerate(self.claims):
            devices = ((claim.get("spec") or {}).get("devices") or {})
            min_devices = 0
            per_claim: list[list[_Req]] = []
            for req in devices.get("requests") or []:
                name = str(req.get("name"))
                subs = req.get("firstAvailable") or []
                if subs and not self.features.prioritized_list:
                    raise AllocatorError(f"claim {_kobj(claim)}, request {name}: has subrequests, but the "
                                         "DRAPrioritizedList feature is disabled")
                if subs:
                    alts = [self._request(ci, claim, f"{name}/{s.get('name')}", name, str(s.get("name")), s)
                            for s in subs if isinstance(s, dict)]
                    min_devices += min(a.count for a in alts)
                else:
                    alts = [self._request(ci, claim, name, name, "", req.get("exactly") or {})]
                    min_devices += alts[0].count
                per_claim.append(alts)
            if min_devices > MAX_RESULTS:
                raise AllocatorError(f"claim {_kobj(claim)}: number of requested devices {min_devices} exceeds the "
                                     f"claim limit of {MAX_RESULTS}")
            self.plan.append(per_claim)
            self.constraints.append([_Constraint(c) for c in devices.get("constraints") or [] if isinstance(c, dict)
                                     and (c.get("matchAttribute") or c.get("distinctAttribute"))])

    def _request(self, ci: int, claim: Mapping[str, Any], name: str, base: str, sub: str, spec: Obj) -> _Req:
        if spec.get("adminAccess") and not self.features.admin_access:
            raise AllocatorError(f"claim {_kobj(claim)}, request {name}: admin access is requested, but the feature "
                                 "is disabled")
        for i, sel in enumerate(spec.get("selectors") or []):
            if not isinstance((sel or {}).get("cel"), dict):
                raise AllocatorError(f"claim {_kobj(claim)}, request {name}, selector #{i}: CEL expression empty "
                                     "(unsupported selector type?)")
        class_name = spec.get("deviceClassName") or ""
        if not class_name:
            raise AllocatorError(f"claim {_kobj(claim)}, request {name}: missing device class name "
                                 "(unsupported request type?)")
        cls = self.classes.get(class_name)
        if cls is None:
            raise AllocatorError(f"claim {_kobj(claim)}, request {name}: could not retrieve device class "
                                 f'{class_name}: deviceclass.resource.k8s.io "{class_name}" not found')
        req = _Req(ci, name, base, sub, spec, cls)
        mode = spec.get("allocationMode") or "ExactCount"
        if mode == "ExactCount":
            req.count = int(spec.get("count") or 1)
        elif mode == "All":
            for pool in self.pools:
                state = "being updated" if pool.incomplete else "invalid" if pool.invalid else ""
                if state:
                    error = NodeAllocationError if self.features.all_mode_pool_errors_per_node else AllocatorError
                    raise error(f"claim {_kobj(claim)}, request {name}: asks for all devices, but resource pool "
                                f"{pool.driver}/{pool.name} is currently {state}")
                for s in pool.slices:
                    for dev in (s.get("spec") or {}).get("devices") or []:
                        if self._selectable(req, _Candidate(pool, s, dev)):
                            req.all_devices.append((pool, s, dev))
            req.count = len(req.all_devices)
        else:
            raise AllocatorError(f"claim {_kobj(claim)}, request {name}: unsupported count mode {mode}")
        return req

    # -- matching ------------------------------------------------------------------------------------------------
    def _selectable(self, req: _Req, cand: _Candidate) -> bool:
        dev = cand.device
        if dev.get("bindingConditions") and not self.features.device_binding:
            return False
        class_sels = (req.cls.get("spec") or {}).get("selectors") or []
        if not self._match(cand, class_sels, f"class {(req.cls.get('metadata') or {}).get('name')}"):
            return False
        if not self._match(cand, req.spec.get("selectors") or [], f"claim {_kobj(self.claims[req.claim_index])}"):
            return False
        if (cand.slice.get("spec") or {}).get("perDeviceNodeSelection"):
            return _node_matches(self.node, dev.get("nodeName"), bool(dev.get("allNodes")), dev.get("nodeSelector"))
        return True

    def _match(self, cand: _Candidate, selectors: list[Any], owner: str) -> bool:
        meta = cand.slice.get("metadata") or {}
        for i, sel in enumerate(selectors):
            expr = str(((sel or {}).get("cel") or {}).get("expression") or "")
            key = (expr, str(meta.get("name")), str(meta.get("resourceVersion")), str(cand.device.get("name")))

            def compute(expr: str = expr, i: int = i) -> bool:
                try:
                    cel.program(expr)
                except cel.CelError as err:
                    raise AllocatorError(f"{owner}: selector #{i}: CEL compile error: {err}") from err
                try:
                    return cel.evaluate(expr, device_activation(cand.pool.driver, cand.device))
                except cel.CelError as err:
                    raise AllocatorError(f"{owner}: selector #{i}: CEL runtime error: {err}") from err

            if not self.cache.get(key, compute):
                return False
        return True

    # -- availability ----------------------------------------------------------------------------------------------
    def _in_use(self, req: _Req, dev_id: DeviceID) -> bool:
        if req.spec.get("adminAccess"):
            return req.claim_index in self.allocating.get(dev_id, set())
        return dev_id in self.allocated.devices or bool(self.allocating.get(dev_id))

    def _consumption(self, req: _Req, cand: _Candidate) -> dict[str, Fraction] | None | bool:
        """None: exclusive device. A dict: the capacity this allocation consumes of a shared device. False: does not
        fit (or violates the capacity request policy)."""
        if not (self.features.consumable_capacity and cand.device.get("allowMultipleAllocations")):
            return None
        requested = ((req.spec.get("capacity") or {}).get("requests") or {})
        caps = cand.device.get("capacity") or {}
        if any(name not in caps for name in requested):
            return False
        out: dict[str, Fraction] = {}
        for name, cap in caps.items():
            cap = cap if isinstance(cap, dict) else {"value": cap}
            consumed = _consumed(requested.get(name), cap)
            if consumed is None:
                return False
            used = (self.allocated.consumed.get(cand.id, {}).get(name, Fraction(0))
                    + self.consuming.get(cand.id, {}).get(name, Fraction(0)))
            if used + consumed > _q(cap.get("value")):
                return False
            out[name] = consumed
        return out

    def _taints_ok(self, req: _Req, device: Mapping[str, Any]) -> bool:
        if not self.features.device_taints:
            return True
        tolerations = [t for t in req.spec.get("tolerations") or [] if isinstance(t, dict)]
        for taint in device.get("taints") or []:
            if not isinstance(taint, dict) or taint.get("effect") == "None":
                continue
            if not any(tolerates(t, taint) for t in tolerations):
                return False
        return True

    def _counters_ok(self, cand: _Candidate) -> bool | list[tuple[tuple[str, str, str, str], Fraction]]:
        uses = [c for c in cand.device.get("consumesCounters") or [] if isinstance(c, dict)]
        if not uses:
            return True
        if not self.features.partitionable_devices:
            return False
        available: dict[tuple[str, str, str, str], Fraction] = {}
        for s in cand.pool.slices:
            for cs in (s.get("spec") or {}).get("sharedCounters") or []:
                for cname, c in ((cs or {}).get("counters") or {}).items():
                    available[(cand.pool.driver, cand.pool.name, str(cs.get("name")), cname)] = _q((c or {}).get("value"))
        taken: list[tuple[tuple[str, str, str, str], Fraction]] = []
        for use in uses:
            for cname, c in (use.get("counters") or {}).items():
                key = (cand.pool.driver, cand.pool.name, str(use.get("counterSet")), cname)
                want = _q((c or {}).get("value"))
                have = available.get(key, Fraction(0)) - self.allocated.counters.get(key, Fraction(0)) - self.counters.get(key, Fraction(0))
                if want > have:
                    return False
                taken.append((key, want))
        return taken

    # -- search ----------------------------------------------------------------------------------------------------
    def run(self) -> bool:
        return self._claim(0)

    def _claim(self, ci: int) -> bool:
        if ci >= len(self.claims):
            return True
        return self._request_at(ci, 0)

    def _request_at(self, ci: int, ri: int) -> bool:
        if ri >= len(self.plan[ci]):
            return self._claim(ci + 1)
        for ai, req in enumerate(self.plan[ci][ri]):
            if self._device(ci, ri, req, 0):
                self.chosen[(ci, ri)] = ai
                return True
        return False

    def _device(self, ci: int, ri: int, req: _Req, di: int) -> bool:
        if req.spec.get("allocationMode") == "All" and not req.all_devices:
            return False
        if di >= req.count:
            return self._request_at(ci, ri + 1)
        if len(self.results[ci]) + req.count - di > MAX_RESULTS:
            return False
        if req.spec.get("allocationMode") == "All":
            pool, s, dev = req.all_devices[di]
            undo = self._take(req, _Candidate(pool, s, dev))
            if undo is None:
                return False
            if self._device(ci, ri, req, di + 1):
                return True
            undo()
            return False
        for pool in self.pools:
            if pool.invalid or pool.incomplete:
                # skipped, not an error: another pool may have the devices (every allocator variant's
                # allocateDevice: `if pool.IsIncomplete || pool.IsInvalid { continue }`, read at v0.35.4, v0.37.2 and
                # v0.38.0-beta.0)
                continue
            for s in pool.slices:
                for dev in (s.get("spec") or {}).get("devices") or []:
                    if not isinstance(dev, dict):
                        continue
                    cand = _Candidate(pool, s, dev)
                    if self._in_use(req, cand.id) and not (self.features.consumable_capacity
                                                           and dev.get("allowMultipleAllocations")):
                        continue
                    if not self._selectable(req, cand):
                        continue
                    undo = self._take(req, cand)
                    if undo is None:
                        continue
                    if self._device(ci, ri, req, di + 1):
                        return True
                    undo()
        return False

    def _take(self, req: _Req, cand: _Candidate) -> Callable[[], None] | None:
        ci = req.claim_index
        shared = self._consumption(req, cand)
        if shared is False:
            return None
        if shared is None and self._in_use(req, cand.id):
            return None
        if not self._taints_ok(req, cand.device):
            return None
        counters = self._counters_ok(cand)
        if counters is False:
            return None
        added: list[_Constraint] = []
        for c in self.constraints[ci]:
            if not c.add(req, cand):
                for done in added:
                    done.remove(req)
                if req.spec.get("allocationMode") == "All":
                    raise AllocatorError(f"claim {_kobj(self.claims[ci])}, request {req.name}: cannot add device "
                                         f"{'/'.join(cand.id)} because a claim constraint would not be satisfied")
                return None
            added.append(c)
        consumed = shared if isinstance(shared, dict) else None
        if consumed is None:
            self.allocating.setdefault(cand.id, set()).add(ci)
        else:
            caps = self.consuming.setdefault(cand.id, {})
            for name, v in consumed.items():
                caps[name] = caps.get(name, Fraction(0)) + v
        taken = counters if isinstance(counters, list) else []
        for key, v in taken:
            self.counters[key] = self.counters.get(key, Fraction(0)) + v
        self.results[ci].append((req, cand, consumed))

        def undo() -> None:
            self.results[ci].pop()
            for key, v in taken:
                self.counters[key] -= v
            if consumed is None:
                self.allocating[cand.id].discard(ci)
            else:
                for name, v in consumed.items():
                    self.consuming[cand.id][name] -= v
            for c in added:
                c.remove(req)

        return undo


def _consumed(requested: Any, cap: Mapping[str, Any]) -> Fraction | None:
    """consumable_capacity.go calculateConsumedCapacity + violatesPolicy; None when the request violates the
    policy."""
    policy = cap.get("requestPolicy") if isinstance(cap.get("requestPolicy"), dict) else None
    if requested is None:
        default = (policy or {}).get("default")
        return _q(default) if default is not None else _q(cap.get("value"))
    want = _q(requested)
    if policy is None:
        return want
    valid_range = policy.get("validRange") if isinstance(policy.get("validRange"), dict) else None
    values = [_q(v) for v in policy.get("validValues") or []]
    if valid_range and valid_range.get("min") is not None:
        low = _q(valid_range["min"])
        if want < low:
            want = low
        elif valid_range.get("step") is not None:
            step = _q(valid_range["step"])
            n = -((low - want) // step)  # ceil((want - low) / step)
            want = low + step * n
        if valid_range.get("max") is not None and want > _q(valid_range["max"]):
            return None
    elif values:
        bigger = [v for v in sorted(values) if v >= want]
        if not bigger:
            return None
        want = bigger[0]
    return want


def _kobj(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def _quantity_string(value: Fraction) -> str:
    if value.denominator != 1:
        return f"{value.numerator * 1000 // value.denominator}m"
    n = value.numerator
    for suffix, unit in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def _node_selector(results: list[tuple[_Req, _Candidate, Any]]) -> Obj | None:
    fields: list[Obj] = []
    exprs: list[Obj] = []
    for _, cand, _ in results:
        spec = cand.slice.get("spec") or {}
        if spec.get("perDeviceNodeSelection"):
            node_name, selector = cand.device.get("nodeName"), cand.device.get("nodeSelector")
        else:
            node_name, selector = spec.get("nodeName"), spec.get("nodeSelector")
        if node_name:
            return {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
        if selector:
            terms = selector.get("nodeSelectorTerms") or []
            if len(terms) > 1:
                raise AllocatorError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
            if terms:
                for req in terms[0].get("matchFields") or []:
                    if req not in fields:
                        fields.append(req)
                for req in terms[0].get("matchExpressions") or []:
                    if req not in exprs:
                        exprs.append(req)
    if not fields and not exprs:
        return None
    term: Obj = {}
    if exprs:
        term["matchExpressions"] = exprs
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def allocate(
    node: Mapping[str, Any],
    claims: Sequence[Mapping[str, Any]],
    *,
    classes: Mapping[str, Obj],
    slices: Iterable[Mapping[str, Any]],
    allocated: AllocatedState,
    features: Features,
    cache: MatchCache | None = None,
    new_share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> list[Obj] | None:
    """One `status.allocation` per claim, in order, or None when the claims do not fit on the node. Raises
    AllocatorError for claims that cannot be handled at all."""
    pools = gather_pools(slices, node, features)
    search = _Search(node, claims, classes, pools, allocated, features, cache or MatchCache())
    search.prepare()
    if not search.run():
        if any(pool.invalid for pool in pools):
            # Allocate (allocator_incubating.go v0.35.4/v0.37.2, allocator_stable.go v0.38.0-beta.0): nothing fit
            # and some pool was invalid, which may be why; not fatal, other nodes may have the devices
            raise NodeAllocationError("invalid resource pools were encountered")
        return None
    out: list[Obj] = []
    for ci, claim in enumerate(claims):
        devices = ((claim.get("spec") or {}).get("devices") or {})
        results = []
        for req, cand, consumed in search.results[ci]:
            r: Obj = {"request": req.name, "driver": cand.pool.driver, "pool": cand.pool.name,
                      "device": str(cand.device.get("name"))}
            if req.spec.get("adminAccess"):
                r["adminAccess"] = True
            if consumed is not None:
                r["shareID"] = new_share_id()
                r["consumedCapacity"] = {k: _quantity_string(v) for k, v in consumed.items()}
            results.append(r)
        configs: list[Obj] = []
        for ri, alts in enumerate(search.plan[ci]):
            req = alts[search.chosen.get((ci, ri), 0)]
            for cfg in (req.cls.get("spec") or {}).get("config") or []:
                configs.append({"source": "FromClass", **{k: v for k, v in cfg.items() if k != "requests"}})
        for cfg in devices.get("config") or []:
            wanted = cfg.get("requests") or []
            if not wanted:
                configs.append({"source": "FromClaim", **cfg})
                continue
            # As the real allocator: once per request the config names (a config naming two requests appears
            # twice), or for the chosen sub-request of a request with firstAvailable.
            for ri, alts in enumerate(search.plan[ci]):
                if alts[0].base in wanted:
                    configs.append({"source": "FromClaim", **cfg})
                elif alts[0].sub and alts[search.chosen.get((ci, ri), 0)].name in wanted:
                    configs.append({"source": "FromClaim", **cfg})
        allocation: Obj = {"devices": {"results": results}}
        if configs:
            allocation["devices"]["config"] = configs
        selector = _node_selector(search.results[ci])
        if selector is not None:
            allocation["nodeSelector"] = selector
        out.append(allocation)
    return out


__all__ = ["AllocatedState", "AllocatorError", "Features", "MatchCache", "Pool", "allocate", "device_activation",
           "gather_pools"]
