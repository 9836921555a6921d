"""The split-status annotation: one versioned schema, small, read back exactly, refused clearly when unreadable."""

from __future__ import annotations

import json

import pytest

from bridge.inventory import devices_from_spec
from bridge.ledger import (
    STATUS_KEY,
    Facts,
    Holder,
    HolderKind,
    Ledger,
    Observations,
    StatusError,
    build_status,
    decode,
    parse_split,
    reconcile,
    requested_split,
    status_of,
)
from bridge.ledger.status import MAX_BYTES, RefusalStatus

GPUS = devices_from_spec("8xH100-80GB", "node-1")


def status_for(target: str, facts: Facts = Facts(), refusals: tuple[RefusalStatus, ...] = ()):  # type: ignore[no-untyped-def]
    req = requested_split({"metadata": {"annotations": {"dra-bridge.io/dra-devices": target}}})
    d = reconcile(Ledger.all_legacy(GPUS), parse_split(target), facts, Observations(now=0, node_allocatable=8,
                                                                                   node_changed_at=-10))
    return build_status(node="node-1", request=req, decision=d, facts=facts, refusals=refusals,
                        updated="2025-06-01T12:00:00Z")


def test_the_document_round_trips_and_says_what_a_reader_needs() -> None:
    busy = Facts.build([(GPUS[7].uuid, Holder(HolderKind.INIT_CONTAINER, "pod ml/train-7 container init"))])
    s = status_for("gpu-5,gpu-7", busy, (RefusalStatus("2025-06-01T11:59:00Z", "allocate", "gpu-6", "refused"),))
    doc = json.loads(s.encode())
    assert doc["version"] == 1 and doc["node"] == "node-1" and doc["requested"] == {"value": "gpu-5,gpu-7",
                                                                                   "source": "annotation"}
    assert doc["state"] == "converging" and doc["wanted"] == 2
    assert doc["counts"] == {"legacy": 7, "dra": 0, "withdrawn": 1}
    gpu7 = doc["devices"][7]
    assert gpu7 == {"name": "gpu-7", "uuid": GPUS[7].uuid, "side": "legacy", "numa": GPUS[7].numa_node, "nvlink": 0,
                    "holders": ["pod ml/train-7 container init (legacy init container)"]}
    assert {p["device"]: p["phase"] for p in doc["pending"]} == {"gpu-7": "held", "gpu-5": "waiting-node-status"}
    assert "will move when free" in next(p["reason"] for p in doc["pending"] if p["device"] == "gpu-7")
    assert doc["refusals"][0]["api"] == "allocate"
    assert decode(s.encode()) == s
    assert status_of({"metadata": {"annotations": {STATUS_KEY: s.encode()}}}) == s


def test_content_comparison_ignores_the_update_time() -> None:
    a = status_for("2")
    from dataclasses import replace

    assert a.same_content(replace(a, updated="2030-01-01T00:00:00Z"))
    assert not a.same_content(status_for("3"))


def test_a_document_stays_small_even_with_many_holders() -> None:
    many = Facts.build([(g.uuid, Holder(HolderKind.CONTAINER, f"pod ns/{'p' * 200}{i} container c"))
                        for g in GPUS for i in range(50)])
    text = status_for("all", many).encode()
    assert len(text.encode()) <= MAX_BYTES


@pytest.mark.parametrize(("text", "message"), [
    ("{nope", "is not JSON"),
    ('{"version": 2}', "schema version 2; this one reads version 1 \\(written by a newer dra-bridge"),
    ('{"version": 1, "requested": {"value": "1", "source": "moon"}, "state": "converged"}', "unknown requested.source"),
    ('{"version": 1, "requested": {"value": "1", "source": "label"}, "state": "converged", "devices": [{"name": "g", '
     '"side": "sideways"}]}', "expected one of legacy, dra, withdrawn"),
])
def test_an_unreadable_status_is_refused_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(StatusError, match=message):
        decode(text)


def test_a_node_without_the_annotation_has_no_status() -> None:
    assert status_of({"metadata": {"annotations": {}}}) is None and status_of(None) is None


def test_bridge_controller_reads_the_document_the_daemon_writes() -> None:
    """The schema contract with `bridge controller` (bridge/controller/nodestatus.py reads what this writes)."""
    from bridge.controller.nodestatus import decode_status

    busy = Facts.build([(GPUS[7].uuid, Holder(HolderKind.CONTAINER, "pod ml/p container c"))])
    read = decode_status(status_for("gpu-5,gpu-7", busy).encode())
    assert read.node == "node-1" and read.requested == "gpu-5,gpu-7" and read.source == "annotation"
    assert read.moving_to == {"gpu-5": "dra"} and read.unknown_holders == ()
    assert [d.name for d in read.devices if d.held] == ["gpu-7"]
    assert {d.group for d in read.devices} == {"nvlink-0"}  # one HGX board: one NVLink island, for its preference


def test_a_claim_several_sources_report_is_named_once_by_its_strongest_fact() -> None:
    """Our checkpoint record, the kubelet's PodResources and the pods bound to the node all report a prepared claim;
    the status (and `bridge node status`) names it once, as prepared, with its pod, never as 'not prepared yet'."""
    gpu = GPUS[6].uuid
    facts = Facts.build([
        (gpu, Holder(HolderKind.PREPARED, "claim ml/train-gpu")),
        (gpu, Holder(HolderKind.PREPARED, "claim ml/train-gpu (pod ml/train)")),
        (gpu, Holder(HolderKind.ALLOCATED, "claim ml/train-gpu (pod ml/train)")),
        (gpu, Holder(HolderKind.ALLOCATED, "claim ml/next-gpu (pod ml/next)")),
    ])
    s = status_for("gpu-6", facts)
    (dev,) = [d for d in s.devices if d.name == "gpu-6"]
    assert dev.holders == ("claim ml/train-gpu (pod ml/train) (DRA claim prepared)",
                           "claim ml/next-gpu (pod ml/next) (DRA claim allocated, not prepared yet)")


def test_a_prepared_record_without_its_pod_borrows_the_pod_another_source_named() -> None:
    from bridge.ledger.holders import distinct

    held = distinct([Holder(HolderKind.PREPARED, "claim ml/a (prepare in progress)"),
                     Holder(HolderKind.ALLOCATED, "claim ml/a (pod ml/p)"),
                     Holder(HolderKind.CONTAINER, "pod x/y container main")])
    assert [h.describe() for h in held] == ["claim ml/a (pod ml/p) (prepare in progress) (DRA claim prepared)",
                                            "pod x/y container main (legacy container)"]
