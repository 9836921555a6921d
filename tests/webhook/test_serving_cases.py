"""Table-driven: what the real webhook does to each kind of pod, through the API emulator (pods created with the
official client, the webhook called over HTTPS by the emulator's admission, with its live facts: the node informer,
the dry-run check, the DeviceClass), and how many GPUs each pod will hold afterwards.

Three emulated clusters cover the table:
* `mixed` (1.35): GPU nodes of several kinds as GPU Feature Discovery labels them: whole H100s, an A100 under MIG
  strategy single, a T4 time-sliced without rename (`-SHARED`), an L4 time-sliced with rename (`gpu.replicas`);
* `gated` (1.33 serving resource.k8s.io with DynamicResourceAllocation off in kube-apiserver);
* `modern` (1.36 with the DeviceClass, GPU-node kubelets 1.36, then one kubelet at 1.35: the skew).

Every translated pod holds exactly as many GPUs as under the device plugin (bridge.kvalues.podgpu), and every pod
left alone still asks for its `nvidia.com/gpu`, with a warning of at most 120 characters and an Event saying why.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bridge.dra.slices import device_attributes, device_entry
from bridge.inventory.simulated import devices_from_spec
from bridge.kube.api import EVENTS, NODES, PODS
from bridge.kvalues import cel as kcel
from bridge.kvalues import gfd
from bridge.kvalues.podgpu import pod_devices
from bridge.sandbox.apiserver import ApiServer
from tests.polling import wait_until
from tests.webhook.pki import Pki
from tests.webhook.pods import container, deployment_pod
from tests.webhook.test_e2e import Cluster, gpu_node

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
EXT = "deviceclass.resource.kubernetes.io/gpu.dra-bridge.io"
DRIVER = "gpu.dra-bridge.io"

WHOLE = gpu_node("h100-0", "v1.35.3", {gfd.PRODUCT: "NVIDIA-H100-80GB-HBM3", gfd.FAMILY: "hopper",
                                       gfd.COMPUTE_MAJOR: "9", gfd.COMPUTE_MINOR: "0", gfd.REPLICAS: "1",
                                       gfd.SHARING_STRATEGY: "none", "pool": "h100"})
MIG = gpu_node("a100-mig-0", "v1.35.3", {gfd.PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", gfd.MIG_STRATEGY: "single",
                                         gfd.FAMILY: "ampere", gfd.COMPUTE_MAJOR: "8", gfd.COMPUTE_MINOR: "0",
                                         "pool": "inference-mig"})
SHARED = gpu_node("t4-0", "v1.35.3", {gfd.PRODUCT: "Tesla-T4-SHARED", gfd.REPLICAS: "4",
                                      gfd.SHARING_STRATEGY: "time-slicing", "pool": "notebooks"})
RENAMED = gpu_node("l4-0", "v1.35.3", {gfd.PRODUCT: "NVIDIA-L4", gfd.REPLICAS: "8",
                                       gfd.SHARING_STRATEGY: "time-slicing", "pool": "shared-l4"})


def sidecar(name: str, gpus: int) -> Obj:
    return {**container(name, gpus), "restartPolicy": "Always"}


def with_spec(pod: Obj, **spec: Any) -> Obj:
    out = copy.deepcopy(pod)
    out["spec"].update(spec)
    return out


@dataclass
class Case:
    pod: Obj
    devices: int  # GPUs the pod holds afterwards, whatever happened (= what it held under the device plugin)
    claims: dict[str, int] = field(default_factory=dict)  # translated with claims: pod claim -> GPUs
    init_refs: list[Obj] | None = None  # what the first init container references
    untouched: str = ""  # left on the device plugin: a word of the reason
    selects: set[str] | None = None  # GFD family cases: the catalog models the claim's CEL selects


FAMILY = {"L4": ("ada-lovelace", {"L4", "L40S"}), "L40S": ("ada-lovelace", {"L4", "L40S"}),
          "H100-80GB": ("hopper", {"H100-80GB", "H200-141GB"}), "B200": ("blackwell", {"B200"})}

MIXED: dict[str, Case] = {
    "init + main (8 + 8) share one claim: 8 GPUs, not 16": Case(
        deployment_pod(container("main", 8), init=(container("prep", 8),)), 8, {"gpu-main": 8},
        [{"name": "gpu-main"}]),
    "init smaller than main sees only its share": Case(
        deployment_pod(container("main", 4), init=(container("warmup", 1),)), 4, {"gpu-main": 4},
        [{"name": "gpu-main", "request": "gpu-0"}]),
    "init larger than main: main's claim plus a shared init claim": Case(
        deployment_pod(container("main", 1), init=(container("prep", 3),)), 3, {"gpu-main": 1, "gpu-init": 2},
        [{"name": "gpu-init"}, {"name": "gpu-main"}]),
    "sidecar init container runs alongside: its own claim": Case(
        deployment_pod(container("main", 2), init=(sidecar("logger", 1),)), 3, {"gpu-logger": 1, "gpu-main": 2},
        [{"name": "gpu-logger"}]),
    "MIG strategy single on the only node it selects": Case(
        deployment_pod(container("main", 1), node_selector={"pool": "inference-mig"}), 1, untouched="MIG slice"),
    "-SHARED product selected by name": Case(
        deployment_pod(container("main", 1), node_selector={gfd.PRODUCT: "Tesla-T4-SHARED"}), 1,
        untouched="-SHARED"),
    "gpu.replicas > 1 on the nodes its affinity allows": Case(
        deployment_pod(container("main", 1), affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In",
                                                         "values": ["shared-l4"]}]}]}}}), 1,
        untouched="gpu.replicas=8"),
    "no selector in a cluster with whole and shared nodes: translated": Case(
        deployment_pod(container("main", 2)), 2, {"gpu-main": 2}),
    "preset spec.nodeName": Case(
        with_spec(deployment_pod(container("main", 2)), nodeName="h100-0"), 2, untouched="nodeName"),
    "Volcano scheduler": Case(
        with_spec(deployment_pod(container("main", 2)), schedulerName="volcano"), 2, untouched="volcano"),
    **{f"GPU family {fam} (like {model})": Case(
        deployment_pod(container("main", 1), node_selector={gfd.FAMILY: fam}), 1, {"gpu-main": 1}, selects=models)
       for model, (fam, models) in FAMILY.items()},
}


def catalog_device(model: str) -> Obj:
    """The CEL `device` of a GPU of `model` as the node daemon publishes it (bridge/dra/slices.py)."""
    (dev,) = devices_from_spec(f"1x{model}", "n")
    attrs: Obj = {}
    for name, value in device_attributes(dev).items():
        (kind, raw), = value.items()
        attrs[name] = kcel.Semver(raw) if kind == "version" else raw
    caps = {k: v["value"] for k, v in device_entry(dev, "v1", None)["capacity"].items()}
    return kcel.device_activation(DRIVER, {DRIVER: attrs}, {DRIVER: caps})


MODELS = ("L4", "L40S", "H100-80GB", "H200-141GB", "A100-40GB", "A100-80GB", "B200", "T4", "V100-32GB")


def start(tmp: Path, version: str, nodes: tuple[Obj, ...], gates: dict[str, bool] | None = None) -> Iterator[Cluster]:
    srv = ApiServer(version=version, feature_gates=gates).start()
    pki = Pki(tmp)
    pki.issue()
    c = Cluster(srv, srv.write_kubeconfig(tmp / "kubeconfig"), pki, "auto", nodes)
    try:
        yield c
    finally:
        c.close()
        srv.stop()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from start(tmp_path_factory.mktemp("mixed"), "1.35.0", (WHOLE, MIG, SHARED, RENAMED))


def created(c: Cluster, ns: str, pod: Obj) -> Obj:
    pod = copy.deepcopy(pod)
    pod["metadata"]["namespace"] = ns
    return c.api.create(PODS, pod, ns)


def events_about(c: Cluster, ns: str) -> list[str]:
    return [e.get("message", "") for e in c.api.list(EVENTS, ns)["items"] if e.get("reason") == "DRABridgeUntranslatable"]


def held(c: Cluster, pod: Obj, ns: str) -> int:
    """GPUs the pod will hold: the device-plugin count of what is left of nvidia.com/gpu, plus the devices of the
    claim templates it references (as created in the emulator), plus the extended resource's count."""
    spec = pod["spec"]
    total = pod_devices(spec, GPU) + pod_devices(spec, EXT)
    for ref in spec.get("resourceClaims") or []:
        template = c.api.get(c.templates, ref["resourceClaimTemplateName"], ns)
        total += sum(r["exactly"]["count"] for r in template["spec"]["spec"]["devices"]["requests"])
    return total


@pytest.mark.parametrize("name", list(MIXED))
def test_each_kind_of_pod_through_the_api_server(name: str, mixed: Cluster) -> None:
    case, c = MIXED[name], mixed
    ns = "mixed-" + str(list(MIXED).index(name))
    c.namespace(ns, "dra")
    out = created(c, ns, case.pod)
    spec = out["spec"]
    assert held(c, out, ns) == case.devices == pod_devices(case.pod["spec"], GPU)
    if case.untouched:
        assert "dra-bridge.io/translated" not in (out["metadata"].get("annotations") or {})
        assert spec == {**case.pod["spec"], **{k: v for k, v in spec.items() if k not in case.pod["spec"]}}
        wait_until(lambda: any(case.untouched in m for m in events_about(c, ns)), 30, "the Event saying why")
        return
    record = json.loads(out["metadata"]["annotations"]["dra-bridge.io/translation"])
    assert out["metadata"]["annotations"]["dra-bridge.io/translated"] == "claims" and record["devices"] == case.devices
    assert {r["name"]: held_by(c, r, ns) for r in spec["resourceClaims"]} == case.claims
    for ctr in spec["containers"] + spec.get("initContainers", []):
        assert GPU not in ctr["resources"].get("limits", {})
    if case.init_refs is not None:
        assert spec["initContainers"][0]["resources"]["claims"] == case.init_refs
    if case.selects is not None:
        template = c.api.get(c.templates, spec["resourceClaims"][0]["resourceClaimTemplateName"], ns)
        expression = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]
        assert {m for m in MODELS if kcel.evaluate(expression, catalog_device(m))} == case.selects
        assert "nodeSelector" not in spec  # the family moved into the claim


def held_by(c: Cluster, ref: Obj, ns: str) -> int:
    template = c.api.get(c.templates, ref["resourceClaimTemplateName"], ns)
    return sum(r["exactly"]["count"] for r in template["spec"]["spec"]["devices"]["requests"])


def test_warnings_reach_the_client_and_stay_within_120_characters(mixed: Cluster) -> None:
    c = mixed
    c.namespace("warn", "dra")
    pod = with_spec(deployment_pod(container("main", 1), node_selector={"pool": "inference-mig"}),
                    schedulerName="volcano")
    pod["metadata"].update(name="warned", namespace="warn")
    pod["spec"]["containers"][0]["resources"]["limits"][GPU] = "1"  # the client's model wants strings
    pod["spec"]["containers"][0]["resources"]["requests"][GPU] = "1"
    _, status, headers = c.core.create_namespaced_pod_with_http_info("warn", pod)
    assert status == 201
    warnings = [w.rstrip('", ') for w in headers.get("Warning", "").split('299 - "') if w.strip()]
    assert len(warnings) >= 2 and all(len(w) <= 120 for w in warnings), warnings
    assert any("MIG slice" in w for w in warnings) and any("volcano" in w for w in warnings), warnings


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from start(tmp_path_factory.mktemp("gated"), "1.33.1", (WHOLE,), {"DynamicResourceAllocation": False})


def test_an_api_server_that_drops_claims_gets_no_translated_pods(gated: Cluster) -> None:
    c = gated
    assert c.live.current().claims_kept is False  # the dry-run check saw the claim vanish
    assert c.metrics.claims_kept._value.get() == 0
    c.namespace("gated", "dra")
    pod = deployment_pod(container("main", 2), init=(container("prep", 2),))
    out = created(c, "gated", pod)
    assert out["spec"]["containers"][0]["resources"]["limits"][GPU] in (2, "2")  # still asks the device plugin
    assert "resourceClaims" not in out["spec"] and held(c, out, "gated") == 2
    wait_until(lambda: any("drops a pod's resourceClaims" in m for m in events_about(c, "gated")), 30, "the Event")


@pytest.fixture(scope="module")
def modern(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    nodes = (gpu_node("gpu-a", "v1.36.1", WHOLE["metadata"]["labels"]), gpu_node("gpu-b", "v1.36.0"))
    yield from start(tmp_path_factory.mktemp("modern"), "1.36.0", nodes)


def test_auto_picks_extended_only_while_every_gpu_kubelet_is_1_36(modern: Cluster) -> None:
    c = modern
    c.namespace("modern", "dra")
    pod = deployment_pod(container("main", 2), init=(sidecar("logger", 1),))
    out = created(c, "modern", pod)
    assert out["spec"]["containers"][0]["resources"]["limits"][EXT] in (2, "2")
    assert out["spec"]["initContainers"][0]["resources"]["limits"][EXT] in (1, "1")
    assert "resourceClaims" not in out["spec"] and held(c, out, "modern") == 3
    # an init container with GPUs goes through claims even here (see bridge/webhook/translate.py)
    init_pod = deployment_pod(container("main", 8), init=(container("prep", 8),))
    out = created(c, "modern", init_pod)
    assert out["metadata"]["annotations"]["dra-bridge.io/translated"] == "claims" and held(c, out, "modern") == 8
    # kubelet skew: one GPU node still runs a 1.35 kubelet, which would not hand the extended claim's devices over
    node = c.api.get(NODES, "gpu-b")
    node["status"]["nodeInfo"]["kubeletVersion"] = "v1.35.4"
    c.api.update(NODES, node, subresource="status")
    wait_until(lambda: c.live.current().nodes.kubelets_at_least((1, 36))[0] is False, 30, "the skew seen")
    out = created(c, "modern", pod)
    assert out["metadata"]["annotations"]["dra-bridge.io/translated"] == "claims"
    assert {r["name"] for r in out["spec"]["resourceClaims"]} == {"gpu-logger", "gpu-main"}
    assert held(c, out, "modern") == 3
