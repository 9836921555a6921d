"""`bridge demo`: the whole migration story on one machine, on top of the sandbox cluster, told step by step and
checked as it is told.

The cluster is `bridge.sandbox.cluster.SandboxCluster`: two nodes with 8 simulated H100 GPUs each on Kubernetes
1.34 (DRA GA, translation to ResourceClaims), the API emulator, kubelet simulators that run the pods, the scheduler
and claim-controller stand-ins, and the real bridge: a `bridge node` per node, `bridge webhook`, `bridge controller`.
The story (`story.py`) flips one namespace from the device plugin to DRA while another stays, and every claim it
prints is read back from the cluster (the API, the daemons' split status, the kubelets' PodResources) and checked;
`inspect.SideWatch` samples "no GPU on both sides" for the whole run. The `bridge` commands it shows are run for
real, as child processes, against the sandbox's kubeconfig (`commands.py`).

Outputs, in `out_dir`: `kubeconfig` (valid while the sandbox runs: with `keep`, until Ctrl-C), the reports
`report-before.{json,html}` and `report-after.{json,html}`, and `summary.json` (schema below) for scripts and tests.

    {"ok": true, "failure": "",                   the first wrong outcome, if any
     "steps": [{"title": "...", "startedAt": 12.3, "checks": [{"claim": "...", "ok": true}]}],
     "pods": {"legacy": {"Running": 8, "Succeeded": 1}, "dra": {"Running": 3, "Succeeded": 2}},
     "gpus": {"gpu-node-1": {"legacy": 5, "dra": 3, "withdrawn": 0}, ...},
     "prepareFailures": [],                       pod starts refused by NodePrepareResources ({pod, message, retryIn})
     "noGpuOnBothSides": {"checked": true, "samples": 240, "violations": []},
     "reports": {"report-before": {"exitCode": 0, "status": "needs-config", "namespaces": {...}, "json": "...",
                                   "html": "..."}, "report-after": {...}},
     "html": ".../report-after.html", "seconds": 61.2}

Exit codes (`run_demo`'s return value): 0 every step's outcome was the one the demo tells, 1 one was not (the
message says which step, what was expected and what was seen), 2 the sandbox could not start.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.sandbox.cluster import ClusterError, ClusterSpec, NodeSpec, SandboxCluster
from bridge.sandbox.cluster.inspect import Samples, SideWatch
from bridge.sandbox.demo.narrate import WIDTH, Narrator
from bridge.sandbox.demo.story import FAST, NORMAL, STEPS, DemoFailed, Story, Timings

EXIT_OK, EXIT_WRONG, EXIT_START = 0, 1, 2
NODES = ("gpu-node-1", "gpu-node-2")
GPUS = "8xH100-80GB"
KUBERNETES = "1.34"


@dataclass(frozen=True)
class DemoOptions:
    out_dir: Path | None = None  # None: a new directory under the system's temp dir (kept, its path printed)
    fast: bool = False  # short timings (CI)
    keep: bool = False  # leave the sandbox running at the end until `until_stopped` returns

    @property
    def timings(self) -> Timings:
        return FAST if self.fast else NORMAL


def cluster_spec(t: Timings) -> ClusterSpec:
    return ClusterSpec(nodes=tuple(NodeSpec(n, GPUS) for n in NODES), kubernetes_version=KUBERNETES, bridge=True,
                       webhook=True, controller=True, node_status_frequency=t.node_status_frequency,
                       sync_retry=t.node_status_frequency, split_grace=t.split_grace,
                       controller_interval=t.controller_interval,
                       controller_args=("--cooldown", f"{t.cooldown:g}s"))


def run_demo(options: DemoOptions, write: Callable[[str], None],
             until_stopped: Callable[[], None] = lambda: None) -> int:
    """Run the demo, printing through `write`; returns the exit code (module docstring)."""
    out_dir = options.out_dir or Path(tempfile.mkdtemp(prefix="dra-bridge-demo-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    t = options.timings
    n = Narrator(write, total_steps=STEPS)
    n.title("dra-bridge demo: moving GPU workloads from the device plugin to DRA, one namespace at a time")
    n.say(f"A whole cluster on this machine: {len(NODES)} nodes x {GPUS} simulated GPUs on Kubernetes {KUBERNETES}, "
          "an API emulator, kubelet simulators that run pods, scheduler and claim-controller stand-ins, and the real "
          "bridge: one `bridge node` per node, `bridge webhook`, `bridge controller`. Every claim below is checked "
          f"against the cluster as it is made.{' Timings: --fast.' if options.fast else ''}", indent=0)
    kubeconfig = out_dir / "kubeconfig"
    n.say("To look for yourself while it runs (or after, with --keep), point kubectl and bridge at it:", indent=0)
    n.write(f"    export KUBECONFIG={kubeconfig}")
    n.write("")
    n.write("Starting the sandbox cluster...")
    cluster = SandboxCluster(cluster_spec(t), kubeconfig_out=kubeconfig)
    try:
        cluster.start(timeout=max(120.0, t.bound))
    except (ClusterError, OSError) as err:
        n.write(f"bridge demo: the sandbox cluster could not start: {err}")
        return EXIT_START
    n.write(f"Sandbox cluster ready in {n.elapsed():.1f}s.")
    try:
        watch = SideWatch(cluster).start()
        story = Story(cluster, watch, n, out_dir, t)
        failure = ""
        try:
            story.run()
        except DemoFailed as err:
            failure = str(err)
        samples = watch.stop()
        if not samples.clean and not failure:
            failure = f"a GPU was seen on both sides: {samples.describe()}"
        summary = story.summary()
        doc = _document(story, summary, samples, failure, n.elapsed())
        (out_dir / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
        _print_summary(n, doc, samples, out_dir)
        if options.keep:
            n.write("")
            n.say(f"The sandbox keeps running (logs of the bridge's processes under {cluster.work_dir}). Explore "
                  "it, then press Ctrl-C to stop it:", indent=0)
            for line in (f"export KUBECONFIG={kubeconfig}", "kubectl get pods -A -o wide",
                         f"bridge node status {NODES[0]}", "bridge namespace status", "bridge migrate-report"):
                n.write(f"    {line}")
            n.write("Ctrl-C stops it.")
            until_stopped()
    finally:
        n.write("Stopping the sandbox cluster...")
        cluster.stop()
    return EXIT_WRONG if failure else EXIT_OK


def _document(story: Story, summary: dict[str, Any], samples: Samples, failure: str,
              seconds: float) -> dict[str, Any]:
    return {"ok": not failure, "failure": failure, "steps": story.results.steps, **summary,
            "noGpuOnBothSides": {"checked": samples.count > 0 and samples.clean, "samples": samples.count,
                                 "violations": [] if samples.clean else [samples.describe()]},
            "reports": story.results.reports, "html": story.results.html, "seconds": round(seconds, 1)}


def _print_summary(n: Narrator, doc: dict[str, Any], samples: Samples, out_dir: Path) -> None:
    n.write("")
    head, stamp = "Summary", f"[{n.elapsed():6.1f}s]"
    n.write(f"{head}{' ' * (WIDTH - len(head) - len(stamp))}{stamp}")
    n.write("-" * WIDTH)
    pods = doc["pods"]
    n.write("  GPU pods per API")
    n.table(["API", "RUNNING", "FINISHED", "PENDING"],
            [[label, pods[api].get("Running", 0), pods[api].get("Succeeded", 0), pods[api].get("Pending", 0)]
             for api, label in (("legacy", "device plugin"), ("dra", "DRA"))])
    n.write("  GPUs per side (each node daemon's split status)")
    gpus = doc["gpus"]
    rows: list[list[object]] = [[node, s["legacy"], s["dra"], s["withdrawn"]] for node, s in gpus.items()]
    rows.append(["total", sum(s["legacy"] for s in gpus.values()), sum(s["dra"] for s in gpus.values()),
                 sum(s["withdrawn"] for s in gpus.values())])
    n.table(["NODE", "LEGACY", "DRA", "IN TRANSIT"], rows)
    if samples.clean and samples.count:
        n.write(f"  No GPU on both sides: checked ({samples.count} samples of every node during the demo: never held "
                "twice, never offered to both APIs)")
    else:
        n.write(f"  No GPU on both sides: FAILED ({samples.describe()})")
    reports = doc["reports"]
    if reports:
        n.write("  Migration report: " + ", ".join(f"{name.removeprefix('report-')} exit {r['exitCode']} "
                                                    f"({r['status']})" for name, r in reports.items()))
    checks = [c for s in doc["steps"] for c in s["checks"]]
    if doc["ok"]:
        n.write(f"  Every outcome the demo told was checked: {len(checks)} checks ok")
    else:
        n.write(f"  FAILED: {doc['failure']}")
    if doc["html"]:
        n.write(f"  HTML report: {doc['html']}")
    n.write(f"  Everything it wrote: {out_dir}")


__all__ = ["DemoFailed", "DemoOptions", "EXIT_OK", "EXIT_START", "EXIT_WRONG", "cluster_spec", "run_demo"]
