#!/usr/bin/env python3
"""`bridge migrate-report` against a live cluster at the scalability envelope: memory and time of the scan with every
pod kept whole (before) against pods read page by page with the report's schema (bridge/report/jsonlists.py, now),
and of `migrate-report snapshot` holding the cluster (before) against writing each page as it arrives (now).

    .venv/bin/python bench/report_live_bench.py [--nodes 5000] [--gpu-pods 30000] [--pending 10000]
                                                [--other-pods 110000] [--images 30]

The cluster is served as bench/controller_memory_bench.py serves it: list pages of 500 copies of a Running pod and
its Node as a real kube-apiserver and kubelet returned them (tests/controller/data), made on demand as JSON bytes
behind the real `RestKube` client (its pagination and page decoding run as in production; every other resource
lists empty). Each mode runs in a fresh interpreter, so its peak RSS is its own:
  whole     `load_live(whole=True)`: every pod as the server sent it (the scan before)
  cut       `load_live()`: pods, ReplicaSets and Nodes through `jsonlists.Reader.page`
  held      `write_snapshot(load_live(whole=True))`: the snapshot before, every list held, then written
  streamed  `snapshot_live`: the snapshot now, each item written as its page arrives (the command's path)
Printed for the scans: the scan (list and parse), resident memory after it and the peak, the report built from it
(`build_report`: every check and the capacity simulation), and the findings, which must be equal in both modes.
For the snapshots: the time to the last file, the peak resident memory and the bytes written; the two snapshots'
files must have the same SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from controller_memory_bench import Served, _proc_status, cluster_args, run_modes, served_kube  # noqa: E402

MODES = ("whole", "cut", "held", "streamed")


def child(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    from bridge.report import build_report
    from bridge.report.live import load_live

    api = served_kube(Served(args), threading.Event())
    if mode in ("held", "streamed"):
        return snapshot(mode, api)
    t = time.perf_counter()
    data = load_live(api, whole=mode == "whole")
    out: dict[str, Any] = {"scan_s": time.perf_counter() - t, "rss_mib": _proc_status("VmRSS"),
                           "peak_mib": _proc_status("VmHWM"), "pods": len(data.of("Pod"))}
    t = time.perf_counter()
    report = build_report(data)
    out["report_s"] = time.perf_counter() - t
    facts = [(f.rule, f.severity, f.object.kind, f.object.namespace, f.object.name, f.message) for f in report.findings]
    out["findings"] = len(facts)
    out["findings_sha"] = hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]
    out["peak_after_report_mib"] = _proc_status("VmHWM")
    return out


def snapshot(mode: str, api: Any) -> dict[str, Any]:
    """`migrate-report snapshot` as it was (`held`) or is (`streamed`), into a temporary directory: its time, peak
    resident memory, and the files' total size and SHA-256."""
    from bridge.report.live import load_live, snapshot_live, write_snapshot

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        if mode == "held":
            files = write_snapshot(load_live(api, whole=True), Path(tmp))
        else:
            files = snapshot_live(api, Path(tmp)).files
        out: dict[str, Any] = {"snapshot_s": time.perf_counter() - t, "peak_mib": _proc_status("VmHWM")}
        digest = hashlib.sha256()
        for path in sorted(files):
            with path.open("rb") as f:
                while chunk := f.read(1 << 22):
                    digest.update(chunk)
        out["bytes"] = sum(p.stat().st_size for p in files)
        out["sha"] = digest.hexdigest()[:16]
    return out


def main() -> None:
    args = cluster_args(__doc__, MODES).parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    print(f"live migrate-report: {args.nodes} nodes, {args.gpu_pods + args.pending + args.other_pods} pods "
          f"(copies of a real Running pod); load average {os.getloadavg()[0]:.2f}", flush=True)
    results = run_modes(__file__, MODES, args)
    w, c, h, st = results["whole"], results["cut"], results["held"], results["streamed"]
    if (w["pods"], w["findings"], w["findings_sha"]) != (c["pods"], c["findings"], c["findings_sha"]):
        raise SystemExit(f"the reports differ: whole {w} cut {c}")
    rows = [("scan (list and parse), s", "scan_s", "{:.1f}"), ("resident after the scan, MiB", "rss_mib", "{:.0f}"),
            ("peak resident during the scan, MiB", "peak_mib", "{:.0f}"), ("report from it, s", "report_s", "{:.1f}"),
            ("peak resident with the report, MiB", "peak_after_report_mib", "{:.0f}")]
    print(f"{'':38} {'whole':>10} {'cut':>10} {'cut/whole':>10}")
    for label, key, fmt in rows:
        print(f"{label:38} {fmt.format(w[key]):>10} {fmt.format(c[key]):>10} {c[key] / w[key]:>10.2f}")
    print(f"{c['pods']} pods, {c['findings']} findings, equal in both modes")
    if (h["bytes"], h["sha"]) != (st["bytes"], st["sha"]):
        raise SystemExit(f"the snapshots differ: held {h} streamed {st}")
    print(f"\n{'migrate-report snapshot':38} {'held':>10} {'streamed':>10} {'ratio':>10}")
    for label, key, fmt in (("to the last file, s", "snapshot_s", "{:.1f}"),
                            ("peak resident, MiB", "peak_mib", "{:.0f}")):
        print(f"{label:38} {fmt.format(h[key]):>10} {fmt.format(st[key]):>10} {st[key] / h[key]:>10.2f}")
    print(f"{st['bytes'] / 2**20:.0f} MiB written, the same bytes in both modes; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
