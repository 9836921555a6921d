"""Cluster and node checks: each triggered by a minimal object set, and quiet on the fixed one."""

from __future__ import annotations

from tests.report.conftest import (
    bridge_class,
    cluster,
    container,
    daemonset,
    deployment,
    device_class,
    findings,
    gpu_device,
    node,
    pod,
    resource_slice,
    spec,
)

GPU_WORKLOAD = deployment("app", pod_spec=spec(container({"nvidia.com/gpu": 1})))


# ---- DRB000 input completeness
def test_unreadable_resources_are_named_with_the_missing_permission() -> None:
    fs = findings(cluster(unreadable={"pods": "forbidden: the credentials may not list pods"}), "DRB000")
    assert [(f.severity, f.object.name) for f in fs] == [("warning", "pods")]
    assert "may not list pods" in fs[0].message


def test_complete_input_has_no_completeness_finding() -> None:
    assert findings(cluster(), "DRB000") == []


# ---- DRB001 version and API
def test_cluster_without_resource_api_is_blocked() -> None:
    fs = findings(cluster(version="v1.30.4", api_versions=()), "DRB001")
    assert [f.severity for f in fs] == ["blocker"]
    assert "not served" in fs[0].message and "1.34" in fs[0].fix


def test_beta_only_resource_api_needs_config() -> None:
    fs = findings(cluster(version="v1.33.1", api_versions=("resource.k8s.io/v1beta1",)), "DRB001")
    assert [f.severity for f in fs] == ["warning"]
    assert "v1beta1" in fs[0].message


def test_unknown_version_is_a_warning_not_a_guess() -> None:
    fs = findings(cluster(version="", api_versions=None), "DRB001")
    assert [f.severity for f in fs] == ["warning"] and "unknown" in fs[0].message


def test_ga_cluster_with_v1_passes_the_api_check() -> None:
    assert findings(cluster(version="v1.35.0"), "DRB001") == []


# ---- DRB002 feature availability
def test_feature_stages_follow_the_version_table() -> None:
    by_gate = {f.object.name: f.details["stage"] for f in findings(cluster(version="v1.36.1"), "DRB002")}
    assert by_gate["DRAExtendedResource"] == "beta"
    assert by_gate["DRADeviceTaints"] == "beta"
    assert by_gate["DRAConsumableCapacity"] == "beta"
    assert by_gate["KEP-6406"] == "absent"
    ga = {f.object.name: f.details["stage"] for f in findings(cluster(version="v1.37.0"), "DRB002")}
    assert ga["DRAExtendedResource"] == "ga" and ga["DRADeviceTaints"] == "ga"
    # KEP-6406 is provisional: no gate and no stage in any release, so no version makes it available.
    assert {f.object.name: f.details["stage"] for f in findings(cluster(version="v1.38.0"), "DRB002")}[
        "KEP-6406"] == "absent"


def test_feature_facts_match_the_landscape_table() -> None:
    """kubernetes/kubernetes pkg/features/kube_features.go: gate names, KEP numbers and the first version on by default."""
    by_gate = {f.object.name: f for f in findings(cluster(version="v1.34.2"), "DRB002")}
    expected = {"DRAExtendedResource": ("5004", "alpha", "1.36"), "DRADeviceTaints": ("5055", "alpha", "1.36"),
                "DRAConsumableCapacity": ("5075", "alpha", "1.36"),
                "KEP-6406": ("6406", "absent", None),
                "ResourceHealthStatus": ("4680", "alpha", "1.36")}
    assert set(by_gate) == set(expected)
    for gate, (kep, stage, on_from) in expected.items():
        f = by_gate[gate]
        assert f"KEP-{kep}" in f.message and f.details["stage"] == stage
        if on_from is None:
            assert f.fix == "Not available in any release yet (KEP-6406 (provisional, no feature gate in Kubernetes yet))"
        else:
            assert f"Available by default from {on_from}" in f.fix


def test_feature_findings_are_info_and_absent_without_a_version() -> None:
    assert {f.severity for f in findings(cluster(version="v1.34.2"), "DRB002")} == {"info"}
    assert findings(cluster(version="", api_versions=None), "DRB002") == []


# ---- DRB003 duplicate extendedResourceName
def test_two_classes_with_one_extended_name_name_the_later_one_as_winner() -> None:
    data = cluster(device_class("gpu.nvidia.com", "true", "nvidia.com/gpu", "2026-01-01T00:00:00Z"),
                   device_class("mig-1g.nvidia.com", "true", "nvidia.com/gpu", "2026-03-01T00:00:00Z"))
    fs = findings(data, "DRB003")
    assert len(fs) == 2 and {f.severity for f in fs} == {"blocker"}
    assert all(f.details["winner"] == "mig-1g.nvidia.com" for f in fs)
    assert "mig-1g.nvidia.com (created last)" in fs[0].message


def test_equal_creation_time_picks_the_lexicographically_first_class() -> None:
    data = cluster(device_class("b-class", "true", "nvidia.com/gpu"), device_class("a-class", "true", "nvidia.com/gpu"))
    fs = findings(data, "DRB003")
    assert fs[0].details["winner"] == "a-class" and "same creation time" in fs[0].message


def test_distinct_extended_names_are_fine() -> None:
    data = cluster(device_class("a", "true", "nvidia.com/gpu"), device_class("b", "true", "nvidia.com/mig-1g.10gb"))
    assert findings(data, "DRB003") == []


# ---- DRB004 bridge DeviceClass
def test_missing_bridge_class_needs_config_when_gpu_workloads_exist() -> None:
    fs = findings(cluster(GPU_WORKLOAD), "DRB004")
    assert [f.severity for f in fs] == ["warning"] and "--emit-manifests" in fs[0].fix


def test_bridge_class_with_invalid_cel_is_a_blocker() -> None:
    fs = findings(cluster(GPU_WORKLOAD, device_class("gpu.dra-bridge.io", 'device.driver == "gpu.dra-bridge.io" &&')),
                  "DRB004")
    assert "blocker" in [f.severity for f in fs]


def test_bridge_class_selecting_the_driver_passes() -> None:
    assert findings(cluster(GPU_WORKLOAD, bridge_class()), "DRB004") == []


# ---- DRB010 two backends on one node
def test_device_plugin_and_bridge_on_one_node_is_a_blocker() -> None:
    data = cluster(node("gpu-1"), daemonset("nvidia-device-plugin", "gpu-operator", "nvcr.io/nvidia/k8s-device-plugin:v0.17"),
                   pod("dp-1", "gpu-operator", owner=("DaemonSet", "nvidia-device-plugin")),
                   resource_slice("gpu-1", [gpu_device(0)]))
    fs = findings(data, "DRB010")
    assert [f.severity for f in fs] == ["blocker"] and fs[0].object.name == "gpu-1"
    assert "keeps one plugin per resource name (the last to register)" in fs[0].message
    # Without a sign of the GPU Operator both supported ways are named; the operator's comes first.
    assert fs[0].fix.startswith("Under the GPU Operator, label the node: kubectl label node gpu-1 "
                                "nvidia.com/gpu.deploy.device-plugin=false --overwrite")
    assert "editing the operator's DaemonSet is reverted" in fs[0].fix and "standalone" in fs[0].fix


def test_under_the_gpu_operator_the_fix_is_the_node_label_only() -> None:
    operator_node = node("gpu-1", labels={"nvidia.com/gpu.deploy.device-plugin": "true"})
    data = cluster(operator_node, daemonset("nvidia-device-plugin", "gpu-operator", "nvcr.io/nvidia/k8s-device-plugin:v0.17"),
                   pod("dp-1", "gpu-operator", owner=("DaemonSet", "nvidia-device-plugin")),
                   resource_slice("gpu-1", [gpu_device(0)]))
    fix = findings(data, "DRB010")[0].fix
    assert "nvidia.com/gpu.deploy.device-plugin=false" in fix and "standalone" not in fix


def test_extended_name_backed_by_dra_and_device_plugin_on_one_node() -> None:
    """The scheduler serves the name through the device plugin wherever allocatable is above 0: the DRA devices are
    unreachable by that name on this node (not 'forbidden')."""
    data = cluster(node("gpu-1", 4), device_class("gpu.nvidia.com", 'device.driver == "gpu.nvidia.com"', "nvidia.com/gpu"),
                   resource_slice("gpu-1", [gpu_device(0)], driver="gpu.nvidia.com"))
    fs = findings(data, "DRB010")
    named = [f for f in fs if f.details.get("deviceClass") == "gpu.nvidia.com"]
    assert [f.severity for f in named] == ["warning"]
    assert "serves nvidia.com/gpu through the device plugin on every node whose allocatable for it is above 0" \
        in named[0].message and "never get the DRA devices gpu.nvidia.com selects" in named[0].message
    assert "forbid" not in named[0].message and "nvidia.com/gpu.deploy.device-plugin=false" in named[0].fix
    assert any("counts each GPU twice" in f.message for f in fs)


def test_extended_name_on_a_node_whose_device_plugin_allocatable_is_zero_is_served_by_dra() -> None:
    data = cluster(node("gpu-1", 4, allocatable=0),
                   device_class("gpu.nvidia.com", 'device.driver == "gpu.nvidia.com"', "nvidia.com/gpu"),
                   resource_slice("gpu-1", [gpu_device(0)], driver="gpu.nvidia.com"))
    assert [f for f in findings(data, "DRB010") if f.details.get("deviceClass")] == []


def test_bridge_alone_on_its_node_is_fine() -> None:
    data = cluster(node("gpu-1", 8, allocatable=4),
                   daemonset("dra-bridge-node", "dra-bridge", "img", {"app.kubernetes.io/name": "dra-bridge",
                                                                     "app.kubernetes.io/component": "node"}),
                   pod("b-1", "dra-bridge", owner=("DaemonSet", "dra-bridge-node")),
                   resource_slice("gpu-1", [gpu_device(i) for i in range(4)]))
    assert findings(data, "DRB010") == []


# ---- DRB011 stale zero capacity
def test_zero_gpu_capacity_without_a_device_plugin_is_stale() -> None:
    fs = findings(cluster(node("cpu-1", 0, extra={"nvidia.com/gpu": "0"})), "DRB011")
    assert [f.object.name for f in fs] == ["cpu-1"]


def test_node_without_gpu_entries_is_not_stale() -> None:
    assert findings(cluster(node("cpu-1", 0)), "DRB011") == []


# ---- DRB012 runtime CDI
def test_cri_dockerd_blocks_and_containerd_17_needs_config() -> None:
    data = cluster(node("a", runtime="docker://24.0.7"), node("b", runtime="containerd://1.7.22"),
                   node("c", runtime="containerd://1.6.30"))
    got = {f.object.name: f.severity for f in findings(data, "DRB012")}
    assert got == {"a": "blocker", "b": "warning", "c": "blocker"}


def test_containerd_2_and_crio_support_cdi() -> None:
    data = cluster(node("a", runtime="containerd://2.0.4"), node("b", runtime="cri-o://1.31.2"))
    assert findings(data, "DRB012") == []


# ---- DRB013 split label
def _bridge_node(split: str) -> list:
    return [node("gpu-1", 8, labels={"dra-bridge.io/dra-devices": split}), resource_slice("gpu-1", [gpu_device(0)])]


def test_malformed_split_label_on_a_bridge_node() -> None:
    fs = findings(cluster(*_bridge_node("half")), "DRB013")
    assert [f.severity for f in fs] == ["warning"] and "'half'" in fs[0].message


def test_valid_split_labels_pass() -> None:
    for split in ("0", "4", "all"):
        assert findings(cluster(*_bridge_node(split)), "DRB013") == []


# ---- DRB014 the controller's decisions
def _decided_node(text: str) -> dict:
    n = node("gpu-4", 8)
    n["metadata"].setdefault("annotations", {})["dra-bridge.io/split-decision"] = text
    return n


def test_the_controllers_latest_decision_is_shown_with_its_reason() -> None:
    from bridge.controller.record import DecisionRecord

    rec = DecisionRecord(time="2025-06-01T12:00:00Z", controller="ctl-1", dry_run=False, previous="0", target="6",
                         from_dra=0, to_dra=6, direction="to-dra",
                         reason="3 pending DRA pods in team-a need 6 GPUs; gpu-4 had 6 free legacy GPUs: moving 6")
    (f,) = findings(cluster(_decided_node(rec.encode())), "DRB014")
    assert f.severity == "info" and f.object.name == "gpu-4"
    assert f.message.startswith("bridge controller ctl-1 set dra-bridge.io/dra-devices 0 -> 6 at 2025-06-01T12:00:00Z")
    assert "3 pending DRA pods in team-a need 6 GPUs" in f.message and "split-pinned" in f.fix
    dry = DecisionRecord(**{**rec.__dict__, "dry_run": True})
    (f,) = findings(cluster(_decided_node(dry.encode())), "DRB014")
    assert " would set " in f.message and "--dry-run" in f.fix and f.details["dryRun"] is True


def test_an_unreadable_decision_record_is_a_warning_and_nodes_without_one_are_quiet() -> None:
    (f,) = findings(cluster(_decided_node('{"version": 9}')), "DRB014")
    assert f.severity == "warning" and "schema version 9" in f.message
    assert findings(cluster(node("gpu-1", 8)), "DRB014") == []


# ---- DRB040 autoscaler
def test_karpenter_and_cluster_autoscaler_without_dra_flag() -> None:
    karp = deployment("karpenter", "karpenter", pod_spec=spec({"name": "c", "image": "public.ecr.aws/karpenter/controller:1.5"}))
    ca = deployment("cluster-autoscaler", "kube-system", pod_spec=spec(
        {"name": "c", "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.1", "command": ["./cluster-autoscaler"]}))
    got = {f.object.name for f in findings(cluster(GPU_WORKLOAD, karp, ca), "DRB040")}
    assert got == {"karpenter", "cluster-autoscaler"}


def test_cluster_autoscaler_with_dra_enabled_passes() -> None:
    ca = deployment("cluster-autoscaler", "kube-system", pod_spec=spec(
        {"name": "c", "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.1",
         "args": ["--enable-dynamic-resource-allocation=true"]}))
    assert findings(cluster(GPU_WORKLOAD, ca), "DRB040") == []


# ---- DRB041 dcgm-exporter
def test_dcgm_exporter_without_dra_env() -> None:
    ds = daemonset("dcgm-exporter", "gpu-operator", "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3")
    assert [f.object.name for f in findings(cluster(ds), "DRB041")] == ["dcgm-exporter"]


def test_dcgm_exporter_with_dra_env_passes() -> None:
    ds = daemonset("dcgm-exporter", "gpu-operator", "x", pod_spec={"containers": [
        {"name": "c", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3",
         "env": [{"name": "KUBERNETES_ENABLE_DRA", "value": "true"}]}]})
    assert findings(cluster(ds), "DRB041") == []
