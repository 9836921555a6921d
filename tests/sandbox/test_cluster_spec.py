"""What a sandbox cluster is made of: node lists from a count or a YAML file, clear errors for bad descriptions,
and the DeviceClass it installs being the one the examples document."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bridge.sandbox.cluster import ClusterSpec, NodeSpec, SpecError, device_class, nodes_from_count
from bridge.sandbox.cluster.spec import check, gfd_labels, kubelet_skew_problem, nodes_from_yaml

ROOT = Path(__file__).resolve().parents[2]


def test_nodes_from_a_count_are_numbered_and_share_the_gpu_spec() -> None:
    assert nodes_from_count(2, "4xA100-40GB") == (NodeSpec("node-0", "4xA100-40GB"), NodeSpec("node-1", "4xA100-40GB"))


def test_nodes_from_yaml_carry_gpus_labels_and_split() -> None:
    nodes = nodes_from_yaml("""
nodes:
  - name: gpu-a
    gpus: 8xH100-80GB
    labels: {zone: a}
    split: 4
  - name: gpu-b
    gpus: 4xA100-40GB,2xL4
""")
    assert nodes == (NodeSpec("gpu-a", "8xH100-80GB", {"zone": "a"}, "4"), NodeSpec("gpu-b", "4xA100-40GB,2xL4"))
    assert nodes[0].all_labels()["zone"] == "a"


def test_every_node_gets_the_labels_gpu_feature_discovery_would_set() -> None:
    assert gfd_labels("n", "8xH100-80GB") == {
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.family": "hopper"}
    # the family follows the compute capability (8.9), not NVML's architecture name ("Ada Lovelace")
    assert gfd_labels("n", "2xL4")["nvidia.com/gpu.family"] == "ada-lovelace"


@pytest.mark.parametrize(("text", "message"), [
    ("nodes: []", "non-empty list under 'nodes'"),
    ("- name: a", "non-empty list under 'nodes'"),
    ("nodes: [{name: a, gpu: 8xH100-80GB}]", "unknown field(s) ['gpu']"),
    ("nodes: [{name: a, labels: {count: 8}}]", "labels must map strings to strings"),
    ("nodes: [{name: 7}]", "name and gpus must be strings"),
    ("nodes: [{name: a, split: [1]}]", "split must be a string"),
    ("nodes: {", "not YAML"),
])
def test_a_bad_nodes_file_is_refused_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(SpecError, match="nodes file") as err:
        nodes_from_yaml(text)
    assert message in str(err.value)


@pytest.mark.parametrize(("spec", "message"), [
    (ClusterSpec(nodes=(NodeSpec("Node_A"),)), "not a lower-case DNS name"),
    (ClusterSpec(nodes=(NodeSpec("a"), NodeSpec("a"))), "used twice"),
    (ClusterSpec(nodes=(NodeSpec("a", "8xNOPE"),)), "node a: gpus '8xNOPE'"),
    (ClusterSpec(nodes=(NodeSpec("a"),), kubernetes_version="1.31"), "supported are 1.32 to 1.38"),
    (ClusterSpec(nodes=()), "at least one node"),
    (ClusterSpec(nodes=(NodeSpec("a"),), webhook=True), "needs the bridge nodes"),
    (ClusterSpec(nodes=(NodeSpec("a"),), controller=True), "the controller sets the split"),
    (ClusterSpec(nodes=(NodeSpec("a"),), bridge=True, controller=True, controller_interval=0), "controller interval"),
    (ClusterSpec(nodes=(NodeSpec("a"),), apiserver_args=("--v=4",)), "kube-apiserver flags: they need the real"),
    (ClusterSpec(nodes=(NodeSpec("a"), NodeSpec("b")), simulated_nodes=("b",)), "exceptions among real kubelets"),
    (ClusterSpec(nodes=(NodeSpec("a"), NodeSpec("b")), kubernetes_version="1.37", backend="real", real_kubelets=True,
                 simulated_nodes=("c",)), "names no node of the cluster: c"),
    (ClusterSpec(nodes=(NodeSpec("a"),), kubernetes_version="1.37", backend="real", real_kubelets=True,
                 simulated_nodes=("a",)), "names every node"),
    (ClusterSpec(nodes=(NodeSpec("a"),), kubernetes_version="1.37", backend="real", kubelet_version="1.35"),
     "kubelet_version is the real kubelets' release"),
    (ClusterSpec(nodes=(NodeSpec("a"),), kubernetes_version="1.37", backend="real", real_kubelets=True,
                 kubelet_version="1.38"), "a kubelet of 1.38 under a 1.37 control plane: a kubelet is never newer"),
    (ClusterSpec(nodes=(NodeSpec("a"),), kubernetes_version="1.37", backend="real", real_kubelets=True,
                 kubelet_version="1.36"), "kubelet version: Kubernetes '1.36': the real backend builds"),
])
def test_a_bad_cluster_description_is_refused(spec: ClusterSpec, message: str) -> None:
    with pytest.raises(SpecError) as err:
        check(spec)
    assert message in str(err.value)


@pytest.mark.parametrize(("kubelet", "plane", "problem"), [
    ("1.35", "1.37", ""),
    ("1.37", "1.37", ""),
    ("v1.35.4", "v1.38.0-beta.0", ""),  # three minors older: the oldest the policy allows
    ("1.38", "1.37", "a kubelet of 1.38 under a 1.37 control plane: a kubelet is never newer than kube-apiserver "
                     "(the version skew policy)"),
])
def test_a_real_kubelet_may_be_up_to_three_minors_older_than_the_control_plane(kubelet: str, plane: str,
                                                                               problem: str) -> None:
    assert kubelet_skew_problem(kubelet, plane) == problem


def test_four_minors_of_skew_is_refused_naming_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.sandbox.real import binaries

    monkeypatch.setitem(binaries.LINES, "1.33", "v1.33.0")
    assert kubelet_skew_problem("1.33", "1.37") == ("a kubelet of 1.33 under a 1.37 control plane: at most 3 minors "
                                                    "older (the version skew policy)")


@pytest.mark.parametrize(("version", "served"), [
    ("1.32", ("v1beta1",)), ("1.33", ("v1beta2", "v1beta1")), ("1.34", ("v1",)), ("1.37", ("v1",))])
def test_the_served_resource_versions_follow_the_kubernetes_release(version: str, served: tuple[str, ...]) -> None:
    assert ClusterSpec(nodes=(NodeSpec("a"),), kubernetes_version=version).resource_versions == served


@pytest.mark.parametrize(("api_version", "example"), [("v1", "deviceclass.yaml"),
                                                      ("v1beta1", "deviceclass-v1beta1.yaml")])
def test_the_installed_device_class_is_the_documented_example(api_version: str, example: str) -> None:
    assert device_class(api_version) == yaml.safe_load((ROOT / "examples" / example).read_text())
