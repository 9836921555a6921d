"""The static split: where the target comes from, how it is applied, and how unsafe changes are refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.dra.slicepublisher import SlicePublisher
from bridge.dra.split import SPLIT_KEY, StaticSplit, ownership_listener_for_publisher, requested_split
from bridge.inventory.simulated import devices_from_spec
from bridge.kube import EVENTS, NODES, KubeAPI, RetryPolicy, connect
from bridge.ledger import Checkpoint, Ownership, OwnershipError
from bridge.sandbox.apiserver import ApiServer
from tests.polling import wait_until as wait_for

NODE = "node-a"
DEVICES = devices_from_spec("8xH100-80GB", NODE)


def node_obj(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": NODE}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


# ---- where the target comes from ---------------------------------------------------------------------------------

def test_node_that_says_nothing_and_no_flag_means_all_legacy():
    req = requested_split(node_obj(), None)
    assert req.text == "0" and "default" in req.origin


def test_flag_applies_when_the_node_says_nothing():
    assert requested_split(node_obj(), "2").text == "2"


def test_node_label_overrides_the_flag():
    req = requested_split(node_obj(labels={SPLIT_KEY: "all"}), "2")
    assert req.text == "all" and "label" in req.origin


def test_node_annotation_overrides_label_and_flag():
    req = requested_split(node_obj(labels={SPLIT_KEY: "all"}, annotations={SPLIT_KEY: "gpu-6,gpu-7"}), "2")
    assert req.text == "gpu-6,gpu-7" and "annotation" in req.origin


# ---- applying, without an API server -----------------------------------------------------------------------------

def test_label_saying_2_puts_the_two_highest_gpus_on_the_dra_side():
    split = StaticSplit(DEVICES, node_name=NODE, grace_s=0)
    outcome = split.evaluate(node_obj(labels={SPLIT_KEY: "2"}))
    assert outcome.applied
    assert sorted(split.dra_uuids()) == sorted([DEVICES[6].uuid, DEVICES[7].uuid])
    assert split.side_of(DEVICES[0].uuid) == "legacy"
    assert split.side_of(DEVICES[7].uuid) == "dra"
    assert "gpu-6 legacy->dra" in outcome.message and "2 of 8 GPUs serve DRA" in outcome.message


def test_busy_device_refuses_the_whole_split_and_changes_nothing():
    listener_calls: list[Ownership] = []
    busy = {DEVICES[7].uuid: "pod team-a/trainer container main"}
    split = StaticSplit(DEVICES, node_name=NODE, grace_s=0, in_use_legacy=lambda: busy,
                        listeners=[listener_calls.append])
    outcome = split.evaluate(node_obj(labels={SPLIT_KEY: "2"}))
    assert outcome.refused
    assert "gpu-7" in outcome.message and "pod team-a/trainer container main" in outcome.message
    assert "Nothing was changed" in outcome.message
    assert split.dra_uuids() == ()
    assert listener_calls == []


def test_device_grabbed_during_the_grace_aborts_the_move_and_restores_sides():
    holders: dict[str, str] = {}
    seen: list[tuple[str, ...]] = []

    def listener(own: Ownership) -> None:
        seen.append(tuple(own.sides[d.uuid] for d in DEVICES[6:]))
        if own.sides[DEVICES[7].uuid] == "withdrawn":
            holders[DEVICES[7].uuid] = "pod team-b/late container c"  # the kubelet raced us

    split = StaticSplit(DEVICES, node_name=NODE, grace_s=0.05, in_use_legacy=lambda: holders, listeners=[listener])
    outcome = split.evaluate(node_obj(labels={SPLIT_KEY: "2"}))
    assert outcome.refused and "grace" in outcome.message
    assert seen == [("withdrawn", "withdrawn"), ("legacy", "legacy")]
    assert split.dra_uuids() == ()


@pytest.mark.parametrize(("value", "message"), [("9", "asks for 9 devices but this node has 8"),
                                                 ("gpu-12", "unknown device 'gpu-12'"),
                                                 ("two", "neither a count")])
def test_target_that_does_not_fit_the_node_is_refused_clearly(value, message):
    split = StaticSplit(DEVICES, node_name=NODE, grace_s=0)
    outcome = split.evaluate(node_obj(annotations={SPLIT_KEY: value}))
    assert outcome.refused and message in outcome.message and "Nothing was changed" in outcome.message
    assert split.dra_uuids() == ()


def test_bad_flag_is_a_configuration_error_at_start():
    with pytest.raises(OwnershipError, match="neither a count"):
        StaticSplit(DEVICES, node_name=NODE, flag="lots")


def test_applied_split_is_persisted_in_the_checkpoint(short_tmp: Path):
    cp = Checkpoint(short_tmp, boot_id=lambda: "boot-1")
    split = StaticSplit(DEVICES, node_name=NODE, grace_s=0, checkpoint=cp)
    split.evaluate(node_obj(labels={SPLIT_KEY: "all"}))
    stored = cp.read()
    assert stored.data.split == "all"
    assert set(stored.data.sides.values()) == {"dra"}
    restarted = StaticSplit(DEVICES, node_name=NODE, initial=Ownership.adopt(DEVICES, stored.data.sides))
    assert len(restarted.dra_uuids()) == 8


def test_moving_back_to_legacy_is_refused_while_a_claim_holds_the_device():
    holders: dict[str, str] = {}
    split = StaticSplit(DEVICES, node_name=NODE, grace_s=0, in_use_dra=lambda: holders)
    split.evaluate(node_obj(labels={SPLIT_KEY: "2"}))
    holders[DEVICES[6].uuid] = "claim team-a/gpu-claim"
    outcome = split.evaluate(node_obj(labels={SPLIT_KEY: "0"}))
    assert outcome.refused and "claim team-a/gpu-claim" in outcome.message
    assert len(split.dra_uuids()) == 2


# ---- against the API emulator: Node watch, Events, slices --------------------------------------------------------

@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeAPI]:
    with ApiServer(version="1.34.2", resource_versions=("v1", "v1beta2", "v1beta1")) as srv:
        srv.write_kubeconfig(tmp_path / "kc")
        client = connect(tmp_path / "kc", retry=RetryPolicy(initial_backoff=0.05, max_backoff=0.5, deadline=2.0))
        client.create(NODES, node_obj())
        yield client


def published(api: KubeAPI) -> list[str]:
    items = api.list(api.resource_api().slices, field_selector=f"spec.nodeName={NODE}")["items"]
    return sorted(d["name"] for s in items for d in s["spec"]["devices"])


def label_node(api: KubeAPI, value: str) -> None:
    api.patch(NODES, NODE, {"metadata": {"labels": {SPLIT_KEY: value}}})


def test_labelling_the_node_publishes_exactly_the_dra_side_devices(api):
    pub = SlicePublisher(api, DEVICES, node_name=NODE, backoff=RetryPolicy(initial_backoff=0.05, max_backoff=0.5))
    split = StaticSplit(DEVICES, node_name=NODE, api=api, grace_s=0.05,
                        listeners=[ownership_listener_for_publisher(pub.set_dra_devices)])
    with pub:
        split.start()
        try:
            label_node(api, "2")
            wait_for(lambda: published(api) == ["gpu-6", "gpu-7"], what="two devices published")
            label_node(api, "all")
            wait_for(lambda: len(published(api)) == 8, what="all devices published")
        finally:
            split.stop()


def test_refused_split_leaves_slices_alone_and_records_a_warning_event(api):
    busy = {DEVICES[7].uuid: "pod team-a/trainer container main"}
    pub = SlicePublisher(api, DEVICES, node_name=NODE, watch=False)
    split = StaticSplit(DEVICES, node_name=NODE, api=api, grace_s=0, in_use_legacy=lambda: busy,
                        listeners=[ownership_listener_for_publisher(pub.set_dra_devices)])
    pub.reconcile_once()
    label_node(api, "2")
    outcome = split.evaluate()
    pub.reconcile_once()
    assert outcome.refused
    assert published(api) == []
    events = api.list(EVENTS, "default")["items"]
    (event,) = [e for e in events if e["reason"] == "DRASplitRefused"]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == NODE and event["involvedObject"]["kind"] == "Node"
    assert "gpu-7" in event["message"] and "team-a/trainer" in event["message"]
    split.evaluate()  # the same refusal again: no second Event
    assert len([e for e in api.list(EVENTS, "default")["items"] if e["reason"] == "DRASplitRefused"]) == 1


def test_refused_split_applies_by_itself_once_the_device_is_free(api):
    busy = {DEVICES[7].uuid: "pod team-a/trainer container main"}
    split = StaticSplit(DEVICES, node_name=NODE, api=api, grace_s=0, retry_interval_s=0.1,
                        in_use_legacy=lambda: dict(busy))
    split.start()
    try:
        label_node(api, "2")
        wait_for(lambda: split.outcomes and split.outcomes[-1].refused, what="refusal")
        busy.clear()
        wait_for(lambda: len(split.dra_uuids()) == 2, what="split applied after the pod finished")
    finally:
        split.stop()
