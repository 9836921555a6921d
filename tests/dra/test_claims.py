"""What a ResourceClaim means for this node: checks with per-claim errors, device mapping, request names."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.dra.claims import ClaimError, ClaimRef, allocation_for, base_request
from bridge.inventory.simulated import devices_from_spec

DRIVER = "gpu.dra-bridge.io"
NODE = "node-a"
DEVICES = {f"gpu-{d.index}": d for d in devices_from_spec("4xH100-80GB", NODE)}
REF = ClaimRef("ns", "claim", "uid-1")


def claim(results: list[dict[str, Any]] | None, *, uid: str = "uid-1", requests: tuple[str, ...] = ("gpu",)) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "claim", "namespace": "ns", "uid": uid},
        "spec": {"devices": {"requests": [{"name": r} for r in requests]}},
        "status": {},
    }
    if results is not None:
        obj["status"]["allocation"] = {"devices": {"results": results}}
    return obj


def result(device: str, request: str = "gpu", driver: str = DRIVER, pool: str = NODE, **extra: Any) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


def test_single_request_claim_maps_its_device_and_serves_all_requests() -> None:
    alloc = allocation_for(claim([result("gpu-3")]), REF, DRIVER, NODE, DEVICES)
    assert [(d.device, d.pool, d.request_names) for d in alloc.devices] == [("gpu-3", NODE, ())]


def test_request_names_are_base_names_when_a_device_serves_only_some_requests() -> None:
    obj = claim([result("gpu-0", "train/h100"), result("gpu-1", "infer")], requests=("train", "infer"))
    alloc = allocation_for(obj, REF, DRIVER, NODE, DEVICES)
    assert {d.device: d.request_names for d in alloc.devices} == {"gpu-0": ("train",), "gpu-1": ("infer",)}
    assert base_request("train/h100") == "train" and base_request("infer") == "infer"


def test_results_of_other_drivers_are_left_to_them() -> None:
    obj = claim([result("gpu-1"), result("nic-0", driver="net.example.com", pool="rack-1")])
    assert [d.device for d in allocation_for(obj, REF, DRIVER, NODE, DEVICES).devices] == ["gpu-1"]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (claim([result("gpu-1")], uid="uid-other"), "was deleted and re-created"),
        (claim(None), "is not allocated"),
        (claim([result("nic-0", driver="net.example.com")]), "no device allocated by driver gpu.dra-bridge.io (allocated drivers: net.example.com)"),
        (claim([result("gpu-1", pool="node-b")]), "allocated from pool 'node-b', not from this node's pool 'node-a'"),
        (claim([result("gpu-9")]), "device gpu-9 of ResourceClaim ns/claim does not exist on node node-a"),
    ],
    ids=["replaced-claim", "unallocated", "other-driver-only", "other-pool", "unknown-device"],
)
def test_a_claim_that_cannot_be_prepared_here_fails_with_its_cause(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ClaimError) as err:
        allocation_for(obj, REF, DRIVER, NODE, DEVICES)
    assert message in str(err.value)


def test_a_device_in_several_results_is_one_entry_with_all_its_requests() -> None:
    obj = claim([result("gpu-2", "a"), result("gpu-2", "b/x")], requests=("a", "b", "c"))
    alloc = allocation_for(obj, REF, DRIVER, NODE, DEVICES)
    assert [(d.device, d.request_names) for d in alloc.devices] == [("gpu-2", ("a", "b"))]


def test_admin_access_is_carried_through() -> None:
    alloc = allocation_for(claim([result("gpu-0", adminAccess=True)]), REF, DRIVER, NODE, DEVICES)
    assert alloc.admin_access and alloc.devices[0].admin_access
