"""From a ResourceClaim object to what this node must prepare for it. PURE: no I/O, no clock.

The kubelet's request carries only {namespace, name, uid}; the allocation lives in the claim
(kubernetes/kubernetes pkg/kubelet/cm/dra/manager.go). Rules, each a per-claim error naming the cause when broken:

* `metadata.uid` must equal the UID the kubelet sent (else the claim was deleted and re-created under the name);
* `status.allocation` must be set;
* results are kept when `driver` is ours. A result for our driver in a pool other than this node's is refused
  rather than dropped: pools are node-local, so preparing the rest would silently hand the pod fewer GPUs than
  the scheduler allocated;
* at least one result must be ours (the kubelet only calls a driver named in the results);
* device names are `gpu-<index>` (the slice contract) and must exist in this node's inventory.

Before any of that, the kubelet's {namespace, name, uid} itself is checked (`ref_problem`): the namespace must be a
DNS-1123 label and the name a DNS-1123 subdomain, as the API server validates them for every ResourceClaim
(kubernetes/kubernetes pkg/apis/resource/validation/validation.go, `ValidateResourceClaim` through
`ValidateObjectMeta`), and the UID must be set. Nothing else can name a claim, so a ref that breaks these rules is
answered with its own error without asking the API: an empty namespace would otherwise make the client refuse
the request for the whole call, and a `/` or `..` in a name would change the URL that is read.

`request_names` (pkg/kubelet/cm/dra/manager.go): the kubelet compares them literally with the containers'
`resources.claims[].request`, so we return BASE request names (`req/sub` -> `req`). An empty list means "this
device serves every request of the claim"; we return it only when that is literally true: the device's base
requests cover every request named in `spec.devices.requests`. Otherwise the list names the requests. A device
that appears in several results (consumable capacity) is one entry with all its request names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bridge.inventory.model import GpuDevice

Obj = dict[str, Any]


class ClaimError(Exception):
    """This claim cannot be prepared here; the message goes into the claim's `error` in the response."""


class ClaimGone(ClaimError):
    """The claim does not exist in the API (a GET answered NotFound)."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"


@dataclass(frozen=True)
class AllocatedDevice:
    device: str  # slice device name, "gpu-3"
    pool: str
    request_names: tuple[str, ...]  # base names; () = serves all requests
    admin_access: bool = False


@dataclass(frozen=True)
class ClaimAllocation:
    ref: ClaimRef
    devices: tuple[AllocatedDevice, ...]

    @property
    def admin_access(self) -> bool:
        return all(d.admin_access for d in self.devices)


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MAX_UID = 128  # API server UIDs are 36-character UUIDs; anything far longer is not one


def ref_problem(ref: ClaimRef) -> str | None:
    """Why the kubelet's claim reference cannot name a ResourceClaim (the per-claim error), or None when it can."""
    if not ref.uid:
        return f"the request names ResourceClaim {ref.namespace!r}/{ref.name!r} without a UID"
    if len(ref.uid) > _MAX_UID or not ref.uid.isprintable():
        return f"the request names a ResourceClaim with an invalid UID {ref.uid[:_MAX_UID]!r}"
    if not ref.namespace:
        return f"the request names ResourceClaim {ref.name!r} (uid {ref.uid}) with an empty namespace"
    if len(ref.namespace) > 63 or not _DNS1123_LABEL.fullmatch(ref.namespace):
        return (f"the request names ResourceClaim {ref.name!r} (uid {ref.uid}) in namespace {ref.namespace[:80]!r}, "
                "which is not a valid namespace name (a DNS-1123 label)")
    if not ref.name:
        return f"the request names a ResourceClaim in namespace {ref.namespace} (uid {ref.uid}) without a name"
    if len(ref.name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(ref.name):
        return (f"the request names ResourceClaim {ref.name[:80]!r} (uid {ref.uid}) in namespace {ref.namespace}: "
                "not a valid ResourceClaim name (a DNS-1123 subdomain)")
    return None


def base_request(name: str) -> str:
    """`req/sub` -> `req` (the helper's `resourceclaim.BaseRequestRef`)."""
    return name.split("/", 1)[0]


def _spec_requests(claim: Obj) -> set[str]:
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    return {r["name"] for r in requests if isinstance(r, dict) and r.get("name")}


def allocation_for(claim: Obj, ref: ClaimRef, driver: str, pool: str, devices: Mapping[str, GpuDevice]) -> ClaimAllocation:
    """What to prepare for `claim` on this node. `devices` maps slice device name -> GPU. Raises ClaimError."""
    meta = claim.get("metadata") or {}
    if meta.get("uid") != ref.uid:
        raise ClaimError(
            f"ResourceClaim {ref.namespace}/{ref.name} has UID {meta.get('uid')!r}, the kubelet asked for "
            f"{ref.uid!r}: the claim was deleted and re-created"
        )
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name} is not allocated (no status.allocation)")
    results = (allocation.get("devices") or {}).get("results") or []
    ours = [r for r in results if r.get("driver") == driver]
    if not ours:
        others = sorted({str(r.get("driver")) for r in results})
        raise ClaimError(
            f"ResourceClaim {ref.namespace}/{ref.name} has no device allocated by driver {driver} "
            f"(allocated drivers: {', '.join(others) or 'none'})"
        )
    merged: dict[str, list[str]] = {}
    admin: dict[str, bool] = {}
    for result in ours:
        name, result_pool = str(result.get("device", "")), str(result.get("pool", ""))
        if result_pool != pool:
            raise ClaimError(
                f"device {name} of ResourceClaim {ref.namespace}/{ref.name} is allocated from pool {result_pool!r}, "
                f"not from this node's pool {pool!r}"
            )
        if name not in devices:
            raise ClaimError(f"device {name} of ResourceClaim {ref.namespace}/{ref.name} does not exist on node {pool}")
        req = base_request(str(result.get("request", "")))
        names = merged.setdefault(name, [])
        if req and req not in names:
            names.append(req)
        admin[name] = admin.get(name, True) and bool(result.get("adminAccess"))
    all_requests = {base_request(r) for r in _spec_requests(claim)}
    allocated = []
    for name, reqs in merged.items():
        serves_all = bool(all_requests) and set(reqs) >= all_requests
        allocated.append(AllocatedDevice(name, pool, () if serves_all else tuple(reqs), admin[name]))
    return ClaimAllocation(ref, tuple(allocated))
