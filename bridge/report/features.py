"""DRA feature availability by Kubernetes minor version (kubernetes/kubernetes pkg/features/kube_features.go),
and the report's constants shared by model and checks.

The table says what a *default* cluster of a given version has: a gate that is beta is on by default unless the
table says otherwise. Managed clusters can flip gates; the report cannot see gates through the API, so findings
say "by default" and name the gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from bridge.ledger.target import SPLIT_KEY

# Facts fixed by the project (other components use the same values).
BRIDGE_DRIVER = "gpu.dra-bridge.io"
BRIDGE_CLASS = "gpu.dra-bridge.io"
MODE_LABEL = "dra-bridge.io/mode"
MODES = ("legacy", "shadow", "dra")
SPLIT_LABEL = SPLIT_KEY  # the node daemon's key, from its parser's module
BRIDGE_DS_LABELS = {"app.kubernetes.io/name": "dra-bridge", "app.kubernetes.io/component": "node"}

GPU = "nvidia.com/gpu"
GPU_SHARED_SUFFIX = ".shared"
MIG_PREFIX = "nvidia.com/mig-"
HAMI_RESOURCES = ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores", "nvidia.com/priority")
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
# Quota keys (KEP-5004 "Resource Quota"): the device-count quota on claims of a class, and the requests quota on
# the implicit extended-resource name of the class.
CLASS_DEVICES_QUOTA = "{cls}.deviceclass.resource.k8s.io/devices"
CLASS_IMPLICIT_QUOTA = "requests." + IMPLICIT_PREFIX + "{cls}"
# Allocation results per claim (AllocationResultsMaxSize, k8s.io/api resource/v1/types.go).
MAX_DEVICES_PER_CLAIM = 32

# Namespaces the webhook never mutates.
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})


class Stage(str, Enum):
    ABSENT = "absent"
    ALPHA = "alpha"  # off by default
    BETA_OFF = "beta-off"  # beta, off by default
    BETA = "beta"  # on by default
    GA = "ga"

    @property
    def on_by_default(self) -> bool:
        return self in (Stage.BETA, Stage.GA)


@dataclass(frozen=True)
class Feature:
    key: str
    gate: str
    kep: str
    alpha: tuple[int, int] | None
    beta: tuple[int, int] | None
    ga: tuple[int, int] | None
    why: str  # what the bridge uses it for
    beta_off: bool = False  # beta but off by default

    def stage(self, major: int, minor: int) -> Stage:
        v = (major, minor)
        if self.ga and v >= self.ga:
            return Stage.GA
        if self.beta and v >= self.beta:
            return Stage.BETA_OFF if self.beta_off else Stage.BETA
        if self.alpha and v >= self.alpha:
            return Stage.ALPHA
        return Stage.ABSENT


FEATURES: tuple[Feature, ...] = (
    Feature("dra", "DynamicResourceAllocation", "4381", (1, 26), (1, 32), (1, 34),
            "resource.k8s.io/v1: claims, DeviceClasses, ResourceSlices (the bridge's DRA side)"),
    Feature("extended-resource", "DRAExtendedResource", "5004", (1, 34), (1, 36), (1, 37),
            "the `extended` translation target (nvidia.com/gpu -> deviceclass.resource.kubernetes.io/<class>)"),
    Feature("device-taints", "DRADeviceTaints", "5055", (1, 33), (1, 36), (1, 37),
            "NoSchedule taints on legacy-owned devices instead of omitting them from the slice; health taints"),
    Feature("consumable-capacity", "DRAConsumableCapacity", "5075", (1, 34), (1, 36), None,
            "several claims per GPU (the DRA counterpart of time-slicing replicas)"),
    Feature("extended-resource-capacity", "DRAExtendedResourceCapacity", "6406", (1, 38), None, None,
            "nvidia.com/gpu.shared served by DRA without pod changes"),
    Feature("partitionable-devices", "DRAPartitionableDevices", "4815", (1, 33), (1, 36), None,
            "MIG slices as partitions of a GPU (counter sets)"),
    Feature("prioritized-list", "DRAPrioritizedList", "4816", (1, 33), (1, 34), (1, 36),
            "firstAvailable: fall back between GPU models"),
    Feature("resource-health", "ResourceHealthStatus", "4680", (1, 31), (1, 36), None,
            "device health in pod status for both APIs"),
    Feature("admin-access", "DRAAdminAccess", "5018", (1, 32), (1, 34), (1, 36),
            "monitoring agents (dcgm-exporter) reading allocated devices"),
    Feature("dra-preemption", "-", "5690", (1, 38), None, None,
            "preempting pods that hold DRA devices"),
)

FEATURE_BY_KEY = {f.key: f for f in FEATURES}
