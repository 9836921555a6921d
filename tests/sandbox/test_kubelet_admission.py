"""The kubelet simulator's admission predicate on extended resources, case by case (pure: pod and Node dicts in,
the verdict out), as kubernetes/kubernetes pkg/kubelet/lifecycle/predicate.go `removeMissingExtendedResources`
and the noderesources fit check decide it."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.sandbox.kubelet.admission import fits

IMPLICIT = "deviceclass.resource.kubernetes.io/gpu.dra-bridge.io"
NODE = {"metadata": {"name": "n1", "labels": {}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "0"}}}


def pod(resource: str, *, mapped_for: str | None = None, container: str = "main") -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ns"},
                           "spec": {"containers": [{"name": container, "resources": {"limits": {resource: "1"}}}]},
                           "status": {}}
    if mapped_for is not None:
        obj["status"]["extendedResourceClaimStatus"] = {
            "resourceClaimName": "p-extended-resources-x",
            "requestMappings": [{"containerName": mapped_for, "resourceName": resource,
                                 "requestName": "container-0-request-0"}]}
    return obj


@pytest.mark.parametrize("gate", [True, False])
def test_an_extended_resource_no_node_advertises_is_a_cluster_level_resource_and_is_admitted(gate: bool) -> None:
    assert fits(pod("example.com/licence"), NODE, [], {}, dra_extended=gate).admit


def test_the_implicit_class_name_mapped_for_the_container_is_left_to_dra_and_admitted() -> None:
    assert fits(pod(IMPLICIT, mapped_for="main"), NODE, [], {}, dra_extended=True).admit


@pytest.mark.parametrize("mapped_for", [None, "sidecar"])
def test_the_implicit_class_name_without_a_mapping_for_its_container_is_out_of_that_resource(
        mapped_for: str | None) -> None:
    verdict = fits(pod(IMPLICIT, mapped_for=mapped_for), NODE, [], {}, dra_extended=True)
    assert (verdict.admit, verdict.reason) == (False, f"OutOf{IMPLICIT}")
    assert verdict.message == f"Node didn't have enough resource: {IMPLICIT}, requested: 1, used: 0, capacity: 0"


def test_with_the_gate_off_a_mapping_is_not_read_and_the_implicit_name_is_rejected() -> None:
    verdict = fits(pod(IMPLICIT, mapped_for="main"), NODE, [], {}, dra_extended=False)
    assert (verdict.admit, verdict.reason) == (False, f"OutOf{IMPLICIT}")


def test_an_advertised_extended_resource_mapped_to_dra_is_not_counted_against_the_device_plugin() -> None:
    # The DeviceClass names nvidia.com/gpu as its extendedResourceName: the node lists it (0 from the plugin).
    assert fits(pod("nvidia.com/gpu", mapped_for="main"), NODE, [], {}, dra_extended=True).admit
    refused = fits(pod("nvidia.com/gpu"), NODE, [], {}, dra_extended=True)
    assert (refused.admit, refused.reason) == (False, "OutOfnvidia.com/gpu")
