"""The whole product on real nodes: real kubelets v1.37.2 with containerd and runc, GPU pods of both APIs in real
containers that see exactly the devices and driver files our CDI specs name (applied by containerd), and the
bridge's one-owner invariant checked from inside the containers and from the kubelets' PodResources."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from bridge.dra import registration
from bridge.dra.registration import RegistrationServicer
from bridge.grpcserver import GrpcServer
from bridge.inventory.simulated import simulated_uuid
from bridge.kube.api import NODES, PODS, Resource
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.apiserver.profiles import parse_minor
from bridge.sandbox.cluster.inspect import offered_twice, shared
from bridge.sandbox.kubelet.dramanager import DraManager
from bridge.sandbox.kubelet.pluginwatcher import PluginRejected
from bridge.sandbox.kubelet.version import KubeletVersion
from bridge.sandbox.real.binaries import NODE, Binaries
from tests.polling import wait_until
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, require_binaries
from tests.real.realnodes import (
    claim_template,
    create_pod,
    ensure_namespace,
    pod_claim,
    probe_log,
    probe_pod,
    register_device_plugin,
)
from tests.sandbox.plugins import FakePlugin, Served
from tests.sandbox_cluster import spec_for_tests

START_TIMEOUT = 300.0  # a loaded 2-core CI machine starts two kubelets, two containerds and two daemons slowly

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

NODES_SPEC = (NodeSpec("node-0", "8xH100-80GB", split="4"), NodeSpec("node-1", "8xH100-80GB", split="4"))
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
CLASS = "gpu.dra-bridge.io"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SandboxCluster]:
    require_binaries(REAL_LINE, CONTROL_PLANE + NODE + ("kubelet", "kubectl"))
    spec = spec_for_tests(NODES_SPEC, backend="real", version=REAL_LINE, real_kubelets=True, bridge=True,
                          webhook=True, node_status_frequency=2.0)
    with SandboxCluster(spec).start(timeout=START_TIMEOUT) as c:
        ensure_namespace(c, "legacy")
        ensure_namespace(c, "dra")
        ensure_namespace(c, "team-a", {"dra-bridge.io/mode": "dra"})
        c.api.create(c.api.resource_api().claim_templates, claim_template("one-gpu"), "dra")
        yield c


def _allocatable(cluster: SandboxCluster, node: str) -> str:
    return (cluster.api.get(NODES, node).get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu", "")


def _published(cluster: SandboxCluster, node: str) -> int:
    slices = cluster.api.list(cluster.api.resource_api().slices, field_selector=f"spec.nodeName={node}")["items"]
    return sum(len(s["spec"].get("devices") or []) for s in slices)


def test_the_daemon_serves_the_split_to_the_real_kubelet_through_both_apis(cluster: SandboxCluster) -> None:
    """Split 4 of 8: the kubelet's allocatable nvidia.com/gpu is 4 and the ResourceSlice publishes the other 4
    (published once the Node's allocatable shows the smaller count: the move protocol's legacy -> DRA order)."""
    deadline = time.monotonic() + 60
    while (_allocatable(cluster, "node-0"), _published(cluster, "node-0")) != ("4", 4) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert (_allocatable(cluster, "node-0"), _published(cluster, "node-0")) == ("4", 4)


def test_each_nodes_run_is_a_tmpfs_of_its_own_as_on_a_real_node(cluster: SandboxCluster) -> None:
    """systemd mounts /run as tmpfs: the CDI specs in /var/run/cdi live in memory, on the node and as the host sees
    them, and each node has its own."""
    devices = set()
    for node in cluster.nodes:
        assert node.real is not None
        inside = subprocess.run(node.real.ns.enter(["stat", "-f", "-c", "%T", "/var/run/cdi"]), capture_output=True,
                                text=True, timeout=30)
        host = subprocess.run(["stat", "-f", "-c", "%T", str(node.real.cdi_root)], capture_output=True, text=True,
                              timeout=30)
        assert (inside.stdout.strip(), host.stdout.strip()) == ("tmpfs", "tmpfs"), (inside.stderr, host.stderr)
        devices.add(os.stat(node.real.cdi_root).st_dev)
    assert len(devices) == len(cluster.nodes)


def test_a_legacy_pod_sees_exactly_its_gpu_and_the_driver_files(cluster: SandboxCluster) -> None:
    create_pod(cluster, "legacy", probe_pod("one", gpus=1, node="node-0"))
    cluster.wait_pod_phase("legacy", "one", "Running", timeout=120)
    seen = probe_log(cluster, "legacy", "one")
    assert len(seen.gpus) == 1, seen.devices
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= set(seen.devices)
    assert seen.env.get("NVIDIA_VISIBLE_DEVICES") == "void"
    assert any(f.endswith("libcuda.so.550.54.15") for f in seen.files), seen.files
    # nvidia-smi -L names the GPU, numbered 0 in the container, by the node's UUID for the device node it got
    (gpu,) = seen.gpus
    uuid = simulated_uuid("node-0", int(gpu[len("/dev/nvidia"):]))
    assert seen.smi == [f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {uuid})"]


def test_a_dra_pod_sees_exactly_its_claimed_gpu(cluster: SandboxCluster) -> None:
    create_pod(cluster, "dra", probe_pod("claimer", claim_template="one-gpu", node="node-0"))
    cluster.wait_pod_phase("dra", "claimer", "Running", timeout=120)
    seen = probe_log(cluster, "dra", "claimer")
    assert len(seen.gpus) == 1, seen.devices
    assert seen.env.get("NVIDIA_VISIBLE_DEVICES") == "void"
    assert any(f.endswith("libnvidia-ml.so.550.54.15") for f in seen.files), seen.files
    legacy = probe_log(cluster, "legacy", "one")
    assert seen.gpus.isdisjoint(legacy.gpus), "one GPU in two pods' containers"
    assert shared(cluster) == {}
    assert offered_twice(cluster) == set()


def test_deleting_the_dra_pod_unprepares_its_claim_and_removes_its_cdi_spec(cluster: SandboxCluster) -> None:
    node = cluster.node("node-0")
    assert node.real is not None
    create_pod(cluster, "dra", probe_pod("short", claim_template="one-gpu", node="node-0"))
    cluster.wait_pod_phase("dra", "short", "Running", timeout=120)
    uid = pod_claim(cluster, "dra", "short")["metadata"]["uid"]
    assert any(uid in p.name for p in node.real.cdi_root.iterdir()), sorted(p.name for p in node.real.cdi_root.iterdir())
    cluster.api.delete(PODS, "short", "dra")
    cluster.wait_pod_phase("dra", "short", "Gone", timeout=120)
    deadline = time.monotonic() + 60
    while any(uid in p.name for p in node.real.cdi_root.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not any(uid in p.name for p in node.real.cdi_root.iterdir())


def test_legacy_pods_with_two_gpus_an_init_container_gpu_and_a_deployment_run(cluster: SandboxCluster) -> None:
    create_pod(cluster, "legacy", probe_pod("two", gpus=2))
    create_pod(cluster, "legacy", probe_pod("init", init_gpus=1))
    template = probe_pod("replica", gpus=1)
    template["metadata"] = {"labels": {"app": "replica"}}
    cluster.api.create(DEPLOYMENTS, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "replica"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "replica"}}, "template": template}}, "legacy")
    cluster.wait_pod_phase("legacy", "two", "Running", timeout=120)
    assert len(probe_log(cluster, "legacy", "two").gpus) == 2
    cluster.wait_pod_phase("legacy", "init", "Running", timeout=120)
    assert len(probe_log(cluster, "legacy", "init", container="init").gpus) == 1
    assert probe_log(cluster, "legacy", "init").gpus == set()  # the app container asked for none
    deadline = time.monotonic() + 120
    while True:
        pods = cluster.api.list(PODS, "legacy", label_selector="app=replica")["items"]
        if sum((p.get("status") or {}).get("phase") == "Running" for p in pods) == 2:
            break
        assert time.monotonic() < deadline, [(p["metadata"]["name"], p.get("status", {}).get("phase")) for p in pods]
        time.sleep(0.5)
    for p in pods:
        assert len(probe_log(cluster, "legacy", p["metadata"]["name"]).gpus) == 1


def test_two_pods_of_one_shared_claim_see_the_same_gpu(cluster: SandboxCluster) -> None:
    claims = cluster.api.resource_api().claims
    cluster.api.create(claims, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                "metadata": {"name": "shared"},
                                "spec": claim_template("x")["spec"]["spec"]}, "dra")
    for name in ("reader-a", "reader-b"):
        pod = probe_pod(name)
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        create_pod(cluster, "dra", pod)
    for name in ("reader-a", "reader-b"):
        cluster.wait_pod_phase("dra", name, "Running", timeout=120)
    a, b = (probe_log(cluster, "dra", n).gpus for n in ("reader-a", "reader-b"))
    assert len(a) == 1 and a == b


def test_the_webhook_translates_a_pod_of_a_dra_namespace_and_it_gets_its_gpu(cluster: SandboxCluster) -> None:
    """1.37: the webhook's automatic target is the DeviceClass's extended-resource name; the real scheduler makes
    the claim, the real kubelet admits the pod (its requestMappings cover the container) and prepares it."""
    created = create_pod(cluster, "team-a", probe_pod("translated", gpus=1))
    limits = created["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {f"deviceclass.resource.kubernetes.io/{CLASS}": "1"}
    cluster.wait_pod_phase("team-a", "translated", "Running", timeout=120)
    assert len(probe_log(cluster, "team-a", "translated").gpus) == 1
    status = cluster.api.get(PODS, "translated", "team-a")["status"]
    assert status.get("extendedResourceClaimStatus", {}).get("resourceClaimName")


def test_a_pod_asking_the_extended_resource_name_itself_gets_a_dra_gpu(cluster: SandboxCluster) -> None:
    pod = probe_pod("extended")
    pod["spec"]["containers"][0]["resources"] = {"limits": {f"deviceclass.resource.kubernetes.io/{CLASS}": "1"}}
    create_pod(cluster, "dra", pod)
    cluster.wait_pod_phase("dra", "extended", "Running", timeout=120)
    assert len(probe_log(cluster, "dra", "extended").gpus) == 1


def test_no_gpu_is_in_two_pods_containers_and_none_is_offered_twice(cluster: SandboxCluster) -> None:
    """From inside every running GPU container (their own device nodes) and from the kubelets' PodResources and
    the claims: each GPU belongs to one pod, except the two pods that share one claim."""
    seen: dict[tuple[str, str], list[str]] = {}
    for ns in ("legacy", "dra", "team-a"):
        for p in cluster.api.list(PODS, ns)["items"]:
            if (p.get("status") or {}).get("phase") != "Running":
                continue
            node, name = p["spec"]["nodeName"], p["metadata"]["name"]
            for c in ["probe"] + [i["name"] for i in p["spec"].get("initContainers") or []]:
                for gpu in probe_log(cluster, ns, name, container=c).gpus:
                    seen.setdefault((node, gpu), []).append(f"{ns}/{name}")
    twice = {k: v for k, v in seen.items() if len(set(v)) > 1 and set(v) != {"dra/reader-a", "dra/reader-b"}}
    assert twice == {}
    assert len(seen) >= 9
    assert shared(cluster) == {}
    assert offered_twice(cluster) == set()


@pytest.mark.parametrize(("driver", "endpoint"), [
    ("Bad_Name", "/var/lib/kubelet/plugins/bad/dra.sock"),  # not a DNS subdomain (the kubelet lower-cases first)
    ("probe.example.com", "//var/lib/kubelet/plugins/probe.example.com/dra.sock"),  # a unix: URL's host
])
def test_the_real_kubelet_checks_a_dra_plugins_name_and_endpoint_as_the_simulator_of_its_release_does(
        cluster: SandboxCluster, driver: str, endpoint: str) -> None:
    """From 1.38 the kubelet refuses such a registration (dra_plugin_manager.go validateDriverName and
    validateEndpoint); 1.37 checks only the services. A registration socket of ours in the real node's
    plugins_registry advertises it; the kubelet's answer must be what the simulator of the same release decides."""
    node = cluster.nodes[0].real
    assert node is not None
    socket_path = node.kubelet_root / "plugins_registry" / "probe-reg.sock"
    servicer = RegistrationServicer(driver, endpoint, ("v1.DRAPlugin",))
    server = GrpcServer("probe-reg", workers=2)
    registration.add_to_server(servicer, server.server)
    server.serve_unix(str(socket_path), 0o660)
    try:
        status = servicer.wait_for_status(60)
    finally:
        server.stop(grace=1.0)
        socket_path.unlink(missing_ok=True)
    assert status is not None, "the kubelet never answered the registration"
    simulator = DraManager(cluster.api, "node-0", str(node.kubelet_root / "unused"),
                           version=KubeletVersion.parse(Binaries(REAL_LINE).version))
    try:
        simulator.validate_plugin(driver, endpoint, ["v1.DRAPlugin"])
        refusal = None
    except PluginRejected as err:
        refusal = str(err)
    assert status.registered == (refusal is None), (status, refusal)
    if refusal is not None:
        assert status.error == f"RegisterPlugin error -- plugin validation failed with err: {refusal}"
    assert status.registered is (parse_minor(REAL_LINE) < 38)


def test_the_real_kubelet_refuses_a_second_registration_on_a_connected_socket_as_the_simulator_does(
        cluster: SandboxCluster) -> None:
    """kubelet 1.37+ (manager.go PluginConnected): "device plugin already connected: <path>", after it dialled the
    socket and asked its options; the refusal drops the connected client of that path too, so when that plugin
    stops, nothing is disconnected: the node keeps advertising its devices. A plugin of ours for a resource of its
    own (`example.com/probe`, so the bridge's GPUs are not touched) on node-1."""
    node = cluster.nodes[1].real
    assert node is not None
    plugin_dir = node.kubelet_root / "device-plugins"
    plugin = FakePlugin(["p0", "p1"])
    served = Served(plugin_dir / "probe.sock", plugin)
    resource = "example.com/probe"

    def allocatable() -> str:
        return (cluster.api.get(NODES, "node-1").get("status") or {}).get("allocatable", {}).get(resource, "")

    try:
        assert register_device_plugin(plugin_dir, "probe.sock", resource) == ""
        wait_until(lambda: allocatable() == "2", 60, "the probe's devices on node-1")
        asked = plugin.options_calls
        refused = register_device_plugin(plugin_dir, "probe.sock", resource)
        assert refused == "device plugin already connected: /var/lib/kubelet/device-plugins/probe.sock"
        assert plugin.options_calls == asked + 1
    finally:
        served.stop()
    time.sleep(6)  # node status every 2 s here: a disconnect would have shown allocatable 0 by now
    assert allocatable() == "2"
