#!/usr/bin/env python3
"""migrate-report at the Kubernetes scalability envelope: time and peak memory of the `bridge migrate-report` command
against a plain `json.load` of the same files, in the same run.

    .venv/bin/python bench/report_bench.py [--nodes 5000] [--pods 150000] [--namespaces 10000] [--split current]
                                           [--rounds 5] [--snapshot DIR] [--stages]

What it does:
1. generates a snapshot as JSON List files (in a temp dir, or in --snapshot DIR when that is empty; a filled DIR is
   reused): 5,000 nodes (20% run the bridge with 8 GPUs and publish ResourceSlices, 70% vendor device plugin with 8
   GPUs, 10% CPU), 10,000 namespaces (5% dra, 5% shadow) with quotas, Deployments (+ReplicaSets) and Jobs, 150,000
   pods (about a third request GPUs, some with GFD selectors, a few MIG / time-sliced), device-plugin DaemonSet pods,
   DeviceClasses;
2. baseline: a fresh interpreter runs `json.load` on every file and keeps the result (wall and CPU seconds, peak
   RSS), once as a plain program would (GC on) and once with the cyclic GC off: the like-for-like parse, as the
   report pauses the GC for its whole scan;
3. report: a fresh interpreter runs the command itself in-process, `bridge migrate-report --snapshot DIR -o json
   --file OUT` through `bridge.cli.main` (loading, every check and the capacity simulation, JSON rendering, the
   remediation manifests, the file written and the objects freed: nothing left out), timed from the call to its
   return, the imports before the clock;
4. repeats 2-3 `--rounds` times, prints each round with the load average, and the medians; `--stages` adds the CPU
   seconds of each stage (the same library calls, one more process).

Each measurement runs in its own process so peak RSS (ru_maxrss) belongs to that measurement alone. Targets (issue
25): the report within 1.25x the GC-off `json.load`, peak memory under 1 GB.

Measured on the shared 2-core machine (`--rounds 5 --stages`, ratios within each round, medians; load average
2.2-2.6 from other jobs, 4.4 in the last round): the report 2.60 s wall / 2.57 s CPU against 2.24 s / 2.20 s for
`json.load` with the GC off: 1.13x wall (rounds 1.13-1.20x; 0.55x in the last, where json.load lost the CPU), 1.14x
in CPU seconds (1.12-1.20x, which move far less than wall seconds here); 0.28x `json.load` with the GC on. Peak RSS
524 MiB (0.55 GB) against `json.load`'s 1309 MiB. Stages (CPU s): load 0.90, model and checks 1.14, JSON 0.12,
manifests 0.24; freeing the objects at the end about 0.2 more. The same harness on the code before issue 25 item 2
(one load of full dicts, the GC paused and resumed per stage, rules scanning the pods again): 3.14x in CPU seconds,
1422 MiB (load average 5.4-5.7); the stage timing of the earlier bench gave 2.24-2.63x and 1.37 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
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
t0, c0 = time.perf_counter(), time.process_time()
docs = []
for p in files:
    with open(p) as f:
        docs.append(json.load(f))
t, c = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"seconds": t, "cpu": c, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "objects": sum(len(d.get("items", [])) for d in docs)}))
"""

# The product itself: `bridge migrate-report --snapshot DIR -o json --file OUT` run in-process through the CLI's
# own entry point (bridge/cli/report.py: load, every check, the capacity simulation, JSON rendering, remediation
# manifests, the file written), timed from the call to its return; only the imports come before the clock.
CHILD_REPORT = r"""
import json, resource, sys, time
import bridge.cli, bridge.report, bridge.report.checks, bridge.report.render, bridge.report.remediation
from bridge.cli import main
snap, split, out = sys.argv[1], sys.argv[2], sys.argv[3]
t0, c0 = time.perf_counter(), time.process_time()
code = main(["migrate-report", "--snapshot", snap, "-o", "json", "--file", out, "--assume-split", split],
            standalone_mode=False)
t, c = time.perf_counter() - t0, time.process_time() - c0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
doc = json.load(open(out))
print(json.dumps({"seconds": t, "cpu": c, "exit": code, "maxrss_kb": peak,
                  "findings": len(doc["findings"]),
                  "blockers": sum(f["severity"] == "blocker" for f in doc["findings"]),
                  "workloads": len(doc["workloads"]), "namespaces": len(doc["namespaces"]),
                  "json_bytes": len(open(out, "rb").read())}))
"""

# Where the time goes, by stage: the same library calls the CLI makes (bridge.report.run_report), under the one GC
# pause the CLI holds for the whole scan.
CHILD_STAGES = r"""
import json, resource, sys, time
from bridge.report.sources import bulk_allocation, load_snapshot
from bridge.report.checks import ReportOptions
from bridge.report.report import build_report
from bridge.report.render import render
from bridge.report.remediation import manifests
out = {}
with bulk_allocation():
    t0 = time.process_time(); data = load_snapshot(sys.argv[1]); out["load"] = time.process_time() - t0
    t0 = time.process_time(); report = build_report(data, ReportOptions(assume_split=sys.argv[2]))
    out["model_checks"] = time.process_time() - t0
    t0 = time.process_time(); text = render(report, "json"); out["render"] = time.process_time() - t0
    t0 = time.process_time(); files = manifests(report); out["manifests"] = time.process_time() - t0
    out["manifest_files"] = len(files)
out["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(out))
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


def _load1() -> float:
    return os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=150_000)
    ap.add_argument("--namespaces", type=int, default=10_000)
    ap.add_argument("--split", default="current", help="--assume-split for the report run (current, all, N)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of (json.load GC on, GC off, report); medians")
    ap.add_argument("--snapshot", type=Path, help="use this generated snapshot (written there first if empty)")
    ap.add_argument("--stages", action="store_true", help="also time each stage (CPU seconds, one more process)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        snap = args.snapshot or Path(tmp) / "snapshot"
        if not (snap.is_dir() and any(snap.iterdir())):
            t0 = time.perf_counter()
            counts = generate(snap, args.nodes, args.pods, args.namespaces)
            print(f"generated {counts} in {time.perf_counter() - t0:.1f} s")
        size = sum(p.stat().st_size for p in snap.iterdir())
        print(f"snapshot {snap}: {size / 2**20:.0f} MiB of JSON; load average {os.getloadavg()[0]:.2f} at start")
        rows = []
        for i in range(args.rounds):
            load = _load1()
            base = _child(CHILD_BASELINE, str(snap), "gc")
            base_nogc = _child(CHILD_BASELINE, str(snap), "nogc")
            rep = _child(CHILD_REPORT, str(snap), args.split, str(Path(tmp) / "report.json"))
            rows.append((base, base_nogc, rep))
            print(f"round {i + 1}: json.load {base['seconds']:.2f} s (GC off {base_nogc['seconds']:.2f} s), report "
                  f"{rep['seconds']:.2f} s: {rep['seconds'] / base_nogc['seconds']:.2f}x GC-off json.load "
                  f"({rep['cpu'] / base_nogc['cpu']:.2f}x in CPU seconds {rep['cpu']:.2f}/{base_nogc['cpu']:.2f}), "
                  f"{rep['seconds'] / base['seconds']:.2f}x json.load; peak RSS report "
                  f"{rep['maxrss_kb'] / 2**10:.0f} MiB, json.load {base['maxrss_kb'] / 2**10:.0f} MiB; "
                  f"load average {load:.2f} -> {_load1():.2f}", flush=True)
        stages = _child(CHILD_STAGES, str(snap), args.split) if args.stages else None
    med = statistics.median
    base_s, nogc_s = med(b["seconds"] for b, _, _ in rows), med(n["seconds"] for _, n, _ in rows)
    rep_s = med(r["seconds"] for _, _, r in rows)
    ratio = med(r["seconds"] / n["seconds"] for _, n, r in rows)
    ratio_cpu = med(r["cpu"] / n["cpu"] for _, n, r in rows)
    peak = max(r["maxrss_kb"] for _, _, r in rows) * 1024
    rep = rows[-1][2]
    print(f"report: exit {rep['exit']}, {rep['workloads']} GPU workloads, {rep['namespaces']} namespaces, "
          f"{rep['findings']} findings ({rep['blockers']} blockers), JSON {rep['json_bytes'] / 2**20:.1f} MiB")
    if stages is not None:
        print(f"stages (CPU s): load {stages['load']:.2f}, model+checks {stages['model_checks']:.2f}, render "
              f"{stages['render']:.2f}, manifests {stages['manifests']:.2f} ({stages['manifest_files']} files)")
    print(f"medians of {len(rows)} rounds: json.load {base_s:.2f} s, GC off {nogc_s:.2f} s, report {rep_s:.2f} s")
    print(f"ratio report / GC-off json.load: {ratio:.2f}x wall, {ratio_cpu:.2f}x CPU (target <= 1.25x); "
          f"report / json.load (GC on): {med(r['seconds'] / b['seconds'] for b, _, r in rows):.2f}x")
    print(f"peak memory of the report: {peak / 2**20:.0f} MiB = {peak / 1e9:.2f} GB (target < 1 GB); "
          f"json.load's {max(b['maxrss_kb'] for b, _, _ in rows) / 2**10:.0f} MiB")
    _ = resource  # ru_maxrss is read in the children


if __name__ == "__main__":
    main()
