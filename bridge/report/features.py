"""The report's constants shared by model and checks, and the feature table it reads.

Feature availability by Kubernetes version (which gate is alpha/beta/GA where, with the upstream source of each
row) lives in `bridge.kvalues.features`, shared with the webhook; it is re-exported here for the report's modules.
"""

from __future__ import annotations

from bridge.kvalues.features import FEATURE_BY_KEY as FEATURE_BY_KEY  # re-exported: the shared table
from bridge.kvalues.features import FEATURES as FEATURES
from bridge.kvalues.features import Feature as Feature
from bridge.kvalues.features import Stage as Stage
from bridge.ledger.target import SPLIT_KEY

# Facts fixed by the project (other components use the same values).
BRIDGE_DRIVER = "gpu.dra-bridge.io"
BRIDGE_CLASS = "gpu.dra-bridge.io"
MODE_LABEL = "dra-bridge.io/mode"
TARGET_LABEL = "dra-bridge.io/target"  # a namespace's translation target override (claims | extended)
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

# The scheduler that allocates ResourceClaims; pods naming another one are left untouched by the webhook.
DEFAULT_SCHEDULER = "default-scheduler"

# Namespaces the webhook never mutates.
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})

