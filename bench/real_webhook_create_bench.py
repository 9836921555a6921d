"""What our webhook adds to a pod CREATE, through the real kube-apiserver: the same pod in a namespace the webhook
translates vs one it does not see, in the same run, at a steady rate and in a burst.

    .venv/bin/python bench/real_webhook_create_bench.py [--rate 50] [--seconds 20] [--burst 500] [--workers 32]
                                                        [--no-echo] [--no-go-echo] [--rounds 1]

Needs the real control plane (`scripts/build_real.py`). One node (a kubelet simulator: no pod here ever runs) with
our `bridge node`, and our `bridge webhook` registered as the chart registers it (`namespaceSelector` on
`dra-bridge.io/mode`, `matchConditions`, fail open, TLS with its own CA bundle). Namespaces:
  dra     labelled `dra-bridge.io/mode: dra`: the API server calls the webhook, which translates the pod (on 1.37
          its `auto` target is `extended`: `nvidia.com/gpu` becomes `deviceclass.resource.kubernetes.io/<class>`)
  plain   no label: the namespaceSelector leaves the webhook out (no call, no TLS)
  echo    labelled `bench.dra-bridge.io/echo: "1"`, which a second registration selects: the same entry as ours
          (rules, matchConditions, objectSelector, fail open, 5 s, reinvocation) calling `bench/echo_webhook.py`,
          our HTTPS shell answering `allowed` with no patch. `echo - plain` is the floor any webhook costs a create
          here (the API server's dispatch, TLS, a review parsed and answered); `dra - echo` is what our review and
          its patch add to it. `--no-echo` leaves it out (the two-namespace runs of earlier notes).
  goecho  labelled `bench.dra-bridge.io/echo: go`: the same entry again, calling `bench/goecho`, the same answer
          from Go's net/http (built once under ~/.cache/dra-bridge/bench; left out without a Go toolchain, or with
          `--no-go-echo`). HTTP/1.1 only, as the API server speaks to a webhook behind a Service (it would offer
          HTTP/2 to this loopback URL: k8s.io/apiserver pkg/util/webhook/client.go). `goecho - plain` is the floor
          with a webhook server far cheaper than ours; `echo - goecho` is what our Python HTTPS shell costs on it.
The pod: one container asking `nvidia.com/gpu: 1`, no nodeName (a preset nodeName is a pod the webhook refuses to
translate, so its review would be the cheap path), and a scheduling gate.

Why a gate, and two modes (all four phases run in one process, one after another):
* `stored` creates are real: admission, validation, the etcd write. The gate keeps kube-scheduler from binding
  them (the pods never run; nothing else is started by them), so what the two namespaces differ in is the webhook
  call. Not isolated: kube-controller-manager's claim controller makes a ResourceClaim for each translated pod (a
  cost of the translation, on the API server during the run, paid by both namespaces' creates alike since they
  interleave; with the `extended` target kube-scheduler would make it, and gated pods are not scheduled). Each
  phase's pods are deleted afterwards (ungated, unbound pods go at once).
* `dry-run` creates (`dryRun=All`) run the same admission chain and validation and store nothing: no controller
  reacts, the webhook skips its side effects (`sideEffects: NoneOnDryRun`; the template exists by then anyway),
  so the difference is the admission path alone: the API server's webhook dispatch, TLS to the webhook, our
  review, the JSON patch applied.
Requests alternate between the namespaces (each round one per namespace, the rounds' orders cycling through every
permutation), so queueing and load fall on all alike. `steady`: one create every 1/rate seconds (open loop,
--workers connections); `burst`: --burst creates per namespace released at once on --workers connections. Latency is
measured at the client (request sent -> answer read, over a kept-alive HTTPS connection per worker, bodies
serialized beforehand).

Attribution, per phase, from scrapes before and after: the API server's own
`apiserver_admission_webhook_admission_duration_seconds` for our webhook and for the echo (the call as the API
server times it: dispatch, TLS, the answer) and the webhook's `dra_bridge_webhook_review_duration_seconds` (its own
review time), both as means (`_sum`/`_count`; the API server's buckets start at 5 ms). Goal (issue 25): dra - plain
<= +3 ms at p99, steady 50/s and burst 500.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import subprocess
import ssl
import statistics
import tempfile
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.realbench import (  # noqa: E402
    AdminHttps, Samples, build_go, cpu_seconds, hist_sum, load, parse_metrics, pct, summary)
from bridge.kube import MUTATING_WEBHOOKS, PODS  # noqa: E402
from bridge.sandbox.cluster import ClusterSpec, NodeSpec, SandboxCluster  # noqa: E402
from bridge.webhook.registration import WEBHOOK_NAME  # noqa: E402
from bridge.webhook.selfsigned import ensure_self_signed, registration  # noqa: E402
from tests.real.realnodes import ensure_namespace  # noqa: E402

NS = {"dra": "bench-dra", "plain": "bench-plain", "echo": "bench-echo", "goecho": "bench-goecho"}
ECHO_LABEL = "bench.dra-bridge.io/echo"
ECHO_VALUES = {"echo": "1", "goecho": "go"}
ECHO_NAMES = {"echo": "echo.bench.dra-bridge.io", "goecho": "goecho.bench.dra-bridge.io"}
# The differences printed per phase, (a, b) for a - b: the goal; the floor with our shell; ours on that floor; the
# floor with a Go server; our shell on the Go floor.
PAIRS = (("dra", "plain"), ("echo", "plain"), ("dra", "echo"), ("goecho", "plain"), ("echo", "goecho"))
WEBHOOK_METRIC = "apiserver_admission_webhook_admission_duration_seconds"
REVIEW_METRIC = "dra_bridge_webhook_review_duration_seconds"


def pod_body(name: str) -> bytes:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "webhook-create"}},
        "spec": {"schedulingGates": [{"name": "bench.dra-bridge.io/hold"}], "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "main", "image": "dra-bridge.local/probe:1", "imagePullPolicy": "Never",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    return json.dumps(pod).encode()


class Worker(threading.Thread):
    """One kept-alive HTTPS connection sending the creates handed to it; records (namespace kind, seconds)."""

    def __init__(self, cluster: SandboxCluster, jobs: list[tuple[float, str, bytes]], dry_run: bool,
                 out: list[tuple[str, float, int]], gate: threading.Event) -> None:
        super().__init__(daemon=True)
        self.https = AdminHttps(cluster)
        self.jobs = jobs
        self.query = "?dryRun=All" if dry_run else ""
        self.out = out
        self.gate = gate

    def run(self) -> None:
        self.https.request("GET", "/readyz")  # connect (TLS handshake) before the clock starts
        self.gate.wait()
        for when, kind, body in self.jobs:
            delay = when - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t = time.monotonic()
            status, data = self.https.request("POST", f"/api/v1/namespaces/{NS[kind]}/pods{self.query}", body,
                                              {"Content-Type": "application/json", "Accept": "application/json"})
            elapsed = time.monotonic() - t
            self.out.append((kind, elapsed, status))
            if status != 201:
                print(f"  create in {NS[kind]} answered {status}: {data[:200]!r}", flush=True)
        self.https.close()


def plan(count: int, prefix: str, kinds: tuple[str, ...]) -> list[tuple[str, bytes]]:
    """`count` creates per namespace of `kinds`, one per namespace each round, the rounds' orders cycling through
    every permutation of `kinds`."""
    orders = list(itertools.permutations(kinds))
    out = []
    for i in range(count):
        out += [(kind, pod_body(f"{prefix}-{i}")) for kind in orders[i % len(orders)]]
    return out


GO_ECHO_DIR = Path(__file__).with_name("goecho")


def build_go_echo() -> Path | None:
    """`bench/goecho` built once per source under ~/.cache/dra-bridge/bench; None (with why) without a Go toolchain."""
    return build_go(GO_ECHO_DIR, "the Go echo webhook")


class EchoWebhook:
    """An echo webhook in a child process (kind `echo`: bench/echo_webhook.py on our HTTPS shell; `goecho`:
    bench/goecho, given its binary), registered for its own namespace with our entry's settings."""

    def __init__(self, cluster: SandboxCluster, kind: str, go_binary: Path | None = None) -> None:
        self.kind = kind
        self.dir = tempfile.TemporaryDirectory(prefix=f"bench-{kind}-")
        if go_binary is None:
            cmd = [sys.executable, str(Path(__file__).with_name("echo_webhook.py")), self.dir.name]
        else:
            tls = ensure_self_signed(Path(self.dir.name), ["127.0.0.1"])
            cmd = [str(go_binary), "-cert", str(tls.cert_file), "-key", str(tls.key_file)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        self.port = 0
        try:
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline().split()
            if line[:1] != ["port"]:
                raise RuntimeError(f"{kind} webhook did not start (exit {self.proc.poll()})")
            self.port = int(line[1])
            # our registration (`bridge webhook --self-signed` writes the same), another name and namespaceSelector
            config = registration(f"https://127.0.0.1:{self.port}/mutate",
                                  (Path(self.dir.name) / "ca.crt").read_bytes())
            config["metadata"]["name"] = f"bench-{kind}"
            (entry,) = config["webhooks"]
            entry["name"] = ECHO_NAMES[kind]
            entry["namespaceSelector"] = {"matchLabels": {ECHO_LABEL: ECHO_VALUES[kind]}}
            cluster.api.create(MUTATING_WEBHOOKS, config)
            ensure_namespace(cluster, NS[kind], {ECHO_LABEL: ECHO_VALUES[kind]})
        except BaseException:
            self.stop()
            raise

    def stats(self) -> dict[str, int]:
        """The Go echo's counters: accepted connections, reviews answered (bench/goecho's /stats)."""
        ca = (Path(self.dir.name) / "ca.crt").read_bytes()
        return dict(json.loads(local_https_get(self.port, ca, "/stats")))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.dir.cleanup()


def run_phase(cluster: SandboxCluster, creates: list[tuple[str, bytes]], *, rate: float | None, workers: int,
              dry_run: bool) -> list[tuple[str, float, int]]:
    """Hand creates round-robin to the workers, each at its slot time (rate) or all at once (burst)."""
    start = time.monotonic() + 1.0
    per: list[list[tuple[float, str, bytes]]] = [[] for _ in range(workers)]
    for i, (kind, body) in enumerate(creates):
        when = start + i / rate if rate else start
        per[i % workers].append((when, kind, body))
    out: list[tuple[str, float, int]] = []
    gate = threading.Event()
    threads = [Worker(cluster, jobs, dry_run, out, gate) for jobs in per if jobs]
    for t in threads:
        t.start()
    time.sleep(max(0.0, start - time.monotonic() - 0.05))
    gate.set()
    for t in threads:
        t.join()
    return out


class Connections(threading.Thread):
    """Samples /proc/net/tcp every 50 ms: the API server's established connections to the webhook's port (how
    many at once, how many distinct ones over the phase: one per call would mean a TLS handshake per call)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = f"{port:04X}"
        self.peers: set[str] = set()
        self.most = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            now = set()
            for path in ("/proc/net/tcp", "/proc/net/tcp6"):
                try:
                    lines = open(path).read().splitlines()[1:]
                except OSError:
                    continue
                for line in lines:
                    f = line.split()
                    if f[1].endswith(":" + self.port) and f[3] == "01":
                        now.add(f[2])
            self.peers |= now
            self.most = max(self.most, len(now))


def local_https_get(port: int, ca_pem: bytes, path: str) -> bytes:
    """GET `path` from a webhook on 127.0.0.1 that serves a certificate of the CA `ca_pem`, on a connection of its
    own."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


def scrape(cluster: SandboxCluster, https: AdminHttps) -> Samples:
    samples = parse_metrics(https.get("/metrics"))
    assert cluster.webhook is not None
    samples.update(parse_metrics(local_https_get(cluster.webhook.port, cluster.webhook.ca_pem, "/metrics").decode()))
    return samples


def mean_delta(before: Samples, after: Samples, metric: str, /, **labels: str) -> tuple[float, float]:
    s1, c1 = hist_sum(before, metric, **labels)
    s2, c2 = hist_sum(after, metric, **labels)
    return ((s2 - s1) / (c2 - c1) if c2 > c1 else float("nan")), c2 - c1


def show(title: str, results: list[tuple[str, float, int]], before: Samples, after: Samples,
         wall: float) -> tuple[float, ...]:
    """Per namespace latencies, and (p50, p99) of each of PAIRS (ms; nan where a namespace was left out)."""
    ok = [(k, s) for k, s, status in results if status == 201]
    by = {kind: [s for k, s in ok if k == kind] for kind in NS if any(k == kind for k, _ in ok)}
    print(f"\n{title}: {len(results)} creates in {wall:.1f}s ({len(results) / wall:.0f}/s), "
          f"{len(results) - len(ok)} failed")
    for kind, values in by.items():
        print(f"  {kind:<6} {summary(values)}")
    out: list[float] = []
    for a, b in PAIRS:
        if a in by and b in by:
            d50 = (statistics.median(by[a]) - statistics.median(by[b])) * 1000
            d99 = (pct(by[a], 99) - pct(by[b], 99)) * 1000
            print(f"  {a + ' - ' + b:<13} p50 {d50:+6.1f} ms  p99 {d99:+6.1f} ms  mean "
                  f"{(statistics.fmean(by[a]) - statistics.fmean(by[b])) * 1000:+6.1f} ms"
                  + ("   (goal p99 <= +3 ms)" if (a, b) == PAIRS[0] else ""))
            out += [d50, d99]
        else:
            out += [float("nan"), float("nan")]
    for label, name in (("our webhook", WEBHOOK_NAME), ("the echo", ECHO_NAMES["echo"]),
                        ("the Go echo", ECHO_NAMES["goecho"])):
        call, n = mean_delta(before, after, WEBHOOK_METRIC, name=name, operation="CREATE", type="admit")
        if n:
            print(f"  the API server's call to {label} (mean of {n:.0f}): {call * 1000:.2f} ms")
    review, m = mean_delta(before, after, REVIEW_METRIC)
    print(f"  our review inside the webhook (mean of {m:.0f}): {review * 1000:.2f} ms")
    return tuple(out)


def show_process(cpu: dict[str, float], wall: float, conns: Connections) -> None:
    print("  CPU seconds in the phase: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
          + f" (wall {wall:.1f}s, 2 CPUs: {2 * wall:.1f} CPU-s in all)")
    print(f"  API server -> webhook connections: {len(conns.peers)} distinct, at most {conns.most} at once")


def cleanup(cluster: SandboxCluster) -> None:
    for ns in NS.values():
        cluster.api.delete_collection(PODS, ns, label_selector="bench=webhook-create")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not any(cluster.api.list(PODS, ns, label_selector="bench=webhook-create")["items"] for ns in NS.values()):
            return
        time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=50.0, help="steady creates per second, all namespaces together")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each steady phase")
    ap.add_argument("--burst", type=int, default=500, help="creates per namespace in each burst")
    ap.add_argument("--workers", type=int, default=32, help="client connections")
    ap.add_argument("--modes", default="dry-run,stored", help="which kinds of create to run (dry-run, stored)")
    ap.add_argument("--no-echo", action="store_true", help="leave the echo webhook's namespace out")
    ap.add_argument("--no-go-echo", action="store_true", help="leave the Go echo webhook's namespace out")
    ap.add_argument("--rounds", type=int, default=1, help="run every phase this many times over (one cluster); the "
                    "summary gives the median of the rounds")
    ap.add_argument("--py-spy", metavar="FILE", help="record the webhook process with py-spy (raw format, "
                    "non-blocking) over the measured phases")
    ap.add_argument("--extra-rates", type=lambda v: [float(x) for x in v.split(",") if x], default=[10.0],
                    help="steady rates to run first as references (default 10: what this machine sustains "
                         "without queueing; '' for none)")
    args = ap.parse_args()
    spec = ClusterSpec(nodes=(NodeSpec("node-0", "8xH100-80GB", split="4"),), kubernetes_version="1.37",
                       backend="real", bridge=True, webhook=True)
    t0 = time.monotonic()
    cluster = SandboxCluster(spec).start(timeout=300)
    go_binary = None if args.no_go_echo else build_go_echo()
    kinds = ("dra", "plain", *(() if args.no_echo else ("echo",)), *(() if go_binary is None else ("goecho",)))
    echoes: list[EchoWebhook] = []
    try:
        print(f"cluster up in {time.monotonic() - t0:.1f}s ({load()})", flush=True)
        ensure_namespace(cluster, NS["dra"], {"dra-bridge.io/mode": "dra"})
        ensure_namespace(cluster, NS["plain"])
        if "echo" in kinds:
            echoes.append(EchoWebhook(cluster, "echo"))
        go_echo = EchoWebhook(cluster, "goecho", go_binary) if "goecho" in kinds else None
        if go_echo is not None:
            echoes.append(go_echo)
        https = AdminHttps(cluster)
        # the first dra pod makes the template
        warm = run_phase(cluster, plan(20, "warm", kinds), rate=20, workers=4, dry_run=False)
        if not all(any(k == kind and status == 201 for k, _, status in warm) for kind in kinds):
            print(f"warm-up creates failed: {sorted(set((k, status) for k, _, status in warm))}", file=sys.stderr)
            return 1
        translated = cluster.api.get(PODS, "warm-0", NS["dra"])
        if "nvidia.com/gpu" in json.dumps(translated["spec"]["containers"][0].get("resources")):
            print(f"the webhook did not translate the warm-up pod: {translated['metadata'].get('annotations')}",
                  file=sys.stderr)
            return 1
        cleanup(cluster)
        summary_rows: list[tuple[str, tuple[float, ...]]] = []
        pids = {c.name: [c.child.pid] for c in (cluster.plane.components if cluster.plane else []) if c.child.pid}
        if cluster.webhook is not None and cluster.webhook.process is not None and cluster.webhook.process.pid:
            pids["webhook"] = [cluster.webhook.process.pid]
        for echo in echoes:
            pids[f"{echo.kind} webhook"] = [echo.pid]
        pids["this client"] = [os.getpid()]
        spy = None
        if args.py_spy and "webhook" in pids:
            import subprocess

            spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p",
                                    str(pids["webhook"][0]), "-o", args.py_spy, "--format", "raw", "-r", "200",
                                    "--idle", "--nonblocking", "--threads"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for rnd in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"\n=== round {rnd} of {args.rounds}", flush=True)
            for rate in args.extra_rates:
                for mode in args.modes.split(","):
                    dry = mode == "dry-run"
                    title = f"steady {rate:g}/s, {mode} (unsaturated reference)"
                    before = scrape(cluster, https)
                    print(f"\n[{title}] {load()}", flush=True)
                    t = time.monotonic()
                    creates = plan(int(rate * args.seconds / len(kinds)), f"r{int(rate)}{int(dry)}", kinds)
                    results = run_phase(cluster, creates, rate=rate, workers=8, dry_run=dry)
                    after = scrape(cluster, https)
                    summary_rows.append((title, show(title, results, before, after, time.monotonic() - t - 1.0)))
                    if not dry:
                        cleanup(cluster)
            for mode in args.modes.split(","):
                dry = mode == "dry-run"
                phases: list[tuple[str, Callable[[], list[tuple[str, float, int]]]]] = [
                    (f"steady {args.rate:g}/s, {mode}",
                     lambda: run_phase(cluster, plan(int(args.rate * args.seconds / len(kinds)), f"s{int(dry)}", kinds),
                                       rate=args.rate, workers=args.workers, dry_run=dry)),
                    (f"burst {args.burst} per namespace, {mode}",
                     lambda: run_phase(cluster, plan(args.burst, f"b{int(dry)}", kinds), rate=None,
                                       workers=args.workers, dry_run=dry)),
                ]
                for title, phase in phases:
                    before = scrape(cluster, https)
                    print(f"\n[{title}] {load()}", flush=True)
                    conns = Connections(cluster.webhook.port if cluster.webhook is not None else 0)
                    conns.start()
                    go_before = go_echo.stats() if go_echo is not None else None
                    cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
                    t = time.monotonic()
                    results = phase()
                    wall = time.monotonic() - t - 1.0
                    cpu = {k: cpu_seconds(v) - cpu0[k] for k, v in pids.items()}
                    conns.done.set()
                    after = scrape(cluster, https)
                    summary_rows.append((title, show(title, results, before, after, wall)))
                    show_process(cpu, wall, conns)
                    if go_echo is not None and go_before is not None:
                        now = go_echo.stats()
                        print(f"  API server -> Go echo: {now['connections'] - go_before['connections']} new "
                              f"connections for {now['reviews'] - go_before['reviews']} reviews")
                    if not dry:
                        cleanup(cluster)
        if spy is not None:
            spy.send_signal(2)
            spy.wait(60)
        print(f"\n{load()}")
        print("summary (ms; goal: dra - plain <= +3 at p99; echo - plain: the floor on our HTTPS shell, dra - echo: "
              "ours on it; goecho - plain: the floor with a Go server, echo - goecho: our shell on it):")
        by_title: dict[str, list[tuple[float, ...]]] = {}
        for title, d in summary_rows:
            by_title.setdefault(title, []).append(d)
        if args.rounds > 1:
            print(f"each cell the median of {args.rounds} rounds (a p99 of 250 creates is their 3rd slowest: it moves "
                  "by several ms from round to round; the rounds' dra - plain p99 follow the table)")
        # columns: the goal's pair, its verdict (11), then the other pairs; each pair 19 wide (p50, p99)
        names = [f"{a + ' - ' + b:>19}" for a, b in PAIRS]
        pair_head = f"{'p50':>9} {'p99':>9}"
        print(f"  {'':<48} {names[0]} {'':>11} " + " ".join(names[1:]))
        print(f"  {'':<48} " + " ".join([pair_head, " " * 11, *[pair_head] * (len(PAIRS) - 1)]))
        for title, rows in by_title.items():
            d = tuple(statistics.median(column) for column in zip(*rows))
            print(f"  {title:<48} {d[0]:+9.1f} {d[1]:+9.1f} {'meets' if d[1] <= 3 else 'MISSES':>11} "
                  + " ".join(f"{v:+9.1f}" for v in d[2:]))
        if args.rounds > 1:
            for title, rows in by_title.items():
                print(f"  {title:<48} dra - plain p99 by round: " + ", ".join(f"{r[1]:+.1f}" for r in rows))
    finally:
        for echo in echoes:
            echo.stop()
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
