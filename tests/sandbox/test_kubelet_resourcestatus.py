"""The kubelet's `allocatedResourcesStatus` rules (pkg/kubelet/cm/devicemanager and cm/dra
`UpdateAllocatedResourcesStatus`, cm/dra/healthinfo.go), on their surprising cases: a DRA device's health goes
Unknown when its report is older than its timeout, a device is named by the first CDI ID the plugin answered (else
driver/pool/device), a container that names a request reports only that request's devices."""

from __future__ import annotations

from dataclasses import dataclass

from bridge.sandbox.kubelet.resourcestatus import (
    ClaimDevice,
    actual_claim_name,
    claim_resource_name,
    claim_resources,
    container_status,
    device_health,
)


@dataclass(frozen=True)
class Seen:
    health: str
    message: str = ""
    received_at: float = 100.0
    timeout_seconds: int = 0


def test_a_dra_devices_health_is_unknown_when_never_reported_or_older_than_its_timeout() -> None:
    assert device_health(None, 100.0, with_message=True) == ("Unknown", "")
    assert device_health(Seen("Unhealthy", "XID 79"), 129.0, with_message=True) == ("Unhealthy", "XID 79")
    assert device_health(Seen("Unhealthy", "XID 79"), 131.0, with_message=True) == ("Unknown", "")  # 30 s default
    assert device_health(Seen("Healthy", timeout_seconds=60), 150.0, with_message=True) == ("Healthy", "")
    assert device_health(Seen("Unhealthy", "XID 79"), 101.0, with_message=False) == ("Unhealthy", "")


def test_a_claim_device_is_named_by_its_first_cdi_id_else_by_driver_pool_and_device_and_listed_once() -> None:
    devices = [ClaimDevice("gpu.dra-bridge.io", "node-a", "gpu-0", ("k8s.gpu.dra-bridge.io/claim=u-gpu-0", "x")),
               ClaimDevice("gpu.dra-bridge.io", "node-a", "gpu-0", ("k8s.gpu.dra-bridge.io/claim=u-gpu-0",)),
               ClaimDevice("gpu.dra-bridge.io", "node-a", "gpu-1")]
    assert claim_resources(devices, None, lambda d: ("Healthy", "")) == [
        {"resourceID": "k8s.gpu.dra-bridge.io/claim=u-gpu-0", "health": "Healthy"},
        {"resourceID": "gpu.dra-bridge.io/node-a/gpu-1", "health": "Healthy"}]


def test_from_1_38_a_claims_devices_are_listed_by_resource_id_and_before_in_the_order_prepare_gave() -> None:
    """pkg/kubelet/cm/dra/manager.go `UpdateAllocatedResourcesStatus`: v1.38.0-beta.0 sorts by ResourceID."""
    devices = [ClaimDevice("d", "p", "gpu-5"), ClaimDevice("d", "p", "gpu-10"), ClaimDevice("d", "p", "gpu-1")]
    as_prepared = [r["resourceID"] for r in claim_resources(devices, None, lambda d: ("Healthy", ""))]
    assert as_prepared == ["d/p/gpu-5", "d/p/gpu-10", "d/p/gpu-1"]
    by_id = [r["resourceID"] for r in claim_resources(devices, None, lambda d: ("Healthy", ""), by_id=True)]
    assert by_id == ["d/p/gpu-1", "d/p/gpu-10", "d/p/gpu-5"]  # strings, not numbers


def test_a_container_naming_a_request_reports_only_that_requests_devices_under_claim_name_slash_request() -> None:
    devices = [ClaimDevice("d", "p", "gpu-0", request_names=("big",)), ClaimDevice("d", "p", "gpu-1",
                                                                                  request_names=("small",)),
               ClaimDevice("d", "p", "gpu-2")]  # no request names (not prepared yet): never filtered out
    health = claim_resources(devices, "small/mig", lambda d: ("Unknown", ""))  # a subrequest: its request's
    assert [r["resourceID"] for r in health] == ["d/p/gpu-1", "d/p/gpu-2"]
    assert claim_resource_name({"name": "gpus", "request": "small"}) == "claim:gpus/small"
    assert claim_resource_name({"name": "gpus"}) == "claim:gpus"


def test_the_claim_a_pod_reference_names_comes_from_the_pods_status_for_a_template_claim() -> None:
    pod = {"spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "shared"},
                                       {"name": "b", "resourceClaimTemplateName": "one-gpu"}]},
           "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "pod-b-x7k2p"}]}}
    assert actual_claim_name(pod, "a") == "shared"
    assert actual_claim_name(pod, "b") == "pod-b-x7k2p"
    assert actual_claim_name({"spec": pod["spec"]}, "b") is None  # the claim is not made yet
    assert actual_claim_name(pod, "c") is None


def test_entries_are_sorted_by_name_and_empty_ones_dropped() -> None:
    entries = container_status({"nvidia.com/gpu": [("GPU-b", True), ("GPU-a", False)]},
                               {"claim:gpu": [{"resourceID": "x", "health": "Healthy"}], "claim:none": []})
    assert entries == [
        {"name": "claim:gpu", "resources": [{"resourceID": "x", "health": "Healthy"}]},
        {"name": "nvidia.com/gpu", "resources": [{"resourceID": "GPU-a", "health": "Unhealthy"},
                                                 {"resourceID": "GPU-b", "health": "Healthy"}]}]
    assert container_status({}, {}) == []
