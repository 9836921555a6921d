#!/usr/bin/env python3
"""migrate-report at the Kubernetes scalability envelope: time and peak memory of the full report against a plain
`json.load` of the same files, in the same run.

    .venv/bin/python bench/report_bench.py [--nodes 5000] [--pods 150000] [--namespaces 10000] [--split current]

What it does:
1. generates a snapshot as JSON List files in a temp dir: 5,000 nodes (20% run the bridge with 8 GPUs and publish
   ResourceSlices, 70% vendor device plugin with 8 GPUs, 10% CPU), 10,000 namespaces (5% dra, 5% shadow) with
   quotas, Deployments (+ReplicaSets) and Jobs, 150,000 pods (about a third request GPUs, some with GFD selectors,
   a few MIG / time-sliced), device-plugin DaemonSet pods, DeviceClasses;
2. baseline: a fresh interpreter runs `json.load` on every file and keeps the result (time, peak RSS), once as a
   plain program would (GC on) and once with the cyclic GC off (what the report itself does while loading);
3. report: a fresh interpreter runs the whole report (load_snapshot -> model -> all checks incl. the capacity
   simulation -> JSON rendering -> remediation manifests), timed per stage (peak RSS);
4. prints both and the ratios. Targets: report <= 2x parse time, peak < 2 GB.

Each measurement runs in its own process so peak RSS (ru_maxrss) belongs to that measurement alone.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD_BASELINE = r"""
import gc, json, resource, sys, time
from pathlib import Path
if sys.argv[2] == "nogc":
    gc.disable()
files = [p for p in sorted(Path(sys.argv[1]).iterdir()) if p.suffix == ".json"]
t0 = time.perf_counter()
docs = []
for p in files:
    with open(p) as f:
        docs.append(json.load(f))
t = time.perf_counter() - t0
print(json.dumps({"seconds": t, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "objects": sum(len(d.get("items", [])) for d in docs)}))
"""

CHILD_REPORT = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from bridge.report.sources import load_snapshot
from bridge.report.checks import CheckContext, ReportOptions
from bridge.report.report import build_report
from bridge.report.render import render
from bridge.report.remediation import manifests
from bridge.report.sources import bulk_allocation
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
data = load_snapshot(sys.argv[1])
t_load = time.perf_counter() - t0
t0 = time.perf_counter()
report = build_report(data, ReportOptions(assume_split=sys.argv[2]))
t_report = time.perf_counter() - t0
t0 = time.perf_counter()
with bulk_allocation():  # as bridge.report.run_report does
    text = render(report, "json")
    files = manifests(report)
t_render = time.perf_counter() - t0
print(json.dumps({"import": t_import, "load": t_load, "model_checks": t_report, "render": t_render,
                  "seconds": t_load + t_report + t_render,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "findings": len(report.findings), "blockers": report.blockers,
                  "workloads": len(report.workloads), "namespaces": len(report.namespaces),
                  "json_bytes": len(text), "manifests": len(files)}))
"""


def _labels_h100() -> dict[str, str]:
    return {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559",
            "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
            "nvidia.com/gpu.count": "8", "nvidia.com/gpu.present": "true"}


def _labels_a100() -> dict[str, str]:
    return {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920",
            "nvidia.com/gpu.family": "ampere", "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0",
            "nvidia.com/gpu.count": "8", "nvidia.com/gpu.present": "true"}


def _write(path: Path, items: list[dict]) -> None:
    with open(path, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}, f,
                  separators=(",", ":"))


def _meta(name: str, ns: str | None, uid: int, labels: dict | None = None, owner: tuple[str, str, int] | None = None) -> dict:
    m: dict = {"name": name, "uid": f"00000000-0000-4000-8000-{uid:012d}", "resourceVersion": str(uid),
               "creationTimestamp": "2026-11-02T09:00:00Z"}
    if ns:
        m["namespace"] = ns
    if labels:
        m["labels"] = labels
    if owner:
        m["ownerReferences"] = [{"apiVersion": "apps/v1" if owner[0] != "Job" else "batch/v1", "kind": owner[0],
                                 "name": owner[1], "uid": f"00000000-0000-4000-8000-{owner[2]:012d}",
                                 "controller": True, "blockOwnerDeletion": True}]
    return m


def _container(name: str, gpu: dict[str, str] | None) -> dict:
    res: dict = {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"memory": "32Gi"}}
    if gpu:
        res["limits"].update(gpu)
    return {"name": name, "image": "nvcr.io/nvidia/pytorch:25.10-py3", "resources": res,
            "env": [{"name": "MODEL", "value": "llama"}, {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}],
            "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}


def generate(out: Path, n_nodes: int, n_pods: int, n_ns: int, seed: int = 7) -> dict[str, int]:
    rng = random.Random(seed)
    uid = iter(range(1, 10**9))
    nodes, slices, ds_pods = [], [], []
    n_bridge = n_nodes // 5
    n_dp = n_nodes * 7 // 10
    gpu_nodes = []
    for i in range(n_nodes):
        name = f"node-{i:05d}"
        base = {"cpu": "96", "memory": "1056Gi", "pods": "110"}
        if i < n_bridge:
            labels, cap, alloc = _labels_h100(), {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "4"}
            labels["dra-bridge.io/dra-devices"] = "4"
            slices.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                           "metadata": _meta(f"{name}-gpu.dra-bridge.io", None, next(uid)),
                           "spec": {"driver": "gpu.dra-bridge.io", "nodeName": name,
                                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                                    "devices": [{"name": f"gpu-{d}", "attributes": {
                                        "uuid": {"string": f"GPU-{i:05d}-{d}"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
                                        "architecture": {"string": "Hopper"}, "cudaComputeCapability": {"version": "9.0.0"},
                                        "driverVersion": {"version": "570.124.6"}, "index": {"int": d}, "minor": {"int": d},
                                        "pciBusID": {"string": f"0000:{d:02x}:00.0"}, "numaNode": {"int": d // 4},
                                        "migCapable": {"bool": True}}, "capacity": {"memory": {"value": "80Gi"}}}
                                        for d in range(4, 8)]}})
            gpu_nodes.append(name)
        elif i < n_bridge + n_dp:
            labels, cap, alloc = _labels_a100(), {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"}
            gpu_nodes.append(name)
            ds_pods.append((name, "nvidia-device-plugin-daemonset", "gpu-operator"))
        else:
            labels, cap, alloc = {}, {}, {}
        if i < n_bridge:
            ds_pods.append((name, "dra-bridge-node", "dra-bridge"))
        nodes.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": _meta(name, None, next(uid), {"kubernetes.io/hostname": name, **labels}),
                      "status": {"capacity": {**base, **cap}, "allocatable": {**base, **alloc},
                                 "nodeInfo": {"containerRuntimeVersion": "containerd://2.0.4", "kubeletVersion": "v1.36.1"},
                                 "conditions": [{"type": "Ready", "status": "True"}]}})
    namespaces, quotas, deployments, replicasets, jobs, pods = [], [], [], [], [], []
    for j in range(n_ns):
        ns = f"team-{j:05d}"
        r = rng.random()
        mode = "dra" if r < 0.05 else "shadow" if r < 0.10 else "legacy"
        namespaces.append({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": _meta(ns, None, next(uid), {"dra-bridge.io/mode": mode})})
        if j % 3 == 0:
            quotas.append({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta("gpu", ns, next(uid)),
                           "spec": {"hard": {"requests.nvidia.com/gpu": "16"}}})
    per_ns = max(1, n_pods // n_ns)
    made = 0
    j = 0
    while made < n_pods:
        ns = f"team-{j % n_ns:05d}"
        j += 1
        kind = rng.random()
        gpu: dict[str, str] | None = None
        sel: dict[str, str] = {}
        if kind < 0.33:
            gpu = {"nvidia.com/gpu": str(rng.choice([1, 1, 1, 2, 4, 8]))}
            if rng.random() < 0.3:
                sel = {"nvidia.com/gpu.product": rng.choice(["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"])}
        elif kind < 0.335:
            gpu = {"nvidia.com/mig-1g.10gb": "1"}
        elif kind < 0.34:
            gpu = {"nvidia.com/gpu.shared": "1"}
        count = min(per_ns, n_pods - made)
        spec = {"containers": [_container("main", gpu)], "nodeSelector": sel, "restartPolicy": "Always",
                "volumes": [{"name": "data", "emptyDir": {}}], "serviceAccountName": "default",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
        if rng.random() < 0.7:
            dname = f"app-{j}"
            duid, rsuid = next(uid), next(uid)
            deployments.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(dname, ns, duid, {"app": dname}),
                                "spec": {"replicas": count, "selector": {"matchLabels": {"app": dname}},
                                         "template": {"metadata": {"labels": {"app": dname}}, "spec": spec}}})
            replicasets.append({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                "metadata": _meta(f"{dname}-5d8f7", ns, rsuid, {"app": dname}, ("Deployment", dname, duid)),
                                "spec": {"replicas": count, "selector": {"matchLabels": {"app": dname}},
                                         "template": {"metadata": {"labels": {"app": dname}}, "spec": spec}}})
            owner = ("ReplicaSet", f"{dname}-5d8f7", rsuid)
        else:
            jname = f"train-{j}"
            juid = next(uid)
            jspec = dict(spec, restartPolicy="Never")
            jobs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(jname, ns, juid),
                         "spec": {"parallelism": count, "completions": count, "template": {"spec": jspec}}})
            owner = ("Job", jname, juid)
            spec = jspec
        for k in range(count):
            node = rng.choice(gpu_nodes) if gpu else f"node-{n_nodes - 1 - (made % max(1, n_nodes // 10)):05d}"
            pods.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": _meta(f"{owner[1]}-{k}", ns, next(uid), {"app": owner[1]}, owner),
                         "spec": dict(spec, nodeName=node),
                         "status": {"phase": "Running", "podIP": f"10.{k % 250}.{j % 250}.{k % 200}",
                                    "conditions": [{"type": "Ready", "status": "True"}],
                                    "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                                           "image": "nvcr.io/nvidia/pytorch:25.10-py3"}]}})
            made += 1
    daemonsets = []
    for name, ns in (("nvidia-device-plugin-daemonset", "gpu-operator"), ("dra-bridge-node", "dra-bridge")):
        labels = {"app.kubernetes.io/name": "dra-bridge", "app.kubernetes.io/component": "node"} if ns == "dra-bridge" else {"app": name}
        img = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1" if ns == "gpu-operator" else "ghcr.io/dra-bridge/dra-bridge:0.1.0"
        daemonsets.append({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(name, ns, next(uid), labels),
                           "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
                                    "spec": {"containers": [{"name": "c", "image": img}]}}}})
    ds_uids = {d["metadata"]["name"]: int(d["metadata"]["uid"][-12:]) for d in daemonsets}
    for node, ds, ns in ds_pods:
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": _meta(f"{ds}-{node}", ns, next(uid), None, ("DaemonSet", ds, ds_uids[ds])),
                     "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}, "status": {"phase": "Running"}})
    classes = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": _meta("gpu.dra-bridge.io", None, next(uid)),
                "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.dra-bridge.io"'}}]}}]
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "nodes.json", nodes)
    _write(out / "namespaces.json", namespaces)
    _write(out / "resourcequotas.json", quotas)
    _write(out / "deployments.json", deployments)
    _write(out / "replicasets.json", replicasets)
    _write(out / "jobs.json", jobs)
    _write(out / "daemonsets.json", daemonsets)
    _write(out / "resourceslices.json", slices)
    _write(out / "deviceclasses.json", classes)
    for c in range(0, len(pods), 25_000):
        _write(out / f"pods-{c // 25_000:02d}.json", pods[c:c + 25_000])
    (out / "version.json").write_text(json.dumps({"serverVersion": {"gitVersion": "v1.36.1", "major": "1", "minor": "36"}}))
    (out / "api-versions.txt").write_text("v1\napps/v1\nbatch/v1\nresource.k8s.io/v1\n")
    return {"nodes": len(nodes), "pods": len(pods), "namespaces": len(namespaces), "slices": len(slices),
            "deployments": len(deployments), "jobs": len(jobs)}


def _child(code: str, *args: str) -> dict:
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"child failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=150_000)
    ap.add_argument("--namespaces", type=int, default=10_000)
    ap.add_argument("--split", default="current", help="--assume-split for the report run (current, all, N)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        t0 = time.perf_counter()
        counts = generate(Path(tmp), args.nodes, args.pods, args.namespaces)
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        print(f"generated {counts} ({size / 2**20:.0f} MiB of JSON) in {time.perf_counter() - t0:.1f} s")
        base = _child(CHILD_BASELINE, tmp, "gc")
        base_nogc = _child(CHILD_BASELINE, tmp, "nogc")
        rep = _child(CHILD_REPORT, tmp, args.split)
    print(f"baseline json.load:  {base['seconds']:.2f} s, peak RSS {base['maxrss_kb'] / 2**10:.0f} MiB "
          f"({base['objects']} objects)")
    print(f"full report:         {rep['seconds']:.2f} s (load {rep['load']:.2f} + model/checks {rep['model_checks']:.2f} "
          f"+ render/manifests {rep['render']:.2f}; imports {rep['import']:.2f} not counted), "
          f"peak RSS {rep['maxrss_kb'] / 2**10:.0f} MiB")
    print(f"report: {rep['workloads']} GPU workloads, {rep['namespaces']} namespaces, {rep['findings']} findings "
          f"({rep['blockers']} blockers), JSON {rep['json_bytes'] / 2**20:.1f} MiB, {rep['manifests']} manifest files")
    print(f"json.load, GC off:   {base_nogc['seconds']:.2f} s, peak RSS {base_nogc['maxrss_kb'] / 2**10:.0f} MiB "
          "(the report pauses the cyclic GC while loading and modelling; this is the like-for-like parse)")
    ratio = rep["seconds"] / base["seconds"]
    print(f"ratio vs GC-off json.load: {rep['seconds'] / base_nogc['seconds']:.2f}x")
    print(f"ratio report/json.load time: {ratio:.2f}x (target <= 2x); "
          f"peak memory {rep['maxrss_kb'] / 2**20:.2f} GiB (target < 2 GiB)")
    _ = resource  # ru_maxrss is read in the children


if __name__ == "__main__":
    main()
