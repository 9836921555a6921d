"""Findings about what real clusters hide: GPUs that are not whole GPUs, pods the scheduler does not place, kubelets
too old for the extended target, quotas and queues that translated pods escape. Each with a no-trigger twin."""

from __future__ import annotations

from typing import Any

from tests.report.conftest import (
    Obj,
    bridge_class,
    cluster,
    container,
    deployment,
    findings,
    namespace,
    node,
    pod,
    spec,
)


def app(gpu: int = 1, replicas: int = 1, ns: str = "team", name: str = "app", **pod_extra: Any) -> Obj:
    return deployment(name, ns, replicas, spec(container({"nvidia.com/gpu": gpu}), **pod_extra))


def running(name: str, ns: str, node_name: str, gpu: int = 1) -> Obj:
    return pod(name, ns, spec(container({"nvidia.com/gpu": gpu})), owner=("Deployment", "app"), node=node_name)


def configmap(**data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dp-config", "namespace": "gpu-operator"},
            "data": data}


def cluster_policy(mig: str = "", config: str = "", default: str = "") -> Obj:
    spec_: Obj = {"devicePlugin": {"enabled": True}}
    if mig:
        spec_["mig"] = {"strategy": mig}
    if config:
        spec_["devicePlugin"]["config"] = {"name": config, "default": default}
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
            "spec": spec_}


TIME_SLICED = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
               "      replicas: 4\n")
WHOLE = "version: v1\nflags:\n  migStrategy: none\n"
MIG_NODE_LABELS = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/mig.strategy": "single"}


# ---- DRB015 nvidia.com/gpu is not a whole GPU on the node


def test_a_node_running_an_un_renamed_time_slicing_config_is_blocked() -> None:
    data = cluster(configmap(default=WHOLE, ts=TIME_SLICED), node("gpu-1", 8),
                   node("gpu-2", 32, labels={"nvidia.com/device-plugin.config": "ts"}))
    fs = findings(data, "DRB015")
    assert [(f.object.name, f.severity) for f in fs] == [("gpu-2", "blocker")]
    assert "shares nvidia.com/gpu without a rename (timeSlicing x4)" in fs[0].message


def test_nodes_running_a_whole_gpu_config_are_not_flagged() -> None:
    data = cluster(configmap(default=WHOLE, ts=TIME_SLICED), node("gpu-1", 8))
    assert findings(data, "DRB015") == []


def test_the_cluster_policy_mig_strategy_single_blocks_mig_enabled_nodes_only() -> None:
    """The ClusterPolicy's spec.mig.strategy reaches the plugin as MIG_STRATEGY and wins over the config file."""
    data = cluster(cluster_policy(mig="single", config="dp-config", default="default"), configmap(default=WHOLE),
                   node("mig-1", 7, labels=MIG_NODE_LABELS), node("gpu-1", 8))
    fs = findings(data, "DRB015")
    assert [f.object.name for f in fs] == ["mig-1"]
    assert "spec.mig.strategy of ClusterPolicy/cluster-policy" in fs[0].message


def test_mig_strategy_mixed_keeps_nvidia_gpu_whole() -> None:
    data = cluster(cluster_policy(mig="mixed"), node("mig-1", 0, extra={"nvidia.com/mig-1g.5gb": "7"}))
    assert findings(data, "DRB015") == []


# ---- DRB036 workloads on such nodes


def test_a_workload_running_on_a_time_sliced_node_is_blocked() -> None:
    data = cluster(configmap(ts=TIME_SLICED), node("gpu-1", 32), app(), running("app-1", "team", "gpu-1"))
    fs = findings(data, "DRB036")
    assert [(f.object.name, f.severity) for f in fs] == [("app", "blocker")]
    assert "runs on nodes where nvidia.com/gpu is not a whole GPU (gpu-1" in fs[0].message


def test_a_workload_selecting_only_mig_nodes_is_blocked_and_one_on_whole_gpus_is_not() -> None:
    data = cluster(cluster_policy(mig="single"), node("mig-1", 7, labels=MIG_NODE_LABELS),
                   node("gpu-1", 8, labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}),
                   app(name="sliced", nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}),
                   app(name="whole", nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}))
    fs = findings(data, "DRB036")
    assert [(f.object.name, f.details["nodes"]) for f in fs] == [("sliced", ["mig-1"])]


def test_no_shared_nodes_no_workload_finding() -> None:
    data = cluster(configmap(default=WHOLE), node("gpu-1", 8), app(), running("app-1", "team", "gpu-1"))
    assert findings(data, "DRB036") == []


# ---- DRB042 the GPU Operator's ClusterPolicy


def test_cluster_policy_mig_single_with_mig_enabled_nodes_is_a_blocker() -> None:
    fs = findings(cluster(cluster_policy(mig="single"), node("mig-1", 7, labels=MIG_NODE_LABELS)), "DRB042")
    assert [(f.object.kind, f.severity) for f in fs] == [("ClusterPolicy", "blocker")]
    assert fs[0].details["nodes"] == ["mig-1"]
    assert "kubectl patch clusterpolicy cluster-policy --type merge -p '{\"spec\":{\"mig\":{\"strategy\":\"mixed\"}}}'" in fs[0].fix


def test_cluster_policy_mig_single_without_mig_nodes_is_only_information() -> None:
    fs = findings(cluster(cluster_policy(mig="single"), node("gpu-1", 8)), "DRB042")
    assert [f.severity for f in fs] == ["info"]
    assert findings(cluster(cluster_policy(mig="mixed"), node("mig-1", 7, labels=MIG_NODE_LABELS)), "DRB042") == []


def test_cluster_policy_default_config_drives_the_un_renamed_time_slicing_blocker() -> None:
    """spec.devicePlugin.config.default names the config every unlabeled node runs."""
    data = cluster(cluster_policy(config="dp-config", default="ts"), configmap(default=WHOLE, ts=TIME_SLICED),
                   node("gpu-1", 32))
    fs = findings(data, "DRB050")
    assert [f.severity for f in fs] == ["blocker"] and fs[0].details["nodes"] == ["gpu-1"]
    assert "spec.devicePlugin.config.default of ClusterPolicy/cluster-policy" in fs[0].message
    missing = findings(cluster(cluster_policy(config="elsewhere"), node("gpu-1", 8)), "DRB042")
    assert [f.severity for f in missing] == ["warning"] and "elsewhere" in missing[0].message


# ---- DRB034 pods the default scheduler does not place


def test_preset_node_name_in_a_template_is_a_blocker() -> None:
    fs = findings(cluster(app(nodeName="gpu-7")), "DRB034")
    assert [(f.severity, f.details["nodeName"]) for f in fs] == [("blocker", "gpu-7")]
    assert "kubernetes.io/hostname: gpu-7" in fs[0].fix


def test_another_scheduler_needs_configuration() -> None:
    fs = findings(cluster(app(schedulerName="volcano")), "DRB034")
    assert [(f.severity, f.details["schedulerName"]) for f in fs] == [("warning", "volcano")]
    assert "--translate-scheduler volcano" in fs[0].fix


def test_default_scheduler_and_bare_pods_bound_by_it_are_fine() -> None:
    assert findings(cluster(app(schedulerName="default-scheduler")), "DRB034") == []
    bare = pod("p", "team", spec(container({"nvidia.com/gpu": 1})), node="gpu-3")  # nodeName from the binding
    assert findings(cluster(bare), "DRB034") == []


# ---- DRB016 kubelets too old for the extended target


def _gpu_node(name: str, kubelet: str) -> Obj:
    n = node(name, 8)
    n["status"]["nodeInfo"]["kubeletVersion"] = kubelet
    return n


def test_an_old_kubelet_holds_back_the_extended_target_on_a_136_cluster() -> None:
    data = cluster(_gpu_node("gpu-1", "v1.35.4"), _gpu_node("gpu-2", "v1.36.1"), version="v1.36.1")
    fs = findings(data, "DRB016")
    assert [(f.object.name, f.severity) for f in fs] == [("gpu-1", "warning")]
    assert "DRAExtendedResource, KEP-5004: alpha in 1.34, beta in 1.36" in fs[0].message


def test_a_namespace_forcing_the_extended_target_is_blocked_by_old_kubelets() -> None:
    ns = namespace("team", "dra")
    ns["metadata"]["labels"]["dra-bridge.io/target"] = "extended"
    fs = findings(cluster(ns, _gpu_node("gpu-1", "v1.34.2"), version="v1.36.1"), "DRB016")
    assert sorted((f.object.kind, f.severity) for f in fs) == [("Namespace", "blocker"), ("Node", "warning")]


def test_kubelet_skew_does_not_matter_before_the_api_server_serves_the_extended_target() -> None:
    assert findings(cluster(_gpu_node("gpu-1", "v1.33.1"), version="v1.35.0"), "DRB016") == []
    assert findings(cluster(_gpu_node("gpu-1", "v1.36.0"), version="v1.36.1"), "DRB016") == []


# ---- DRB030 quotas translated pods escape


def _quota(ns: str, **hard: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-quota", "namespace": ns},
            "spec": {"hard": hard}}


def test_an_unpaired_gpu_quota_is_a_blocker_where_namespaces_share_the_gpus() -> None:
    data = cluster(app(ns="team-a"), app(ns="team-b"), _quota("team-a", **{"requests.nvidia.com/gpu": "8"}))
    fs = findings(data, "DRB030")
    assert [f.severity for f in fs] == ["blocker"] and "other namespace(s) share the GPUs" in fs[0].message


def test_an_unpaired_quota_of_the_only_gpu_tenant_is_a_warning_and_a_paired_one_is_fine() -> None:
    assert [f.severity for f in findings(cluster(app(ns="team-a"), _quota("team-a", **{"requests.nvidia.com/gpu": "8"})),
                                         "DRB030")] == ["warning"]
    paired = _quota("team-a", **{"requests.nvidia.com/gpu": "8",
                                 "gpu.dra-bridge.io.deviceclass.resource.k8s.io/devices": "8"})
    assert findings(cluster(app(ns="team-a"), app(ns="team-b"), paired), "DRB030") == []


def test_with_the_extended_target_on_the_quota_needs_the_implicit_name_too() -> None:
    paired = _quota("team-a", **{"requests.nvidia.com/gpu": "8",
                                 "gpu.dra-bridge.io.deviceclass.resource.k8s.io/devices": "8"})
    fs = findings(cluster(app(ns="team-a"), app(ns="team-b"), paired, version="v1.36.1"), "DRB030")
    assert [f.severity for f in fs] == ["blocker"]
    assert fs[0].details["missing"] == ["requests.deviceclass.resource.kubernetes.io/gpu.dra-bridge.io"]


# ---- DRB043 Kueue budgets nvidia.com/gpu


def _cluster_queue(name: str, resource: str = "nvidia.com/gpu") -> Obj:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"resourceGroups": [{"coveredResources": ["cpu", resource], "flavors": [
                {"name": "a100", "resources": [{"name": "cpu", "nominalQuota": "64"},
                                               {"name": resource, "nominalQuota": "16"}]}]}]}}


def _local_queue(ns: str, cq: str) -> Obj:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": ns},
            "spec": {"clusterQueue": cq}}


def test_a_local_queue_feeding_a_gpu_budget_blocks_its_namespace() -> None:
    data = cluster(app(ns="team-a"), _cluster_queue("gpus"), _local_queue("team-a", "gpus"), bridge_class())
    fs = findings(data, "DRB043")
    assert [(f.object.kind, f.object.namespace, f.severity) for f in fs] == [("LocalQueue", "team-a", "blocker")]
    assert "deviceClassMappings" in fs[0].fix and fs[0].details["nominalQuota"] == {"a100": "16"}


def test_a_queue_that_does_not_cover_gpus_is_fine() -> None:
    data = cluster(app(ns="team-a"), _cluster_queue("cpus", resource="memory"), _local_queue("team-a", "cpus"))
    assert findings(data, "DRB043") == []


def test_a_gpu_budget_whose_namespaces_are_unknown_is_a_cluster_blocker() -> None:
    fs = findings(cluster(app(ns="team-a"), _cluster_queue("gpus")), "DRB043")
    assert [(f.object.kind, f.severity) for f in fs] == [("ClusterQueue", "blocker")]


# ---- DRB033 GPUs in init containers (the shared device-plugin arithmetic)


def _with_init(*inits: Obj, main: int = 1) -> Obj:
    return deployment("train", "team", 1, spec(container({"nvidia.com/gpu": main}), initContainers=list(inits)))


def test_init_gpus_are_reported_with_the_count_the_pod_holds() -> None:
    fs = findings(cluster(_with_init(container({"nvidia.com/gpu": 8}, "fetch"), main=2)), "DRB033")
    assert [f.severity for f in fs] == ["info"]
    assert fs[0].details == {"podDevices": 8, "longLived": 2, "onlyForInit": 6, "initContainers": ["fetch"]}
    assert "6 only for its init containers, held until the pod ends" in fs[0].message


def test_a_sidecar_started_before_an_init_container_adds_to_its_count() -> None:
    """sidecar 1 + init 2 + main 1 holds 3 (the init container runs beside the sidecar): the old arithmetic said 2."""
    s = spec(container({"nvidia.com/gpu": 1}), initContainers=[
        container({"nvidia.com/gpu": 1}, "proxy", restartPolicy="Always"), container({"nvidia.com/gpu": 2}, "warm")])
    data = cluster(deployment("svc", "team", 1, s))
    assert findings(data, "DRB033")[0].details["podDevices"] == 3
    from bridge.report.checks import CheckContext, ReportOptions
    from bridge.report.model import build_model

    assert build_model(data).workloads[0].gpus_per_pod == 3
    assert CheckContext(build_model(data), ReportOptions()).gpu_workloads[0].demand == {"nvidia.com/gpu": 3}


def test_init_containers_without_gpus_or_only_sidecars_say_nothing() -> None:
    assert findings(cluster(_with_init(container(name="setup"))), "DRB033") == []
    sidecar_only = spec(container({"nvidia.com/gpu": 1}),
                        initContainers=[container({"nvidia.com/gpu": 1}, "proxy", restartPolicy="Always")])
    assert findings(cluster(deployment("svc", "team", 1, sidecar_only)), "DRB033") == []


# ---- DRB015 from GFD labels (bridge.kvalues.gfd.not_whole_gpu, the webhook's own test)


def test_gfd_labels_of_a_time_sliced_node_block_it() -> None:
    shared = node("gpu-1", 32, labels={"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4"})
    fs = findings(cluster(shared), "DRB015")
    assert [f.object.name for f in fs] == ["gpu-1"] and "GFD labels: nvidia.com/gpu is time-sliced (product -SHARED)" in fs[0].message
    plain = node("gpu-1", 8, labels={"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.replicas": "1"})
    assert findings(cluster(plain), "DRB015") == []


# ---- DRB035 GPU-label selectors whose CEL misses the published devices


def _bridge_node(name: str, labels: dict[str, str], product: str, cc: str, n: int = 2) -> list[Obj]:
    from tests.report.conftest import gpu_device, resource_slice

    return [node(name, n, allocatable=0, labels=labels),
            resource_slice(name, [gpu_device(i, product=product, arch="x", cc=cc) for i in range(n)])]


L4_OLD_GFD = {"nvidia.com/gpu.family": "ampere", "nvidia.com/gpu.compute.major": "8",
              "nvidia.com/gpu.compute.minor": "9", "nvidia.com/gpu.product": "NVIDIA-L4"}
L40S_NEW_GFD = {"nvidia.com/gpu.family": "ada-lovelace", "nvidia.com/gpu.compute.major": "8",
                "nvidia.com/gpu.compute.minor": "9", "nvidia.com/gpu.product": "NVIDIA-L40S"}


def test_gfd_releases_that_disagree_on_family_leave_a_family_selector_pending_on_some_nodes() -> None:
    """An old GFD labels the L4 node `ampere` (every 8.x), a newer one the L40S node `ada-lovelace` (8.9): no single
    rule explains both, the newest is assumed, and `family In [ampere]` no longer matches the L4's devices."""
    data = cluster(*_bridge_node("l4-1", L4_OLD_GFD, "NVIDIA L4", "8.9.0"),
                   *_bridge_node("l40s-1", L40S_NEW_GFD, "NVIDIA L40S", "8.9.0"),
                   app(nodeSelector={"nvidia.com/gpu.family": "ampere"}), bridge_class())
    fs = findings(data, "DRB035")
    assert [(f.severity, f.details["labelsOnlyNodes"]) for f in fs] == [("blocker", ["l4-1"])]
    assert "GFD releases on the nodes disagree" in fs[0].message


def test_labels_and_published_devices_that_agree_raise_nothing() -> None:
    data = cluster(*_bridge_node("l40s-1", L40S_NEW_GFD, "NVIDIA L40S", "8.9.0"),
                   *_bridge_node("l4-1", {**L40S_NEW_GFD, "nvidia.com/gpu.product": "NVIDIA-L4"}, "NVIDIA L4", "8.9.0"),
                   app(nodeSelector={"nvidia.com/gpu.family": "ada-lovelace"}),
                   app(name="by-product", nodeSelector={"nvidia.com/gpu.product": "NVIDIA-L4"}), bridge_class())
    assert findings(data, "DRB035") == []


def test_a_selector_matching_devices_on_nodes_its_labels_exclude_is_a_warning() -> None:
    hand_labeled = {**L40S_NEW_GFD, "nvidia.com/gpu.product": "NVIDIA-L4-custom"}  # a label edited by hand
    data = cluster(*_bridge_node("l4-1", hand_labeled, "NVIDIA L4", "8.9.0"),
                   app(nodeSelector={"nvidia.com/gpu.product": "NVIDIA-L4"}), bridge_class())
    fs = findings(data, "DRB035")
    assert [(f.severity, f.details["celOnlyNodes"]) for f in fs] == [("warning", ["l4-1"])]


def test_a_selector_that_errors_on_a_published_device_is_a_blocker() -> None:
    """Memory is published for every bridge device, so its CEL is not guarded; a slice without it (another node
    daemon version) makes the expression fail, and the real scheduler aborts the pod on a CEL runtime error."""
    from tests.report.conftest import gpu_device, resource_slice

    bare = gpu_device(0, product="NVIDIA L4", cc="8.9.0")
    del bare["capacity"]
    data = cluster(node("l4-1", 1, allocatable=0, labels={"nvidia.com/gpu.memory": "23034"}),
                   resource_slice("l4-1", [bare]), app(nodeSelector={"nvidia.com/gpu.memory": "23034"}), bridge_class())
    fs = findings(data, "DRB035")
    assert any(f.severity == "blocker" and "errors on published devices (l4-1/gpu-0" in f.message for f in fs)
