"""`KubeletVersion`: which kubelet release the simulator plays, and the behaviours that differ between releases.

Only what changes the contract a node daemon sees is modelled here (each rule cites the upstream change):

* `per_instance_device_plugin_clients` (1.37+): the device manager keeps one client per plugin *socket* for a
  resource, so the end of an old instance's ListAndWatch stream disconnects only that instance. Through 1.36 the
  handler keeps one client per *resource name* (kubernetes/kubernetes
  pkg/kubelet/cm/devicemanager/plugin/v1beta1/handler.go @f449697: `clients map[string]Client`, `getClient(name)`),
  so the old stream ending disconnects whichever client is registered now: after a surge rollout, the new one
  (issue #121994, regression from PR #109016; fixed by PR #135437, first released in 1.37).
* `resource_health_status` (1.36+): the ResourceHealthStatus gate (KEP-4680: alpha 1.31, beta on by default in
  1.36; kubernetes/kubernetes pkg/kubelet/cm/container_manager_linux.go forwards the DRA manager's health updates
  to the sync loop only with it on): a health change of a device that a claim in the DRA manager's cache uses makes
  the kubelet sync that claim's pods at once (pkg/kubelet/cm/dra/manager.go `HandleWatchResourcesStream`,
  pkg/kubelet/kubelet.go `syncLoopIteration`: `HandlePodSyncs`), as does a device plugin's health change for the
  pods holding the device (devicemanager/manager.go `genericDeviceUpdateCallback`); app containers' statuses carry
  `allocatedResourcesStatus` (kubelet_pods.go `generateAPIPodStatus`), with the health messages of
  ResourceHealthStatusMessage (beta, on from 1.36).
* `dra_extended_resource` (1.36+): the DRAExtendedResource gate (alpha 1.34 off by default, beta on in 1.36, GA in
  1.37; kubernetes/kubernetes pkg/features/kube_features.go): the kubelet prepares the claim named in
  `pod.status.extendedResourceClaimStatus` and admission ignores extended resources that DRA backs
  (pkg/kubelet/lifecycle/predicate.go `removeMissingExtendedResources`).
* `validates_dra_registration` (1.38+): the DRA plugin manager checks a plugin's driver name (as a CSI driver name)
  and its endpoint (absolute, < 108 bytes, a plain path for gRPC's `unix:` URL) before its services, in both
  `ValidatePlugin` and `RegisterPlugin` (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go `validateDriverName`,
  `validateEndpoint`, new in v1.38.0-beta.0; 1.37.2 checks the services only).
* `sorts_claim_resource_status` (1.38+): `allocatedResourcesStatus` lists each claim's devices sorted by
  `resourceID` (pkg/kubelet/cm/dra/manager.go `UpdateAllocatedResourcesStatus`, v1.38.0-beta.0: `slices.SortFunc`
  on ResourceID, then the entries by name); 1.37.2 keeps the order the drivers' prepare answers gave.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SUPPORTED_MINORS = range(32, 39)  # 1.32 .. 1.38, the releases the API emulator's profiles cover
DEFAULT_VERSION = "1.34"

_VERSION = re.compile(r"^v?1\.(\d+)(?:\.(\d+)(?:-[0-9A-Za-z.]+)?)?$")  # a pre-release (v1.38.0-beta.0) plays its minor


class VersionError(ValueError):
    pass


@dataclass(frozen=True)
class KubeletVersion:
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> KubeletVersion:
        m = _VERSION.match(text.strip())
        if not m:
            raise VersionError(f"kubelet version {text!r} is not MAJOR.MINOR[.PATCH] (e.g. 1.36 or v1.36.2)")
        minor, patch = int(m.group(1)), int(m.group(2) or 0)
        if minor not in SUPPORTED_MINORS:
            raise VersionError(f"kubelet version {text!r} is not simulated: supported are 1.{SUPPORTED_MINORS.start}"
                               f" to 1.{SUPPORTED_MINORS.stop - 1}")
        return cls(minor, patch)

    @property
    def git_version(self) -> str:
        return f"v1.{self.minor}.{self.patch}"

    @property
    def validates_dra_registration(self) -> bool:
        return self.minor >= 38

    @property
    def sorts_claim_resource_status(self) -> bool:
        return self.minor >= 38

    @property
    def per_instance_device_plugin_clients(self) -> bool:
        return self.minor >= 37

    @property
    def dra_extended_resource(self) -> bool:
        return self.minor >= 36

    @property
    def resource_health_status(self) -> bool:
        return self.minor >= 36
