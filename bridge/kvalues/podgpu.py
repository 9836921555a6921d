"""How many devices of one extended resource a pod holds, and how a pod's GPUs can be shared between its containers
under DRA so that it holds exactly as many as under the device plugin. Pure, plain dicts in.

**The count** (`pod_devices`) is what the scheduler reserves and the kubelet's device manager hands out, written
from kubernetes/kubernetes staging/src/k8s.io/component-helpers/resource/helpers.go (`PodRequests` ->
`AggregateContainerRequests`) and pkg/kubelet/cm/devicemanager/manager.go (`Allocate`, `devicesToReuse`):

* app containers run together: their counts add up;
* a sidecar (an init container with `restartPolicy: Always`) starts in order and keeps running: it adds to that
  sum, and to every init container started after it;
* an ordinary init container runs alone (with the sidecars started before it): it needs its own count plus those
  sidecars', and its devices are handed on to the containers that start after it (the device manager puts them in
  `devicesToReuse`; sidecars take theirs out of it);
* the pod needs the maximum of the sum and of each ordinary init container's need:

      pod = max(sum(app) + sum(sidecars), max_i(init_i + sum(sidecars started before init_i)))

  e.g. init 8 + main 8 holds 8, init 1 + main 1 holds 1, sidecar 1 + init 2 + main 1 holds 3.

A container's count is its `limits` value (what the device manager allocates), else its `requests` (the API server
requires both to be equal for an extended resource and defaults requests from limits, so a valid pod has one
value). Malformed values count 0 (the API server rejects such a pod); so does a value that is not a valid count at
all (`bridge.kvalues.quantity.check_count`: "1e400" is out of range, and older API servers store it), which
`count_problems` names so that callers can say why instead of planning with it. `spec.overhead` never names a device
resource; pod-level `resources` do not cover extended resources (PodLevelResources: cpu, memory, hugepages).

**The sharing plan** (`plan_claims`) gives DRA the same count. Under DRA every claim of a pod is allocated for the
pod's whole life and containers that reference one claim share its devices, so:

* each long-lived container (app container or sidecar) asking N gets its own claim of N devices: they run at the
  same time and must not share;
* an ordinary init container borrows from claims of containers that are not running while it runs: the app
  containers and the sidecars started after it (exactly the devices the device manager would hand on). What
  they cannot cover comes from one extra claim shared by all ordinary init containers (they run one at a time),
  sized for the largest shortfall. So the pod holds sum(long-lived) + max(0, max_i(init_i - borrowable_i)), which
  is `pod_devices` (tested for every shape);
* an init container sees exactly as many GPUs as it asked for: where it needs part of a claim, that claim is cut
  into requests (`segments`) and the init container references only the requests it needs
  (`resources.claims[].request`), while the claim's owner references the whole claim. Upstream's own
  extended-resource path (KEP-5004, pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go
  `createResourceRequestAndMappings`) hands an init container whole requests of the long-lived containers, so it may
  see more GPUs than it asked for; the plan here never does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bridge.kvalues.quantity import QuantityError, check_count, quantity_int

Kind = Literal["init", "sidecar", "app"]


@dataclass(frozen=True)
class ContainerCount:
    """One container's whole-device count of a resource. `index` is its position in `spec.initContainers` (kind
    init or sidecar) or `spec.containers` (kind app)."""

    name: str
    kind: Kind
    index: int
    count: int

    @property
    def long_lived(self) -> bool:
        return self.kind != "init"

    @property
    def spec_list(self) -> str:
        """`initContainers` or `containers`."""
        return "containers" if self.kind == "app" else "initContainers"


def container_count(container: Mapping[str, Any], resource: str) -> int:
    """The container's count of `resource`: limits, else requests (see the module docstring); 0 when absent."""
    res = container.get("resources") or {}
    if not _is_map(res):
        return 0
    for part in ("limits", "requests"):
        values = res.get(part)
        if values and _is_map(values) and resource in values:
            return max(0, quantity_int(values[resource]))
    return 0


def count_problems(spec: Mapping[str, Any], resource: str) -> tuple[str, ...]:
    """Why a container's `resource` value is not a valid count (`check_count`: not a quantity, out of range, not
    whole, negative, above `MAX_COUNT`), one line per container; () when every value is a count or absent."""
    out: list[str] = []
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or ()):
            res = c.get("resources") if _is_map(c) else None
            if not res or not _is_map(res):
                continue
            for part in ("limits", "requests"):  # one line per container: its limit, else its request
                values = res.get(part)
                if values and _is_map(values) and resource in values:
                    try:
                        check_count(values[resource])
                    except QuantityError as err:
                        out.append(f"container {str(c.get('name', f'#{i}'))[:63]}: {resource} {err}")
                        break
    return tuple(out)


def _is_map(value: object) -> bool:
    """`isinstance(value, Mapping)`, with the JSON case (a dict) answered without the ABC machinery: the webhook
    asks this for every container of every pod it reviews."""
    return type(value) is dict or isinstance(value, Mapping)


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def containers(spec: Mapping[str, Any], resource: str) -> tuple[ContainerCount, ...]:
    """Every container with its count (0 included), in start order: init containers (sidecars marked), then app
    containers."""
    out: list[ContainerCount] = []
    for i, c in enumerate(spec.get("initContainers") or ()):
        if _is_map(c):
            out.append(ContainerCount(str(c.get("name", f"#{i}")), "sidecar" if _is_sidecar(c) else "init", i,
                                      container_count(c, resource)))
    for i, c in enumerate(spec.get("containers") or ()):
        if _is_map(c):
            out.append(ContainerCount(str(c.get("name", f"#{i}")), "app", i, container_count(c, resource)))
    return tuple(out)


def devices_of(counts: Sequence[ContainerCount]) -> int:
    """`pod_devices` for counts already read (start order)."""
    total = sum(c.count for c in counts if c.long_lived)
    sidecars = 0
    peak = 0
    for c in counts:
        if c.kind == "sidecar":
            sidecars += c.count
            peak = max(peak, sidecars)
        elif c.kind == "init":
            peak = max(peak, c.count + sidecars)
    return max(total, peak)


def pod_devices(spec: Mapping[str, Any], resource: str) -> int:
    """How many devices of `resource` the pod holds under the device plugin (see the module docstring)."""
    return devices_of(containers(spec, resource))


def pod_devices_by_name(spec: Mapping[str, Any], accept: Callable[[str], bool]) -> dict[str, int]:
    """`pod_devices` for every resource name `accept` takes that some container names; zero counts left out."""
    names: set[str] = set()
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or ():
            res = c.get("resources") if isinstance(c, Mapping) else None
            if not isinstance(res, Mapping):
                continue
            for part in ("limits", "requests"):
                values = res.get(part)
                if isinstance(values, Mapping):
                    names.update(k for k in values if isinstance(k, str) and accept(k))
    out = {name: pod_devices(spec, name) for name in sorted(names)}
    return {k: v for k, v in out.items() if v > 0}


# --- the DRA sharing plan ---------------------------------------------------------------------------------------

OWNER_EXTRA = ""  # `PlannedClaim.owner` of the claim shared by the ordinary init containers


@dataclass(frozen=True)
class PlannedClaim:
    """One pod claim: `owner` is the long-lived container it belongs to (OWNER_EXTRA for the init containers'
    extra claim); `segments` are the request sizes it is cut into (one segment: not cut), summing to `count`."""

    owner: str
    count: int
    segments: tuple[int, ...]


@dataclass(frozen=True)
class Use:
    """A container's reference to a claim: the whole claim (`requests` empty) or only some of its requests (indexes
    into `segments`)."""

    claim: int  # index into ClaimPlan.claims
    requests: tuple[int, ...] = ()


@dataclass(frozen=True)
class ClaimPlan:
    claims: tuple[PlannedClaim, ...]
    uses: Mapping[tuple[Kind, int], tuple[Use, ...]]  # (kind, index) of a container -> what it references

    @property
    def devices(self) -> int:
        return sum(c.count for c in self.claims)

    def visible(self, kind: Kind, index: int) -> int:
        """How many devices the container sees through its references."""
        n = 0
        for use in self.uses.get((kind, index), ()):
            segs = self.claims[use.claim].segments
            n += sum(segs[i] for i in use.requests) if use.requests else sum(segs)
        return n


def plan_claims(counts: Sequence[ContainerCount]) -> ClaimPlan:
    """The claims and references that give every container exactly its count and the pod exactly `devices_of`
    (see the module docstring). `counts` in start order, as `containers` returns them."""
    order = list(counts)
    if not any(c.kind == "init" and c.count > 0 for c in order):  # the common case: nothing to borrow or cut
        live = [c for c in order if c.count > 0]
        return ClaimPlan(tuple(PlannedClaim(c.name, c.count, (c.count,)) for c in live),
                         {(c.kind, c.index): (Use(n),) for n, c in enumerate(live)})
    long_idx = [i for i, c in enumerate(order) if c.long_lived and c.count > 0]
    claim_of = {i: n for n, i in enumerate(long_idx)}
    sizes = [order[i].count for i in long_idx]
    first_app = next((i for i, c in enumerate(order) if c.kind == "app"), len(order))

    def borrowable(at: int) -> list[int]:
        """Claim numbers an ordinary init container at position `at` may borrow: app containers first (the devices
        the device manager hands on to them), then sidecars started after it."""
        apps = [claim_of[i] for i in long_idx if i >= first_app]
        later_sidecars = [claim_of[i] for i in long_idx if at < i < first_app]
        return apps + later_sidecars

    inits = [i for i, c in enumerate(order) if c.kind == "init" and c.count > 0]
    extra = max((order[i].count - sum(sizes[n] for n in borrowable(i)) for i in inits), default=0)
    extra = max(0, extra)
    extra_claim = len(sizes) if extra else -1
    if extra:
        sizes.append(extra)

    # each init container takes a prefix of [extra claim] + borrowable claims; record where it cuts each claim
    takes: dict[int, list[tuple[int, int]]] = {}  # init position -> [(claim, devices taken from its start)]
    cuts: list[set[int]] = [set() for _ in sizes]
    for i in inits:
        need = order[i].count
        sequence = ([extra_claim] if extra else []) + borrowable(i)
        taken: list[tuple[int, int]] = []
        for n in sequence:
            if need == 0:
                break
            k = min(need, sizes[n])
            taken.append((n, k))
            need -= k
            if k < sizes[n]:
                cuts[n].add(k)
        assert need == 0, "an init container's shortfall is covered by the extra claim"
        takes[i] = taken

    bounds = [sorted({0, sizes[n], *cuts[n]}) for n in range(len(sizes))]
    segments = [tuple(b - a for a, b in zip(bs, bs[1:])) for bs in bounds]
    claims = [PlannedClaim(order[i].name, order[i].count, segments[claim_of[i]]) for i in long_idx]
    if extra:
        claims.append(PlannedClaim(OWNER_EXTRA, extra, segments[extra_claim]))

    uses: dict[tuple[Kind, int], tuple[Use, ...]] = {}
    for i in long_idx:
        uses[(order[i].kind, order[i].index)] = (Use(claim_of[i]),)
    for i in inits:
        refs: list[Use] = []
        for n, k in takes[i]:
            if k == sizes[n]:
                refs.append(Use(n))
            else:
                ends = bounds[n][1:]
                refs.append(Use(n, tuple(s for s, end in enumerate(ends) if end <= k)))
        uses[(order[i].kind, order[i].index)] = tuple(refs)
    return ClaimPlan(tuple(claims), uses)


__all__ = [
    "ClaimPlan", "ContainerCount", "OWNER_EXTRA", "PlannedClaim", "Use", "container_count", "containers",
    "devices_of", "plan_claims", "pod_devices", "pod_devices_by_name",
]
