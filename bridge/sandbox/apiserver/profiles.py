"""What an emulated Kubernetes minor serves and enables: `resource.k8s.io` versions and the DRA feature gates.

    profile = profile_for("1.37")                 # or "1.37.2", "v1.37.0"
    profile.enabled("DRADeviceTaints")            # True
    profile.with_gates({"DRADeviceTaints": False})  # a cluster whose admin turned a gate off

The API emulator (`ApiServer(version=...)`), the scheduler and claim-controller stand-ins and `bridge sandbox
cluster` all take one `KubernetesProfile`, so the server drops the fields a disabled gate guards (as the registry
strategies' `dropDisabledFields` do) and the scheduler allocates with the same features the real kube-scheduler of
that minor would (`structured.Features` built from the gates in
kubernetes/kubernetes pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go `New`).

Sources: the versioned feature-gate table (kubernetes/kubernetes pkg/features/kube_features.go; the gates' alpha /
beta / GA releases as listed in KEPs 4381, 5018, 4816, 4817, 5055, 4815, 5075, 5007, 5004, 5278). A beta gate is on by
default, an alpha gate off, a GA gate on (and locked). `DynamicResourceAllocation` itself was beta and *off by
default* in 1.32/1.33: an emulated 1.32/1.33 is a cluster whose administrator enabled it (otherwise nothing of
`resource.k8s.io` would be served and the bridge's DRA half would have nothing to talk to). It can be turned off
(`with_gates({"DynamicResourceAllocation": False})`) through 1.34, where it went GA still switchable; from 1.35 it is
locked to its default (kube_features.go: `{Version: 1.35, Default: true, PreRelease: GA, LockToDefault: true}`),
and `with_gates` refuses to change a locked gate as the real component refuses to start. With the gate off the
`resource.k8s.io` versions stay served here (an administrator's `--runtime-config`), which is the surprising
cluster: discovery says DRA, and the server drops every pod's claims (strategy.py).

Served `resource.k8s.io` versions, by default, as a real kube-apiserver serves them: every beta version of the group
is in `betaAPIGroupVersionsDisabledByDefault` in every release from 1.32 to 1.37 (kubernetes/kubernetes
pkg/controlplane/instance.go, read at v1.32.0, v1.33.0, v1.34.0, v1.35.4, v1.36.0 and v1.37.2: v1beta1 from 1.32,
v1beta2 from 1.33) and `resource.k8s.io/v1` is in `stableAPIGroupVersionsEnabledByDefault` from 1.34; kube-apiserver
v1.37.2 serves only `resource.k8s.io/v1` (observed by tests/real/test_differential.py). So 1.34-1.37 serve `v1`
alone; a cluster that also serves a beta is one whose administrator asked for it (`--runtime-config=
resource.k8s.io/v1beta2=true`), which `ApiServer(resource_versions=...)` and `with_resource_versions` model. In
1.32/1.33 nothing of the group is served by default; an emulated 1.32 (1.33) is, like its DynamicResourceAllocation
gate above, a cluster whose administrator enabled DRA: it serves v1beta1 (v1beta2 and v1beta1). The alpha v1alpha3
of 1.31-1.33 is not emulated.

1.38 (read at v1.38.0-beta.0; the whole real tier passes on it): `DynamicResourceAllocation` is gone from the gate
table (DRA is always on; naming the gate stops a component from starting), DRADeviceTaints, DRADeviceTaintRules,
DRAPartitionableDevices and DRADeviceBindingConditions are locked on, and `resource.k8s.io/v1beta1` cannot be served
any more (`with_resource_versions` leaves it out, as kube-apiserver does).

Messages that changed between minors are recorded here too, so stand-ins do not hard-code one release:
`detailed_taint_reason` — kube-scheduler's TaintToleration Filter reason was `node(s) had untolerated taint {k: v}`
(pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go as read for 1.30-1.33) and is
`node(s) had untolerated taint(s)` in newer releases (observed in 1.34+ events; the exact release of the change is
inferred, not read). `device_taint_effect_none` — the `None` device-taint effect
(pkg/apis/resource/validation/validation.go `validDeviceTaintEffects`) arrived with DeviceTaintRules in 1.35.
`unresolvable_fit` — from 1.34 NodeResourcesFit marks a node UnschedulableAndUnresolvable when a request exceeds the
node's whole allocatable, not only what is free (`InsufficientResource.Unresolvable`,
pkg/scheduler/framework/plugins/noderesources/fit.go, read at v1.33.0 (absent), v1.34.0, v1.35.4, v1.36.0, v1.37.2),
so preemption reports "Preemption is not helpful for scheduling" for it (seen on kube-scheduler v1.37.2 for a node
whose only legacy GPU was unhealthy: allocatable `nvidia.com/gpu` 0). `dra_postfilter_reasons` — through 1.36 the
DynamicResources PostFilter says "no new claims to deallocate" or "still not schedulable" when it does nothing; from
1.37 it returns Unschedulable without a reason (dynamicresources.go `PostFilter`, read at v1.32.0, v1.35.4,
v1.36.0 and v1.37.2; seen on kube-scheduler v1.37.2: "0/1 nodes are available: 1 cannot allocate all claims.
preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."). `preemption_placement_message`
— from 1.37 a successful DefaultPreemption says "preemption: found a potential placement for pod on node N,
preempting K victims" (framework/preemption/preemption.go `Preempt`, read at v1.32.0, v1.33.0, v1.34.0, v1.35.4,
v1.36.0 (Success without a message) and v1.37.2; seen on kube-scheduler v1.37.2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

SUPPORTED_MINORS = (32, 33, 34, 35, 36, 37, 38)

# gate -> (first minor where it exists, first minor where it is on by default, or None if never on by default yet).
# Beta-on minors are where the gate went beta (on by default) or GA.
_GATES: dict[str, tuple[int, int | None]] = {
    "DynamicResourceAllocation": (26, 32),  # see the module docstring: enabled in every emulated minor
    "DRAAdminAccess": (32, 34),
    "DRAResourceClaimDeviceStatus": (32, 33),
    "DRAPrioritizedList": (33, 34),
    "DRADeviceTaints": (33, 36),
    "DRAPartitionableDevices": (33, 36),
    "DRAConsumableCapacity": (34, 36),
    "DRADeviceBindingConditions": (34, 36),
    "DRAExtendedResource": (34, 36),
    "DRADeviceTaintRules": (35, 37),  # beta in 1.36 but off by default, GA in 1.37
    # KEP-5278: the scheduler writes status.nominatedNodeName at the start of a binding cycle that waits (Permit) or
    # has PreBind work, and the API server clears it when the pod is bound (pkg/registry/core/pod/storage/storage.go);
    # both alpha in 1.34, beta and on by default in 1.35 (kubernetes/kubernetes PR #135103).
    "NominatedNodeNameForExpectation": (34, 35),
    "ClearingNominatedNodeNameAfterBinding": (34, 35),
}
KNOWN_GATES = frozenset(_GATES)
# gate -> first minor where it is GA and locked to its default (`LockToDefault: true`): it can no longer be turned off
# (kube_features.go, read at v1.35.4, v1.36.0, v1.37.2 and v1.38.0-beta.0).
_LOCKED: dict[str, int] = {
    "DynamicResourceAllocation": 35,
    "DRAAdminAccess": 36,
    "DRAPrioritizedList": 37,
    "DRAResourceClaimDeviceStatus": 37,
    "DRAExtendedResource": 37,
    "DRADeviceBindingConditions": 38,
    "DRADeviceTaints": 38,
    "DRADeviceTaintRules": 38,
    "DRAPartitionableDevices": 38,
}
# From 1.35 a component checks the gates' dependencies once they are set, and does not start when an enabled gate
# depends on a disabled one ("X is enabled, but depends on features that are disabled: [Y]": k8s.io/component-base
# featuregate/feature_gate.go, the dependency table in kube_features.go, read at v1.35.4, v1.36.0, v1.37.2 and
# v1.38.0-beta.0; v1.34.0 has none). Only the edges between gates modelled here; through 1.37 every DRA gate also
# depends on DynamicResourceAllocation, which is locked on from 1.35.
_DEPENDENCIES_FROM = 35
_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "DRADeviceTaintRules": ("DRADeviceTaints",),
    "DRADeviceBindingConditions": ("DRAResourceClaimDeviceStatus",),
}
# gate -> first minor that no longer has it: what it guarded is always on, and naming it stops a component from
# starting (`unrecognized feature gate`). DynamicResourceAllocation is gone from kube_features.go in v1.38.0-beta.0.
_REMOVED: dict[str, int] = {"DynamicResourceAllocation": 38}


# resource.k8s.io version -> first minor that serves it no longer, whatever --runtime-config says
_REMOVED_VERSIONS = {"v1beta1": 38, "v1beta2": 39}


def _served(minor: int) -> tuple[str, ...]:
    """The resource.k8s.io versions served by default (see the module docstring)."""
    if minor >= 34:
        return ("v1",)
    if minor == 33:
        return ("v1beta2", "v1beta1")
    return ("v1beta1",)


def parse_minor(version: str) -> int:
    """"1.37", "1.37.2", "v1.37.0" -> 37. Raises ValueError for anything else or an unsupported minor."""
    m = re.fullmatch(r"v?1\.(\d+)(?:\.\d+(?:-[0-9A-Za-z.]+)?)?", version.strip())
    if not m:
        raise ValueError(f"Kubernetes version must look like 1.MINOR or 1.MINOR.PATCH (e.g. 1.37 or 1.37.2), got {version!r}")
    minor = int(m.group(1))
    if minor not in SUPPORTED_MINORS:
        raise ValueError(
            f"Kubernetes 1.{minor} is not emulated; supported: "
            + ", ".join(f"1.{v}" for v in SUPPORTED_MINORS)
        )
    return minor


@dataclass(frozen=True)
class KubernetesProfile:
    minor: int
    resource_versions: tuple[str, ...]
    gates: Mapping[str, bool] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def version(self) -> str:
        """The minor as "1.37" (callers add a patch level where a full version is needed)."""
        return f"1.{self.minor}"

    def enabled(self, gate: str) -> bool:
        """Whether the gate is on; a gate that does not exist yet in this minor is off. Unknown names raise
        KeyError (a typo must not read as "off")."""
        if gate not in _GATES:
            raise KeyError(f"unknown feature gate {gate!r}; known: {', '.join(sorted(_GATES))}")
        return self.gates.get(gate, False)

    def with_gates(self, overrides: Mapping[str, bool] | None) -> KubernetesProfile:
        """A copy with some gates forced (like `--feature-gates` on every component). Unknown gates and gates that do
        not exist yet in this minor are rejected: a real component refuses to start with them."""
        if not overrides:
            return self
        gates = dict(self.gates)
        for name, value in overrides.items():
            if name not in _GATES:
                raise ValueError(f"unknown feature gate {name!r}; known: {', '.join(sorted(_GATES))}")
            if _GATES[name][0] > self.minor:
                raise ValueError(f"feature gate {name!r} does not exist in Kubernetes 1.{self.minor} "
                                 f"(added in 1.{_GATES[name][0]})")
            removed = _REMOVED.get(name)
            if removed is not None and self.minor >= removed:
                raise ValueError(f"feature gate {name!r} was removed in Kubernetes 1.{removed} (what it guarded is "
                                 f"always on): a component given it does not start")
            locked = _LOCKED.get(name)
            if locked is not None and self.minor >= locked and bool(value) != gates.get(name, False):
                raise ValueError(f"feature gate {name!r} is locked to its default in Kubernetes 1.{locked} and later")
            gates[name] = bool(value)
        if self.minor >= _DEPENDENCIES_FROM:
            for gate, needs in _DEPENDENCIES.items():
                off = [dep for dep in needs if not gates.get(dep, False)]
                if gates.get(gate, False) and off:
                    raise ValueError(f"{gate} is enabled, but depends on features that are disabled: "
                                     f"[{' '.join(off)}] (a component refuses to start)")
        return replace(self, gates=MappingProxyType(gates))

    def with_resource_versions(self, versions: tuple[str, ...] | None) -> KubernetesProfile:
        """A copy serving these resource.k8s.io versions (an administrator's `--runtime-config`); None keeps the
        release's default. A version removed in this minor is left out, as kube-apiserver leaves it out: it accepts
        `--runtime-config=resource.k8s.io/v1beta1=true` from 1.38 on and serves nothing of it (k8s.io/api
        resource/v1beta1 `APILifecycleRemoved` 1.38; k8s.io/apiserver pkg/server/deleted_kinds.go
        `ShouldServeForVersion`; v1beta2 goes in 1.39)."""
        if versions is None:
            return self
        return replace(self, resource_versions=tuple(v for v in versions if _REMOVED_VERSIONS.get(v, 99) > self.minor))

    # -- messages that differ between minors (see the module docstring) ------------------------------------------
    @property
    def detailed_taint_reason(self) -> bool:
        return self.minor <= 33

    @property
    def unresolvable_fit(self) -> bool:
        return self.minor >= 34

    @property
    def dra_postfilter_reasons(self) -> bool:
        return self.minor <= 36

    @property
    def preemption_placement_message(self) -> bool:
        return self.minor >= 37

    @property
    def slice_pool_field_selector(self) -> bool:
        """ResourceSlices are selectable by `spec.pool.name` from 1.37 (registry.py)."""
        return self.minor >= 37

    @property
    def semver_18_digits(self) -> bool:
        """Version attributes' numbers have at most 18 digits, and the message says so, from 1.38
        (pkg/apis/resource/validation/validation.go `numericIdentifier`, read at v1.37.2 and v1.38.0-beta.0)."""
        return self.minor >= 38

    @property
    def qualified_names_one_slash(self) -> bool:
        """An attribute or capacity name with two slashes is refused from 1.38 ("must not contain more than one
        slash"); through 1.37 it is stored (validation.go `validateQualifiedName`, names.qualified_device_name)."""
        return self.minor >= 38

    @property
    def device_taint_effects(self) -> tuple[str, ...]:
        return ("NoExecute", "NoSchedule", "None") if self.minor >= 35 else ("NoExecute", "NoSchedule")


def profile_for(version: str) -> KubernetesProfile:
    minor = parse_minor(version)
    gates = {
        name: (beta is not None and minor >= beta)
        for name, (alpha, beta) in _GATES.items()
        if alpha <= minor
    }
    gates["DynamicResourceAllocation"] = True
    return KubernetesProfile(minor, _served(minor), MappingProxyType(gates))


__all__ = ["KNOWN_GATES", "KubernetesProfile", "SUPPORTED_MINORS", "parse_minor", "profile_for"]
