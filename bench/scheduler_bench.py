"""Scheduling throughput of the scheduler + claim-controller stand-ins against the API emulator, in one process.

    .venv/bin/python bench/scheduler_bench.py [--nodes 50] [--gpus 10] [--pods 500]

The kubelet side is faked: every node is a Node object with allocatable set, and (for DRA) a published
ResourceSlice of --gpus devices, which is all a scheduler looks at. Three runs, each on a fresh emulator:
  floor   the client creates each pod and POSTs pods/binding itself (no scheduler): the API cost of a bound pod
  legacy  pods asking `nvidia.com/gpu: 1` on device-plugin nodes, bound by the stand-in scheduler
  dra     pods with a ResourceClaimTemplate claim (one GPU, CEL class selector): the claim controller creates the
          claims, the scheduler allocates them from the slices (finalizer, allocation, reservedFor) and binds
Printed per run: pods/s (pods / time from the first create to the last bind seen by a watch), create->bound
latency p50/p99, and the process RSS growth; the ratios of legacy and dra to the floor. Pods are created as fast
as one client can (all of them pending at once, like a Job of 500 pods).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.kube import NODES, PODS, KubeAPI, connect  # noqa: E402
from bridge.sandbox.apiserver import ApiServer  # noqa: E402
from bridge.sandbox.claimcontroller import ClaimController  # noqa: E402
from bridge.sandbox.scheduler import Scheduler  # noqa: E402

DRIVER = "gpu.dra-bridge.io"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def setup(api: KubeAPI, nodes: int, gpus: int, dra: bool) -> None:
    rapi = api.resource_api()
    if dra:
        api.create(rapi.device_classes, {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                         "metadata": {"name": DRIVER},
                                         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
        api.create(rapi.claim_templates, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}}})
    for i in range(nodes):
        name = f"node-{i:03d}"
        api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "0" if dra else str(gpus)}
        api.patch(NODES, name, {"status": {"allocatable": alloc, "capacity": alloc}}, subresource="status")
        if dra:
            api.create(rapi.slices, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{name}-gpus"},
                "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": f"gpu-{g}", "attributes": {"productName": {"string": "H100"}},
                                      "capacity": {"memory": {"value": "80Gi"}}} for g in range(gpus)]}})


def pod(name: str, dra: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "cuda"}
    spec: dict[str, Any] = {"containers": [container]}
    if dra:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def watch_bound(api: KubeAPI, total: int, bound: dict[str, float], done: threading.Event) -> None:
    rv = api.list(PODS, "default")["metadata"]["resourceVersion"]
    while len(bound) < total:
        for ev in api.watch(PODS, "default", resource_version=rv, timeout_seconds=30):
            rv = ev.object["metadata"].get("resourceVersion", rv)
            if ev.type != "BOOKMARK" and ev.object["spec"].get("nodeName"):
                bound.setdefault(ev.object["metadata"]["name"], time.perf_counter())
            if len(bound) >= total:
                break
    done.set()


def run(mode: str, nodes: int, gpus: int, pods: int, tmp: Path) -> dict[str, float]:
    rss0 = rss_mb()
    with ApiServer(version="1.37.0", history_limit=50_000) as srv:
        kc = srv.write_kubeconfig(tmp / f"kc-{mode}")
        api = connect(kc, timeout=30.0)
        client = connect(kc, timeout=30.0)
        dra = mode == "dra"
        setup(api, nodes, gpus, dra)
        parts: list[Any] = []
        if mode != "floor":
            parts.append(Scheduler(api, profile=srv.profile).start())
            if dra:
                parts.append(ClaimController(connect(kc, timeout=30.0), profile=srv.profile).start())
        bound: dict[str, float] = {}
        done = threading.Event()
        watcher = threading.Thread(target=watch_bound, args=(client, pods, bound, done), daemon=True)
        watcher.start()
        time.sleep(0.2)
        created: dict[str, float] = {}
        start = time.perf_counter()
        for i in range(pods):
            name = f"p-{i:04d}"
            created[name] = time.perf_counter()
            made = api.create(PODS, pod(name, dra), "default")
            if mode == "floor":
                api.create(PODS, {"apiVersion": "v1", "kind": "Binding",
                                  "metadata": {"name": name, "namespace": "default", "uid": made["metadata"]["uid"]},
                                  "target": {"kind": "Node", "name": f"node-{i % nodes:03d}"}}, "default",
                           subresource="binding")
        if not done.wait(600):
            raise SystemExit(f"{mode}: only {len(bound)}/{pods} pods bound after 600 s")
        elapsed = max(bound.values()) - start
        latencies = sorted(bound[n] - created[n] for n in created)
        for part in parts:
            part.stop()
    return {"pods_per_s": pods / elapsed, "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000, "rss_growth_mb": rss_mb() - rss0,
            "elapsed_s": elapsed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--gpus", type=int, default=10, help="devices per node (500 one-GPU pods need 10 on 50 nodes)")
    ap.add_argument("--pods", type=int, default=500)
    args = ap.parse_args()
    if args.pods > args.nodes * args.gpus:
        raise SystemExit("--pods must not exceed --nodes x --gpus (every pod needs one GPU)")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("floor", "legacy", "dra"):
            results[mode] = run(mode, args.nodes, args.gpus, args.pods, Path(tmp))
            r = results[mode]
            print(f"{mode:7s} {r['pods_per_s']:7.1f} pods/s   create->bound p50 {r['p50_ms']:7.1f} ms  "
                  f"p99 {r['p99_ms']:8.1f} ms   {r['elapsed_s']:6.1f} s   RSS growth {r['rss_growth_mb']:6.1f} MB",
                  flush=True)
    floor = results["floor"]["pods_per_s"]
    print(f"ratios to floor: legacy {results['legacy']['pods_per_s'] / floor:.2f}, "
          f"dra {results['dra']['pods_per_s'] / floor:.2f}   ({args.pods} pods, {args.nodes} nodes x {args.gpus} GPUs; "
          f"peak RSS {rss_mb():.0f} MB)")


if __name__ == "__main__":
    main()
