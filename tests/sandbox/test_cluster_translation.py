"""Through `bridge sandbox cluster` (1.36: scheduler and claim-controller stand-ins, pod-running kubelets, real node
daemons, the real webhook): every kind of pod the webhook translates runs, and holds exactly as many GPUs as the
same pod holds on the device plugin.

One cluster for the module: `node-0` keeps its 8 GPUs on the device plugin, `node-1` and `node-2` serve theirs
through DRA. The same pods are created three times: in a legacy namespace (the device plugin: the kubelet's device
manager hands init containers' GPUs on to later containers), in a `dra` namespace with target `claims`, and in a
`dra` namespace where `auto` picks `extended` (kubelets and API server at 1.36, the DeviceClass present; pods with
GPU init containers go through claims there too).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.kube import NAMESPACES, PODS
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.inspect import shared
from tests.polling import wait_until
from tests.sandbox_cluster import spec_for_tests

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
DRIVER = "gpu.dra-bridge.io"


def ctr(name: str, gpus: int, *, sidecar: bool = False) -> Obj:
    out: Obj = {"name": name, "image": "cuda", "resources": {"limits": {GPU: str(gpus)}}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def pod(name: str, containers: list[Obj], init: list[Obj] | None = None, **spec: Any) -> Obj:
    body: Obj = {"containers": containers, **spec}
    if init:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


# name -> (pod, GPUs it holds on the device plugin); 8 GPUs in all, as node-0 has
KINDS: dict[str, tuple[Obj, int]] = {
    "init-main": (pod("init-main", [ctr("main", 1)], [ctr("prep", 1)]), 1),
    "init-smaller": (pod("init-smaller", [ctr("main", 2)], [ctr("warmup", 1)]), 2),
    "init-larger": (pod("init-larger", [ctr("main", 1)], [ctr("prep", 2)]), 2),
    "sidecar": (pod("sidecar", [ctr("main", 1)], [ctr("logger", 1, sidecar=True)]), 2),
    "gfd-family": (pod("gfd-family", [ctr("main", 1)], nodeSelector={"nvidia.com/gpu.family": "hopper"}), 1),
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[SandboxCluster]:
    nodes = (NodeSpec("node-0", "8xH100-80GB", split="0"), NodeSpec("node-1", "8xH100-80GB", split="all"),
             NodeSpec("node-2", "8xH100-80GB", split="all"))
    with SandboxCluster(spec_for_tests(nodes, bridge=True, webhook=True, version="1.36")) as c:
        api = c.api
        for ns, labels in (("device-plugin", {}), ("claims", {"dra-bridge.io/mode": "dra", "dra-bridge.io/target":
                                                             "claims"}), ("auto", {"dra-bridge.io/mode": "dra"})):
            api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}})
        c.wait_daemons_settled(90)
        yield c


def legacy_gpus(c: SandboxCluster, p: Obj) -> int:
    """Distinct GPUs the kubelet's device manager gave the pod (init containers included, which PodResources omits)."""
    uid = p["metadata"]["uid"]
    return len({d for n in c.nodes for a in n.kubelet.devices.assignments() if a.pod_uid == uid and a.resource == GPU
                for d in a.device_ids})


def dra_gpus(c: SandboxCluster, p: Obj) -> int:
    """Distinct GPUs allocated to the pod's claims (its own and the scheduler's extended-resource claim)."""
    api, status = c.api, p.get("status") or {}
    names = [s["resourceClaimName"] for s in status.get("resourceClaimStatuses") or [] if s.get("resourceClaimName")]
    ext = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    names += [ext] if ext else []
    devices = set()
    for name in names:
        claim = api.get(api.resource_api().claims, name, p["metadata"]["namespace"])
        for r in claim["status"]["allocation"]["devices"]["results"]:
            if r["driver"] == DRIVER:
                devices.add((r["pool"], r["device"]))
    return len(devices)


def run_all(c: SandboxCluster, ns: str) -> dict[str, Obj]:
    for name, (p, _) in KINDS.items():
        c.api.create(PODS, copy.deepcopy(p), ns)
    return {name: c.wait_pod_phase(ns, name, "Running", 90) for name in KINDS}


def test_each_translated_kind_runs_with_the_gpus_it_had_on_the_device_plugin(cluster: SandboxCluster) -> None:
    c = cluster
    legacy = run_all(c, "device-plugin")
    assert {n: legacy_gpus(c, p) for n, p in legacy.items()} == {n: gpus for n, (_, gpus) in KINDS.items()}
    assert {p["spec"]["nodeName"] for p in legacy.values()} == {"node-0"}

    for ns in ("claims", "auto"):
        translated = run_all(c, ns)
        for name, p in translated.items():
            assert GPU not in p["spec"]["containers"][0]["resources"].get("limits", {}), (ns, name)
            assert p["spec"]["nodeName"] in ("node-1", "node-2"), (ns, name)
        assert {n: dra_gpus(c, p) for n, p in translated.items()} == {n: gpus for n, (_, gpus) in KINDS.items()}, ns
        targets = {n: p["metadata"]["annotations"]["dra-bridge.io/translated"] for n, p in translated.items()}
        if ns == "claims":
            assert set(targets.values()) == {"claims"}
        else:  # auto on 1.36: extended, except where GPU init containers need claims to keep the count
            assert targets == {"init-main": "claims", "init-smaller": "claims", "init-larger": "claims",
                               "sidecar": "extended", "gfd-family": "extended"}
    wait_until(lambda: shared(c) == {}, 10, "no GPU with two holders")
