"""Memory of a whole sandbox cluster and the time from pod create to Running, against a baseline in the same run.

    .venv/bin/python bench/sandbox_bench.py [--nodes 2] [--gpus 8xH100-80GB] [--pods 16] [--version 1.36]

Measured, on a cluster with real `bridge node` processes (split 4 per node) and the kubelet simulators:
  start     time until the cluster answers and every node daemon is registered with its kubelet
  RSS       resident memory of this process (emulator, kubelets, control plane) and of each node daemon, from
            /proc (VmRSS), after the pods ran
  bound     create -> Running for --pods one-GPU pods created with spec.nodeName set (the kubelet's and the
            node daemon's part alone: admission, Allocate, status writes)
  legacy    the same with the control plane binding them (p50, p99, max)
  dra       the same for one-GPU pods with a claim from a template (the scheduler and claim-controller
            stand-ins allocate it, the node daemon prepares it)
  baseline  create -> seen in a GET of the same pod on the bare API emulator (one round trip each), so the ratios
            show what binding, admission, Allocate/NodePrepareResources and status writes cost on top
Pods are spread as the control plane binds them; each finishes (Job-like, run-seconds 0.5) to free its GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.kube import NAMESPACES, PODS, KubeAPI, connect  # noqa: E402
from bridge.sandbox.apiserver import ApiServer  # noqa: E402
from bridge.sandbox.cluster import ClusterSpec, SandboxCluster, nodes_from_count  # noqa: E402
from bridge.sandbox.kubelet import RUN_SECONDS_ANNOTATION  # noqa: E402


def rss_kib(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def show(label: str, values: list[float], baseline: float | None = None) -> None:
    p50 = statistics.median(values)
    ratio = f"   {p50 / baseline:6.1f}x baseline p50" if baseline else ""
    print(f"{label:<9} n={len(values):<4} p50 {p50 * 1000:8.1f} ms  p99 {pct(values, 0.99) * 1000:8.1f} ms  "
          f"max {max(values) * 1000:8.1f} ms{ratio}")


def baseline(pods: int) -> list[float]:
    with ApiServer() as srv:
        api = connect(str(srv.write_kubeconfig(Path("/tmp") / f"bench-{srv.port}.kubeconfig")))
        out = []
        for i in range(pods):
            t = time.perf_counter()
            api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"b-{i}", "namespace": "default"},
                              "spec": {"containers": [{"name": "main", "image": "cuda:12"}]}}, "default")
            api.get(PODS, f"b-{i}", "default")
            out.append(time.perf_counter() - t)
        return out


def until_running(cluster: SandboxCluster, api: KubeAPI, namespace: str, pods: list[dict], *,
                  then_finish: bool = False) -> list[float]:
    """Create each pod and time it to Running; with `then_finish`, also wait for it to end before the next one (a
    pod bound by hand past the node's free GPUs would be rejected by the kubelet, correctly)."""
    out = []
    for pod in pods:
        t = time.perf_counter()
        api.create(PODS, pod, namespace)
        cluster.wait_pod_phase(namespace, pod["metadata"]["name"], "Running", 120)
        out.append(time.perf_counter() - t)
        if then_finish:
            cluster.wait_pod_phase(namespace, pod["metadata"]["name"], "Succeeded", 120)
    return out


def gpu_pod(name: str, namespace: str, *, claim: bool) -> dict:
    container: dict = {"name": "main", "image": "cuda:12"}
    spec: dict = {"restartPolicy": "Never", "containers": [container]}
    if claim:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": namespace, "annotations": {RUN_SECONDS_ANNOTATION: "0.5"}}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus", default="8xH100-80GB")
    ap.add_argument("--pods", type=int, default=16)
    ap.add_argument("--version", default="1.36")
    args = ap.parse_args()

    base = baseline(args.pods)
    rss_before = rss_kib()
    spec = ClusterSpec(nodes=nodes_from_count(args.nodes, args.gpus), kubernetes_version=args.version, bridge=True,
                       split="4", node_status_frequency=0.5, sync_retry=0.5, split_grace=0.5)
    t = time.perf_counter()
    with SandboxCluster(spec) as cluster:
        started = time.perf_counter() - t
        cluster.wait_daemons_settled(120)
        settled = time.perf_counter() - t
        api = cluster.api
        for ns in ("bench-legacy", "bench-dra"):
            api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        bound_pods = [gpu_pod(f"b-{i}", "bench-legacy", claim=False) for i in range(args.pods)]
        for i, p in enumerate(bound_pods):
            p["spec"]["nodeName"] = cluster.nodes[i % len(cluster.nodes)].name
        bound = until_running(cluster, api, "bench-legacy", bound_pods, then_finish=True)
        legacy = until_running(cluster, api, "bench-legacy",
                               [gpu_pod(f"l-{i}", "bench-legacy", claim=False) for i in range(args.pods)])
        rapi = api.resource_api()
        api.create(rapi.claim_templates, {
            "apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": "bench-dra"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.dra-bridge.io"}}]}}}}, "bench-dra")
        dra = until_running(cluster, api, "bench-dra",
                            [gpu_pod(f"d-{i}", "bench-dra", claim=True) for i in range(args.pods)])
        own = rss_kib()
        daemons = [rss_kib(n.daemon.pid) for n in cluster.nodes if n.daemon is not None and n.daemon.pid]
        print(f"sandbox: {args.nodes} nodes x {args.gpus}, Kubernetes {args.version}, split 4, control plane: "
              f"{cluster.control_plane}")
        print(f"start     {started:6.2f} s to a registered cluster, {settled:6.2f} s until every split is applied")
        show("baseline", base)
        show("bound", bound, statistics.median(base))
        show("legacy", legacy, statistics.median(base))
        show("dra", dra, statistics.median(base))
        print(f"RSS       this process {own / 1024:6.1f} MiB (+{(own - rss_before) / 1024:.1f} MiB for the "
              f"cluster), node daemons {', '.join(f'{d / 1024:.1f}' for d in daemons)} MiB, total "
              f"{(own + sum(daemons)) / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
