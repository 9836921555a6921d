"""What the translation needs to know about the cluster, and how `auto` picks a target from it.

`auto` picks `extended` when the cluster serves `resource.k8s.io/v1` and is 1.36 or newer (DRAExtendedResource is
beta and on by default from 1.36, GA in 1.37): the pod keeps extended-resource syntax under the DeviceClass's
implicit name and the scheduler creates the claim. Otherwise `claims`: the webhook writes a ResourceClaimTemplate
at the newest `resource.k8s.io` version served. A namespace label can override either way; so can the operator
(`--target`). The gate itself cannot be read from the API; an operator who turned it off on 1.36 sets
`--target claims`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.kube.api import RESOURCE_GROUP, RESOURCE_VERSIONS, Discovery
from bridge.webhook.cel import DRIVER
from bridge.webhook.policy import Target

DEFAULT_DEVICE_CLASS = DRIVER  # the DeviceClass is named like the driver: gpu.dra-bridge.io
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
LEGACY_RESOURCE = "nvidia.com/gpu"


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

    def auto_target(self) -> Target:
        if self.resource_version == "v1" and (self.major, self.minor) >= (1, 36):
            return Target.EXTENDED
        return Target.CLAIMS


def facts_from_discovery(discovery: Discovery, device_class: str = DEFAULT_DEVICE_CLASS, driver: str = DRIVER) -> ClusterFacts:
    served = next(
        (v for v in RESOURCE_VERSIONS if discovery.serves(f"{RESOURCE_GROUP}/{v}", "resourceclaimtemplates")), None
    )
    return ClusterFacts(served, discovery.major, discovery.minor, device_class, driver)


def effective_target(facts: ClusterFacts, configured: str, namespace_override: Target | None) -> Target:
    """`configured` is the operator's --target: auto, claims or extended. The namespace label wins over both."""
    if namespace_override is not None:
        return namespace_override
    if configured == "auto":
        return facts.auto_target()
    return Target(configured)
