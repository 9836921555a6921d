"""List every pod of a large cluster: the bridge's raw-JSON layer vs the official client's model objects.

    .venv/bin/python bench/kube_list_bench.py [--pods 150000] [--page-size 500] [--paths raw,layer,model]

The parent process starts the API emulator, loads N realistic pods straight into its store (`load_objects`, not
through HTTP) and writes a kubeconfig. Each client path then runs in its own fresh subprocess, so the peak RSS it
reports (VmHWM) is that path's alone:

* raw   — the floor: the same paginated GETs, bodies read and thrown away (server + transport cost only);
* layer — `RestKube.list(PODS)` (json.loads into dicts, all pages kept);
* model — `CoreV1Api.list_pod_for_all_namespaces` with `limit`/`_continue` (V1Pod objects, all pages kept).

Printed: wall seconds, items, peak RSS and RSS growth during the list per path, and the model/layer ratios.
The emulator runs in the parent, so both client paths pay the same server cost.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

CONTINUE = re.compile(rb'"continue":\s*"([^"]+)"')
GPU_PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4")


def make_pod(i: int, rng: random.Random) -> dict[str, Any]:
    """A pod shaped like a real one from a Deployment: labels, owner, two containers, probes, env, volumes,
    tolerations, full status. About 3 KB of JSON (real pods carry managedFields too, which makes them larger)."""
    ns = f"team-{i % 300:03d}"
    app = f"app-{i % 2000:04d}"
    rs = f"{app}-{(i // 7) % 100000:x}"
    name = f"{rs}-{i:06x}"
    node = f"node-{i % 5000:04d}"
    gpus = rng.choice((0, 0, 0, 1, 2, 4, 8))
    main: dict[str, Any] = {
        "name": "main",
        "image": f"registry.example.com/{app}:v{i % 17}.{i % 5}",
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/server"],
        "args": ["--port=8080", f"--shard={i % 64}", "--log-level=info"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "MODEL", "value": f"model-{i % 40}"},
        ],
        "resources": {
            "requests": {"cpu": "500m", "memory": "2Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})},
            "limits": {"memory": "4Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
        ],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10,
                           "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    sidecar = {
        "name": "log-shipper",
        "image": "registry.example.com/fluent-bit:3.1",
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    ts = "2025-06-01T12:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app": app, "pod-template-hash": f"{(i // 7) % 100000:x}", "tier": rng.choice(("web", "batch", "ml"))},
            "annotations": {"prometheus.io/scrape": "true", "kubectl.kubernetes.io/restartedAt": ts},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": f"00000000-0000-4000-8000-{i // 7:012x}",
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "nodeName": node,
            "containers": [main, sidecar],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}},
            ],
            "nodeSelector": {"nvidia.com/gpu.product": rng.choice(GPU_PRODUCTS)} if gpus else {},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "priority": 0,
            "enableServiceLinks": True,
        },
        "status": {
            "phase": "Running",
            "hostIP": f"10.{i % 250}.{(i // 250) % 250}.1",
            "podIP": f"172.16.{(i // 250) % 250}.{i % 250}",
            "startTime": ts,
            "qosClass": "Burstable",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": ts}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [
                {"name": c["name"], "ready": True, "restartCount": 0, "started": True, "image": c["image"],
                 "imageID": f"{c['image']}@sha256:{i:064x}", "containerID": f"containerd://{i:064x}",
                 "state": {"running": {"startedAt": ts}}}
                for c in (main, sidecar)
            ],
        },
    }


# ---- child paths: each runs in a fresh interpreter ----------------------------------------------------------------

def _proc_status_mib(field: str) -> float:
    """VmHWM / VmRSS of this process. Not ru_maxrss: Linux carries the parent's high-water mark across
    fork+exec into the child's ru_maxrss, and the parent here holds the whole emulator."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # non-Linux fallback


def child(path: str, kubeconfig: str, page_size: int) -> None:
    from kubernetes import client as kclient

    from bridge.kube import PODS, connect

    api = connect(kubeconfig, timeout=300)
    before = _proc_status_mib("VmRSS")
    t0 = time.perf_counter()
    if path == "layer":
        count = len(api.list(PODS, page_size=page_size)["items"])
    elif path == "raw":
        # Same transport and pages, bodies read but not decoded: the server + HTTP floor. Items are not counted
        # (that needs decoding); bytes are.
        token, count = "", 0
        while True:
            query: list[tuple[str, str | int]] = [("limit", page_size)] + ([("continue", token)] if token else [])
            resp = api._open("GET", "/api/v1/pods", query=query, verb="list", label="pods")
            body = api._read_all(resp, verb="list", label="pods", url="/api/v1/pods")
            count += len(body)
            m = CONTINUE.search(body[:4096]) or CONTINUE.search(body[-4096:])
            token = m.group(1).decode() if m else ""
            if not token:
                break
    elif path == "model":
        with kclient.ApiClient(api._client.configuration) as ac:  # same configuration, model deserialization
            core = kclient.CoreV1Api(ac)
            items: list[Any] = []
            token = None
            while True:
                kw = {"limit": page_size, "_request_timeout": 300}
                if token:
                    kw["_continue"] = token
                page = core.list_pod_for_all_namespaces(**kw)
                items.extend(page.items)
                token = page.metadata._continue
                if not token:
                    break
            count = len(items)
    else:
        raise SystemExit(f"unknown path {path}")
    wall = time.perf_counter() - t0
    peak = _proc_status_mib("VmHWM")
    print(json.dumps({"path": path, "wall_s": wall, "items": count, "peak_rss_mib": peak,
                      "rss_growth_mib": peak - before}))


# ---- parent -------------------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=150_000)
    ap.add_argument("--page-size", type=int, default=500)
    ap.add_argument("--paths", default="raw,layer,model", help="comma-separated subset of raw,layer,model")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.kubeconfig, args.page_size)
        return

    from bridge.sandbox.apiserver import ApiServer

    rng = random.Random(42)
    t0 = time.perf_counter()
    pods = [make_pod(i, rng) for i in range(args.pods)]
    sample = len(json.dumps(pods[0]))
    with ApiServer() as srv, tempfile.TemporaryDirectory(prefix="kbench-") as tmp:
        # Bulk load skips the OpenAPI validation when the emulator offers that (it is ~7 ms per pod otherwise).
        bulk = {"validate": False} if "validate" in inspect.signature(srv.load_objects).parameters else {}
        srv.load_objects(pods, **bulk)
        del pods
        load_s = time.perf_counter() - t0
        kubeconfig = os.path.join(tmp, "kubeconfig")
        srv.write_kubeconfig(kubeconfig)
        print(f"emulator loaded with {args.pods} pods (~{sample} B JSON each) in {load_s:.1f}s; page size {args.page_size}")
        results: dict[str, dict[str, Any]] = {}
        for path in args.paths.split(","):
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", path, "--kubeconfig", kubeconfig,
                 "--page-size", str(args.page_size)],
                capture_output=True, text=True, check=False,
            )
            if out.returncode != 0:
                print(f"{path}: FAILED\n{out.stderr[-3000:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results[path] = r
            if path == "raw":
                print(f"  raw: {r['wall_s']:8.2f} s  {r['items'] / 2**20:7.0f} MiB of JSON read, not decoded  "
                      f"peak RSS {r['peak_rss_mib']:7.0f} MiB")
                continue
            print(f"{path:>5}: {r['wall_s']:8.2f} s  {r['items']:>7} items  {r['items'] / r['wall_s']:9.0f} items/s  "
                  f"peak RSS {r['peak_rss_mib']:7.0f} MiB  (+{r['rss_growth_mib']:.0f} MiB during the list)")
        if "layer" in results and "model" in results:
            lay, mod = results["layer"], results["model"]
            print(f"model/layer: wall x{mod['wall_s'] / lay['wall_s']:.1f}, "
                  f"peak RSS x{mod['peak_rss_mib'] / lay['peak_rss_mib']:.1f}, "
                  f"RSS growth x{mod['rss_growth_mib'] / max(lay['rss_growth_mib'], 1):.1f}")
        if "raw" in results and "layer" in results and "model" in results:
            floor = results["raw"]["wall_s"]
            lay, mod = results["layer"]["wall_s"] - floor, results["model"]["wall_s"] - floor
            print(f"client-side cost above the raw floor (server + transport): layer {lay:.2f} s, model {mod:.2f} s"
                  f" (x{mod / max(lay, 1e-3):.0f})")


if __name__ == "__main__":
    main()
