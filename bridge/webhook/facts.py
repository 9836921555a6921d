"""What the translation needs to know about the cluster, and how `auto` picks a target from it.

Two kinds of facts:

* `ClusterFacts` are fixed at start (discovery): the newest served `resource.k8s.io` version and the API server's
  version. With no `resource.k8s.io` served nothing is translated.
* `ServeFacts` change while the webhook runs and are refreshed by the shell (bridge/webhook/serving.py): whether
  the API server keeps a pod's claims (a server-side dry-run create of a pod with a claim, at start and
  periodically: on 1.32-1.34 an API server can serve `resource.k8s.io` with DynamicResourceAllocation off and then
  drops `spec.resourceClaims` silently, kubernetes/kubernetes pkg/api/pod/util.go
  `dropDisabledDynamicResourceAllocationFields`), whether the bridge's DeviceClass exists, and the GPU nodes
  (bridge/webhook/nodes.py). Each snapshot has a `generation`; the review memo keys on it, so an answer given under
  old facts is never reused under new ones.

`auto` picks `extended` only when all of these hold, else `claims`:
* the API server is 1.36 or newer and serves `resource.k8s.io/v1` (DRAExtendedResource is beta and on by default
  from 1.36, GA in 1.37);
* every GPU node's kubelet is 1.36 or newer (`status.nodeInfo.kubeletVersion`): an older kubelet does not read the
  pod's `status.extendedResourceClaimStatus`, so the container would start without its GPUs;
* the DeviceClass exists (its implicit extended-resource name is what the pod asks for).
The gate itself cannot be read from the API; an operator who turned it off on 1.36 sets `--target claims`. A
namespace label can override either way; so can the operator (`--target`).

`ServeFacts()` (the default) vouches for a cluster that keeps claims, knows no nodes and has not looked for the
DeviceClass: what pure callers (tests, tools) get. The running webhook starts from `ServeFacts.unknown()` and only
translates once the dry-run check has answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bridge.kube.api import RESOURCE_GROUP, RESOURCE_VERSIONS, Discovery
from bridge.kvalues.gfd import DEFAULT_DRIVER as DRIVER
from bridge.webhook.nodes import EMPTY, NodeView
from bridge.webhook.policy import Target

DEFAULT_DEVICE_CLASS = DRIVER  # the DeviceClass is named like the driver: gpu.dra-bridge.io
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
LEGACY_RESOURCE = "nvidia.com/gpu"
EXTENDED_MIN = (1, 36)


@dataclass(frozen=True)
class ClusterFacts:
    resource_version: str | None  # newest served resource.k8s.io version, None when DRA is not served
    major: int
    minor: int
    device_class: str = DEFAULT_DEVICE_CLASS
    driver: str = DRIVER

    @property
    def extended_resource_name(self) -> str:
        return IMPLICIT_PREFIX + self.device_class


@dataclass(frozen=True)
class ServeFacts:
    generation: int = 0
    claims_kept: bool | None = True  # the dry-run check: None = not known (not run yet, or it failed)
    claims_problem: str = ""  # why claims are not kept, or why that is not known
    device_class: bool | None = None  # the DeviceClass exists; None = not checked
    nodes: NodeView = field(default=EMPTY)

    @classmethod
    def unknown(cls) -> ServeFacts:
        return cls(0, None, "the API server has not been checked yet", None, EMPTY)


def auto_target(facts: ClusterFacts, serve: ServeFacts) -> tuple[Target, str]:
    """The target `auto` picks, and why (for logs and the translation record)."""
    if facts.resource_version != "v1" or (facts.major, facts.minor) < EXTENDED_MIN:
        return Target.CLAIMS, f"API server {facts.major}.{facts.minor} is older than 1.36 or serves no resource.k8s.io/v1"
    ok, why = serve.nodes.kubelets_at_least(EXTENDED_MIN)
    if not ok:
        return Target.CLAIMS, f"extended needs kubelets 1.36+: {why}"
    if serve.device_class is not True:
        state = "is missing" if serve.device_class is False else "was not found yet"
        return Target.CLAIMS, f"DeviceClass {facts.device_class} {state}"
    return Target.EXTENDED, "API server and GPU-node kubelets are 1.36+ and the DeviceClass exists"


def facts_from_discovery(discovery: Discovery, device_class: str = DEFAULT_DEVICE_CLASS, driver: str = DRIVER) -> ClusterFacts:
    served = next(
        (v for v in RESOURCE_VERSIONS if discovery.serves(f"{RESOURCE_GROUP}/{v}", "resourceclaimtemplates")), None
    )
    return ClusterFacts(served, discovery.major, discovery.minor, device_class, driver)


_TARGETS = {t.value: t for t in Target}
_ASSUMED = ServeFacts()
_last_auto: tuple[ClusterFacts, ServeFacts, Target] | None = None


def effective_target(facts: ClusterFacts, configured: str, namespace_override: Target | None,
                     serve: ServeFacts | None = None) -> Target:
    """`configured` is the operator's --target: auto, claims or extended. The namespace label wins over both.
    `auto` is decided once per (facts, serve) snapshot, not once per review (the snapshot is immutable)."""
    global _last_auto
    if namespace_override is not None:
        return namespace_override
    if configured == "auto":
        serve = serve if serve is not None else _ASSUMED
        last = _last_auto
        if last is not None and last[0] is facts and last[1] is serve:
            return last[2]
        target = auto_target(facts, serve)[0]
        _last_auto = (facts, serve, target)
        return target
    found = _TARGETS.get(configured) if type(configured) is str else None
    return found if found is not None else Target(configured)
