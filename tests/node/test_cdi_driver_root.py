"""The whole daemon (DualNode, both halves) on a fake 570.x GPU host: the CDI specs a prepared claim and a
device-plugin container get, the NVIDIA Container Toolkit's names when its spec is on the node, and a CDI setup
that cannot work refused at start. The kubelet simulator drives both APIs over real sockets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.cdi import CdiConfigError, CdiOptions, validate_spec
from bridge.deviceplugin.allocate import CDI_CRI
from bridge.inventory.simulated import SimulatedSource, devices_from_spec
from bridge.kube import NODES, connect
from bridge.node.daemon import NodeConfig
from bridge.node.dual import DraOptions, DualNode
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import KubeletSimulator
from tests.dra.cluster import DRIVER, NODE, cdi_files, gpu, make_claim, make_pod
from tests.fakedriver import LIBDIR, VERSION, make_host, put_spec, toolkit_spec

RESOURCE = "nvidia.com/gpu"
LIB = f"/{LIBDIR}"
DP_KIND = "k8s.device-plugin.dra-bridge.io/gpu"


class Host:
    """A fake 570.x GPU host: driver files at /, device nodes of every GPU but gpu-5, the hook, the API."""

    def __init__(self, root: Path, srv: ApiServer) -> None:
        self.root = root
        self.gpus = devices_from_spec("8xH100-80GB", NODE, driver_version=VERSION)
        self.missing = self.gpus[5]  # its /dev/nvidia<minor> does not exist on this host
        self.host = make_host(root / "host", [g.minor for g in self.gpus if g != self.missing])
        kubeconfig = srv.write_kubeconfig(root / "kubeconfig")
        self.kubeconfig = str(kubeconfig)
        self.api = connect(self.kubeconfig)
        self.api.create(NODES, {"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": NODE, "annotations": {"dra-bridge.io/dra-devices": "gpu-6,gpu-7"}}})
        self.kubelet = KubeletSimulator(root / "kl", kube=connect(self.kubeconfig), node_name=NODE,
                                        dra_call_timeout=20, dra_health_retry=0.2).start()
        self.node: DualNode | None = None

    def start(self, **cdi: Any) -> DualNode:
        options = CdiOptions(**{"driver_root": "/", "check_device_nodes": True, "host_root": self.host, **cdi})
        config = NodeConfig(node_name=NODE, kubelet_root=self.root / "kl", cdi_root=self.host / "var/run/cdi",
                            state_dir=self.root / "st", http_address=None, device_list_strategy=frozenset({CDI_CRI}),
                            cdi=options)
        self.node = DualNode(config, SimulatedSource(self.gpus, name="simulated"),
                             DraOptions(mode="on", kubeconfig=self.kubeconfig, split_grace_s=0.2), environ={})
        self.node.start()
        return self.node

    @property
    def cdi_root(self) -> Path:
        return self.host / "var/run/cdi"

    def prepare(self, device: str) -> tuple[str, tuple[str, ...]]:
        pod = make_pod(self.api, "team-a", f"pod-{device}", ["gpu"])
        uid = make_claim(self.api, "team-a", "gpu", pod, [gpu(device)])["metadata"]["uid"]
        assert self.kubelet.dra is not None
        records = self.kubelet.dra.prepare_pod_with_retry(pod, timeout=30)
        [dev] = records[uid].prepared[DRIVER]
        return uid, tuple(dev.cdi_ids)

    def allocate(self, count: int) -> Any:
        assert self.kubelet.devices.wait_for(lambda m: len(m.resource(RESOURCE).healthy) == 6, 30)
        return self.kubelet.devices.allocate("legacy-pod", "main", RESOURCE, count)


@pytest.fixture
def host(short_tmp: Path) -> Iterator[Host]:
    with ApiServer() as srv:
        h = Host(short_tmp, srv)
        try:
            yield h
        finally:
            if h.node is not None:
                h.node.stop()
            h.kubelet.stop()


def mounted(doc: dict[str, Any]) -> dict[str, str]:
    return {m["containerPath"]: m["hostPath"] for m in doc["containerEdits"]["mounts"]}


def test_a_prepared_claim_and_a_cdi_cri_container_get_the_driver_from_the_driver_root(host: Host) -> None:
    host.start()
    uid, ids = host.prepare("gpu-7")
    assert ids == (f"k8s.{DRIVER}/claim={uid}-gpu-7",)
    claim_spec = json.loads(cdi_files(host.cdi_root)[uid].read_text())
    validate_spec(claim_spec)
    assert mounted(claim_spec)[f"{LIB}/libcuda.so.{VERSION}"] == f"{LIB}/libcuda.so.{VERSION}"
    assert mounted(claim_spec)[f"{LIB}/libnvidia-ml.so.{VERSION}"] == f"{LIB}/libnvidia-ml.so.{VERSION}"
    # only the nodes this host has: nvidiactl and nvidia-uvm, not nvidia-uvm-tools or nvidia-modeset
    assert claim_spec["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]
    assert [h["args"][1] for h in claim_spec["containerEdits"]["hooks"]] == ["create-symlinks", "update-ldcache"]
    assert claim_spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]

    resp = host.allocate(2)  # the device plugin's cdi-cri strategy: our own vendor, never nvidia.com/gpu
    names = [c.name for c in resp.cdi_devices]
    assert len(names) == 2 and all(n.startswith(f"{DP_KIND}=GPU-") for n in names)
    [dp_file] = host.cdi_root.glob("k8s.device-plugin.dra-bridge.io-gpu_*.json")
    dp_spec = json.loads(dp_file.read_text())
    validate_spec(dp_spec)
    assert {f"{DP_KIND}={d['name']}" for d in dp_spec["devices"]} >= set(names)
    assert mounted(dp_spec)[f"{LIB}/libcuda.so.{VERSION}"] == f"{LIB}/libcuda.so.{VERSION}"
    assert dp_spec["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]
    assert "hooks" in dp_spec["containerEdits"]
    assert host.missing.uuid not in {d["name"] for d in dp_spec["devices"]}  # no node: left out, not broken
    assert not list(host.cdi_root.glob("nvidia.com*")), "nothing of ours under the toolkit's kind"


def test_with_the_toolkits_spec_on_the_node_prepare_and_allocate_return_its_names(host: Host) -> None:
    put_spec(host.host, "/var/run/cdi/nvidia.yaml", toolkit_spec(host.gpus))
    host.start()
    uid, ids = host.prepare("gpu-6")
    assert ids == (f"nvidia.com/gpu={host.gpus[6].uuid}",)
    assert uid not in cdi_files(host.cdi_root)  # no duplicate of the toolkit's edits
    resp = host.allocate(1)
    [name] = [c.name for c in resp.cdi_devices]
    assert name.startswith("nvidia.com/gpu=GPU-")


def test_source_toolkit_without_a_toolkit_spec_fails_the_start_before_anything_is_served(host: Host) -> None:
    with pytest.raises(CdiConfigError, match="--cdi-source toolkit"):
        host.start(source="toolkit")
    assert not list((host.root / "kl" / "device-plugins").glob("dra-bridge*.sock"))
    assert not (host.root / "kl" / "plugins_registry").exists() or not list(
        (host.root / "kl" / "plugins_registry").glob(f"{DRIVER}*"))


def test_allocate_for_a_gpu_whose_device_node_is_missing_fails_loudly_instead_of_a_dead_container(
        host: Host) -> None:
    import grpc

    from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
    from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc

    node = host.start()
    assert node.daemon is not None
    host.allocate(1)  # registered and serving
    with grpc.insecure_channel(f"unix://{node.daemon.plugin_config.socket_path}") as channel:
        stub = pb_grpc.DevicePluginStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[host.missing.uuid])]), timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"device node /dev/nvidia{host.missing.minor} of GPU 5" in str(err.value.details())
