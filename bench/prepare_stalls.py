"""How often a pod waits for the kubelet's 60-90 s prepare retry, under split churn with slow bindings.

    .venv/bin/python bench/prepare_stalls.py [--rounds 8] [--pods 4] [--seed 1] [--modes 1.35:auto,1.34:5]

A real kubelet retries a failed NodePrepareResources only at its pod worker's next resync, 60-90 s later
(pkg/kubelet/pod_workers.go; the kubelet simulator does the same), so every per-claim refusal of the node daemon
costs its pod a minute or more. On one sandbox node with 8 GPUs and a real `bridge node`, each round sets a random
split (2-6 DRA GPUs), creates --pods DRA pods (claims from a template; half of them with a slow PreBind of 0-8 s,
as VolumeBinding makes for late-bound volumes) and --pods legacy pods, all Job-like (2 s), and waits 6 s. Then every
pod must finish. Per mode (Kubernetes minor : --split-grace):

  refusals  pod starts whose NodePrepareResources failed (each waited 60-90 s), and their messages
  stuck     claims reported stuck behind a legacy pod (DRAClaimStuck Events)
  late      allocations that landed after their GPU started leaving DRA, handled without a refusal (the move
            aborted, or the free GPU taken back: DRADeviceMoveAborted, DRADeviceReclaimed Events)
  rejected  pods the kubelet rejected at admission: a legacy pod the scheduler bound from the Node's allocatable
            while a GPU had just been withdrawn from the device plugin (legacy -> DRA) fails with
            UnexpectedAdmissionError, as on a real kubelet (the device manager's healthy devices are short)
  dra/legacy  create -> Running, p50 and max

1.35 with `auto` (5 s) is the default on a release whose scheduler nominates pods before it writes their
allocation; "1.34:5" is what the daemon did before 1.35 before `auto` (605 s there, which this bench does not run:
every DRA -> legacy move would wait ten minutes).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.kube import EVENTS, NAMESPACES, NODES, PODS, KubeAPI  # noqa: E402
from bridge.node.bindinggrace import parse_grace  # noqa: E402
from bridge.sandbox.cluster import ClusterSpec, NodeSpec, SandboxCluster  # noqa: E402
from bridge.sandbox.kubelet import RUN_SECONDS_ANNOTATION  # noqa: E402
from bridge.sandbox.scheduler.scheduler import PREBIND_SECONDS_ANNOTATION  # noqa: E402

NODE = "n1"


def pod(name: str, namespace: str, *, claim: bool, prebind: float) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "cuda:12"}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    annotations = {RUN_SECONDS_ANNOTATION: "2"}
    if claim:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        if prebind:
            annotations[PREBIND_SECONDS_ANNOTATION] = f"{prebind:.1f}"
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations}}


class Starts:
    """Polls the pods; remembers when each was first seen Running (or already finished)."""

    def __init__(self, api: KubeAPI) -> None:
        self.api = api
        self.created: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.phases: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                items = self.api.list(PODS)["items"]
            except Exception:  # noqa: BLE001 - a bench: try again
                continue
            now = time.monotonic()
            for p in items:
                key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                phase = (p.get("status") or {}).get("phase", "")
                self.phases[key] = phase
                if phase in ("Running", "Succeeded") and key not in self.running:
                    self.running[key] = now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def run_mode(version: str, grace: str, rounds: int, pods: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    spec = ClusterSpec(nodes=(NodeSpec(NODE, "8xH100-80GB", split="4"),), kubernetes_version=version, bridge=True,
                       node_status_frequency=0.5, sync_retry=0.5, split_grace=parse_grace(grace))
    with SandboxCluster(spec) as cluster:
        cluster.wait_daemons_settled(120)
        api = cluster.api
        for ns in ("dra", "legacy"):
            api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        rapi = api.resource_api()
        api.create(rapi.claim_templates, {
            "apiVersion": f"resource.k8s.io/{rapi.version}", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": "dra"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.dra-bridge.io"}}]}}}}, "dra")
        starts = Starts(api)
        try:
            for r in range(rounds):
                split = rng.randint(2, 6)
                api.patch(NODES, NODE, {"metadata": {"annotations": {"dra-bridge.io/dra-devices": str(split)}}})
                for i in range(pods):
                    prebind = rng.uniform(0, 8) if i % 2 else 0.0
                    for ns, claim in (("dra", True), ("legacy", False)):
                        name = f"r{r}-{i}"
                        starts.created[f"{ns}/{name}"] = time.monotonic()
                        api.create(PODS, pod(name, ns, claim=claim, prebind=prebind), ns)
                time.sleep(6)
            deadline = time.monotonic() + 600
            ended = ("Succeeded", "Failed")
            while time.monotonic() < deadline and any(starts.phases.get(k) not in ended for k in starts.created):
                time.sleep(1)
            unfinished = sorted(k for k in starts.created if starts.phases.get(k) not in ended)
            rejected = []
            for key in sorted(k for k in starts.created if starts.phases.get(k) == "Failed"):
                ns, _, name = key.partition("/")
                status = (cluster.pod(ns, name) or {}).get("status") or {}
                rejected.append(f"{key}: {status.get('reason')}: {status.get('message')}")
        finally:
            starts.stop()
        waits = {k: starts.running[k] - t for k, t in starts.created.items() if k in starts.running}
        events = api.list(EVENTS)["items"]
        stuck = [e for e in events if e.get("reason") == "DRAClaimStuck" and e["involvedObject"].get("kind") == "Pod"]
        late = [e for e in events if e.get("reason") in ("DRADeviceReclaimed", "DRADeviceMoveAborted")
                and "claim" in e.get("message", "").lower()]
        return {"failures": cluster.prepare_failures(), "stuck": stuck, "unfinished": unfinished,
                "rejected": rejected, "late": late,
                "dra": [w for k, w in waits.items() if k.startswith("dra/")],
                "legacy": [w for k, w in waits.items() if k.startswith("legacy/")]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--pods", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--modes", default="1.35:auto,1.34:5")
    args = ap.parse_args()
    for mode in args.modes.split(","):
        version, _, grace = mode.partition(":")
        t = time.perf_counter()
        out = run_mode(version, grace or "auto", args.rounds, args.pods, args.seed)
        took = time.perf_counter() - t
        n = args.rounds * args.pods
        print(f"Kubernetes {version}, --split-grace {grace or 'auto'}: {n} DRA + {n} legacy pods in {took:.0f} s")
        print(f"  refusals  {len(out['failures'])} pod starts waited for the 60-90 s resync; "
              f"stuck claims {len(out['stuck'])}; unfinished {len(out['unfinished'])}")
        for f in out["failures"][:5]:
            print(f"    {f.pod}: {f.message[:160]}")
        print(f"  late      {len(out['late'])} moves aborted or GPUs taken back for an allocation that landed late "
              "(no refusal)")
        print(f"  rejected  {len(out['rejected'])} pods failed admission")
        for r in out["rejected"][:5]:
            print(f"    {r[:200]}")
        for api in ("dra", "legacy"):
            w = out[api]
            if w:
                print(f"  {api:<8}  create -> Running p50 {statistics.median(w):5.1f} s  max {max(w):5.1f} s  (n={len(w)})")


if __name__ == "__main__":
    main()
