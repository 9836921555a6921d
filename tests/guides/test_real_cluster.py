"""The guide blocks that need real nodes (marked `real-backend`: exec, logs, port-forward, NVIDIA's chart), run as
written on the real backend (tests/guides/realworld.py: one GPU node with a real kubelet and containerd, the chart's
pods from the image built from this repository, the real `kubectl` and `helm`), with what the guide says about each
checked, in guide 01's standalone order: NVIDIA's chart learns the switch, the bridge's chart is installed and the
node handed over by guide 01's own blocks, then a GPU pod's container, the node daemon's log and the webhook's
metric are read as the guides read them.

As with the sandbox's guide tests, each test first brings the cluster to where its block stands (the stages below,
each done once per cluster), so any one of them runs alone."""

from __future__ import annotations

import json
import re
import shlex
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.kube.api import DAEMON_SETS, NAMESPACES, NODES, PODS
from bridge.kube.errors import NotFound
from bridge.sandbox.real.images import PROBE_IMAGE
from tests.guides import markdown
from tests.guides.checks import eventually
from tests.guides.realworld import NODE, PROGRAMS, RealGuideWorld, bridge_values, real_world
from tests.guides.world import STANDALONE_VALUES, Ran
from tests.imagebuilt import build
from tests.real.conftest import REAL_LINE, require_binaries

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(900)]
NS = "team-a"
VENDOR_NS, VENDOR_DS = "nvidia-device-plugin", "nvdp-nvidia-device-plugin"
WEBHOOK_PODS = "app.kubernetes.io/component=webhook"
REVIEWS = "dra_bridge_webhook_reviews_total"


@pytest.fixture(scope="module")
def real(request: pytest.FixtureRequest) -> Iterator[RealGuideWorld]:
    require_binaries(REAL_LINE, PROGRAMS)  # before the image is built for nothing
    built: build.BuildResult = request.getfixturevalue("built")
    with real_world(built) as w:
        try:
            yield w
        finally:
            print("real-backend guide blocks run, with their times:\n" + "\n".join(w.order), file=sys.stderr)


def test_01_nvidias_chart_learns_the_switch_and_leaves_the_node_labeled_false(real: RealGuideWorld) -> None:
    before = vendor_pods(real)
    real.run("01-first-node", "vendor-affinity")
    ds = real.api.get(DAEMON_SETS, VENDOR_DS, VENDOR_NS)
    assert ds["spec"]["template"]["spec"]["affinity"] == yaml.safe_load(STANDALONE_VALUES.read_text())["affinity"]
    # No node carries the label yet: the plugin stays on the node, in a new pod (its template changed).
    real.sh(f"kubectl -n {VENDOR_NS} rollout status daemonset/{VENDOR_DS} --timeout=120s")
    after = vendor_pods(real)
    assert list(before.values()) == list(after.values()) == [NODE] and set(after) != set(before)

    # The label takes it off (the real DaemonSet controller reads the affinity), and the bridge comes.
    ran = handed_over(real)
    assert vendor_pods(real) == {}
    out = ran["verify"].stdout
    assert "state: converged" in out and "0 of 4 GPUs on DRA" in out and "\n4\n" in out


def test_01_a_gpu_pods_container_names_the_gpu_bridge_node_status_lists_it_holding(real: RealGuideWorld) -> None:
    trainer_adopted(real)
    ran = real.run("01-first-node", "gpus-in-containers")
    shown = re.findall(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$", section(ran.stdout, f"{NS}/trainer"), re.M)
    assert [(index, name) for index, name, _ in shown] == [("0", "NVIDIA H100 80GB HBM3")], ran.stdout
    (uuid,) = [u for _, _, u in shown]

    def holders() -> None:
        held = {d["uuid"]: d["holders"] for d in split_status(real)["devices"]}
        assert [h.split(" container")[0] for h in held[uuid]] == [f"pod {NS}/trainer"], held

    eventually(holders, "bridge node status naming the trainer as the holder of the GPU its container names")
    # The bridge's own pods run on the node too; they have no GPU and no nvidia-smi: kubectl says so, the loop goes on.
    assert section(ran.stdout, "dra-bridge/dra-bridge-node-") == "" and "nvidia-smi" in ran.stderr


def test_01_the_node_daemons_log_is_read_from_its_container(real: RealGuideWorld) -> None:
    handed_over(real)
    ran = real.run("01-first-node", "daemon-log")
    lines = [json.loads(line) for line in ran.stdout.splitlines()]  # the chart's JSON log format
    assert 0 < len(lines) <= 50
    assert all(line["logger"].startswith("bridge.") for line in lines)
    assert any(line.get("node") == NODE and "converged" in line["msg"] for line in lines)


def test_03_the_webhooks_metric_through_a_port_forward_is_one_replicas_count(real: RealGuideWorld) -> None:
    forwarded(real)
    out = real.run("03-first-namespace", "metric").stdout
    assert reviews(out, 'mode="shadow",outcome="shadow"'), out
    # One replica's count, as the guide says: exactly the lines of one of the two webhook pods.
    per_pod = {pod: reviews(m) for pod, m in replica_metrics(real).items()}
    assert len(per_pod) == 2 and reviews(out) in per_pod.values(), (out, per_pod)


def test_every_real_backend_block_of_the_guides_ran(real: RealGuideWorld) -> None:
    trainer_adopted(real)
    forwarded(real)
    for guide, block_id in (("01-first-node", "gpus-in-containers"), ("01-first-node", "daemon-log"),
                            ("03-first-namespace", "metric")):
        real.run(guide, block_id)
    expected = {(b.guide, b.line) for name in markdown.guide_names() for b in markdown.load(name).commands()
                if b.real_backend is not None}
    assert expected and expected - set(real.ran) == set()


# -- stages: each runs the guide's blocks (and the test's own setup) that bring the cluster there, once -------------


def handed_over(real: RealGuideWorld) -> dict[str, Ran]:
    """Guide 01's standalone steps: NVIDIA's chart upgraded with the values file, the bridge's chart installed (with
    this machine's values: `bridge_values`, instead of the `install-standalone` block, which needs cert-manager),
    the image checked, NVIDIA's plugin off the node, the node opted in, verified."""
    real.run("01-first-node", "vendor-affinity")
    if "dra-bridge" not in namespaces(real):
        real.sh("kubectl create namespace dra-bridge\n"
                "kubectl label namespace dra-bridge pod-security.kubernetes.io/enforce=privileged\n"
                "helm install dra-bridge charts/dra-bridge -n dra-bridge " + shlex.join(bridge_values(real.image_tag)))
    return {block_id: real.run("01-first-node", block_id)
            for block_id in ("image", "vendor-off-standalone", "opt-in", "verify")}


def trainer_adopted(real: RealGuideWorld) -> None:
    """A GPU pod of team-a on the node, adopted by the node daemon. In the guide the GPU pods ran before the
    hand-over, and the daemon adopted them when it started; this one starts after, and the daemon's status does not
    name it until its next evaluation (an answered Allocate does not wake one: found here, reported), so the daemon
    is restarted as guide 01's Troubleshooting does (safe at any time), which adopts it as the hand-over does."""
    handed_over(real)
    team_namespace(real)
    try:
        real.api.get(PODS, "trainer", NS)
    except NotFound:
        real.api.create(PODS, gpu_pod("trainer"), NS)
    real.sh(f"kubectl -n {NS} wait --for=condition=Ready pod/trainer --timeout=120s")
    real.run("01-first-node", "restart-daemon")


def forwarded(real: RealGuideWorld) -> None:
    """Guide 03's shadow flip, GPU pods reviewed by both webhook replicas (the guide's story has created some by
    then: dry runs here), and the guide's port-forward."""
    handed_over(real)
    team_namespace(real)
    real.run("03-first-namespace", "shadow")
    created = 0
    while not all(reviews(m, 'mode="shadow"') for m in replica_metrics(real).values()):
        assert created < 40, replica_metrics(real)
        real.api.create(PODS, gpu_pod(f"shadow-{created}"), NS, dry_run=True)
        created += 1
    # The block forwards the fixed local port 8443: one test run at a time on this machine forwards it.
    real.session.hold(Path(tempfile.gettempdir()) / "dra-bridge-guides-port-8443.lock")
    real.run("03-first-namespace", "forward")


def team_namespace(real: RealGuideWorld) -> None:
    if NS not in namespaces(real):
        real.sh(f"kubectl create namespace {NS}")
    eventually(lambda: real.sh(f"kubectl -n {NS} get serviceaccount default"), f"{NS}'s default ServiceAccount")


# -- reading the cluster --------------------------------------------------------------------------------------------


def namespaces(real: RealGuideWorld) -> set[str]:
    return {n["metadata"]["name"] for n in real.api.list(NAMESPACES)["items"]}


def vendor_pods(real: RealGuideWorld) -> dict[str, str]:
    """NVIDIA's plugin's pods that are not going away -> their node."""
    pods = real.api.list(PODS, VENDOR_NS)["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods
            if not p["metadata"].get("deletionTimestamp")}


def split_status(real: RealGuideWorld) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(real.api.get(NODES, NODE)["metadata"]["annotations"]
                                        ["dra-bridge.io/split-status"])
    return status


def replica_metrics(real: RealGuideWorld) -> dict[str, str]:
    """Each webhook pod's /metrics, read through the API server's proxy to that pod."""
    out = {}
    for p in real.api.list(PODS, "dra-bridge", label_selector=WEBHOOK_PODS)["items"]:
        name = p["metadata"]["name"]
        out[name] = real.sh(f"kubectl get --raw /api/v1/namespaces/dra-bridge/pods/https:{name}:8443/proxy/metrics")
    return out


def reviews(metrics: str, labels: str = "") -> list[str]:
    """The lines of the webhook's review counter (with these labels)."""
    return [line for line in metrics.splitlines() if line.startswith(REVIEWS + "{") and labels in line]


def section(out: str, heading: str) -> str:
    """What the exec block printed under `heading` (its `namespace/pod:` line, matched by prefix)."""
    m = re.search(rf"^{re.escape(heading)}[^\n]*:\n(.*?)(?=^\S+/\S+:$|\Z)", out, re.M | re.S)
    assert m, f"no {heading!r} in:\n{out}"
    return m.group(1).strip()


def gpu_pod(name: str) -> dict[str, Any]:
    """A pod asking one `nvidia.com/gpu`, in the real nodes' test image."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                {"name": "train", "image": PROBE_IMAGE, "imagePullPolicy": "Never",
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
