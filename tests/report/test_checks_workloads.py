"""Workload, namespace, device-plugin config and capacity checks: trigger and no-trigger for each."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.kvalues import cel as kcel
from bridge.kvalues import gfd
from bridge.report.checks import CheckContext, ReportOptions, run_checks
from bridge.report.findings import RETIRED, RULES, rule
from bridge.report.model import build_model
from tests.report.conftest import (
    bridge_class,
    cluster,
    container,
    deployment,
    findings,
    gpu_device,
    namespace,
    node,
    pod,
    resource_slice,
    spec,
)


def app(gpu: dict[str, int] | None = None, replicas: int = 1, ns: str = "team", name: str = "app", **pod_extra: Any):
    return deployment(name, ns, replicas, spec(container(gpu or {"nvidia.com/gpu": 1}), **pod_extra))


PLAIN = app()


# ---- DRB020 MIG
def test_mig_names_are_blocked_without_a_driver_publishing_mig_devices() -> None:
    fs = findings(cluster(app({"nvidia.com/mig-1g.10gb": 1})), "DRB020")
    assert [f.severity for f in fs] == ["blocker"] and fs[0].details["profiles"] == ["1g.10gb"]


def test_mig_names_need_config_when_mig_devices_are_published() -> None:
    mig = gpu_device(0, extra={"profile": {"string": "1g.10gb"}})
    data = cluster(app({"nvidia.com/mig-1g.10gb": 1}), node("n"), resource_slice("n", [mig], driver="gpu.nvidia.com"))
    assert [f.severity for f in findings(data, "DRB020")] == ["warning"]


def test_whole_gpus_are_not_mig() -> None:
    assert findings(cluster(PLAIN), "DRB020") == []


# ---- DRB021 time-slicing
def test_shared_gpus_are_blocked_before_kep_6406() -> None:
    fs = findings(cluster(app({"nvidia.com/gpu.shared": 1})), "DRB021")
    assert [f.severity for f in fs] == ["blocker"] and "KEP-6406" in fs[0].message


def test_plain_gpu_is_not_shared() -> None:
    assert findings(cluster(PLAIN), "DRB021") == []


# ---- DRB022 HAMi
def test_hami_memory_and_cores_are_blocked() -> None:
    fs = findings(cluster(app({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 30})), "DRB022")
    assert [f.severity for f in fs] == ["blocker"]
    assert "nvidia.com/gpucores" in fs[0].message and "nvidia.com/gpumem" in fs[0].message


def test_no_hami_resources_no_finding() -> None:
    assert findings(cluster(PLAIN), "DRB022") == []


# ---- DRB023 more than 32 devices in one claim
def test_container_with_more_than_32_gpus_cannot_be_one_claim() -> None:
    fs = findings(cluster(app({"nvidia.com/gpu": 40})), "DRB023")
    assert [f.severity for f in fs] == ["blocker"] and fs[0].details["maxGpusPerContainer"] == 40
    assert "at most 32" in fs[0].message and "at most 32 GPUs" in fs[0].fix


def test_32_gpus_fit_in_one_claim() -> None:
    assert findings(cluster(app({"nvidia.com/gpu": 32})), "DRB023") == []
    assert findings(cluster(app({"nvidia.com/gpu": 32}), version="v1.37.0"), "DRB023") == []


def test_an_init_container_above_32_blocks_too() -> None:
    s = spec(container({"nvidia.com/gpu": 2}, "a"), initContainers=[container({"nvidia.com/gpu": 33}, "init")])
    fs = findings(cluster(deployment("init", "team", 1, s)), "DRB023")
    assert [f.severity for f in fs] == ["blocker"] and fs[0].details["gpusPerPod"] == 33


def test_pod_total_above_32_only_matters_for_the_extended_target() -> None:
    # 20 + 20 GPUs: two claims of 20 under the claims target (1.34: extended path off by default) ...
    s = spec(container({"nvidia.com/gpu": 20}, "a"), container({"nvidia.com/gpu": 20}, "b"),
             initContainers=[container({"nvidia.com/gpu": 8}, "init")])
    assert findings(cluster(deployment("big", "team", 1, s)), "DRB023") == []
    # ... but one claim of 40 devices on the KEP-5004 path, on by default from 1.36.
    fs = findings(cluster(deployment("big", "team", 1, s), version="v1.36.1"), "DRB023")
    assert [f.severity for f in fs] == ["warning"]
    assert fs[0].details == {"gpusPerPod": 40, "maxGpusPerContainer": 20, "gpuContainers": 3}
    assert "claims translation target" in fs[0].fix


# ---- DRB024 retired: ephemeral containers can never set resources, so there was nothing to say
def test_a_gpu_pod_with_ephemeral_containers_has_no_finding_about_them() -> None:
    s = spec(container({"nvidia.com/gpu": 1}), ephemeralContainers=[{"name": "debug", "image": "busybox"}])
    ctx = CheckContext(build_model(cluster(pod("p", pod_spec=s), bridge_class())), ReportOptions())
    assert [f for f in run_checks(ctx) if f.object.name == "p"] == []
    assert "DRB024" not in RULES and "DRB024" in RETIRED


def test_the_same_pod_without_ephemeral_containers_has_no_finding_either() -> None:
    ctx = CheckContext(build_model(cluster(pod("p", pod_spec=spec(container({"nvidia.com/gpu": 1}))), bridge_class())),
                       ReportOptions())
    assert [f for f in run_checks(ctx) if f.object.name == "p"] == []


def test_a_retired_rule_id_cannot_be_registered_again() -> None:
    with pytest.raises(ValueError, match="retired"):
        rule("DRB024", "anything", severities=("info",), fix="none")(lambda ctx: iter(()))


# ---- DRB025 GFD selectors
def test_gfd_selector_is_shown_as_cel() -> None:
    fs = findings(cluster(app(nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                             "nvidia.com/gpu.present": "true"})), "DRB025")
    assert [f.severity for f in fs] == ["info"]
    # The webhook's own mapping (bridge.kvalues.gfd): a pattern for every NVML name GFD sanitises to the label.
    expected = gfd.map_requirement(gfd.Requirement("nvidia.com/gpu.product", "In", ("NVIDIA-H100-80GB-HBM3",)))
    assert fs[0].details["cel"] == expected.expression
    assert kcel.evaluate(fs[0].details["cel"], kcel.device_activation(
        "gpu.dra-bridge.io", {"gpu.dra-bridge.io": {"productName": "NVIDIA H100 80GB HBM3"}}, {}))
    assert fs[0].details["nodeSelectors"] == ["nvidia.com/gpu.present In true"]


def test_gfd_requirement_that_cannot_be_expressed_needs_config() -> None:
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.memory", "operator": "DoesNotExist"}]}]}}}
    fs = findings(cluster(app(affinity=aff)), "DRB025")
    assert [f.severity for f in fs] == ["warning"]


def test_no_gfd_selector_no_finding() -> None:
    assert findings(cluster(app(nodeSelector={"kubernetes.io/os": "linux"})), "DRB025") == []


# ---- DRB026..028 device access around the allocator
def test_host_dev_nvidia_mount_is_a_blocker() -> None:
    s = spec(container(), volumes=[{"name": "d", "hostPath": {"path": "/dev/nvidiactl"}}])
    fs = findings(cluster(pod("p", pod_spec=s)), "DRB026")
    assert [f.severity for f in fs] == ["blocker"] and "/dev/nvidiactl" in fs[0].message


def test_other_host_paths_are_not_gpu_access() -> None:
    s = spec(container({"nvidia.com/gpu": 1}), volumes=[{"name": "d", "hostPath": {"path": "/var/log"}}])
    assert findings(cluster(pod("p", pod_spec=s)), "DRB026") == []


def test_privileged_gpu_container() -> None:
    s = spec(container({"nvidia.com/gpu": 1}, securityContext={"privileged": True}))
    assert [f.severity for f in findings(cluster(deployment("x", "team", 1, s)), "DRB027")] == ["warning"]


def test_unprivileged_gpu_container() -> None:
    assert findings(cluster(PLAIN), "DRB027") == []


def test_nvidia_visible_devices_set_by_hand() -> None:
    s = spec(container({"nvidia.com/gpu": 1}, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    assert [f.severity for f in findings(cluster(deployment("x", "team", 1, s)), "DRB028")] == ["warning"]


def test_other_env_vars_are_fine() -> None:
    s = spec(container({"nvidia.com/gpu": 1}, env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]))
    assert findings(cluster(deployment("x", "team", 1, s)), "DRB028") == []


# ---- DRB029 preemption
def _pc(name: str, policy: str = "PreemptLowerPriority") -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": 1000, "preemptionPolicy": policy}


def test_gpu_workload_relying_on_preemption_before_1_38() -> None:
    fs = findings(cluster(_pc("high"), app(priorityClassName="high")), "DRB029")
    assert [f.severity for f in fs] == ["warning"] and fs[0].details["priorityClass"] == "high"


def test_non_preempting_class_or_1_38_is_fine() -> None:
    assert findings(cluster(_pc("high", "Never"), app(priorityClassName="high")), "DRB029") == []
    assert findings(cluster(_pc("high"), app(priorityClassName="high"), version="v1.38.0"), "DRB029") == []


# ---- DRB030 quotas
def _quota(hard: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": hard}}


def test_gpu_quota_without_device_class_quota() -> None:
    fs = findings(cluster(_quota({"requests.nvidia.com/gpu": "8"})), "DRB030")
    assert [f.severity for f in fs] == ["warning"]
    assert fs[0].details["quotaKey"] == "gpu.dra-bridge.io.deviceclass.resource.k8s.io/devices"


def test_paired_quota_with_equal_limits_passes_and_unequal_is_named() -> None:
    key = "gpu.dra-bridge.io.deviceclass.resource.k8s.io/devices"
    assert findings(cluster(_quota({"requests.nvidia.com/gpu": "8", key: "8"})), "DRB030") == []
    assert "differ" in findings(cluster(_quota({"requests.nvidia.com/gpu": "8", key: "4"})), "DRB030")[0].message


# ---- DRB031 mode label
def test_unknown_mode_label_value() -> None:
    fs = findings(cluster(namespace("team", "DRA")), "DRB031")
    assert [f.object.name for f in fs] == ["team"]


def test_known_mode_label_values() -> None:
    assert findings(cluster(*(namespace(f"n{i}", m) for i, m in enumerate(["legacy", "shadow", "dra"]))), "DRB031") == []


# ---- DRB032 capacity
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "8"}


def test_dra_namespace_larger_than_the_dra_side_is_blocked() -> None:
    data = cluster(namespace("team", "dra"), bridge_class(), app(replicas=5), node("gpu-1", 8, allocatable=4),
                   resource_slice("gpu-1", [gpu_device(i) for i in range(4)]))
    fs = findings(data, "DRB032")
    assert [f.severity for f in fs] == ["blocker"]
    assert fs[0].details["pendingAlone"] == 1 and fs[0].details["matchingDevices"] == 4


def test_namespace_that_fits_has_no_capacity_finding() -> None:
    data = cluster(namespace("team", "dra"), bridge_class(), app(replicas=4), node("gpu-1", 8, allocatable=4),
                   resource_slice("gpu-1", [gpu_device(i) for i in range(4)]))
    assert findings(data, "DRB032") == []


def test_pods_need_all_their_devices_on_one_node() -> None:
    # 2 nodes x 2 DRA devices = 4 devices, but a 3-GPU pod fits on neither.
    data = cluster(namespace("team", "dra"), bridge_class(), app({"nvidia.com/gpu": 3}),
                   *(o for n in ("a", "b") for o in (node(n, 2), resource_slice(n, [gpu_device(0), gpu_device(1)]))))
    assert findings(data, "DRB032")[0].details["pendingAlone"] == 1


def test_selectors_are_evaluated_against_published_attributes() -> None:
    aff = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    data = cluster(namespace("team", "dra"), bridge_class(), app(nodeSelector=aff), node("gpu-1"),
                   resource_slice("gpu-1", [gpu_device(i) for i in range(8)]))
    fs = findings(data, "DRB032")
    assert fs and fs[0].details["matchingDevices"] == 0
    data_ok = cluster(namespace("team", "dra"), bridge_class(), app(nodeSelector={"nvidia.com/gpu.family": "hopper"}),
                      node("gpu-1"), resource_slice("gpu-1", [gpu_device(i) for i in range(8)]))
    assert findings(data_ok, "DRB032") == []


def test_assume_split_all_uses_gfd_labels_of_device_plugin_nodes() -> None:
    data = cluster(namespace("team", "legacy"), bridge_class(),
                   app(replicas=2, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
                   node("gpu-1", 8, labels=H100))
    current = findings(data, "DRB032")
    assert [f.severity for f in current] == ["warning"]  # legacy namespace: needs config, not blocked
    assert findings(data, "DRB032", assume_split="all") == []
    assert findings(data, "DRB032", assume_split="1")[0].details["pendingAlone"] == 1


def test_namespaces_that_fit_alone_but_not_together_are_named_in_wave_order() -> None:
    data = cluster(namespace("first", "dra"), namespace("second", "shadow"), bridge_class(),
                   app(replicas=3, ns="first"), app(replicas=3, ns="second"), node("gpu-1", 4),
                   resource_slice("gpu-1", [gpu_device(i) for i in range(4)]))
    fs = findings(data, "DRB032")
    assert [(f.object.name, f.severity) for f in fs] == [("second", "warning")]
    assert fs[0].details["pendingCumulative"] == 2 and fs[0].details["pendingAlone"] == 0


# ---- DRB05x device-plugin config
def _cm(**data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dp", "namespace": "gpu-operator"},
            "data": data}


TS = "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: {rename}\n    failRequestsGreaterThanOne: {fail}\n" \
     "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"


def test_renamed_time_slicing_is_an_info_stating_the_differences() -> None:
    """Nothing to change in the config: the pods asking the shared name are the ones that stay legacy (DRB021)."""
    fs = findings(cluster(_cm(ts=TS.format(rename="true", fail="false"))), "DRB050")
    assert [f.severity for f in fs] == ["info"]
    assert "independent" in fs[0].message and fs[0].details["replicas"] == 4
    assert fs[0].details["rename"] == "nvidia.com/gpu.shared"


def test_time_slicing_nvidia_gpu_under_its_own_name_blocks_the_nodes_that_run_it() -> None:
    """Un-renamed time-slicing: nvidia.com/gpu: 1 is a time-slice on these nodes (the single config is their
    default through the config-manager's "single" fallback)."""
    data = cluster(_cm(ts=TS.format(rename="false", fail="false")), node("gpu-1", 8), node("gpu-2", 8))
    fs = findings(data, "DRB050")
    assert [f.severity for f in fs] == ["blocker"] and fs[0].details["nodes"] == ["gpu-1", "gpu-2"]
    assert "is a time-slice, not a GPU" in fs[0].message and "fallback to the only config" in fs[0].message


def test_un_renamed_time_slicing_no_node_runs_is_a_warning() -> None:
    data = cluster(_cm(ts=TS.format(rename="false", fail="false"), default="version: v1\nflags:\n  migStrategy: none\n"),
                   node("gpu-1", 8))  # gpu-1 runs `default` (the "named" fallback), not `ts`
    fs = findings(data, "DRB050")
    assert [f.severity for f in fs] == ["warning"] and fs[0].details["nodes"] == []
    assert "nvidia.com/device-plugin.config=ts would" in fs[0].message


def test_a_node_label_selects_the_time_sliced_config() -> None:
    data = cluster(_cm(ts=TS.format(rename="false", fail="false"), default="version: v1\nflags:\n  migStrategy: none\n"),
                   node("gpu-1", 8), node("gpu-2", 8, labels={"nvidia.com/device-plugin.config": "ts"}))
    assert findings(data, "DRB050")[0].details["nodes"] == ["gpu-2"]


def test_an_explicit_rename_is_ignored_by_the_plugin_so_the_gpu_is_still_shared_under_its_own_name() -> None:
    """NVIDIA/k8s-device-plugin api/config/v1/config.go DisableResourceNamingInConfig drops `rename`."""
    cfg = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
           "      rename: nvidia.com/gpu-shared\n      replicas: 4\n")
    data = cluster(_cm(ts=cfg), node("gpu-1", 8))
    assert [f.severity for f in findings(data, "DRB050")] == ["blocker"]
    problems = [f.message for f in findings(data, "DRB056")]
    assert len(problems) == 1 and "rename: nvidia.com/gpu-shared is ignored by the device plugin" in problems[0]
    assert "advertised as nvidia.com/gpu" in problems[0]


def test_rename_and_fail_requests_greater_than_one() -> None:
    data = cluster(_cm(ts=TS.format(rename="true", fail="true")))
    assert findings(data, "DRB051")[0].details["resources"] == ["nvidia.com/gpu.shared"]
    assert [f.severity for f in findings(data, "DRB052")] == ["info"]
    plain = cluster(_cm(ts=TS.format(rename="false", fail="false")))
    assert findings(plain, "DRB051") == [] and findings(plain, "DRB052") == []


def test_mps_with_mig_is_a_blocker_and_renamed_or_unused_mps_an_info() -> None:
    mps = "version: v1\nflags:\n  migStrategy: {mig}\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
    assert [f.severity for f in findings(cluster(_cm(a=mps.format(mig="mixed"))), "DRB053")] == ["blocker"]
    assert [f.severity for f in findings(cluster(_cm(a=mps.format(mig="none"))), "DRB053")] == ["info"]
    assert findings(cluster(_cm(a=TS.format(rename="false", fail="false"))), "DRB053") == []


def test_mig_strategy_single_changes_what_nvidia_gpu_means_on_mig_enabled_nodes() -> None:
    single = "version: v1\nflags:\n  migStrategy: single\n"
    mig_node = node("gpu-1", 7, labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"})
    fs = findings(cluster(_cm(a=single), mig_node), "DRB054")
    assert [f.severity for f in fs] == ["blocker"] and "gpu-1" in fs[0].message
    plain = findings(cluster(_cm(a=single), node("gpu-1", 8)), "DRB054")
    assert [f.severity for f in plain] == ["warning"] and "no MIG-enabled node" in plain[0].message
    assert findings(cluster(_cm(a="version: v1\nflags:\n  migStrategy: none\n")), "DRB054") == []


def test_replicas_below_two_are_refused_by_the_device_plugin() -> None:
    """NVIDIA/k8s-device-plugin api/config/v1/replicas.go: `if s.Replicas < 2` -> "number of replicas must be >= 2"
    (checked again at the source: 1 is refused too, not only 0)."""
    one = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {n}\n"
    fs = findings(cluster(_cm(a=one.format(n=1))), "DRB056")
    assert len(fs) == 1 and "number of replicas must be >= 2" in fs[0].message
    assert findings(cluster(_cm(a=one.format(n=2))), "DRB056") == []


def test_per_node_config_label_and_unknown_config_name() -> None:
    n = node("gpu-1", labels={"nvidia.com/device-plugin.config": "missing"})
    fs = findings(cluster(n, _cm(a="version: v1\nflags:\n  migStrategy: none\n")), "DRB055")
    assert [f.severity for f in fs] == ["warning"] and "missing" in fs[0].message
    assert findings(cluster(node("gpu-1")), "DRB055") == []


def test_config_problems_are_findings_not_crashes() -> None:
    bad = "version: v1\nflags:\n  migStrategy: sometimes\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: lots\n"
    fs = findings(cluster(_cm(a=bad)), "DRB056")
    assert len(fs) == 2 and all(f.severity == "warning" for f in fs)
    assert findings(cluster(_cm(a=TS.format(rename="false", fail="false"))), "DRB056") == []


def test_configmaps_that_are_not_device_plugin_configs_are_ignored() -> None:
    data = cluster(_cm(**{"app.yaml": "version: 3\nflags: [a]\n", "notes": "sharing is caring"}))
    assert findings(data, "DRB056") == [] and findings(data, "DRB050") == []
