"""The chart, installed as a user would (the real `helm`), on real nodes: the image built from this repository
(scripts/build_image.py) imported into each node's containerd, the DaemonSet's pods running our image through the
real kubelet with the chart's hostPath mounts, ServiceAccount and probes, the webhook Deployment serving TLS to the
real API server, GPU pods of both APIs running, no 403 in any component's log; `helm upgrade` to another image tag
rolling the DaemonSet without losing the node's GPUs; `helm uninstall` plus the README's cleanup leaving nothing.

The cluster: two real nodes (kubelet, containerd, runc) whose simulated GPUs' files are at `/run/nvidia/driver`, as
a GPU Operator driver container leaves them, and kube-proxy for Services (in-cluster clients reach the API server
through the `kubernetes` Service, the API server the webhook through its Service)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.kube.api import NODES, PODS, Resource
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.inspect import SideWatch, offered_twice, shared
from bridge.sandbox.real.binaries import NODE
from tests.imagebuilt import build
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, require_binaries
from tests.real.realnodes import claim_template, create_pod, ensure_namespace, kubectl, probe_log, probe_pod
from tests.sandbox_cluster import spec_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CHART = Path(__file__).resolve().parents[2] / "charts" / "dra-bridge"
NAMESPACE = "dra-bridge"
IMAGE = "ghcr.io/dra-bridge/dra-bridge"
HANDED_OVER = {"dra-bridge.io/node": "true", "nvidia.com/gpu.deploy.device-plugin": "false"}
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
REFUSAL = re.compile(r"(?<![\w.:-])403(?!\w)|[Ff]orbidden")  # 403 as a word: not inside a UID (-403e-)

# The chart's documented values for a GPU Operator node (examples/gpu-operator.yaml), and what this machine lacks:
# cert-manager (auto picks the chart's own certificate), the operator's nvidia RuntimeClass (no NVML here:
# simulated GPUs), a registry (the image was imported).
GPU_OPERATOR = ["-f", str(CHART / "examples" / "gpu-operator.yaml"), "--set", "webhook.tls.mode=auto",
                "--set", "node.runtimeClassName=", "--set", "node.devices=simulated:4xH100-80GB",
                "--set-string", "node.draDevices=2", "--set", "image.pullPolicy=Never",
                "--set", "node.deviceListStrategy=cdi-cri", "--set", "controller.enabled=true"]


def tag(built: build.BuildResult) -> str:
    return built.reference.rsplit(":", 1)[1]


def helm(cluster: SandboxCluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    assert cluster.plane is not None
    return subprocess.run([str(cluster.plane.bin.path("helm")), "--kubeconfig", str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(built: build.BuildResult) -> Iterator[SandboxCluster]:
    require_binaries(REAL_LINE, CONTROL_PLANE + NODE + ("kubelet", "kubectl", "helm", "kube-proxy"))
    nodes = tuple(NodeSpec(f"node-{i}", "4xH100-80GB", labels=HANDED_OVER) for i in range(2))
    spec = spec_for_tests(nodes, backend="real", version=REAL_LINE, real_kubelets=True, services=True,
                          node_status_frequency=2.0)
    with SandboxCluster(spec).start(timeout=300) as c:
        for node in c.nodes:
            assert node.real is not None
            node.real.containerd.import_image(built.archive)
        ensure_namespace(c, NAMESPACE, {"pod-security.kubernetes.io/enforce": "privileged"})
        yield c


def wait_rollout(cluster: SandboxCluster, kind: str, name: str, timeout: float = 240) -> None:
    r = kubectl(cluster, "-n", NAMESPACE, "rollout", "status", f"{kind}/{name}", f"--timeout={int(timeout)}s",
                timeout=timeout + 30)
    assert r.returncode == 0, f"{kind}/{name} did not roll out: {r.stdout}{r.stderr}\n" + describe(cluster)


def describe(cluster: SandboxCluster) -> str:
    pods = kubectl(cluster, "-n", NAMESPACE, "get", "pods", "-o", "wide").stdout
    events = kubectl(cluster, "-n", NAMESPACE, "get", "events", "--sort-by=.lastTimestamp").stdout[-4000:]
    return f"{pods}\n{events}"


def component_logs(cluster: SandboxCluster) -> dict[str, str]:
    out = {}
    for p in cluster.api.list(PODS, NAMESPACE)["items"]:
        name = p["metadata"]["name"]
        if (p.get("status") or {}).get("phase") == "Running":
            out[name] = kubectl(cluster, "-n", NAMESPACE, "logs", name, "--all-containers").stdout
    return out


def allocatable(cluster: SandboxCluster, node: str) -> int:
    return int((cluster.api.get(NODES, node).get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu", "0"))


def test_helm_install_with_the_gpu_operator_values_runs_our_image_on_every_handed_over_node(
        cluster: SandboxCluster, built: build.BuildResult) -> None:
    r = helm(cluster, "install", "dra-bridge", str(CHART), "-n", NAMESPACE, "--set",
             f"image.tag={tag(built)}", *GPU_OPERATOR)
    assert r.returncode == 0, r.stderr
    assert "generated" in r.stdout.lower() or "selfsigned" in r.stdout.lower().replace("-", ""), r.stdout  # NOTES
    wait_rollout(cluster, "daemonset", "dra-bridge-node")
    wait_rollout(cluster, "deployment", "dra-bridge-webhook")
    wait_rollout(cluster, "deployment", "dra-bridge-controller")
    pods = cluster.api.list(PODS, NAMESPACE, label_selector="app.kubernetes.io/component=node")["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["node-0", "node-1"]
    assert {c["image"] for p in pods for c in p["spec"]["containers"]} == {f"{IMAGE}:{tag(built)}"}
    deadline = time.monotonic() + 120
    while {allocatable(cluster, n) for n in ("node-0", "node-1")} != {2}:
        assert time.monotonic() < deadline, describe(cluster)
        time.sleep(1)
    slices = cluster.api.list(cluster.api.resource_api().slices)["items"]
    assert sorted(s["spec"]["nodeName"] for s in slices) == ["node-0", "node-1"]


def test_gpu_pods_of_both_apis_run_on_the_charts_nodes(cluster: SandboxCluster) -> None:
    ensure_namespace(cluster, "legacy")
    ensure_namespace(cluster, "team-a", {"dra-bridge.io/mode": "dra"})
    cluster.api.create(cluster.api.resource_api().claim_templates, claim_template("one-gpu"), "team-a")
    create_pod(cluster, "legacy", probe_pod("old", gpus=1))
    create_pod(cluster, "team-a", probe_pod("templated", claim_template="one-gpu"))
    translated = create_pod(cluster, "team-a", probe_pod("translated", gpus=1))
    assert "nvidia.com/gpu" not in translated["spec"]["containers"][0]["resources"].get("limits", {})
    for ns, name in (("legacy", "old"), ("team-a", "templated"), ("team-a", "translated")):
        cluster.wait_pod_phase(ns, name, "Running", timeout=180)
        assert len(probe_log(cluster, ns, name).gpus) == 1
    assert shared(cluster) == {}
    assert offered_twice(cluster) == set()


def test_no_component_of_the_chart_was_refused_anything(cluster: SandboxCluster) -> None:
    refused = {name: [line for line in log.splitlines() if REFUSAL.search(line)][:3]
               for name, log in component_logs(cluster).items()}
    assert {k: v for k, v in refused.items() if v} == {}


def test_helm_upgrade_to_another_tag_rolls_the_daemonset_and_keeps_the_nodes_gpus(
        cluster: SandboxCluster, built: build.BuildResult) -> None:
    new_tag = f"{tag(built)}-next"
    for node in cluster.nodes:
        assert node.real is not None
        r = node.real.containerd._ctr("images", "tag", f"{IMAGE}:{tag(built)}", f"{IMAGE}:{new_tag}")
        assert r.returncode == 0, r.stderr
    before = {ns_name: probe_log(cluster, *ns_name.split("/")).gpus
              for ns_name in ("legacy/old", "team-a/templated", "team-a/translated")}
    with SideWatch(cluster) as watch:
        r = helm(cluster, "upgrade", "dra-bridge", str(CHART), "-n", NAMESPACE, "--set", f"image.tag={new_tag}",
                 *GPU_OPERATOR)
        assert r.returncode == 0, r.stderr
        wait_rollout(cluster, "daemonset", "dra-bridge-node")
        time.sleep(5)
    assert watch.samples.clean, watch.samples.describe()
    pods = cluster.api.list(PODS, NAMESPACE, label_selector="app.kubernetes.io/component=node")["items"]
    assert {c["image"] for p in pods for c in p["spec"]["containers"]} == {f"{IMAGE}:{new_tag}"}
    assert {allocatable(cluster, n) for n in ("node-0", "node-1")} == {2}  # the legacy side of each node, kept
    after = {ns_name: probe_log(cluster, *ns_name.split("/")).gpus for ns_name in before}
    assert after == before
    for ns, name in (("legacy", "old"), ("team-a", "templated"), ("team-a", "translated")):
        assert (cluster.api.get(PODS, name, ns).get("status") or {}).get("phase") == "Running"


def test_helm_uninstall_and_the_cleanup_leave_no_slice_spec_or_socket(cluster: SandboxCluster) -> None:
    """The README's uninstall path: the GPU pods gone, `helm uninstall`, then on each node
    `bridge node --node-name N --cleanup` (the daemon keeps its CDI specs when it stops: a rolling update's
    containers may need them)."""
    for ns in ("legacy", "team-a"):
        cluster.api.delete_collection(PODS, ns)
    for ns, name in (("legacy", "old"), ("team-a", "templated"), ("team-a", "translated")):
        cluster.wait_pod_phase(ns, name, "Gone", timeout=120)
    r = helm(cluster, "uninstall", "dra-bridge", "-n", NAMESPACE, "--wait")
    assert r.returncode == 0, r.stderr
    for node in cluster.nodes:
        assert node.real is not None
        done = subprocess.run(node.real.ns.enter([sys.executable, "-m", "bridge", "node", "--node-name", node.name,
                                                  "--kubeconfig", str(cluster.kubeconfig), "--cleanup"]),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    leftovers: dict[str, Any] = {}
    deadline = time.monotonic() + 120
    while True:
        slices = cluster.api.list(cluster.api.resource_api().slices)["items"]
        leftovers = {"slices": [s["metadata"]["name"] for s in slices]}
        for node in cluster.nodes:
            assert node.real is not None
            leftovers[f"{node.name} cdi"] = sorted(p.name for p in node.real.cdi_root.glob("*dra-bridge*"))
            kl = node.real.kubelet_root
            leftovers[f"{node.name} sockets"] = sorted(
                str(p.relative_to(kl)) for p in [*kl.glob("device-plugins/dra-bridge*"),
                                                 *kl.glob("plugins_registry/gpu.dra-bridge.io*"),
                                                 *kl.glob("plugins/gpu.dra-bridge.io/*")])
        if not any(leftovers.values()) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not any(leftovers.values()), json.dumps(leftovers, indent=1)


def test_the_standalone_values_with_a_secret_certificate_install_and_serve_too(cluster: SandboxCluster,
                                                                                built: build.BuildResult) -> None:
    """examples/standalone-device-plugin.yaml (a host-installed driver: here the simulated one's location) with the
    webhook's certificate from a Secret the user manages (examples/existing-secret.yaml's mode), issued by a CA
    of the user's: the real API server trusts the webhook through the given caBundle."""
    import base64

    from bridge.sandbox.real.pki import TinyCA

    assert cluster.work_dir is not None
    ca = TinyCA(cluster.work_dir / "user-ca", name="user-ca")
    service = "dra-bridge-webhook"
    pair = ca.issue("webhook", common_name=f"{service}.{NAMESPACE}.svc", server=True,
                    dns_names=(f"{service}.{NAMESPACE}.svc", f"{service}.{NAMESPACE}.svc.cluster.local"))
    r = kubectl(cluster, "-n", NAMESPACE, "create", "secret", "tls", "user-webhook-tls", f"--cert={pair.cert}",
                f"--key={pair.key}")
    assert r.returncode == 0, r.stderr
    values = ["-f", str(CHART / "examples" / "standalone-device-plugin.yaml"),
              "--set", "node.driverRoot=/run/nvidia/driver", "--set", "node.devRoot=/run/nvidia/driver",
              "--set", "node.devices=simulated:4xH100-80GB", "--set", "image.pullPolicy=Never",
              "--set-string", "node.draDevices=2",  # the default keeps every GPU on the device plugin
              "--set", "node.deviceListStrategy=cdi-cri", "--set", f"image.tag={tag(built)}",
              "--set", "webhook.tls.mode=secret", "--set", "webhook.tls.secretName=user-webhook-tls",
              "--set", f"webhook.tls.caBundle={base64.b64encode(ca.cert_pem).decode()}",
              "--set", "webhook.tls.certManager.issuerRef=null"]
    r = helm(cluster, "install", "dra-bridge", str(CHART), "-n", NAMESPACE, *values)
    assert r.returncode == 0, r.stderr
    wait_rollout(cluster, "daemonset", "dra-bridge-node")
    wait_rollout(cluster, "deployment", "dra-bridge-webhook")
    create_pod(cluster, "legacy", probe_pod("standalone", gpus=1))
    translated = create_pod(cluster, "team-a", probe_pod("standalone", gpus=1))  # called over the user's TLS
    assert "nvidia.com/gpu" not in translated["spec"]["containers"][0]["resources"].get("limits", {})
    for ns in ("legacy", "team-a"):
        cluster.wait_pod_phase(ns, "standalone", "Running", timeout=180)
        assert len(probe_log(cluster, ns, "standalone").gpus) == 1
