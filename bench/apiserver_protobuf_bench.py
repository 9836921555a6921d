"""Cost of the API emulator's protobuf codec (application/vnd.kubernetes.protobuf) vs its JSON encoding, same process.

    .venv/bin/python bench/apiserver_protobuf_bench.py [--pods 500] [--rounds 5]

Measured per object and per list of --pods pods (the shape a `kubectl get` or Helm's release lookup reads):
  json      json.dumps + json.loads of the same dict (the emulator's JSON path, the baseline)
  encode    dict -> `k8s\\x00` envelope (protobuf.encode)
  decode    envelope -> dict (protobuf.decode, with the zero-value and unknown-field rules)
Printed: milliseconds per operation, bytes on the wire, and each protobuf number as a ratio of the JSON one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.sandbox.apiserver import protobuf as pb  # noqa: E402

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "trainer-0", "namespace": "team-a", "uid": "0b5f7d2e-8f1c-4a7e-9d51-2f3c2b8f1a00",
                 "resourceVersion": "5812", "creationTimestamp": "2025-01-01T00:00:00Z",
                 "labels": {"app": "trainer", "team": "a"}, "annotations": {"dra-bridge.io/translated": "claims"}},
    "spec": {"nodeName": "gpu-1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
             "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
                             "env": [{"name": "EPOCHS", "value": "10"}],
                             "resources": {"limits": {"cpu": "8", "memory": "64Gi"}, "claims": [{"name": "gpu"}]}}],
             "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "trainer-gpu-2"}]},
    "status": {"phase": "Running", "podIP": "10.0.3.7", "startTime": "2025-01-01T00:00:05Z"},
}


def timed(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    item = {k: v for k, v in POD.items() if k not in ("apiVersion", "kind")}
    pod_list = {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": [item] * args.pods}
    print(f"python {sys.version.split()[0]}, best of {args.rounds}")
    print(f"{'object':<18}{'op':<8}{'ms':>10}{'bytes':>10}{'vs json':>10}")
    for name, obj in (("one pod", POD), (f"{args.pods}-pod list", pod_list)):
        n = 200 if obj is POD else 1
        wire = pb.encode(obj)
        text = json.dumps(obj, separators=(",", ":"))
        base = timed(lambda: [json.loads(json.dumps(obj, separators=(",", ":"))) for _ in range(n)], args.rounds) / n
        enc = timed(lambda: [pb.encode(obj) for _ in range(n)], args.rounds) / n
        dec = timed(lambda: [pb.decode(wire) for _ in range(n)], args.rounds) / n
        print(f"{name:<18}{'json':<8}{base * 1e3:>10.3f}{len(text):>10}{1.0:>10.2f}")
        print(f"{'':<18}{'encode':<8}{enc * 1e3:>10.3f}{len(wire):>10}{enc / base:>10.2f}")
        print(f"{'':<18}{'decode':<8}{dec * 1e3:>10.3f}{len(wire):>10}{dec / base:>10.2f}")


if __name__ == "__main__":
    main()
