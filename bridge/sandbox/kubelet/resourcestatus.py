"""`allocatedResourcesStatus`: the device health a kubelet with ResourceHealthStatus (beta, on by default from 1.36)
writes into each app container's status (pure: the facts in, the field out).

Written from kubernetes/kubernetes v1.37.2 pkg/kubelet/kubelet_pods.go (`generateAPIPodStatus` calls the container
manager's `UpdateAllocatedResourcesStatus` with the gate on), pkg/kubelet/cm/devicemanager/manager.go
(`UpdateAllocatedResourcesStatus`) and pkg/kubelet/cm/dra/manager.go (`UpdateAllocatedResourcesStatus`,
`buildResourceHealth`) with pkg/kubelet/cm/dra/healthinfo.go (`getHealthInfo`, `clearDriver`):

* Only `containerStatuses` (app containers); init containers and sidecars never get the field.
* Device plugin: one entry per extended resource the container was allocated (`nvidia.com/gpu`), whatever the
  pod's phase, as long as the device manager still has the pod's devices: from admission (the Pending status)
  until it forgets the pod. Each device ID is `Healthy` as its plugin's last ListAndWatch said, else `Unhealthy`
  (a device the plugin no longer lists counts as Healthy).
* DRA: for each `resources.claims` entry of the container, an entry `claim:<name>` (`claim:<name>/<request>` when
  it names a request), while the DRA manager's claim cache has the claim: from the prepare's validation pass to the
  unprepare, so not in the Pending status written before the first prepare nor in the terminal one. A device's
  `resourceID` is the first CDI device ID its plugin returned from NodePrepareResources, else
  `<driver>/<pool>/<device>`; duplicates are dropped. Its health is the last one `NodeWatchResources` reported,
  `Unknown` when the device was never reported, its report is older than the device's
  `health_check_timeout_seconds` (30 s when not set), or the stream ended (the driver's entries are cleared). With
  ResourceHealthStatusMessage (beta, on from 1.36) a non-empty message goes with it.
* Entries without resources are dropped; a container without any gets no field at all. The real kubelet builds the
  entries from Go maps, so their order varies from status to status; here they are sorted by name (and device-plugin
  IDs sorted), which is one of the real orders.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Obj = dict[str, Any]

DEFAULT_HEALTH_TIMEOUT_S = 30.0  # pkg/kubelet/cm/dra/healthinfo.go DefaultHealthTimeout


class ReportedHealth(Protocol):
    """What the DRA manager's health cache holds for one device (`dramanager.DeviceHealthSeen`): the health, the
    message, when it was received (`time.time()`) and the device's own timeout (0: the default)."""

    @property
    def health(self) -> str: ...  # "Healthy" | "Unhealthy" | "Unknown"

    @property
    def message(self) -> str: ...

    @property
    def received_at(self) -> float: ...

    @property
    def timeout_seconds(self) -> int: ...


@dataclass(frozen=True)
class ClaimDevice:
    """One device of a claim in the DRA manager's cache."""

    driver: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...] = ()
    request_names: tuple[str, ...] = ()


def claim_resource_name(ref: Mapping[str, Any]) -> str:
    """The entry's name for a container's `resources.claims` entry."""
    request = ref.get("request")
    return f"claim:{ref['name']}/{request}" if request else f"claim:{ref['name']}"


def actual_claim_name(pod: Obj, ref_name: str) -> str | None:
    """The ResourceClaim a pod-level claim reference names: `status.resourceClaimStatuses` first (a claim made
    from a template), else the spec's `resourceClaimName`; None when neither says yet."""
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if entry.get("name") == ref_name and entry.get("resourceClaimName"):
            return str(entry["resourceClaimName"])
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        if ref.get("name") == ref_name:
            name = ref.get("resourceClaimName")
            return str(name) if name else None
    return None


def device_health(seen: ReportedHealth | None, now: float, *, with_message: bool) -> tuple[str, str]:
    """`getHealthInfo`: (health, message) of a device now."""
    if seen is None:
        return "Unknown", ""
    timeout = seen.timeout_seconds if seen.timeout_seconds > 0 else DEFAULT_HEALTH_TIMEOUT_S
    if now - seen.received_at > timeout:
        return "Unknown", ""
    return seen.health, seen.message if with_message else ""


def claim_resources(devices: Iterable[ClaimDevice], request: str | None,
                    health_of: Callable[[ClaimDevice], tuple[str, str]], *, by_id: bool = False) -> list[Obj]:
    """The `resources` of one `claim:` entry: the claim's devices (those of `request`, when the container names one
    and the device says which requests it serves), each once by resource ID, in the order given (through 1.37:
    drivers by name, each driver's devices as its prepare answered) or, with `by_id` (1.38+,
    `KubeletVersion.sorts_claim_resource_status`), sorted by resource ID in byte order (Go's `cmp.Compare`)."""
    base = request.split("/", 1)[0] if request else None  # a subrequest reports under its request
    out: list[Obj] = []
    seen: set[str] = set()
    for d in devices:
        if base is not None and d.request_names and base not in d.request_names:
            continue
        resource_id = d.cdi_ids[0] if d.cdi_ids else f"{d.driver}/{d.pool}/{d.device}"
        if resource_id in seen:
            continue
        seen.add(resource_id)
        health, message = health_of(d)
        entry: Obj = {"resourceID": resource_id, "health": health}
        if message:
            entry["message"] = message
        out.append(entry)
    if by_id:
        out.sort(key=lambda r: str(r["resourceID"]).encode())
    return out


def container_status(plugin_devices: Mapping[str, Sequence[tuple[str, bool]]],
                     claims: Mapping[str, list[Obj]]) -> list[Obj]:
    """A container's `allocatedResourcesStatus` from its device-plugin devices (resource -> (ID, healthy)) and its
    `claim:` entries; empty when it has none."""
    entries: dict[str, list[Obj]] = {
        resource: [{"resourceID": i, "health": "Healthy" if healthy else "Unhealthy"} for i, healthy in sorted(ids)]
        for resource, ids in plugin_devices.items()}
    entries.update(claims)
    return [{"name": name, "resources": resources} for name, resources in sorted(entries.items()) if resources]
