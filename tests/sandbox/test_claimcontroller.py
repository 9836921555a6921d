"""The claim-controller stand-in's decisions (pure) and its work queue, written from
pkg/controller/resourceclaim/controller.go and client-go's workqueue."""

from __future__ import annotations

import threading

from bridge.sandbox.claimcontroller.controller import ClaimCache
from bridge.sandbox.claimcontroller.logic import (
    FINALIZER,
    POD_CLAIM_ANNOTATION,
    claim_from_template,
    claim_names,
    deallocated,
    find_pod_claim,
    generate_name,
    is_pod_done,
)
from bridge.sandbox.claimcontroller.workqueue import WorkQueue


def pod(name: str = "train", uid: str = "u1", **status: object) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "uid": uid},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]}, "status": dict(status)}


def test_generated_names_are_pod_dash_claim_and_long_ones_are_cut_proportionally_without_the_trailing_dash():
    assert generate_name("train", "gpu") == "train-gpu-"
    long = generate_name("p" * 50, "c" * 20)
    assert long == "p" * (50 * 57 // 72) + "-" + "c" * (20 * 57 // 72)
    assert not long.endswith("-")


def test_a_claim_from_a_template_is_owned_by_the_pod_and_names_its_pod_claim():
    template = {"spec": {"metadata": {"labels": {"team": "ml"}, "annotations": {"a": "b"}},
                         "spec": {"devices": {"requests": [{"name": "gpu"}]}}}}
    claim = claim_from_template(pod(), {"name": "gpu"}, template)
    meta = claim["metadata"]
    assert meta["generateName"] == "train-gpu-" and meta["namespace"] == "ml" and meta["labels"] == {"team": "ml"}
    assert meta["annotations"] == {"a": "b", POD_CLAIM_ANNOTATION: "gpu"}
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "train", "uid": "u1",
                                        "controller": True}]
    # Up to 1.34 the controller also set blockOwnerDeletion.
    (ref,) = claim_from_template(pod(), {"name": "gpu"}, template, minor=34)["metadata"]["ownerReferences"]
    assert ref["blockOwnerDeletion"] is True
    assert claim["spec"] == {"devices": {"requests": [{"name": "gpu"}]}}


def test_an_orphan_claim_of_an_earlier_attempt_is_reused_but_not_one_of_another_pod_or_pod_claim():
    owner = [{"apiVersion": "v1", "kind": "Pod", "name": "train", "uid": "u1", "controller": True}]
    mine = {"metadata": {"name": "train-gpu-x", "namespace": "ml", "ownerReferences": owner,
                         "annotations": {POD_CLAIM_ANNOTATION: "gpu"}}}
    other_claim = {"metadata": {"name": "train-ib-x", "namespace": "ml", "ownerReferences": owner,
                                "annotations": {POD_CLAIM_ANNOTATION: "ib"}}}
    old_pod = {"metadata": {"name": "train-gpu-y", "namespace": "ml", "annotations": {POD_CLAIM_ANNOTATION: "gpu"},
                            "ownerReferences": [dict(owner[0], uid="u0")]}}
    assert find_pod_claim(pod(), {"name": "gpu"}, [other_claim, old_pod, mine]) == mine
    deterministic = {"metadata": {"name": "train-gpu", "namespace": "ml", "ownerReferences": owner}}
    assert find_pod_claim(pod(), {"name": "gpu"}, [deterministic]) == deterministic  # Kubernetes <= 1.27 naming


def test_without_reservations_a_scheduler_allocated_claim_loses_its_allocation_and_device_status():
    claim = {"metadata": {"finalizers": [FINALIZER]},
             "status": {"allocation": {"devices": {}}, "devices": [{}], "reservedFor": [{"uid": "u1"}]}}
    assert deallocated(claim, []) == {"metadata": {"finalizers": [FINALIZER]}, "status": {}}
    kept = deallocated(claim, [{"uid": "u2"}])
    assert kept["status"]["allocation"] == {"devices": {}} and kept["status"]["reservedFor"] == [{"uid": "u2"}]
    foreign = {"metadata": {}, "status": {"allocation": {"devices": {}}, "reservedFor": [{"uid": "u1"}]}}
    assert deallocated(foreign, [])["status"] == {"allocation": {"devices": {}}}  # allocated by a driver: kept


def test_a_pod_is_done_when_finished_or_deleted_before_it_was_scheduled():
    assert is_pod_done(pod(phase="Failed"))
    unscheduled_deleted = pod()
    unscheduled_deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert is_pod_done(unscheduled_deleted)
    unscheduled_deleted["spec"]["nodeName"] = "n1"
    assert not is_pod_done(unscheduled_deleted)  # the kubelet still has to stop it


def test_the_claims_of_a_pod_include_recorded_template_claims_and_the_extended_resource_claim():
    p = pod(resourceClaimStatuses=[{"name": "gpu", "resourceClaimName": "train-gpu-x"}],
            extendedResourceClaimStatus={"resourceClaimName": "train-extended-resources-y"})
    p["spec"]["resourceClaims"].append({"name": "shared", "resourceClaimName": "team-claim"})
    assert claim_names(p) == ["train-gpu-x", "team-claim", "train-extended-resources-y"]


def test_the_work_queue_never_hands_one_key_to_two_workers_and_reprocesses_keys_added_meanwhile():
    q = WorkQueue(base_delay=0.01)
    q.add("a")
    q.add("a")
    assert q.get() == "a"
    q.add("a")  # added while processing: queued again only after done
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    t.join(0.1)
    assert got == []
    q.done("a")
    t.join(2)
    assert got == ["a"]
    q.done("a")
    q.add_rate_limited("b")
    assert q.get() == "b"  # after its backoff
    q.shutdown()
    assert q.get() is None


def claim_obj(name: str, rv: int) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "resourceVersion": str(rv)}}


def test_the_claim_cache_answers_a_created_claim_until_the_informer_has_it_as_new_and_after_it_is_deleted():
    now = [0.0]
    cache = ClaimCache(clock=lambda: now[0])
    created = claim_obj("train-gpu-x", 10)
    cache.mutation(created)
    assert cache.get("ml/train-gpu-x", None) is created  # not seen by the informer yet
    assert cache.get("ml/train-gpu-x", claim_obj("train-gpu-x", 9)) is created  # the informer's copy is older
    newer = claim_obj("train-gpu-x", 12)
    assert cache.get("ml/train-gpu-x", newer) is newer
    assert cache.get("ml/train-gpu-x", None) is None  # the lookup above dropped the cached copy


def test_a_created_claim_the_controller_deleted_still_exists_for_it_for_an_hour():
    # The controller never tells its mutation cache of a deletion (client-go IncludeAdds): the claim it deleted for a
    # done pod, never looked up while the informer had it, still answers, so it is not created again.
    now = [0.0]
    cache = ClaimCache(clock=lambda: now[0])
    cache.mutation(claim_obj("train-gpu-x", 10))
    now[0] = 3599.0
    assert cache.get("ml/train-gpu-x", None) is not None and len(cache.values()) == 1
    now[0] = 3600.0
    assert cache.get("ml/train-gpu-x", None) is None and cache.values() == []
