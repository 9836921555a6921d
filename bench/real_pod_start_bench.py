"""Pod create -> Running on ONE real node, legacy vs DRA, in one run: what a user feels, and where the DRA path spends.

    .venv/bin/python bench/real_pod_start_bench.py [--pods 50] [--warmup 2] [--no-webhook] [--no-go-floor]
                                                   [--py-spy FILE [--py-spy-rate HZ]] [--node-arg ARG ...]

Needs the real backend (`scripts/build_real.py`: kube-apiserver, controller manager, scheduler, kubelet v1.37.2,
etcd, containerd/runc/CNI). One node (`8xH100-80GB`, split 4: four GPUs to the device plugin, four in our
ResourceSlice) with a real kubelet and containerd, our `bridge node` inside it, the real control plane, and (unless
`--no-webhook`) our webhook. Pods run the probe image (`imagePullPolicy: Never`).

Three kinds of one-GPU pod, and a fourth as the floor, one pod at a time, the kinds' order rotated every round so
the machine's load falls on each alike:
  legacy   `nvidia.com/gpu: 1` (device plugin: the kubelet's Allocate)
  dra      a claim from a ResourceClaimTemplate of our DeviceClass (the claim controller creates it, the scheduler
           allocates it, the kubelet calls our NodePrepareResources)
  webhook  the legacy pod in a namespace our webhook translates (`dra-bridge.io/mode: dra`): a DRA pod to the rest;
           on 1.37 the webhook's `auto` target is `extended` (`deviceclass.resource.kubernetes.io/<class>`,
           KEP-5004), whose claim kube-scheduler makes (no claim controller, no template)
  floor    a DRA pod like `dra`, of another driver on the same node: `bench/godra`, a kubelet plugin in Go on the
           upstream helper (k8s.io/dynamic-resource-allocation/kubeletplugin v0.37.2, as NVIDIA's driver is), which
           reads the claim from the API server as every driver on that helper does and then answers at once (no
           checkpoint, no CDI spec, no checks). Its kubelet-measured prepare is what the kubelet, the API server and a
           Go driver cost on this machine with no driver work: the floor under our prepare. Left out without a Go
           toolchain or with `--no-go-floor`; built once under ~/.cache/dra-bridge/bench.
Each round's pods are deleted and gone before the next round. Timestamps come from one watch on the pods
(create request sent -> spec.nodeName seen -> phase Running seen).

After each pod is Running, the bench scrapes the kubelet's /metrics (through the API server's node proxy,
`/api/v1/nodes/node-0/proxy/metrics`, as the admin), the API server's and the node daemon's: the difference of a
histogram's `_sum` over one pod start is that pod's exact duration whatever the buckets (see bench/realbench.py).
Read that way, per pod:
  kubelet PrepareResources   `dra_operations_duration_seconds{operation_name="PrepareResources"}`: the kubelet's
                             whole DRA prepare of the pod (its claim reads, our gRPC call, its checkpoint)
  kubelet NodePrepare gRPC   `dra_grpc_operations_duration_seconds{method=~".*NodePrepareResources"}`: our call as
                             the kubelet's gRPC client times it
  daemon prepare             `dra_bridge_dra_rpc_seconds{op="prepare"}`: the same call inside our daemon
    of which read/lock/work  `dra_bridge_dra_prepare_phase_seconds`: reading the claim from the API server, waiting
                             for the node lock, the work under it (guards, checkpoint and CDI writes)
      the GET alone          `dra_bridge_dra_claim_get_seconds`: the claim GET timed on the thread that sends it
        the server, per GET  kube-apiserver's `apiserver_request_duration_seconds{verb="GET",
                             resource="resourceclaims"}` over the pod's start, `_sum` / `_count` (the kubelet's
                             GET of the claim and ours): the API server's own share of the GET above
  kubelet Allocate           `kubelet_device_plugin_alloc_duration_seconds` (legacy pods)
  kubelet pod start          `kubelet_pod_start_duration_seconds`: kubelet first sees the pod -> running
  CRI <operation>            `kubelet_runtime_operations_duration_seconds{operation_type=...}`: the kubelet's calls
                             to containerd (run_podsandbox, create_container: where containerd applies the CDI
                             specs, start_container)
  split evaluations          `dra_bridge_split_evaluations_total`: the daemon's split evaluations during the start
The histogram's own buckets are printed too (how many prepares fell in its first, <= 100 ms, bucket).

Goals (issues 22 and 25): DRA create -> Running <= 1.2x legacy at p50 and p99; kubelet-measured prepare p99 <=
10 ms. The machine's load is printed before and after; on a shared machine every figure moves with it, the ratios
(same run, same node, interleaved) much less. `--py-spy FILE` records the node daemon with py-spy for the whole
run (raw collapsed stacks; it costs CPU, so its timing run is not the measured one).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.realbench import (  # noqa: E402
    AdminHttps, Samples, build_go, cpu_seconds, hist_sum, load, parse_metrics, pct, ratio, summary, total)
from bridge.kube import EVENTS, PODS  # noqa: E402
from bridge.kube.errors import KubeError, NotFound  # noqa: E402
from bridge.sandbox.cluster import ClusterSpec, NodeSpec, SandboxCluster  # noqa: E402
from bridge.sandbox.cluster.processes import ChildProcess  # noqa: E402
from tests.real.realnodes import claim_template, ensure_namespace, probe_pod  # noqa: E402

NODE = "node-0"
LABEL = "bench=real-pod-start"
KINDS = ("legacy", "dra", "webhook", "floor")
NAMESPACE = {"legacy": "bench-legacy", "dra": "bench-dra", "webhook": "bench-webhook", "floor": "bench-floor"}
FLOOR_DRIVER = "floor.bench.dra-bridge.io"  # bench/godra's driver and its DeviceClass
FLOOR_DIR = Path(__file__).with_name("godra")
PREPARE = "dra_operations_duration_seconds"
GRPC = "dra_grpc_operations_duration_seconds"
ALLOC = "kubelet_device_plugin_alloc_duration_seconds"
POD_START = "kubelet_pod_start_duration_seconds"
DAEMON = "dra_bridge_dra_rpc_seconds"
PHASE = "dra_bridge_dra_prepare_phase_seconds"
PHASES = ("read", "lock", "work")
EVALUATIONS = "dra_bridge_split_evaluations_total"
SERVER = "apiserver_request_duration_seconds"
SLICE_WRITES = "dra_bridge_dra_slice_writes_total"
CLAIM_OPS = "dra_bridge_dra_claim_operations_total"
SLOW_S = 1.0  # a pod slower than this from create to Running gets its Events printed (the kinds' p50 is ~0.55 s)
RUNTIME = "kubelet_runtime_operations_duration_seconds"
RUNTIME_OPS = ("run_podsandbox", "create_container", "start_container")


@dataclass
class Seen:
    bound: float | None = None
    running: float | None = None
    gone: float | None = None


class PodWatch:
    """One watch on the bench's pods in every namespace: when each was first seen bound, Running, deleted."""

    def __init__(self, cluster: SandboxCluster) -> None:
        self.cluster = cluster
        self.seen: dict[str, Seen] = {}
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def start(self) -> PodWatch:
        self.thread.start()
        return self

    def _run(self) -> None:
        rv = self.cluster.api.list(PODS, label_selector=LABEL)["metadata"]["resourceVersion"]
        while not self.stop.is_set():
            try:
                with self.cluster.api.watch(PODS, label_selector=LABEL, resource_version=rv,
                                            timeout_seconds=300) as stream:
                    for ev in stream:
                        now = time.monotonic()
                        meta = ev.object.get("metadata") or {}
                        rv = meta.get("resourceVersion") or rv
                        if ev.type == "BOOKMARK":
                            continue
                        key = f"{meta.get('namespace')}/{meta.get('name')}"
                        with self.cond:
                            s = self.seen.setdefault(key, Seen())
                            if s.bound is None and (ev.object.get("spec") or {}).get("nodeName"):
                                s.bound = now
                            if s.running is None and (ev.object.get("status") or {}).get("phase") == "Running":
                                s.running = now
                            if ev.type == "DELETED":
                                s.gone = now
                            self.cond.notify_all()
            except KubeError:
                if self.stop.is_set():
                    return
                time.sleep(0.2)

    def wait(self, key: str, what: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                s = self.seen.get(key)
                value = getattr(s, what) if s is not None else None
                if value is not None:
                    return float(value)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"pod {key}: not {what} within {timeout:.0f}s")
                self.cond.wait(min(left, 1.0))


@dataclass
class Sample:
    kind: str
    total: float  # create sent -> Running seen
    to_bound: float  # create sent -> nodeName seen
    deltas: dict[str, float] = field(default_factory=dict)  # per-pod histogram `_sum` differences
    name: str = ""
    events: list[str] = field(default_factory=list)  # a slow pod's Events (why it was slow), else empty


class Scraper:
    """The kubelet's (node proxy) and the node daemon's metrics, as one flat sample set."""

    def __init__(self, cluster: SandboxCluster) -> None:
        self.https = AdminHttps(cluster)
        self.daemon_port = cluster.node(NODE).http_port

    def scrape(self) -> Samples:
        import http.client

        samples = parse_metrics(self.https.get(f"/api/v1/nodes/{NODE}/proxy/metrics"))
        samples.update(parse_metrics(self.https.get("/metrics")))  # the API server's own
        conn = http.client.HTTPConnection("127.0.0.1", self.daemon_port, timeout=10)
        conn.request("GET", "/metrics")
        samples.update(parse_metrics(conn.getresponse().read().decode()))
        conn.close()
        return samples


def deltas(before: Samples, after: Samples) -> dict[str, float]:
    """Per-histogram differences between two scrapes: `key` the seconds spent (`_sum`), `key_n` the observations
    (`_count`), for the figures the summary prints; counters as plain differences."""
    wanted: dict[str, tuple[str, dict[str, str]]] = {
        "prepare": (PREPARE, {"operation_name": "PrepareResources"}),
        "daemon": (DAEMON, {"op": "prepare"}),
        **{f"phase_{ph}": (PHASE, {"phase": ph}) for ph in PHASES},
        "claim_get": ("dra_bridge_dra_claim_get_seconds", {}),
        "server_get": (SERVER, {"verb": "GET", "resource": "resourceclaims"}),
        "alloc": (ALLOC, {}),
        "pod_start": (POD_START, {}),
        **{f"rt_{op}": (RUNTIME, {"operation_type": op}) for op in RUNTIME_OPS},
    }
    out: dict[str, float] = {}
    for key, (name, labels) in wanted.items():
        s1, c1 = hist_sum(before, name, **labels)
        s2, c2 = hist_sum(after, name, **labels)
        out[key], out[f"{key}_n"] = s2 - s1, c2 - c1
    (s1, c1), (s2, c2) = _grpc(before), _grpc(after)
    out["grpc"], out["grpc_n"] = s2 - s1, c2 - c1
    for key, name in (("evaluations", EVALUATIONS), ("slice_writes", SLICE_WRITES)):
        out[key] = total(after, name) - total(before, name)
    # Failed prepares during the pod's start: the kubelet's (any cause) and ours (claims answered with an error).
    out["prepare_failed"] = (total(after, f"{PREPARE}_count", operation_name="PrepareResources", is_error="true")
                             - total(before, f"{PREPARE}_count", operation_name="PrepareResources", is_error="true"))
    out["claims_failed"] = (total(after, CLAIM_OPS, op="prepare", result="error")
                            - total(before, CLAIM_OPS, op="prepare", result="error"))
    return out


def _grpc(samples: Samples) -> tuple[float, float]:
    """(`_sum`, `_count`) of the kubelet's gRPC histogram for NodePrepareResources (either API version)."""
    ours = {k: v for k, v in samples.items() if dict(k[1]).get("method_name", "").endswith("NodePrepareResources")}
    return total(ours, f"{GRPC}_sum"), total(ours, f"{GRPC}_count")


def pod(kind: str, name: str) -> dict[str, Any]:
    template = {"dra": "one-gpu", "floor": "one-floor"}.get(kind)
    p = probe_pod(name, gpus=0 if template else 1, claim_template=template)
    p["metadata"]["labels"] = {"bench": "real-pod-start"}
    return p


class GoFloor:
    """bench/godra inside the node's mount namespace (the kubelet's plugin directories at their default paths), with
    the credentials our daemon has here, its DeviceClass, and a claim template in its namespace."""

    def __init__(self, cluster: SandboxCluster, binary: Path) -> None:
        node = cluster.node(NODE)
        assert node.real is not None
        assert cluster.work_dir is not None
        argv = [str(binary), "--node-name", NODE, "--kubeconfig", str(cluster.kubeconfig), "--driver", FLOOR_DRIVER,
                "--devices", "4"]
        # the sandbox's own child process: SIGTERM, then SIGKILL, at stop, and SIGTERM if this bench dies
        self.proc = ChildProcess("bench/godra", node.real.ns.enter(argv), cluster.work_dir / "godra.log").start()
        try:
            rapi = cluster.api.resource_api()
            cluster.api.create(rapi.device_classes, {
                "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": FLOOR_DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{FLOOR_DRIVER}'"}}]}})
            ensure_namespace(cluster, NAMESPACE["floor"])
            cluster.api.create(rapi.claim_templates, claim_template("one-floor", device_class=FLOOR_DRIVER),
                               NAMESPACE["floor"])
            deadline = time.monotonic() + 60
            while not any((s.get("spec") or {}).get("driver") == FLOOR_DRIVER
                          for s in cluster.api.list(rapi.slices)["items"]):
                if not self.proc.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"bench/godra published no ResourceSlice:\n{self.proc.log_tail()}")
                time.sleep(0.2)
        except BaseException:
            self.proc.stop()
            raise

    def stop(self) -> None:
        self.proc.stop()


def start_cluster(args: argparse.Namespace) -> SandboxCluster:
    spec = ClusterSpec(nodes=(NodeSpec(NODE, args.gpus, split=args.split),), kubernetes_version="1.37",
                       backend="real", real_kubelets=True, bridge=True, webhook=not args.no_webhook,
                       node_args=tuple(args.node_arg))
    cluster = SandboxCluster(spec).start(timeout=300)
    try:
        cluster.wait_daemons_settled(120)
        ensure_namespace(cluster, NAMESPACE["legacy"])
        ensure_namespace(cluster, NAMESPACE["dra"])
        cluster.api.create(cluster.api.resource_api().claim_templates, claim_template("one-gpu"), NAMESPACE["dra"])
        if not args.no_webhook:
            ensure_namespace(cluster, NAMESPACE["webhook"], {"dra-bridge.io/mode": "dra"})
    except BaseException:
        cluster.stop()
        raise
    return cluster


def run_round(cluster: SandboxCluster, watch: PodWatch, scraper: Scraper, kinds: list[str], index: int,
              before: Samples) -> tuple[list[Sample], Samples]:
    out = []
    for kind in kinds:
        name = f"{kind}-{index}"
        ns = NAMESPACE[kind]
        t0 = time.monotonic()
        created = cluster.api.create(PODS, pod(kind, name), ns)
        if kind == "webhook" and "nvidia.com/gpu" in str(created["spec"]["containers"][0].get("resources")):
            raise RuntimeError(f"the webhook did not translate {ns}/{name}: {created['metadata'].get('annotations')}")
        running = watch.wait(f"{ns}/{name}", "running", 180)
        bound = watch.wait(f"{ns}/{name}", "bound", 1)
        after = scraper.scrape()
        out.append(Sample(kind, running - t0, bound - t0, deltas(before, after), name=f"{ns}/{name}",
                          events=pod_events(cluster, ns, name) if running - t0 > SLOW_S else []))
        before = after
    for kind in kinds:
        try:
            cluster.api.delete(PODS, f"{kind}-{index}", NAMESPACE[kind])
        except NotFound:
            pass
    for kind in kinds:
        watch.wait(f"{NAMESPACE[kind]}/{kind}-{index}", "gone", 180)
    return out, before


def pod_events(cluster: SandboxCluster, ns: str, name: str) -> list[str]:
    """The pod's Events, oldest first, as `reason (xN): message` (what kubectl describe shows)."""
    try:
        items = cluster.api.list(EVENTS, ns, field_selector=f"involvedObject.name={name}")["items"]
    except KubeError as err:
        return [f"(events not read: {err})"]
    items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [f"{e.get('reason')} (x{e.get('count') or 1}): {str(e.get('message') or '')[:300]}" for e in items]


def first_bucket(samples: Samples) -> tuple[float, float]:
    """(prepares in the kubelet histogram's first bucket (<= 0.1 s), all prepares)."""
    le = [(float(dict(lab)["le"]), v) for (n, lab), v in samples.items()
          if n == f"{PREPARE}_bucket" and dict(lab).get("operation_name") == "PrepareResources"]
    if not le:
        return 0.0, 0.0
    first = min(le)[0]
    return (sum(v for b, v in le if b == first), sum(v for b, v in le if b == float("inf")))


def report(samples: list[Sample], final: Samples, cpu: dict[str, float], loads: tuple[str, str]) -> None:
    by = {k: [s for s in samples if s.kind == k] for k in KINDS}
    tot = {k: [s.total for s in v] for k, v in by.items()}
    print(f"\nload before: {loads[0]}\nload after:  {loads[1]}\n")
    print("create -> Running (same node, same run, kinds interleaved)")
    for k in KINDS:
        if tot[k]:
            print(f"  {k:<8} {summary(tot[k])}")
    for k in ("dra", "webhook", "floor"):
        if tot[k]:
            print(f"  {k}/legacy: p50 {ratio(tot[k], tot['legacy'], 50):.2f}x  p99 {ratio(tot[k], tot['legacy'], 99):.2f}x"
                  + ("   (goal <= 1.2x)" if k != "floor" else "   (the Go floor driver)"))
    print("\nwhere the time goes (p50 / mean, ms)")
    for k in KINDS:
        if not by[k]:
            continue
        bound = [s.to_bound for s in by[k]]
        kubelet = [s.total - s.to_bound for s in by[k]]
        print(f"  {k:<8} create->bound {statistics.median(bound) * 1000:7.1f} / {statistics.fmean(bound) * 1000:7.1f}"
              f"   bound->Running {statistics.median(kubelet) * 1000:7.1f} / {statistics.fmean(kubelet) * 1000:7.1f}")
    print("\nper pod, from the kubelet's and the daemon's histograms (difference of _sum over one pod start)")
    rows = [("prepare", "kubelet PrepareResources"), ("grpc", "kubelet NodePrepare gRPC"),
            ("daemon", "daemon prepare (ours)"),
            *[(f"phase_{ph}", f"  of which {ph}") for ph in PHASES], ("claim_get", "    the GET alone"),
            ("alloc", "kubelet Allocate (legacy)"),
            ("pod_start", "kubelet pod start"), *[(f"rt_{op}", f"CRI {op}") for op in RUNTIME_OPS]]
    for key, label in rows:
        for k in KINDS:
            values = [s.deltas[key] for s in by[k] if s.deltas.get(f"{key}_n", 0) >= 1]
            if values:
                print(f"  {label:<26} {k:<8} {summary(values)}")
    # The server's own time for one claim GET while the pod started (the kubelet's GET and ours, averaged per pod):
    # what the GET above costs at the API server, before TLS, the network and the client.
    for k in KINDS:
        per_get = [s.deltas["server_get"] / s.deltas["server_get_n"] for s in by[k]
                   if s.deltas.get("server_get_n", 0) >= 1]
        if per_get:
            print(f"  {'      the server, per GET':<26} {k:<8} {summary(per_get)}")
    for key, label in (("evaluations", "split evaluations"), ("slice_writes", "ResourceSlice writes")):
        print(f"  {label:<26} per pod start (daemon): " + ", ".join(
            f"{k} {statistics.fmean([s.deltas.get(key, 0.0) for s in by[k]]):.2f}" for k in KINDS if by[k]))
    failed = {k: sum(s.deltas.get("prepare_failed", 0) for s in by[k]) for k in KINDS if by[k]}
    refused = {k: sum(s.deltas.get("claims_failed", 0) for s in by[k]) for k in KINDS if by[k]}
    print(f"  failed prepares              kubelet: {failed}; claims our daemon answered with an error: {refused}")
    slow = [s for s in samples if s.total > SLOW_S]
    if slow:
        print(f"\npods slower than {SLOW_S:g} s from create to Running, with their Events:")
        for s in slow:
            print(f"  {s.kind:<8} {s.name}: {s.total * 1000:.0f} ms (bound after {s.to_bound * 1000:.0f} ms); "
                  f"kubelet prepares failed {s.deltas.get('prepare_failed', 0):.0f}, "
                  f"our claim errors {s.deltas.get('claims_failed', 0):.0f}")
            named = (("pod_start", "kubelet pod start"), ("prepare", "PrepareResources"),
                     *[(f"rt_{op}", op) for op in RUNTIME_OPS])
            parts = [(key, label) for key, label in named if s.deltas.get(f"{key}_n", 0) >= 1]
            print("      " + ", ".join(f"{label} {s.deltas[key] * 1000:.0f} ms" for key, label in parts))
            for line in s.events:
                print(f"      {line}")
    inside, count = first_bucket(final)
    print(f"\nkubelet {PREPARE}{{PrepareResources}}: {inside:.0f} of {count:.0f} in its first bucket (<= 100 ms; "
          f"every pod's, with claims or not; its buckets cannot resolve 10 ms: the per-pod figures above are exact)")
    prep = [s.deltas["prepare"] for s in samples if s.kind in ("dra", "webhook") and s.deltas.get("prepare_n") == 1]
    floor = [s.deltas["prepare"] for s in by["floor"] if s.deltas.get("prepare_n") == 1]
    if prep:
        print(f"kubelet-measured prepare p99 {pct(prep, 99) * 1000:.1f} ms, p50 {pct(prep, 50) * 1000:.1f} ms "
              "(ours: dra and webhook pods; goal p99 <= 10 ms)")
    if floor:
        print(f"  the floor, bench/godra (Go, the upstream helper, no driver work): "
              f"p99 {pct(floor, 99) * 1000:.1f} ms, p50 {pct(floor, 50) * 1000:.1f} ms")
    print("\nCPU seconds over the measured rounds: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
    if tot["dra"] and tot["legacy"]:
        gap = statistics.fmean(tot["dra"]) - statistics.fmean(tot["legacy"])
        b_gap = (statistics.fmean([s.to_bound for s in by["dra"]])
                 - statistics.fmean([s.to_bound for s in by["legacy"]]))
        k_gap = gap - b_gap
        ours = [s.deltas["daemon"] for s in by["dra"] if s.deltas.get("daemon_n", 0) >= 1]
        prep_d = [s.deltas["prepare"] for s in by["dra"] if s.deltas.get("prepare_n", 0) >= 1]
        alloc = [s.deltas["alloc"] for s in by["legacy"] if s.deltas.get("alloc_n", 0) >= 1]
        print(f"\nmean gap dra - legacy: {gap * 1000:.1f} ms = create->bound {b_gap * 1000:.1f} ms (claim controller + "
              f"scheduler) + bound->Running {k_gap * 1000:.1f} ms (kubelet, runtime)")
        if ours and prep_d:
            print(f"  of which kubelet PrepareResources {statistics.fmean(prep_d) * 1000:.1f} ms, inside our daemon "
                  f"{statistics.fmean(ours) * 1000:.1f} ms"
                  + (f"; legacy Allocate {statistics.fmean(alloc) * 1000:.1f} ms" if alloc else ""))


def pids_of(cluster: SandboxCluster) -> dict[str, list[int]]:
    node = cluster.node(NODE)
    out: dict[str, list[int]] = {}
    if node.daemon is not None and node.daemon.pid:
        out["bridge node"] = [node.daemon.pid]
    real = node.real
    if real is not None and real.kubelet is not None and real.kubelet.component is not None:
        pid = real.kubelet.component.child.pid
        if pid:
            out["kubelet"] = [pid]
    if cluster.webhook is not None and cluster.webhook.process is not None and cluster.webhook.process.pid:
        out["webhook"] = [cluster.webhook.process.pid]
    plane = cluster.plane
    if plane is not None:
        for c in plane.components:
            if c.child.pid:
                out[c.name] = [c.child.pid]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=50, help="measured pods of each kind (default 50)")
    ap.add_argument("--warmup", type=int, default=2, help="rounds not counted (default 2)")
    ap.add_argument("--gpus", default="8xH100-80GB")
    ap.add_argument("--split", default="4")
    ap.add_argument("--no-webhook", action="store_true", help="no webhook pods (and no webhook)")
    ap.add_argument("--no-go-floor", action="store_true", help="no floor pods (bench/godra, the Go driver)")
    ap.add_argument("--node-arg", action="append", default=[], metavar="ARG",
                    help="an extra `bridge node` argument, repeatable, after the sandbox's own (a what-if: "
                         "--node-arg=--claims-dir=/var/lib/dra-bridge puts the claim records back on the node's "
                         "disk, beside the sides' checkpoint, where they were before --claims-dir; the sandbox, as the "
                         "chart, passes --claims-dir /var/run/dra-bridge, the node's tmpfs)")
    ap.add_argument("--py-spy", metavar="FILE", help="record the node daemon with py-spy into FILE (raw format)")
    ap.add_argument("--py-spy-rate", type=int, default=200, metavar="HZ",
                    help="py-spy samples per second (default 200; a prepare takes a few ms: 1000 resolves its phases)")
    args = ap.parse_args()
    started = time.monotonic()
    binary = None if args.no_go_floor else build_go(FLOOR_DIR, "the floor (bench/godra)")
    cluster = start_cluster(args)
    print(f"cluster up in {time.monotonic() - started:.1f}s ({load()})", flush=True)
    spy: subprocess.Popen[bytes] | None = None
    floor: GoFloor | None = None
    try:
        floor = GoFloor(cluster, binary) if binary is not None else None
        watch = PodWatch(cluster).start()
        scraper = Scraper(cluster)
        kinds = [k for k in KINDS if not (k == "webhook" and args.no_webhook) and not (k == "floor" and floor is None)]
        before = scraper.scrape()
        for i in range(args.warmup):
            _, before = run_round(cluster, watch, scraper, kinds, -1 - i, before)
        pids = pids_of(cluster)
        if args.py_spy:
            daemon = pids["bridge node"][0]
            spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(daemon),
                                    "-o", args.py_spy, "--format", "raw", "-r", str(args.py_spy_rate), "--idle", "--nonblocking", "--threads"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
        load0 = load()
        samples: list[Sample] = []
        for i in range(args.pods):
            order = kinds[i % len(kinds):] + kinds[:i % len(kinds)]
            got, before = run_round(cluster, watch, scraper, order, i, before)
            samples += got
            if (i + 1) % 10 == 0:
                print(f"  {i + 1} rounds ({load()})", flush=True)
        cpu = {k: cpu_seconds(v) - cpu0[k] for k, v in pids.items()}
        report(samples, before, cpu, (load0, load()))
        watch.stop.set()
    finally:
        if spy is not None:
            spy.send_signal(2)
            spy.wait(30)
        if floor is not None:
            floor.stop()
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
