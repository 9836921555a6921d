"""The dual-API composition in-process: health fans out to both APIs, a corrupt checkpoint is survived loudly,
DRA off keeps stored sides, readiness covers both halves, and the republish on registration."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bridge.inventory.simulated import SimulatedSource
from bridge.kube import NODES, connect
from bridge.ledger.checkpoint import Checkpoint
from bridge.node.daemon import NodeConfig
from bridge.node.dual import DraOptions, DualNode, dra_wanted
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import KubeletSimulator
from tests.dra.cluster import DRIVER, NODE, wait_until
from tests.node.nodestatus import NodeStatusPoster

RESOURCE = "nvidia.com/gpu"
SPLIT_KEY = "dra-bridge.io/dra-devices"


class World:
    def __init__(self, root: Path, srv: ApiServer) -> None:
        self.root = root
        self.kubeconfig = srv.write_kubeconfig(root / "kubeconfig")
        self.api = connect(str(self.kubeconfig))
        self.api.create(NODES, {"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": NODE, "annotations": {SPLIT_KEY: "2"}}})
        self.kubelet = KubeletSimulator(root / "kl", kube=connect(str(self.kubeconfig)), node_name=NODE,
                                        dra_call_timeout=20, dra_health_retry=0.2).start()
        self.source = SimulatedSource.from_spec("8xH100-80GB", NODE)
        self.gpus = self.source.devices()
        self.nodes: list[DualNode] = []
        self.status = NodeStatusPoster(self.api, NODE, self.kubelet.devices).start()

    def config(self) -> NodeConfig:
        return NodeConfig(node_name=NODE, kubelet_root=self.root / "kl", cdi_root=self.root / "cdi",
                          state_dir=self.root / "st", http_address=None)

    def start(self, **opts: object) -> DualNode:
        options = DraOptions(**{"mode": "on", "kubeconfig": str(self.kubeconfig), "split_grace_s": 0.2, **opts})
        node = DualNode(self.config(), self.source, options, environ={})
        self.nodes.append(node)
        node.start()
        return node

    def counts(self) -> tuple[int, int]:
        state = self.kubelet.devices.resource(RESOURCE)
        return len(state.healthy), len(state.devices) - len(state.healthy)

    def slice_devices(self) -> dict[str, dict]:
        items = self.api.list(self.api.resource_api().slices, field_selector=f"spec.nodeName={NODE}")["items"]
        return {d["name"]: d for s in items for d in s["spec"].get("devices") or []}


@pytest.fixture
def world(short_tmp: Path) -> Iterator[World]:
    with ApiServer() as srv:
        w = World(short_tmp, srv)
        try:
            yield w
        finally:
            for n in reversed(w.nodes):
                n.stop()
            w.status.stop()
            w.kubelet.stop()


def converged(node: DualNode) -> bool:
    return node.split is not None and node.split.last is not None and node.split.last.state == "converged"


def ready(node: DualNode) -> dict[str, str | None]:
    assert node.dra is not None and node.publisher is not None
    checks: dict[str, Callable[[], str | None]] = {**node.dra.readiness(), **node.publisher.readiness()}
    return {name: check() for name, check in checks.items()}


def test_a_health_event_reaches_the_device_plugin_the_dra_health_stream_and_the_slice(world: World) -> None:
    node = world.start()
    assert world.kubelet.devices.wait_for(lambda m: world.counts() == (6, 2), 30)
    wait_until(lambda: set(world.slice_devices()) == {"gpu-6", "gpu-7"}, 30, "gpu-6 and gpu-7 moved to DRA")
    wait_until(lambda: ready(node) == {"dra-registered": None, "dra-slices": None}, 30, "both halves ready")
    assert world.kubelet.dra is not None
    wait_until(lambda: world.kubelet.dra.health(DRIVER, NODE, "gpu-6") is not None, 30, "the health stream")

    world.source.inject_xid(world.gpus[6].uuid, 79)  # DRA side: the slice and the DRA health stream react
    wait_until(lambda: (h := world.kubelet.dra.health(DRIVER, NODE, "gpu-6")) is not None and h.health == "Unhealthy",
               30, "gpu-6 Unhealthy on the DRA health stream")
    wait_until(lambda: (d := world.slice_devices()).get("gpu-6") is None or d["gpu-6"].get("taints"),
               30, "gpu-6 tainted or removed in the slice")  # one read: the slice may change between two
    assert world.counts() == (6, 2)

    world.source.inject_xid(world.gpus[1].uuid, 79)  # legacy side: ListAndWatch drops it, the slice is unchanged
    assert world.kubelet.devices.wait_for(lambda m: world.counts() == (5, 3), 30)
    assert world.gpus[1].uuid not in world.kubelet.devices.resource(RESOURCE).healthy
    assert set(world.slice_devices()) <= {"gpu-6", "gpu-7"} and "gpu-7" in world.slice_devices()


def test_each_dra_registration_republishes_the_slices_the_kubelet_wiped(world: World) -> None:
    node = world.start()
    wait_until(lambda: set(world.slice_devices()) == {"gpu-6", "gpu-7"}, 30, "the slice")
    assert node.dra is not None
    before = node.dra.plugin.registration.notifications
    world.kubelet.restart()
    wait_until(lambda: node.dra is not None and node.dra.plugin.registration.notifications > before, 30,
               "the re-registration")
    wait_until(lambda: set(world.slice_devices()) == {"gpu-6", "gpu-7"}, 30, "the slice republished")


def test_a_corrupt_checkpoint_is_moved_aside_logged_and_the_split_rebuilt_from_the_node(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    state = world.root / "st"
    state.mkdir()
    (state / "checkpoint.json").write_text("{ truncated")
    caplog.set_level(logging.ERROR)
    node = world.start()
    assert node.opened is not None and node.opened.corrupt is not None
    assert node.opened.corrupt.moved_to.read_text() == "{ truncated"
    assert any("is corrupt" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert world.kubelet.devices.wait_for(lambda m: world.counts() == (6, 2), 30)
    wait_until(lambda: converged(node), 30, "the split rebuilt from the Node")
    doc = json.loads((state / "checkpoint.json").read_text())
    assert sorted(s for s in doc["data"]["ownership"]["sides"].values()) == ["dra"] * 2 + ["legacy"] * 6


def test_with_the_api_down_at_start_the_stored_sides_are_served(world: World) -> None:
    sides = {g.uuid: ("dra" if g.index == 7 else "legacy") for g in world.gpus}
    Checkpoint(world.root / "st").update(lambda d: d.with_sides(sides, split="1"))
    unreachable = world.root / "unreachable.kubeconfig"
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        dead = free.getsockname()[1]
    text = world.kubeconfig.read_text()
    server = next(line.split("server:")[1].strip() for line in text.splitlines() if "server:" in line)
    unreachable.write_text(text.replace(server, f"{server.rsplit(':', 1)[0]}:{dead}"))
    node = world.start(kubeconfig=str(unreachable))
    assert world.kubelet.devices.wait_for(lambda m: world.counts() == (7, 1), 30)
    assert node.split is not None and node.split.side_of(world.gpus[7].uuid) == "dra"


def test_without_an_api_connection_auto_mode_serves_the_device_plugin_only_keeping_stored_dra_sides(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    assert dra_wanted(DraOptions(), {})[0] is False
    assert dra_wanted(DraOptions(), {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})[0] is True
    sides = {g.uuid: ("dra" if g.index >= 6 else "legacy") for g in world.gpus}
    Checkpoint(world.root / "st").update(lambda d: d.with_sides(sides, split="2"))
    caplog.set_level(logging.WARNING)
    node = DualNode(world.config(), world.source, DraOptions(mode="auto"), environ={})
    world.nodes.append(node)
    node.start()
    assert not node.dra_on and node.dra is None
    assert world.kubelet.devices.wait_for(lambda m: world.counts() == (6, 2), 30)
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "serving the device-plugin API only" in messages and "gpu-6, gpu-7" in messages
    assert not list((world.root / "kl" / "plugins_registry").glob("*.sock"))


@pytest.mark.parametrize(
    ("mode", "kubeconfig", "env", "wanted"),
    [
        ("auto", None, {}, False),
        ("auto", "/etc/bridge/kubeconfig", {}, True),
        ("auto", None, {"KUBECONFIG": "/a:/b"}, True),
        ("auto", None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, True),
        ("off", "/etc/bridge/kubeconfig", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False),
        ("on", None, {}, True),
    ],
)
def test_dra_auto_mode_follows_the_api_connection_like_kubectl(
    mode: str, kubeconfig: str | None, env: dict[str, str], wanted: bool
) -> None:
    from bridge.node.dual import DraOptions, dra_wanted

    on, reason = dra_wanted(DraOptions(mode=mode, kubeconfig=kubeconfig), env)  # type: ignore[arg-type]
    assert on is wanted
    assert reason.startswith(f"--dra {mode}")


def test_the_dra_halfs_prepare_and_slice_metrics_are_on_the_daemons_metrics_endpoint(world: World) -> None:
    from prometheus_client import generate_latest

    from tests.dra.cluster import gpu, make_claim, make_pod

    node = world.start()
    assert node.daemon is not None and world.kubelet.dra is not None
    world.kubelet.dra.wait_for_plugin(DRIVER, 30)
    wait_until(lambda: set(world.slice_devices()) == {"gpu-6", "gpu-7"}, 30, "the slice")
    pod = make_pod(world.api, "ns", "p", ["gpu"])
    make_claim(world.api, "ns", "gpu", pod, [gpu("gpu-7")])
    world.kubelet.dra.prepare_pod_with_retry(pod, timeout=30)

    def scrape() -> str:  # exactly what GET /metrics serves (bridge.node.http renders this registry)
        assert node.daemon is not None
        return generate_latest(node.daemon.metrics.registry).decode()

    text = scrape()
    assert 'dra_bridge_dra_claim_operations_total{op="prepare",result="ok"} 1.0' in text
    assert "dra_bridge_dra_prepared_claims 1.0" in text
    assert 'dra_bridge_dra_rpc_seconds_count{op="prepare"} 1.0' in text
    for phase in ("read", "lock", "work"):  # where that one call spent its time, one observation per phase
        assert f'dra_bridge_dra_prepare_phase_seconds_count{{phase="{phase}"}} 1.0' in text
    assert "dra_bridge_dra_claim_get_seconds_count 1.0" in text  # its one claim GET
    assert 'dra_bridge_dra_slice_writes_total{kind="create"} 1.0' in text
    assert node.publisher is not None and node.publisher.generation >= 1
    assert f"dra_bridge_dra_slice_generation {float(node.publisher.generation)}" in text
    assert "dra_bridge_deviceplugin_registered" in text  # the device-plugin half is still there


def test_after_corrupt_checkpoints_claims_running_containers_use_are_rebuilt_and_their_gpu_stays_on_dra(
        world: World) -> None:
    """Both files bad (the sides' checkpoint.json and the claim records' claims.json, here both in the state
    directory): each is kept aside and the daemon starts from what the kubelet (PodResources: which containers use
    which DRA devices) and the API (the claims) say, never from nothing: the running claim's record and CDI spec are
    rebuilt, and its GPU is not handed to the device plugin even though the Node now asks for split 0."""
    from tests.dra.cluster import cdi_files, gpu, make_claim, make_pod

    first = world.start()
    assert world.kubelet.dra is not None
    world.kubelet.dra.wait_for_plugin(DRIVER, 30)
    assert world.kubelet.devices.wait_for(lambda m: world.counts() == (6, 2), 30)
    pod = make_pod(world.api, "ns", "running", ["gpu"])
    uid = make_claim(world.api, "ns", "gpu", pod, [gpu("gpu-7")])["metadata"]["uid"]
    world.kubelet.dra.prepare_pod_with_retry(pod, timeout=30)
    first.stop()
    world.nodes.remove(first)

    checkpoint, claims = world.root / "st" / "checkpoint.json", world.root / "st" / "claims.json"
    assert uid in json.loads(claims.read_text())["data"]["preparedClaims"]
    checkpoint.write_text("{ truncated")
    claims.write_text("{ truncated too")
    # a patch: a read-modify-write PUT races the simulated kubelet's node status writes (409 under load)
    world.api.patch(NODES, NODE, {"metadata": {"annotations": {SPLIT_KEY: "0"}}})

    second = world.start()
    assert second.opened is not None and second.opened.corrupt is not None
    assert second.opened.claims_corrupt is not None
    assert second.opened.claims_corrupt.moved_to.read_text() == "{ truncated too"
    assert second.dra is not None and second.dra.recovered == {uid: ""}
    assert set(cdi_files(world.root / "cdi")) == {uid}
    doc = json.loads(claims.read_text())
    assert doc["data"]["preparedClaims"][uid]["state"] == "PrepareCompleted"
    # gpu-6 (free) goes back to the device plugin; gpu-7 (held by the running container) stays on DRA.
    assert world.kubelet.devices.wait_for(lambda m: world.counts() == (7, 1), 30)
    assert world.gpus[7].uuid not in world.kubelet.devices.resource(RESOURCE).healthy
    wait_until(lambda: set(world.slice_devices()) == {"gpu-7"}, 30, "only gpu-7 in the slice")
    # A kubelet restart does not prepare the running pod again (its sandbox exists): the rebuilt record alone keeps
    # gpu-7 with the claim, through the re-registration and the slice wipe.
    calls = len(world.kubelet.dra.prepare_calls)
    world.kubelet.restart()
    world.kubelet.dra.wait_for_plugin(DRIVER, 30)
    wait_until(lambda: set(world.slice_devices()) == {"gpu-7"}, 30, "gpu-7 republished after the wipe")
    assert world.kubelet.devices.wait_for(lambda m: world.counts() == (7, 1), 30)
    assert len(world.kubelet.dra.prepare_calls) == calls
    assert json.loads(claims.read_text())["data"]["preparedClaims"][uid]["state"] == "PrepareCompleted"
    assert set(cdi_files(world.root / "cdi")) == {uid}
