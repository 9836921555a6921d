"""The resourceclaim controller stand-in against kube-controller-manager v1.37.2: the same claims, the same life.

One scenario runs twice, on the API emulator with the scheduler and claim-controller stand-ins and on a real control
plane (kube-apiserver, kube-scheduler, kube-controller-manager v1.37.2), both with kubelet simulators and the real
`bridge node` on one node whose 3 GPUs are all on the DRA side:

* `training-job-with-a-rather-long-name-...`: a pod whose claim comes from a template with labels and annotations
  for its claims, runs 2 s and succeeds (a generated name that must be cut, a done pod's claim);
* `reader-1`, `reader-2`: two pods sharing the claim `shared` by name (one device, reserved for both); deleted one
  after the other;
* `server`: a template pod, deleted while it runs;
* `stuck`: a template pod whose claim's CEL selector matches no device, deleted while it is Pending (its claim was
  never allocated);
* `failed`: a pod whose template does not exist yet, marked Failed, then its template created: through 1.37 the
  controller still makes its claim (and deletes it, its pod being done); from 1.38 it leaves terminal pods alone.

What a user and our node daemon see of each claim is recorded from every version an informer delivers (both
sides' watches deliver every write): per claim, the distinct states in order, a state being (allocated or not,
the pods in `reservedFor`, the finalizers, being deleted); and a generated claim's metadata (generateName, labels,
annotations, owner references) and the pods' `resourceClaimStatuses`. They must be equal; a difference prints both.
The node daemon decides from these facts when a DRA device is free to move (bridge/node/holders.py), so an order
the stand-in gets wrong is a move decided on a state a real cluster never shows. About 50 s.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from bridge.kube import PODS
from bridge.kube.api import WatchEvent
from bridge.kube.watch import Informer
from bridge.sandbox.apiserver.profiles import parse_minor
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.kubelet.pods import RUN_SECONDS_ANNOTATION
from tests.polling import wait_until
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, require_binaries
from tests.sandbox_cluster import create_gpu_template, create_pod_namespaces, dra_gpu_pod, spec_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

Obj = dict[str, Any]
NODE, NS = "n1", "team"
LONG = "training-job-with-a-rather-long-name-so-that-its-claim-name-is-cut"


def _shared_claim_pod(name: str) -> Obj:
    pod = dra_gpu_pod(name, NS)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
    return pod


class Recorder:
    """Every version of every claim and pod in the namespace, in the order the watch delivered them."""

    def __init__(self) -> None:
        self.claims: dict[str, list[tuple[str, Obj]]] = {}
        self.pods: dict[str, list[Obj]] = {}
        self.lock = threading.Lock()

    def claim(self, ev: WatchEvent) -> None:
        with self.lock:
            self.claims.setdefault(ev.object["metadata"]["name"], []).append((ev.type, ev.object))

    def pod(self, ev: WatchEvent) -> None:
        with self.lock:
            self.pods.setdefault(ev.object["metadata"]["name"], []).append(ev.object)


def _state(event: str, claim: Obj) -> tuple[Any, ...]:
    status, meta = claim.get("status") or {}, claim["metadata"]
    allocation = status.get("allocation") or {}
    # kube-scheduler stamps the allocation's time once it reserves the claim (bindClaim, 1.36+)
    allocated = "allocated, stamped" if allocation.get("allocationTimestamp") else "allocated"
    return ("gone" if event == "DELETED" else allocated if allocation else "unallocated",
            tuple(sorted(r.get("name", "") for r in status.get("reservedFor") or ())),
            tuple(meta.get("finalizers") or ()), "deleting" if meta.get("deletionTimestamp") else "")


def _states(versions: list[tuple[str, Obj]]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for event, claim in versions:
        state = _state(event, claim)
        if not out or out[-1] != state:
            out.append(state)
    return out


def _metadata(claim: Obj) -> Obj:
    meta = claim["metadata"]
    return {"generateName": meta.get("generateName"), "labels": meta.get("labels"),
            "annotations": meta.get("annotations"),
            "ownerReferences": [{k: v for k, v in o.items() if k != "uid"} for o in meta.get("ownerReferences") or ()]}


def _run(cluster: SandboxCluster) -> Obj:
    api = cluster.api
    rapi = api.resource_api()
    cluster.wait_daemons_settled(90)
    create_pod_namespaces(cluster, NS)
    create_gpu_template(api, NS)
    labelled = api.get(rapi.claim_templates, "one-gpu", NS)
    labelled["metadata"] = {"name": "labelled", "namespace": NS}
    labelled["spec"]["metadata"] = {"labels": {"team": "vision"}, "annotations": {"cost-center": "42"}}
    api.create(rapi.claim_templates, labelled, NS)
    nowhere = api.get(rapi.claim_templates, "one-gpu", NS)
    nowhere["metadata"] = {"name": "nowhere", "namespace": NS}
    nowhere["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": 'device.attributes["gpu.dra-bridge.io"].productName == "B200"'}}]
    api.create(rapi.claim_templates, nowhere, NS)
    rec = Recorder()
    stop = threading.Event()
    Informer(api, rapi.claims, namespace=NS, on_event=rec.claim).start(stop)
    Informer(api, PODS, namespace=NS, on_event=rec.pod).start(stop)
    api.create(rapi.claims, {"apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaim",
                             "metadata": {"name": "shared", "namespace": NS},
                             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                                 "deviceClassName": "gpu.dra-bridge.io"}}]}}}, NS)
    job = dra_gpu_pod(LONG, NS, {RUN_SECONDS_ANNOTATION: "2"}, template="labelled")
    job["spec"]["restartPolicy"] = "Never"
    api.create(PODS, job, NS)
    api.create(PODS, _shared_claim_pod("reader-1"), NS)
    api.create(PODS, dra_gpu_pod("server", NS), NS)
    api.create(PODS, dra_gpu_pod("failed", NS, template="late"), NS)
    api.patch(PODS, "failed", {"status": {"phase": "Failed"}}, NS, subresource="status")
    create_gpu_template(api, NS, "late")
    for name in ("reader-1", "server"):
        cluster.wait_pod_phase(NS, name, "Running", 90)
    api.create(PODS, _shared_claim_pod("reader-2"), NS)
    api.create(PODS, dra_gpu_pod("stuck", NS, template="nowhere"), NS)
    cluster.wait_pod_phase(NS, "reader-2", "Running", 90)
    wait_until(lambda: any(c.get("reason") == "Unschedulable" for c in
                           ((cluster.pod(NS, "stuck") or {}).get("status") or {}).get("conditions") or ()), 60,
               "the stuck pod refused")
    api.delete(PODS, "stuck", NS)
    cluster.wait_pod_phase(NS, LONG, "Succeeded", 90)
    for name in ("reader-1", "reader-2", "server"):
        api.delete(PODS, name, NS)
        wait_until(lambda: cluster.pod(NS, name) is None, 60, f"{name} gone")
    # The generated claims of done or deleted pods go; the shared claim stays, deallocated.
    wait_until(lambda: [c["metadata"]["name"] for c in api.list(rapi.claims, NS)["items"]] == ["shared"], 60,
               "only the shared claim left")
    wait_until(lambda: not (api.get(rapi.claims, "shared", NS).get("status") or {}).get("allocation"), 60,
               "the shared claim deallocated")
    time.sleep(1)
    stop.set()
    with rec.lock:
        out: Obj = {}
        for pod_name in (LONG, "server", "stuck"):
            (claim_name,) = [n for n in rec.claims if n != "shared" and n.startswith(pod_name[:20])]
            versions = rec.claims[claim_name]
            out[f"{pod_name} claim states"] = _states(versions)
            out[f"{pod_name} claim metadata"] = _metadata(versions[0][1])
            out[f"{pod_name} claim name length"] = len(claim_name)
            last = (rec.pods[pod_name][-1].get("status") or {}).get("resourceClaimStatuses") or ()
            out[f"{pod_name} resourceClaimStatuses"] = [
                {**s, "resourceClaimName": "<its claim>" if s.get("resourceClaimName") == claim_name else "?"}
                for s in last]
        out["shared claim states"] = _states(rec.claims["shared"])
        # whether, not how many: kube-controller-manager 1.37 made two once (its flap with a terminal pod, which
        # 1.38 ends), the stand-in makes one
        out["failed pod: a claim made"] = any(n.startswith("failed-") for n in rec.claims)
        out["failed pod: resourceClaimStatuses"] = [s.get("name") for s in (
            rec.pods["failed"][-1].get("status") or {}).get("resourceClaimStatuses") or ()]
    return out


# Differences that may remain, each with its reason (a race on the real side: it does not show in every run).
KNOWN = {
    "server claim states": "a running pod deleted: the API emulator collects a removed object's dependents in the "
                           "same step (bridge/sandbox/apiserver/rest.py `_remove`), so the pod's claim is marked "
                           "for deletion while it still has its finalizer, and the claim controller then drops the "
                           "finalizer ('deleting', then gone); kube-controller-manager's garbage collector works "
                           "from its own watch and mostly comes after the resourceclaim controller, which drops the "
                           "finalizer and deletes the claim itself (no 'deleting' state), but not always. Both deallocate before "
                           "the claim goes, and our code reads no claim's deletionTimestamp (bridge/node)",
}


def _cluster(backend: str) -> SandboxCluster:
    nodes = (NodeSpec(NODE, "3xH100-80GB", split="3"),)
    return SandboxCluster(spec_for_tests(nodes, backend=backend, version=REAL_LINE, bridge=True))


def test_the_stand_in_gives_each_claim_the_life_kube_controller_manager_gives_it() -> None:
    require_binaries(REAL_LINE, CONTROL_PLANE)
    with _cluster("standin") as emulated:
        stand_in = _run(emulated)
    with _cluster("real") as real:
        kcm = _run(real)
    # what the failed pod shows is the release's: a claim made (and deleted) through 1.37, none from 1.38
    made = parse_minor(REAL_LINE) < 38
    assert (kcm["failed pod: a claim made"], kcm["failed pod: resourceClaimStatuses"]) == (made, ["gpu"] * made)
    differences = {k: (stand_in.get(k), kcm.get(k)) for k in sorted(set(stand_in) | set(kcm))
                   if stand_in.get(k) != kcm.get(k)}
    assert differences.keys() <= KNOWN.keys(), "\n".join(
        f"{k}:\n  stand-in:                {a}\n  kube-controller-manager: {b}" for k, (a, b) in differences.items())
    # The known one is exactly that: the same life (allocation and reservations, in order) with the deletion marked
    # before the finalizer goes. On the real cluster the order is a race between kube-controller-manager's garbage
    # collector and its resourceclaim controller: mostly the controller first (finalizer dropped, no 'deleting'),
    # sometimes the collector (seen once on v1.38.0-beta.0: marked 'deleting' with the finalizer still on, as here).
    if "server claim states" not in differences:
        return  # the real collector came first this time (seen on v1.37.2 and v1.38.0-beta.0): the same life as ours
    ours, theirs = differences["server claim states"]
    assert "deleting" in {x[3] for x in ours} and ours[-1] == ("gone", (), (), "deleting"), ours
    assert theirs[-1][0] == "gone", theirs
    assert _life(ours) == _life(theirs), (ours, theirs)


def _life(states: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A claim's states without its finalizers and deletion mark, repeats dropped: allocation and reservations."""
    out: list[tuple[Any, ...]] = []
    for state in states:
        if not out or out[-1] != state[:2]:
            out.append(state[:2])
    return out


if __name__ == "__main__":  # explore one side: python -m tests.real.test_claim_differential real|standin
    import pprint
    import sys

    with _cluster(sys.argv[1]) as c:
        pprint.pprint(_run(c), width=120)
