"""Kubernetes feature stages: the one table every "alpha/beta/GA in 1.xx" the bridge says comes from.

Each row names the feature gate, its KEP, the release of each stage and the upstream source the row was checked
against. Messages never write a stage or a release by hand: they call `Feature.history()` / `Feature.claim()`,
and `tests/report/test_feature_claims.py` checks every finding message against this table.

How to read the sources:

* `kubernetes/kubernetes pkg/features/kube_features.go` holds each gate's `VersionedSpecs`: one entry per release
  where the gate changed (`{Version: "1.36", Default: true, PreRelease: Beta}`). A stage listed there shipped.
* A KEP's `kep.yaml` (`kubernetes/enhancements keps/<sig>/<number>-<name>/kep.yaml`) holds the *planned*
  milestones. A row whose next stage is only in its kep.yaml is marked `planned`: messages say "targets beta in
  1.38", never "beta in 1.38".
* A KEP with `status: provisional` is not accepted yet: it has no gate in Kubernetes (`gate` is None) and no stage;
  messages say so instead of naming a release.

`stage(major, minor)` says what a *default* cluster of that version has: beta gates are on by default unless the
row says `beta_off` (DynamicResourceAllocation was beta but off by default in 1.32-1.33). Managed clusters can flip
gates and the API does not show them, so findings say "by default" and name the gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

Version = tuple[int, int]


class Stage(str, Enum):
    ABSENT = "absent"
    ALPHA = "alpha"  # off by default
    BETA_OFF = "beta-off"  # beta, off by default
    BETA = "beta"  # on by default
    GA = "ga"

    @property
    def on_by_default(self) -> bool:
        return self in (Stage.BETA, Stage.GA)

    @property
    def label(self) -> str:
        return {Stage.ABSENT: "not available", Stage.ALPHA: "alpha (off by default)",
                Stage.BETA_OFF: "beta (off by default)", Stage.BETA: "beta (on by default)", Stage.GA: "GA"}[self]


def _v(v: Version) -> str:
    return f"{v[0]}.{v[1]}"


@dataclass(frozen=True)
class Feature:
    key: str
    gate: str | None  # None: the KEP has no feature gate in Kubernetes yet
    kep: str
    alpha: Version | None
    beta: Version | None
    ga: Version | None
    why: str  # what the bridge uses it for
    source: str  # where the stages above were checked (repository and file)
    beta_off: bool = False  # beta but off by default
    planned: bool = False  # the last stage listed is a kep.yaml target, not a release
    status: str = ""  # the KEP's status when it is not implemented yet ("provisional", "implementable")

    @property
    def name(self) -> str:
        """The gate, or the KEP when there is no gate yet."""
        return self.gate or f"KEP-{self.kep}"

    @property
    def title(self) -> str:
        """"DRAExtendedResource (KEP-5004)", or "KEP-6406 (provisional, no feature gate yet)"."""
        if self.gate:
            return f"{self.gate} (KEP-{self.kep})"
        return f"KEP-{self.kep} ({self.status + ', ' if self.status else ''}no feature gate yet)"

    def stage(self, major: int, minor: int) -> Stage:
        v = (major, minor)
        if self.ga and v >= self.ga:
            return Stage.GA
        if self.beta and v >= self.beta:
            return Stage.BETA_OFF if self.beta_off else Stage.BETA
        if self.alpha and v >= self.alpha:
            return Stage.ALPHA
        return Stage.ABSENT

    def milestones(self) -> list[tuple[str, Version]]:
        return [(name, v) for name, v in (("alpha", self.alpha), ("beta", self.beta), ("GA", self.ga)) if v]

    def first_on(self) -> Version | None:
        """The first release where the feature is on by default (beta on by default, or GA)."""
        if self.beta and not self.beta_off:
            return self.beta
        return self.ga

    def claim(self, stage: str) -> str:
        """"beta in 1.36" (or "targets beta in 1.38" for a planned stage): one stage of this row, for a message."""
        v = dict(self.milestones()).get(stage)
        if v is None:
            raise KeyError(f"{self.name} has no {stage} stage in the feature table")
        planned = self.planned and (stage, v) == self.milestones()[-1]
        off = " (off by default)" if stage == "beta" and self.beta_off else ""
        return f"{'targets ' if planned else ''}{stage} in {_v(v)}{off}"

    def history(self) -> str:
        """"DRAExtendedResource, KEP-5004: alpha in 1.34, beta in 1.36, GA in 1.37": the whole row for a message."""
        if not self.milestones():
            state = f"{self.status}, " if self.status else ""
            return f"KEP-{self.kep} ({state}no feature gate in Kubernetes yet)"
        stages = ", ".join(self.claim(name) for name, _ in self.milestones())
        return f"{self.name}, KEP-{self.kep}: {stages}"


# The gates' VersionedSpecs: pkg/features/kube_features.go; in the 1.37 sources the scheduler's DRA gates carry the
# same VersionedSpecs in the scheduler's own feature list (checked there for the 1.36/1.37 stages).
_KF = "kubernetes/kubernetes pkg/features/kube_features.go (VersionedSpecs; 1.37 sources: the scheduler's feature list)"

FEATURES: tuple[Feature, ...] = (
    Feature("dra", "DynamicResourceAllocation", "4381", (1, 26), (1, 32), (1, 34),
            "resource.k8s.io/v1: claims, DeviceClasses, ResourceSlices (the bridge's DRA side)",
            f"{_KF}: alpha 1.26, beta 1.32 Default false, GA 1.34", beta_off=True),
    Feature("extended-resource", "DRAExtendedResource", "5004", (1, 34), (1, 36), (1, 37),
            "the `extended` translation target (nvidia.com/gpu -> deviceclass.resource.kubernetes.io/<class>)",
            f"{_KF}: alpha 1.34, beta 1.36, GA 1.37; kubernetes/enhancements "
            "keps/sig-scheduling/5004-dra-extended-resource/kep.yaml"),
    Feature("device-taints", "DRADeviceTaints", "5055", (1, 33), (1, 36), (1, 37),
            "NoSchedule taints on legacy-owned devices instead of omitting them from the slice; health taints",
            f"{_KF}: alpha 1.33, beta 1.36, GA 1.37"),
    Feature("consumable-capacity", "DRAConsumableCapacity", "5075", (1, 34), (1, 36), None,
            "several claims per GPU (the DRA counterpart of time-slicing replicas)",
            f"{_KF}: alpha 1.34, beta 1.36"),
    Feature("extended-resource-capacity", None, "6406", None, None, None,
            "nvidia.com/gpu.shared served by DRA without pod changes",
            "kubernetes/enhancements keps/sig-scheduling/6406-dra-extended-resource-capacity/kep.yaml: status "
            "provisional; the gate it proposes (DRAExtendedResourceCapacity) is not in kube_features.go",
            status="provisional"),
    Feature("partitionable-devices", "DRAPartitionableDevices", "4815", (1, 33), (1, 36), None,
            "MIG slices as partitions of a GPU (counter sets)",
            f"{_KF}: alpha 1.33, beta 1.36"),
    Feature("prioritized-list", "DRAPrioritizedList", "4816", (1, 33), (1, 34), (1, 36),
            "firstAvailable: fall back between GPU models",
            f"{_KF}: alpha 1.33, beta 1.34, GA 1.36"),
    Feature("resource-health", "ResourceHealthStatus", "4680", (1, 31), (1, 36), None,
            "device health in pod status for both APIs",
            f"{_KF}: alpha 1.31; kubernetes/enhancements keps/sig-node/4680-add-resource-health-to-pod-status/"
            "kep.yaml: beta v1.36 (latest-milestone v1.36)"),
    Feature("admin-access", "DRAAdminAccess", "5018", (1, 32), (1, 34), (1, 36),
            "monitoring agents (dcgm-exporter) reading allocated devices",
            f"{_KF}: alpha 1.32, beta 1.34, GA 1.36"),
    Feature("dra-preemption", "DRAPreemption", "5690", None, (1, 38), None,
            "preempting pods that hold DRA devices",
            "kubernetes/enhancements keps/sig-scheduling/5690-dra-preemption/kep.yaml: status implementable, "
            "stage beta, milestone beta v1.38 (a target, not a release)", planned=True, status="implementable"),
)

FEATURE_BY_KEY = {f.key: f for f in FEATURES}


def feature(key: str) -> Feature:
    return FEATURE_BY_KEY[key]
