"""Every finding can be closed by doing what its fix says: for each rule, a cluster where it fires; the change its
fix names (the command's effect, written out: the label, the annotation, the patched object, what the node daemon or
GFD does in answer) applied to that cluster; the next run has no such finding left to act on. A new rule fails
`test_every_rule_has_a_case` until it gets one here.

Info-only rules change nothing in readiness; `test_info_only_rules_ask_for_nothing` checks they never count."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from bridge.report import ReportOptions, build_report
from bridge.report.findings import RULES, Finding
from bridge.report.remediation import paired_quota
from bridge.report.report import unresolved
from tests.report.conftest import (
    bridge_class,
    cluster,
    container,
    daemonset,
    deployment,
    device_class,
    findings,
    gpu_device,
    namespace,
    node,
    pod,
    resource_slice,
    spec,
)
from tests.report.test_controller_capacity import bridge_node, empty_slices

Obj = dict[str, Any]
Objs = list[Obj]
SPLIT = "dra-bridge.io/dra-devices"
OPT_OUT = "dra-bridge.io/translate"


@dataclass
class Case:
    objects: Callable[[], Objs]
    apply: Callable[[Objs, Finding], Objs]  # the fix's effect on the cluster
    version: str = "v1.34.2"
    version_after: str | None = None  # a fix that upgrades the cluster
    api_versions: tuple[str, ...] = ("resource.k8s.io/v1",)
    unreadable: dict[str, str] = field(default_factory=dict)
    unreadable_after: dict[str, str] | None = None


def find(objs: Objs, kind: str, name: str) -> Obj:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


def opt_out(kind: str, name: str) -> Callable[[Objs, Finding], Objs]:
    """The fix's `kubectl patch KIND NAME ...` (or `annotate pod`): the opt-out annotation on the pods it makes."""
    def apply(objs: Objs, f: Finding) -> Objs:
        assert OPT_OUT in f.fix and name in f.fix, f.fix
        obj = find(objs, kind, name)
        if kind == "Pod":
            meta = obj["metadata"]
        else:
            tmpl = obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"]
            meta = tmpl["template"].setdefault("metadata", {})
        meta.setdefault("annotations", {})[OPT_OUT] = "false"
        return objs
    return apply


def edit(kind: str, name: str, change: Callable[[Obj], None], says: str) -> Callable[[Objs, Finding], Objs]:
    def apply(objs: Objs, f: Finding) -> Objs:
        assert says in f.fix, f.fix
        change(find(objs, kind, name))
        return objs
    return apply


def split_applied(objs: Objs, commands: list[str], held: dict[str, int] | None = None) -> Objs:
    """`kubectl annotate|label node N dra-bridge.io/dra-devices=V` as the node daemon answers it: the split status
    shows V devices on the DRA side (free ones move), the slice publishes them."""
    out = list(objs)
    for command in commands:
        m = re.fullmatch(rf"kubectl (annotate|label) node (\S+) {SPLIT}=(\S+) --overwrite", command)
        assert m, command
        name, value = m.group(2), m.group(3)
        old = find(out, "Node", name)
        total = int(old["status"]["capacity"]["nvidia.com/gpu"])
        dra = total if value == "all" else int(value)
        keep = (held or {}).get(name, 0)
        new = bridge_node(name, ["dra"] * dra + ["legacy"] * (total - dra), held=range(dra, dra + keep),
                          labels=old["metadata"].get("labels"), target=value)
        out = [o for o in out if o is not old and not (o["kind"] == "ResourceSlice"
                                                       and o["spec"]["nodeName"] == name)]
        out += [new, resource_slice(name, [gpu_device(i) for i in range(dra)])]
    return out


def gpu_app(name: str = "app", ns: str = "team", gpus: dict[str, int] | None = None, replicas: int = 1,
            **pod_spec: Any) -> Obj:
    return deployment(name, ns, replicas, spec(container(gpus or {"nvidia.com/gpu": 1}), **pod_spec))


def dp_config(text: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dp", "namespace": "gpu-operator"},
            "data": {"a": text}}


MIG_LABELS = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/mig.strategy": "single"}
WHOLE_A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
TIME_SLICED = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
POLICY = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
          "spec": {"devicePlugin": {"enabled": True}, "mig": {"strategy": "single"}}}
KUEUE_CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
resources:
  deviceClassMappings:
  - name: nvidia.com/gpu
    deviceClassNames: [gpu.dra-bridge.io]
"""


def _relabel(labels: dict[str, str]) -> Callable[[Obj], None]:
    def change(o: Obj) -> None:
        o["metadata"]["labels"] = dict(labels)
    return change


def _remove_containers_key(key: str) -> Callable[[Obj], None]:
    def change(o: Obj) -> None:
        for c in o["spec"]["template"]["spec"]["containers"]:
            c.pop(key, None)
    return change


def _drb017_objects() -> Objs:
    n = bridge_node("a", ["dra"] * 8, target="all")
    return [namespace("team"), bridge_class(), n, resource_slice("a", [gpu_device(i) for i in range(8)]),
            pod("legacy-0", "team", spec(container({"nvidia.com/gpu": 4})), node="a")]


def _drb017_apply(objs: Objs, f: Finding) -> Objs:
    assert f"kubectl annotate node a {SPLIT}=4 --overwrite" in f.fix, f.fix
    return split_applied(objs, [f"kubectl annotate node a {SPLIT}=4 --overwrite"], held={"a": 4})


def _drb030_apply(objs: Objs, f: Finding) -> Objs:
    assert "kubectl apply -f quota-team-gpu-quota.yaml" in f.fix, f.fix
    q = find(objs, "ResourceQuota", "gpu-quota")
    return [o for o in objs if o is not q] + [paired_quota(q, extended_on=False)]


def _quota() -> Obj:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-quota", "namespace": "team"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}


def _with_commands(held: dict[str, int] | None = None) -> Callable[[Objs, Finding], Objs]:
    def apply(objs: Objs, f: Finding) -> Objs:
        commands = f.details["commands"]
        assert isinstance(commands, list) and commands and all(c in f.fix for c in commands), f.fix
        return split_applied(objs, commands, held)
    return apply


def _pending(name: str, gpus: int) -> Obj:
    p = pod(name, "team-b", spec(container({"nvidia.com/gpu": gpus})), node="", phase="Pending")
    del p["spec"]["nodeName"]
    return p


def _drb034_apply(objs: Objs, f: Finding) -> Objs:
    assert "Replace spec.nodeName in the pod template with a node selector (kubernetes.io/hostname: gpu-1)" in f.fix
    tmpl = find(objs, "Deployment", "pinned")["spec"]["template"]["spec"]
    del tmpl["nodeName"]
    tmpl["nodeSelector"] = {"kubernetes.io/hostname": "gpu-1"}
    return objs


def _gfd_bridge_node(name: str, labels: dict[str, str]) -> Objs:
    return [node(name, 2, allocatable=0, labels=labels),
            resource_slice(name, [gpu_device(i, product="NVIDIA L4", arch="x", cc="8.9.0") for i in range(2)])]


L4_OLD = {"nvidia.com/gpu.family": "ampere", "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "9"}
L40S_NEW = {"nvidia.com/gpu.family": "ada-lovelace", "nvidia.com/gpu.compute.major": "8",
            "nvidia.com/gpu.compute.minor": "9"}
DEPLOY_DP = "nvidia.com/gpu.deploy.device-plugin"
DP_DS = daemonset("nvidia-device-plugin", "gpu-operator", "x", pod_spec={"nodeSelector": {DEPLOY_DP: "true"},
                  "containers": [{"name": "c", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17"}]})
DP_POD = pod("dp-1", "gpu-operator", owner=("DaemonSet", "nvidia-device-plugin"))


def _drb010_apply(objs: Objs, f: Finding) -> Objs:
    """The operator's label: its DaemonSet no longer selects the node, and its pod there goes."""
    assert f"kubectl label node gpu-1 {DEPLOY_DP}=false --overwrite" in f.fix, f.fix
    find(objs, "Node", "gpu-1")["metadata"]["labels"][DEPLOY_DP] = "false"
    return [o for o in objs if not (o["kind"] == "Pod" and o["metadata"]["name"] == "dp-1")]


def _set_config(text: str, says: str) -> Callable[[Objs, Finding], Objs]:
    return edit("ConfigMap", "dp", lambda o: o.__setitem__("data", {"a": text}), says)


CASES: dict[str, Case] = {
    "DRB000": Case(lambda: [namespace("team")], lambda objs, f: objs, unreadable={"resourceclaims": "forbidden"},
                   unreadable_after={}),
    "DRB001": Case(lambda: [namespace("team")], lambda objs, f: objs, version="v1.33.4",
                   api_versions=("resource.k8s.io/v1beta1",), version_after="v1.34.2"),
    "DRB003": Case(lambda: [device_class("a", "true", "example.com/x", "2026-01-01T00:00:00Z"),
                            device_class("b", "true", "example.com/x", "2026-02-01T00:00:00Z")],
                   edit("DeviceClass", "a", lambda o: o["spec"].pop("extendedResourceName"),
                        "kubectl patch deviceclass a --type json")),
    "DRB004": Case(lambda: [namespace("team"), gpu_app()],
                   lambda objs, f: [*objs, bridge_class()] if "kubectl apply -f deviceclass.yaml" in f.fix else objs),
    "DRB010": Case(lambda: [node("gpu-1", labels={DEPLOY_DP: "true"}), DP_DS, DP_POD,
                            resource_slice("gpu-1", [gpu_device(0)])], _drb010_apply),
    "DRB011": Case(lambda: [node("cpu-1", 0, extra={"nvidia.com/gpu": "0"})],
                   edit("Node", "cpu-1", lambda o: o["status"].update(capacity={}, allocatable={}),
                        "kubectl patch node cpu-1 --subresource=status --type json")),
    "DRB012": Case(lambda: [node("gpu-1", runtime="docker://24.0.7")],
                   edit("Node", "gpu-1", lambda o: o["status"]["nodeInfo"].update(
                       containerRuntimeVersion="containerd://2.0.4"), "containerd 2.x")),
    "DRB013": Case(lambda: [bridge_node("a", ["legacy"] * 4, labels={SPLIT: "9"}), *empty_slices("a")],
                   edit("Node", "a", lambda o: o["metadata"]["labels"].update({SPLIT: "2"}),
                        f"kubectl label node --overwrite a {SPLIT}=<0|N|all|gpu-I>")),
    "DRB014": Case(lambda: [{**node("a"), "metadata": {"name": "a", "annotations": {
                       "dra-bridge.io/split-decision": "{not json"}}}],
                   edit("Node", "a", lambda o: o["metadata"]["annotations"].clear(),
                        "kubectl annotate node a dra-bridge.io/split-decision-")),
    "DRB015": Case(lambda: [POLICY, node("mig-1", 7, labels=MIG_LABELS)],  # GFD relabels once MIG is off
                   edit("Node", "mig-1", _relabel(WHOLE_A100), "kubectl label node mig-1 "
                        "nvidia.com/mig.config=all-disabled --overwrite")),
    "DRB016": Case(lambda: [{**node("gpu-1"), "status": {**node("gpu-1")["status"], "nodeInfo": {
                       "kubeletVersion": "v1.35.1", "containerRuntimeVersion": "containerd://2.0.4"}}}],
                   edit("Node", "gpu-1", lambda o: o["status"]["nodeInfo"].update(kubeletVersion="v1.36.2"),
                        "Upgrade the kubelet on gpu-1 to 1.36+"), version="v1.36.2"),
    "DRB017": Case(_drb017_objects, _drb017_apply),
    "DRB020": Case(lambda: [gpu_app(gpus={"nvidia.com/mig-1g.10gb": 1})], opt_out("Deployment", "app")),
    "DRB021": Case(lambda: [gpu_app(gpus={"nvidia.com/gpu.shared": 1})], opt_out("Deployment", "app")),
    "DRB022": Case(lambda: [gpu_app(gpus={"nvidia.com/gpumem": 1024})], opt_out("Deployment", "app")),
    "DRB023": Case(lambda: [gpu_app(gpus={"nvidia.com/gpu": 40})], opt_out("Deployment", "app")),
    "DRB025": Case(lambda: [gpu_app(nodeSelector={"nvidia.com/gpu.compute.major": "nine"})],
                   opt_out("Deployment", "app")),
    "DRB026": Case(lambda: [pod("nb", "team", spec(volumes=[{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}]))],
                   edit("Pod", "nb", lambda o: o["spec"].pop("volumes"), "Remove the hostPath volumes")),
    "DRB027": Case(lambda: [deployment("app", "team", 1, spec(container({"nvidia.com/gpu": 1},
                                                                        securityContext={"privileged": True})))],
                   edit("Deployment", "app", _remove_containers_key("securityContext"), "Drop privileged: true")),
    "DRB028": Case(lambda: [deployment("app", "team", 1, spec(container(
                       {"nvidia.com/gpu": 1}, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}])))],
                   edit("Deployment", "app", _remove_containers_key("env"), "Remove NVIDIA_VISIBLE_DEVICES")),
    "DRB029": Case(lambda: [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                             "metadata": {"name": "high"}, "value": 1000},
                            gpu_app(priorityClassName="high")], opt_out("Deployment", "app")),
    "DRB030": Case(lambda: [namespace("team"), _quota(), gpu_app(), gpu_app(ns="other")], _drb030_apply),
    "DRB031": Case(lambda: [namespace("team", "dar")],
                   edit("Namespace", "team", lambda o: o["metadata"]["labels"].update({"dra-bridge.io/mode": "dra"}),
                        "bridge namespace set team legacy|shadow|dra")),
    "DRB032": Case(lambda: [namespace("team", "shadow"), bridge_class(), gpu_app(gpus={"nvidia.com/gpu": 2},
                                                                                  replicas=3),
                            bridge_node("a", ["legacy"] * 4), bridge_node("b", ["legacy"] * 4),
                            *empty_slices("a", "b")], _with_commands()),
    "DRB034": Case(lambda: [gpu_app("pinned", nodeName="gpu-1")], _drb034_apply),
    "DRB035": Case(lambda: [*_gfd_bridge_node("l4-1", L4_OLD), *_gfd_bridge_node("l40s-1", L40S_NEW), bridge_class(),
                            gpu_app(nodeSelector={"nvidia.com/gpu.family": "ampere"})],
                   opt_out("Deployment", "app")),
    "DRB036": Case(lambda: [POLICY, node("mig-1", 7, labels=MIG_LABELS),
                            pod("embed-0", "team", spec(container({"nvidia.com/gpu": 1})), owner=("Deployment", "app"),
                                node="mig-1"), gpu_app()], opt_out("Deployment", "app")),
    "DRB037": Case(lambda: [namespace("team-b"),
                            bridge_node("c", ["dra"] * 4 + ["legacy"] * 4, held=[4, 5, 6, 7], target="4"),
                            resource_slice("c", [gpu_device(i) for i in range(4)]), _pending("sweep-0", 2)],
                   _with_commands(held={"c": 4})),
    "DRB040": Case(lambda: [gpu_app(), deployment("cluster-autoscaler", "kube-system", 1, spec(container(
                       name="ca", image="registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.1",
                       command=["./cluster-autoscaler"])))],
                   edit("Deployment", "cluster-autoscaler", lambda o: o["spec"]["template"]["spec"]["containers"][0][
                       "command"].append("--enable-dynamic-resource-allocation=true"),
                        "Add --enable-dynamic-resource-allocation=true")),
    "DRB041": Case(lambda: [daemonset("dcgm-exporter", "gpu-operator", "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3")],
                   edit("DaemonSet", "dcgm-exporter", lambda o: o["spec"]["template"]["spec"]["containers"][0].update(
                       env=[{"name": "KUBERNETES_ENABLE_DRA", "value": "true"}]),
                        "kubectl -n gpu-operator set env daemonset/dcgm-exporter KUBERNETES_ENABLE_DRA=true")),
    "DRB042": Case(lambda: [copy.deepcopy(POLICY), node("mig-1", 7, labels=MIG_LABELS)],
                   edit("ClusterPolicy", "cluster-policy", lambda o: o["spec"]["mig"].update(strategy="mixed"),
                        "kubectl patch clusterpolicy cluster-policy --type merge")),
    "DRB043": Case(lambda: [gpu_app(ns="team-rl"),
                            {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
                             "metadata": {"name": "q"}, "spec": {"resourceGroups": [{
                                 "coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "a100", "resources": [
                                     {"name": "nvidia.com/gpu", "nominalQuota": "8"}]}]}]}},
                            {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                             "metadata": {"name": "lq", "namespace": "team-rl"}, "spec": {"clusterQueue": "q"}}],
                   lambda objs, f: [*objs, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                       "name": "kueue-manager-config", "namespace": "kueue-system"},
                       "data": {"controller_manager_config.yaml": KUEUE_CONFIG}}]
                   if "kubectl -n kueue-system edit configmap kueue-manager-config" in f.fix else objs),
    "DRB050": Case(lambda: [dp_config(TIME_SLICED), node("t4-1", 4, labels={"nvidia.com/device-plugin.config": "a"})],
                   _set_config(TIME_SLICED.replace("timeSlicing:\n", "timeSlicing:\n    renameByDefault: true\n"),
                               "sharing.timeSlicing.renameByDefault: true")),
    "DRB053": Case(lambda: [dp_config("version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  mps:\n    resources:\n"
                                      "    - name: nvidia.com/gpu\n      replicas: 2\n")],
                   _set_config("version: v1\nflags:\n  migStrategy: mixed\n", "remove sharing.mps")),
    "DRB054": Case(lambda: [dp_config("version: v1\nflags:\n  migStrategy: single\n"),
                            node("mig-1", 7, labels={**MIG_LABELS, "nvidia.com/device-plugin.config": "a"})],
                   _set_config("version: v1\nflags:\n  migStrategy: mixed\n", "flags.migStrategy: mixed")),
    "DRB055": Case(lambda: [dp_config("version: v1\nflags:\n  migStrategy: none\n"),
                            node("gpu-1", labels={"nvidia.com/device-plugin.config": "missing"})],
                   edit("Node", "gpu-1", lambda o: o["metadata"]["labels"].update(
                       {"nvidia.com/device-plugin.config": "a"}),
                        "kubectl label node gpu-1 nvidia.com/device-plugin.config=a --overwrite")),
    "DRB056": Case(lambda: [dp_config(TIME_SLICED.replace("replicas: 4", "replicas: 1"))],
                   _set_config(TIME_SLICED, "kubectl -n gpu-operator edit configmap dp, key a")),
    "DRB057": Case(lambda: [gpu_app(gpus={"nvidia.com/gpu": "1e400"})],  # type: ignore[dict-item]
                   edit("Deployment", "app", lambda o: o["spec"]["template"]["spec"]["containers"][0]["resources"][
                       "limits"].update({"nvidia.com/gpu": "2"}), "as a whole number of GPUs")),
}
INFO_ONLY = {"DRB002", "DRB033", "DRB051", "DRB052"}


def test_every_rule_has_a_case() -> None:
    assert sorted(set(RULES) - INFO_ONLY - set(CASES)) == []
    assert all(RULES[r].severities == ("info",) for r in INFO_ONLY)


def _data(case: Case, objs: Objs, after: bool = False) -> Any:
    unreadable = case.unreadable_after if after and case.unreadable_after is not None else case.unreadable
    version = case.version_after if after and case.version_after else case.version
    apis = ("resource.k8s.io/v1",) if after and case.version_after else case.api_versions
    return cluster(*objs, version=version, api_versions=apis, unreadable=unreadable)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_applying_the_fix_closes_the_finding(rule_id: str) -> None:
    case = CASES[rule_id]
    objs = case.objects()
    before = findings(_data(case, objs), rule_id)
    open_ = [f for f in before if f.severity != "info"]
    assert open_, f"{rule_id}: the case does not make the rule ask for anything: {before}"
    assert all(f.severity in RULES[rule_id].severities for f in before), before
    target = open_[0]
    assert target.fix and "NODE" not in target.fix.replace("NODE=", ""), target.fix  # names its objects
    after = findings(_data(case, case.apply(copy.deepcopy(objs), target), after=True), rule_id)
    left = [f for f in after if f.object == target.object and f.severity != "info"]
    assert left == [], f"{rule_id}: still open after its fix ({target.fix}): {left}"


def test_info_only_rules_ask_for_nothing() -> None:
    """DRB002 (feature availability), DRB033 (init-container GPUs), DRB051/DRB052 (config facts): their findings are
    info, so they never make anything needs-config or block a gate."""
    data = cluster(namespace("team", "shadow"), dp_config(TIME_SLICED.replace(
        "timeSlicing:\n", "timeSlicing:\n    renameByDefault: true\n    failRequestsGreaterThanOne: true\n")),
        deployment("eval", "team", 1, spec(container({"nvidia.com/gpu": 1}),
                                           initContainers=[container({"nvidia.com/gpu": 2}, name="warmup")])),
        version="v1.33.4", api_versions=("resource.k8s.io/v1beta1",))
    report = build_report(data, ReportOptions())
    got = {f.rule for f in report.findings if f.rule in INFO_ONLY}
    assert got == INFO_ONLY
    assert all(f.severity == "info" for f in report.findings if f.rule in INFO_ONLY)
    assert not [f for f in unresolved(report, "team", frozenset(INFO_ONLY)) if f.rule in INFO_ONLY]


def test_a_kueue_configuration_without_the_mapping_does_not_count() -> None:
    objs = CASES["DRB043"].objects()
    unrelated = yaml.safe_dump({"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration",
                                "resources": {"deviceClassMappings": [{"name": "example.com/fpga",
                                                                        "deviceClassNames": ["fpga"]}]}})
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config",
                                                                "namespace": "kueue-system"},
          "data": {"controller_manager_config.yaml": unrelated}}
    assert [f.severity for f in findings(cluster(*objs, cm), "DRB043")] == ["blocker"]


def test_a_wrong_split_does_not_close_the_capacity_finding() -> None:
    """Raising a node's split by less than the finding says leaves it open (the gate keeps refusing)."""
    case = CASES["DRB032"]
    objs = case.objects()
    (f,) = findings(_data(case, objs), "DRB032")
    short = split_applied(objs, [f"kubectl annotate node a {SPLIT}=2 --overwrite"])
    assert [g.rule for g in findings(_data(case, short), "DRB032")] == ["DRB032"]
    assert f.details["commands"] == [f"kubectl annotate node a {SPLIT}=all --overwrite",
                                     f"kubectl annotate node b {SPLIT}=2 --overwrite"]
