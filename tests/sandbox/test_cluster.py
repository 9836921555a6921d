"""`SandboxCluster` and `bridge sandbox cluster`: the parts start, register, serve and stop, leaving nothing behind.

The GPU scheduling flows (legacy and DRA pods across nodes, claims, FailedScheduling) are in test_cluster_flow.py;
here a pod needs nothing from the scheduler beyond a binding.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge.cli import main
from bridge.kube import MUTATING_WEBHOOKS, NAMESPACES, NODES, PODS, connect
from bridge.sandbox.cluster import ClusterError, SandboxCluster
from bridge.inventory.simulated import devices_from_spec
from bridge.sandbox.cluster.inspect import SideWatch, holders, offered_twice, shared
from tests.polling import wait_until
from tests.sandbox_cluster import spec_for_tests

ROOT = Path(__file__).resolve().parents[2]


def plain_pod(name: str, namespace: str = "default", **resources: str) -> dict:
    container: dict = {"name": "main", "image": "busybox"}
    if resources:
        container["resources"] = {"limits": dict(resources)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [container]}}


def test_kubelets_register_ready_nodes_with_gpu_labels_and_run_what_gets_bound(
        sandbox_cluster: Callable[..., SandboxCluster]) -> None:
    cluster = sandbox_cluster(nodes=2, gpus="4xA100-40GB")
    nodes = {n["metadata"]["name"]: n for n in cluster.api.list(NODES)["items"]}
    assert sorted(nodes) == ["node-0", "node-1"]
    for node in nodes.values():
        assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    cluster.api.create(PODS, plain_pod("hello"), "default")
    pod = cluster.wait_pod_phase("default", "hello", "Running", 60)
    assert pod["spec"]["nodeName"] in nodes


@pytest.fixture(scope="module")
def bridged() -> Iterator[SandboxCluster]:
    """One node with a real `bridge node` (2 of 8 GPUs on DRA) and the real webhook, shared by the tests below."""
    with SandboxCluster(spec_for_tests(1, bridge=True, webhook=True, split="2")) as cluster:
        yield cluster


def test_with_the_bridge_each_node_daemon_serves_its_split_and_a_legacy_pod_gets_gpus(bridged: SandboxCluster) -> None:
    cluster = bridged
    cluster.wait_daemons_settled(60)
    wait_until(lambda: cluster.api.get(NODES, "node-0")["status"]["allocatable"].get("nvidia.com/gpu") == "6", 60,
               "the Node to show 6 legacy GPUs")
    rapi = cluster.api.resource_api()
    assert cluster.api.get(rapi.device_classes, "gpu.dra-bridge.io")
    cluster.api.create(PODS, plain_pod("train", **{"nvidia.com/gpu": "2"}), "default")
    cluster.wait_pod_phase("default", "train", "Running", 60)
    held = holders(cluster)
    assert sorted(v for vs in held.values() for v in vs) == ["legacy default/train", "legacy default/train"]
    assert shared(cluster) == {}
    assert "bridge node pid" in cluster.describe()


def test_with_the_webhook_it_is_registered_with_tls_and_translates_pods_in_dra_namespaces(
        bridged: SandboxCluster) -> None:
    cluster = bridged
    config = cluster.api.get(MUTATING_WEBHOOKS, "dra-bridge")
    hook = config["webhooks"][0]
    assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:") and hook["clientConfig"]["caBundle"]
    cluster.api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": "team-a", "labels": {"dra-bridge.io/mode": "dra"}}})
    created = cluster.api.create(PODS, plain_pod("gpu", "team-a", **{"nvidia.com/gpu": "1"}), "team-a")
    limits = created["spec"]["containers"][0].get("resources", {}).get("limits", {})
    assert "nvidia.com/gpu" not in limits, "the webhook took the legacy request away"
    assert created["spec"].get("resourceClaims") or any(k.startswith("deviceclass.resource.kubernetes.io/")
                                                        for k in limits)


def test_the_side_checks_see_a_gpu_held_twice_or_offered_twice(bridged: SandboxCluster) -> None:
    """The checks `bridge demo` and the controller's end to end rely on can fail: a claim allocated (by hand) to a
    GPU a legacy pod holds is a GPU held twice, and a ResourceSlice (not the daemon's) publishing a GPU the device
    plugin offers is a GPU offered to both APIs."""
    cluster, api = bridged, bridged.api
    rapi = api.resource_api()
    cluster.api.create(PODS, plain_pod("holder", **{"nvidia.com/gpu": "1"}), "default")
    cluster.wait_pod_phase("default", "holder", "Running", 60)
    (uuid,) = [u for (_, u), h in holders(cluster).items() if h == {"legacy default/holder"}]
    (device,) = [f"gpu-{d.index}" for d in devices_from_spec(cluster.nodes[0].spec.gpus, "node-0") if d.uuid == uuid]
    claim = api.create(rapi.claims, {
        "apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaim",
        "metadata": {"name": "by-hand", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.dra-bridge.io"}}]}},
    }, "default")
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.dra-bridge.io", "pool": "node-0", "device": device}]}}}
    api.update(rapi.claims, claim, "default", subresource="status")
    try:
        assert shared(cluster) == {("node-0", uuid): {"legacy default/holder", "claim default/by-hand"}}
    finally:
        api.delete(rapi.claims, "by-hand", "default")
        api.delete(PODS, "holder", "default")
    assert offered_twice(cluster) == set()
    # A slice for the node's pool that the daemon does not own (no spec.nodeName, so it leaves it alone).
    api.create(rapi.slices, {
        "apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceSlice", "metadata": {"name": "by-hand"},
        "spec": {"driver": "gpu.dra-bridge.io", "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 1},
                 "allNodes": True, "devices": [{"name": device}]}})
    try:
        watch = SideWatch(cluster)
        watch.sample()
        assert watch.samples.offered_twice and not watch.samples.clean
        assert f"node-0/{uuid} offered to both APIs" in watch.samples.describe()
    finally:
        api.delete(rapi.slices, "by-hand")


def _run_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "bridge", "sandbox", "cluster", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _children_of(pid: int) -> list[int]:
    """Children of every thread of `pid`: /proc lists a child under the thread that forked it, and the sandbox forks
    its processes from a spawner thread (processes.py), not the main one."""
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return children


def _bridge_pids(cluster_pid: int, command: bytes) -> list[int]:
    """The cluster's children running `bridge <command>` (node, webhook, controller)."""
    pids = []
    for child in _children_of(cluster_pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"bridge" in cmdline and command in cmdline:
            pids.append(child)
    return pids


def test_the_cli_prints_what_runs_where_and_stops_everything_on_sigterm(short_tmp: Path) -> None:
    kubeconfig = short_tmp / "sb.kubeconfig"
    proc = _run_cli("--nodes", "1", "--gpus", "2xL4", "--bridge", "--controller", "--controller-args",
                    "--cooldown 5s", "--kubeconfig-out", str(kubeconfig), "--node-status-frequency", "0.5")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (_bridge_pids(proc.pid, b"node")
                                                   and _bridge_pids(proc.pid, b"controller")):
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.1)
        (daemon,) = _bridge_pids(proc.pid, b"node")
        (controller,) = _bridge_pids(proc.pid, b"controller")
        assert b"--cooldown" in Path(f"/proc/{controller}/cmdline").read_bytes()
        api = connect(str(kubeconfig))
        wait_until(lambda: [n["metadata"]["name"] for n in api.list(NODES)["items"]] == ["node-0"], 60, "the Node")
        wait_until(lambda: any(line.startswith("work dir") for line in lines), 60, "the whole description")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        reader.join(10)
    assert proc.returncode == 0, stderr
    stdout = "".join(lines)
    assert "API emulator  http://127.0.0.1:" in stdout and "bridge node pid" in stdout
    assert re.search(r"^controller +http://127\.0\.0\.1:\d+/metrics pid \d+", stdout, re.M), stdout
    work = Path(re.search(r"work dir +(\S+)", stdout).group(1))  # type: ignore[union-attr]
    assert not work.exists(), "the temporary work directory is removed"
    assert not Path(f"/proc/{daemon}").exists(), "the node daemon is gone"
    assert not Path(f"/proc/{controller}").exists() or _zombie(controller), "the controller is gone"


def test_a_killed_cluster_takes_its_children_with_it(short_tmp: Path) -> None:
    """No one calls stop() after SIGKILL: the children's death signal (orphanguard, PR_SET_PDEATHSIG) ends them."""
    script = (
        "import sys, time; from pathlib import Path; from bridge.sandbox.cluster.processes import ChildProcess\n"
        "c = ChildProcess('sleeper', ['sleep', '120'], Path(sys.argv[1])).start()\n"
        "print(c.pid, flush=True); time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", script, str(short_tmp / "child.log")], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        wait_until(lambda: _cmdline(child).startswith("sleep"), 30, "orphanguard to exec the child")
    finally:
        parent.kill()
        parent.communicate(timeout=30)
    wait_until(lambda: not Path(f"/proc/{child}").exists() or _zombie(child), 30, "the orphaned child to exit")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize(("args", "message"), [
    (["--split", "2"], "add --bridge"),
    (["--gpus", "8xNOPE"], "8xNOPE"),
    (["--nodes-file", __file__, "--nodes", "3"], "do not combine it with --nodes"),
    (["--kubernetes-version", "1.30"], "supported are 1.32 to 1.38"),
    (["--bridge", "--split", "gpu-x"], "--split"),
    (["--controller"], "add --bridge"),
    (["--bridge", "--controller-args", "--cooldown 5s"], "add --controller"),
    (["--bridge", "--controller", "--controller-args", "--cooldown '5s"], "not a shell-quoted list"),
])
def test_bad_options_are_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["sandbox", "cluster", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_dra_pod_on_a_bridge_node_is_prepared_by_the_real_daemon_and_unprepared_when_deleted(
        bridged: SandboxCluster) -> None:
    """Allocated and bound by hand (the pod names a scheduler nobody runs), in the scheduler's order: claim allocated
    and reserved, then the binding (a pod the kubelet sees before its claim is allocated waits for the kubelet's
    60-90 s resync). The kubelet simulator and the real node daemon do the rest."""
    cluster, api = bridged, bridged.api
    cluster.wait_daemons_settled(60)
    rapi = api.resource_api()
    (slice_,) = api.list(rapi.slices, field_selector="spec.nodeName=node-0")["items"]
    taken = {r["device"] for c in api.list(rapi.claims)["items"]
             for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []}
    device = next(d["name"] for d in slice_["spec"]["devices"] if d["name"] not in taken)  # free DRA-side GPU
    pod = api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "infer", "namespace": "default"},
                            "spec": {"schedulerName": "by-hand", "resourceClaims": [{"name": "gpu", "resourceClaimName": "one"}],
                                     "containers": [{"name": "main", "image": "cuda:12",
                                                     "resources": {"claims": [{"name": "gpu"}]}}]}}, "default")
    claim = api.create(rapi.claims, {
        "apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaim",
        "metadata": {"name": "one", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.dra-bridge.io"}}]}},
    }, "default")
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.dra-bridge.io", "pool": "node-0", "device": device}]}},
        "reservedFor": [{"resource": "pods", "name": "infer", "uid": pod["metadata"]["uid"]}]}
    api.update(rapi.claims, claim, "default", subresource="status")
    api.create(PODS, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "infer", "namespace": "default"},
                      "target": {"apiVersion": "v1", "kind": "Node", "name": "node-0"}}, "default", subresource="binding")
    cluster.wait_pod_phase("default", "infer", "Running", 60)
    node = cluster.node("node-0")
    specs = lambda: [p.name for p in node.cdi_root.glob("*claim_*")]  # noqa: E731
    wait_until(lambda: any(claim["metadata"]["uid"] in n for n in specs()), 30, "the claim's CDI spec")
    assert any(h == {"claim default/one"} for h in holders(cluster).values())
    api.delete(PODS, "infer", "default")
    cluster.wait_pod_phase("default", "infer", "Gone", 60)
    wait_until(lambda: not any(claim["metadata"]["uid"] in n for n in specs()), 30, "the CDI spec to be removed")
    assert node.kubelet.dra is not None and node.kubelet.dra.claim(claim["metadata"]["uid"]) is None


def test_with_the_controller_a_pending_dra_pod_gets_a_gpu_moved_and_settling_follows_the_new_split(
        sandbox_cluster: Callable[..., SandboxCluster]) -> None:
    cluster = sandbox_cluster(nodes=1, gpus="2xL4", bridge=True, controller=True)
    assert "controller    http://127.0.0.1:" in cluster.describe()
    api, rapi = cluster.api, cluster.api.resource_api()
    api.create(rapi.claim_templates, {
        "apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.dra-bridge.io"}}]}}}},
        "default")
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dra", "namespace": "default"},
                      "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                               "containers": [{"name": "main", "image": "cuda:12",
                                               "resources": {"claims": [{"name": "gpu"}]}}]}}, "default")
    cluster.wait_pod_phase("default", "dra", "Running", 60)
    assert api.get(NODES, "node-0")["metadata"]["annotations"]["dra-bridge.io/dra-devices"] == "1"
    cluster.wait_daemons_settled(30)  # against the split the controller set, not the spec's (none: all legacy)


def test_a_controller_that_cannot_start_fails_the_cluster_start_with_its_error_and_leaves_nothing_behind(
        sandbox_cluster: Callable[..., SandboxCluster]) -> None:
    with pytest.raises(ClusterError, match="bridge controller exited with status 2") as err:
        sandbox_cluster(nodes=1, gpus="2xL4", bridge=True, controller=True,
                        controller_args=("--min-legacy-share", "7"))
    assert "--min-legacy-share" in str(err.value)  # the controller's own message, from its log
