"""`KubeletSimulator` with its DRA side: slice wipes at start and restart, and PodResources `dynamic_resources`."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from bridge.ledger import Side
from bridge._proto.podresources.v1 import podresources_pb2 as pb
from bridge._proto.podresources.v1 import podresources_pb2_grpc as pb_grpc
from bridge.dra.component import DraConfig, DraNode
from bridge.dra.plugin import PluginConfig
from bridge.dra.slicepublisher import SlicePublisher
from bridge.dra.stores import CheckpointClaimStore
from bridge.inventory.simulated import devices_from_spec
from bridge.kube import NODES, KubeAPI, connect
from bridge.ledger.checkpoint import Checkpoint
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import KubeletSimulator
from tests.dra.cluster import DRIVER, NODE, gpu, make_claim, make_pod
from tests.polling import wait_until

GPUS = devices_from_spec("2xH100-80GB", NODE)


@pytest.fixture
def api(short_tmp: Path) -> Iterator[tuple[KubeAPI, Path]]:
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(short_tmp / "kubeconfig")
        kube = connect(str(kubeconfig))
        kube.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        yield kube, kubeconfig


def node_slices(kube: KubeAPI) -> list[dict]:
    return kube.list(kube.resource_api().slices, field_selector=f"spec.nodeName={NODE}")["items"]


def test_the_kubelet_wipes_the_nodes_slices_at_start_and_at_every_restart(
        api: tuple[KubeAPI, Path], short_tmp: Path) -> None:
    kube, _ = api
    publisher = SlicePublisher(kube, GPUS, node_name=NODE, dra_devices=[g.uuid for g in GPUS], watch=False)
    publisher.reconcile_once()
    assert len(node_slices(kube)) == 1
    sim = KubeletSimulator(short_tmp / "kl", kube=kube, node_name=NODE).start()
    try:
        # the startup wipe runs in the background, as the real kubelet's does (it may land after start returned)
        wait_until(lambda: node_slices(kube) == [], 30, "the startup wipe of the node's slices")
        publisher.reconcile_once()
        plugin_sock = sim.device_plugin_dir / "some-plugin.sock"
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(plugin_sock))
        sim.restart()
        wait_until(lambda: node_slices(kube) == [], 30, "the wipe of the node's slices after the restart")
        assert not plugin_sock.exists() and sim.kubelet_socket.is_socket()
    finally:
        sim.stop()


def test_podresources_reports_prepared_claims_as_dynamic_resources_also_after_a_restart(
        api: tuple[KubeAPI, Path], short_tmp: Path) -> None:
    kube, kubeconfig = api
    sim = KubeletSimulator(short_tmp / "kl", kube=connect(str(kubeconfig)), node_name=NODE,
                           dra_call_timeout=15, dra_health_retry=0.2).start()
    boot = short_tmp / "boot_id"
    boot.write_text("boot-1\n")
    dra = DraNode(DraConfig(NODE, PluginConfig(kubelet_root=str(short_tmp / "kl")), cdi_root=short_tmp / "cdi",
                            boot_id_path=boot),
                  connect(str(kubeconfig)), GPUS, lambda _: Side.DRA,
                  CheckpointClaimStore(Checkpoint(short_tmp / "st", boot_id=lambda: "boot-1")))
    dra.start()
    try:
        assert sim.dra is not None
        sim.dra.wait_for_plugin(DRIVER)
        pod = make_pod(kube, "ns", "p", ["gpu"])
        uid = make_claim(kube, "ns", "gpu", pod, [gpu("gpu-1")])["metadata"]["uid"]
        sim.dra.prepare_pod(pod)
        for _ in range(2):  # before and after a kubelet restart (the claim-info cache is checkpointed)
            with grpc.insecure_channel(f"unix://{sim.podresources_socket}") as ch:
                resp = pb_grpc.PodResourcesListerStub(ch).List(pb.ListPodResourcesRequest(), timeout=10)
            [p] = resp.pod_resources
            [c] = p.containers
            [dr] = c.dynamic_resources
            [cr] = dr.claim_resources
            assert (p.namespace, p.name, c.name, dr.claim_namespace, dr.claim_name) == ("ns", "p", "c", "ns", "gpu")
            assert (cr.driver_name, cr.pool_name, cr.device_name) == (DRIVER, NODE, "gpu-1")
            assert [d.name for d in cr.cdi_devices] == [f"k8s.{DRIVER}/claim={uid}-gpu-1"]
            sim.restart()
            sim.dra.wait_for_plugin(DRIVER)
        sim.dra.prepare_pod(pod)
        sim.dra.unprepare_pod(pod)
        assert sim.dra.dynamic_assignments() == []
    finally:
        dra.stop()
        sim.stop()
