"""Webhook throughput and latency over TLS, against a bare echo endpoint on the same server in the same run.

    .venv/bin/python bench/webhook_bench.py [--seconds 3] [--rounds 3] [--concurrency 1,16,64]
                                            [--client auto|wrk|python]
                                            [--pin] [--executor] [--log off|text|json]

The server runs in its own process (as in production), wired as `bridge webhook` wires it: an API emulator (in the
bench's main process) holds namespace `team-a` labeled `dra-bridge.io/mode=dra`; the server process has the
informer-fed `NamespaceCache`, a `TemplateEnsurer` and an `EventRecorder` on the official client, and serves
`/mutate` with `Admitter.handle_inline` on the event loop (a Deployment pod with 2 GPUs and a GFD nodeSelector: full
review, translation, CEL and JSONPatch; its template is created through the emulator by the warm-up and is a cache
hit afterwards) and `/echo` (the request body written back, no parsing) on the same `WebhookServer`. Load is
closed-loop: `concurrency` keep-alive TLS connections, each with one request in flight, as the API server's webhook
client does.

Client: `wrk` (C, epoll, one thread; Debian package `wrk`) when it is installed, else a single-process asyncio
client with persistent TLS connections (Python; it costs the server more CPU on a shared machine, so its numbers
are a pessimistic bound). The client used is printed. `--pin` pins the server process to CPU 0 and the client to
CPU 1 (`os.sched_setaffinity`) so the two do not compete for a core; without it both float over all CPUs.
`--executor` registers the handlers as blocking (run in the server's thread pool, `/mutate` as `Admitter.handle`),
to show the cost of the thread hop that the inline fast path saves. `--log text|json` keeps the one INFO line per
review (to /dev/null) that production writes; by default logging is off so the numbers measure the webhook, not
the log handler.

Every request carries its own `request.uid`, as the API server's do. `mutate` sends the same pod each time (the
replicas of one Deployment: after the first, the review memo answers); `mutate-new` gives every request its own
pod (a new generateName), so each one is reviewed from scratch - the worst case, and what a stream of unrelated
pods costs. For each concurrency it prints req/s, p50, p99 (ms) for both and for echo, the ratios, and the server
process's CPU time per request (user+system from /proc, all its threads): on a shared machine that column is the
stable one, and in a closed loop latency ~= concurrency x per-request cost once the server's core is saturated.
Each concurrency is measured in `--rounds` rounds of the three endpoints, one after the other, so that a busy
stretch of a shared machine slows all three alike; each line prints the medians over the rounds, and each ratio its
median, every round's value, and the same ratio from the server's CPU per request (echo's over the endpoint's).
Targets (issue 5): p99 < 10 ms at concurrency 16 on 2 cores; mutate >= 60% of echo's throughput. Issue 11: mutate-new
>= 0.5 of echo at concurrency 16 (`bench/webhook_review_cost.py` counts the instructions behind it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.kube import connect  # noqa: E402
from bridge.kube.api import NAMESPACES, NODES  # noqa: E402
from bridge.logs import setup_logging  # noqa: E402
from bridge.sandbox.apiserver import ApiServer  # noqa: E402
from bridge.webhook.app import Admitter  # noqa: E402
from bridge.webhook.effects import EventRecorder, NamespaceCache, TemplateEnsurer  # noqa: E402
from bridge.webhook.facts import facts_from_discovery  # noqa: E402
from bridge.webhook.metrics import WebhookMetrics  # noqa: E402
from bridge.webhook.policy import PolicyConfig  # noqa: E402
from bridge.webhook.review import ReviewConfig  # noqa: E402
from bridge.webhook.server import WebhookServer  # noqa: E402
from bridge.webhook.serving import LiveFacts  # noqa: E402
from bridge.webhook.tls import ReloadingContext  # noqa: E402
from tests.webhook.pki import Pki  # noqa: E402
from tests.webhook.pods import admission_review, container, deployment_pod  # noqa: E402

SERVER_CPU, CLIENT_CPU = 0, 1
Result = tuple[float, float, float]  # req/s, p50 ms, p99 ms


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all threads) from /proc; NaN where /proc is absent."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


def wire(cert: str, key: str, kubeconfig: str, executor: bool = False,
         check_interval: float | None = None) -> tuple[WebhookServer, Admitter]:
    """The server and its admitter, wired as `bridge webhook` wires them, caches synced (also used by
    bench/webhook_review_cost.py, so both measure the same code path)."""
    import threading

    api = connect(kubeconfig)
    facts = facts_from_discovery(api.discovery())
    metrics = WebhookMetrics()
    cache = NamespaceCache(api, metrics)
    events = EventRecorder(api, metrics)
    # the node informer, the dry-run check, the DeviceClass, as in run() (`check_interval`: seconds between checks)
    live = LiveFacts(api, facts, "dra-bridge", **({} if check_interval is None else {"interval": check_interval}))
    admitter = Admitter(ReviewConfig(PolicyConfig(own_namespace="dra-bridge"), facts, "claims"), cache.labels,
                        TemplateEnsurer(api, metrics), events, metrics, peek_labels=cache.peek, serve=live.current)
    stop = threading.Event()
    cache.start(stop)
    live.start(stop)
    events.start()
    if not cache.wait_synced(30) or not live.wait_ready(30):
        raise SystemExit("namespace or node cache did not sync")
    if live.current().claims_kept is not True or not live.current().nodes.any_not_whole:
        raise SystemExit(f"unexpected live facts: {live.current()}")
    paths = {"/mutate": admitter.handle if executor else admitter.handle_inline, "/echo": lambda body: (200, body)}
    srv = WebhookServer(paths, ReloadingContext(cert, key), host="127.0.0.1", port=0, metrics=metrics,
                        inline=() if executor else tuple(paths))
    return srv, admitter


def quiet_logging(log_format: str) -> None:
    """`off`: no INFO lines at all; else the production format written to /dev/null."""
    import logging

    if log_format == "off":
        logging.disable(logging.INFO)
    else:
        setup_logging(log_format, "info")
        for handler in logging.getLogger().handlers:
            handler.setStream(open(os.devnull, "w"))  # type: ignore[attr-defined]


def serve(cert: str, key: str, kubeconfig: str, cpu: int | None, executor: bool, log_format: str,
          ready: mp.Queue) -> None:  # type: ignore[type-arg]
    pin(cpu)
    quiet_logging(log_format)
    srv, _ = wire(cert, key, kubeconfig, executor)
    ready.put(srv.port)
    srv.serve_forever()


# --- wrk -------------------------------------------------------------------------------------------------------

UID_MARK, POD_MARK = "XUIDX", "XPODX"  # replaced per request: the uid always, the pod's generateName for "mutate-new"

WRK_SCRIPT = """
local f = assert(io.open(BODY_PATH, "rb"))
local template = f:read("*a")
f:close()
local headers = {["Content-Type"] = "application/json"}
local n = 0
request = function()
  n = n + 1
  local body = template:gsub("XUIDX", "RUN_ID-" .. n):gsub("XPODX", VARY_POD and ("RUN_ID-" .. n) or "0")
  return wrk.format("POST", nil, headers, body)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d %d\\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), e.connect + e.read + e.write + e.status + e.timeout))
end
"""


def wrk_script(directory: Path, body_file: Path, vary_pod: bool, run_id: str) -> Path:
    script = directory / f"post-{run_id}.lua"
    script.write_text(WRK_SCRIPT.replace("BODY_PATH", json.dumps(str(body_file)))
                      .replace("VARY_POD", "true" if vary_pod else "false").replace("RUN_ID", run_id))
    return script


def request_body(template: bytes, n: int, vary_pod: bool, run_id: str) -> bytes:
    """What the wrk script sends as request `n` (the Python client's copy of it)."""
    return template.replace(UID_MARK.encode(), f"{run_id}-{n}".encode()).replace(
        POD_MARK.encode(), f"{run_id}-{n}".encode() if vary_pod else b"0")


def run_wrk(port: int, path: str, script: Path, concurrency: int, seconds: float, cpu: int | None) -> Result:
    cmd = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--timeout", "10s", "-s", str(script),
           f"https://127.0.0.1:{port}{path}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60,
                          preexec_fn=(lambda: pin(cpu)) if cpu is not None else None)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
    requests, duration_us, p50_us, p99_us, errors = (int(x) for x in line.split()[1:])
    if errors:
        raise SystemExit(f"{path}: wrk saw {errors} errors (non-2xx or socket errors)\n{proc.stdout}")
    return requests / (duration_us / 1e6), p50_us / 1000, p99_us / 1000


# --- fallback: one-process asyncio client ----------------------------------------------------------------------

def python_client(port: int, ca: str, path: str, template: bytes, vary_pod: bool, run_id: str, concurrency: int,
                  seconds: float, cpu: int | None, out: mp.Queue) -> None:  # type: ignore[type-arg]
    pin(cpu)
    counter = iter(range(1, 1 << 62))

    def next_request() -> bytes:
        body = request_body(template, next(counter), vary_pod, run_id)
        return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    async def one(lat: list[float], start_at: float, stop_at: float, ctx: ssl.SSLContext) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        while True:
            request = next_request()
            t0 = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = head[9:12]
            length = next(int(ln[15:]) for ln in head.split(b"\r\n") if ln[:15].lower() == b"content-length:")
            await reader.readexactly(length)
            t1 = time.perf_counter()
            if status != b"200":
                raise SystemExit(f"{path}: HTTP {status.decode()}")
            if time.monotonic() > stop_at:
                break
            lat.append(t1 - t0)
        writer.close()

    async def main() -> list[float]:
        ctx = ssl.create_default_context(cafile=ca)
        start_at = time.monotonic() + 0.5 + concurrency * 0.01  # all handshakes done before the clock starts
        lats: list[list[float]] = [[] for _ in range(concurrency)]
        await asyncio.gather(*(one(lats[i], start_at, start_at + seconds, ctx) for i in range(concurrency)))
        return [x for lst in lats for x in lst]

    out.put(asyncio.run(main()))


def run_python(port: int, ca: str, path: str, template: bytes, vary_pod: bool, run_id: str, concurrency: int,
               seconds: float, cpu: int | None) -> Result:
    q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    p = mp.Process(target=python_client, args=(port, ca, path, template, vary_pod, run_id, concurrency, seconds, cpu, q))
    p.start()
    lat = sorted(q.get(timeout=seconds + 120))
    p.join()
    if p.exitcode:
        raise SystemExit(f"python client failed with exit code {p.exitcode}")
    return len(lat) / seconds, lat[len(lat) // 2] * 1000, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000


def gpu_nodes() -> list[dict[str, object]]:
    info = {"kubeletVersion": "v1.35.2", "kubeProxyVersion": "", "machineID": "m", "systemUUID": "s", "bootID": "b",
            "kernelVersion": "6.8", "osImage": "linux", "containerRuntimeVersion": "containerd://2.1",
            "operatingSystem": "linux", "architecture": "amd64"}
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
             "status": {"capacity": {"nvidia.com/gpu": "8"}, "nodeInfo": info}}
            for name, labels in (("h100-0", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
                                 ("a100-mig-0", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
                                                 "nvidia.com/mig.strategy": "single"}))]


def request_template() -> bytes:
    """The AdmissionReview the bench sends, with UID_MARK and POD_MARK to replace per request: a Deployment pod
    with 2 GPUs, a sidecar without, and a GFD nodeSelector. Compact JSON, as the API server's webhook client writes
    it (apimachinery's JSON serializer: no spaces between tokens, a newline at the end)."""
    pod = deployment_pod(container("trainer", 2), container("sidecar"),
                         node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    pod["metadata"]["generateName"] = f"trainer-{POD_MARK}-"
    return json.dumps(admission_review(pod, "team-a", uid=UID_MARK), separators=(",", ":")).encode() + b"\n"


def start_cluster(directory: Path) -> tuple[ApiServer, Path]:
    """The API emulator with namespace `team-a` in dra mode, the webhook's own namespace and the two GPU nodes;
    the emulator and the path of a kubeconfig for it."""
    apiserver = ApiServer(version="1.35.0").start()
    kubeconfig = apiserver.write_kubeconfig(directory / "kubeconfig")
    admin = connect(str(kubeconfig))
    admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "team-a", "labels": {"dra-bridge.io/mode": "dra"}}})
    admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dra-bridge"}})
    for node in gpu_nodes():  # a whole-GPU node the pod selects, and a MIG node: the placement check runs
        admin.create(NODES, node)
    return apiserver, kubeconfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--client", choices=("auto", "wrk", "python"), default="auto")
    ap.add_argument("--pin", action="store_true", help=f"server on CPU {SERVER_CPU}, client on CPU {CLIENT_CPU}")
    ap.add_argument("--executor", action="store_true", help="run handlers in the server's thread pool")
    ap.add_argument("--log", choices=("off", "text", "json"), default="off",
                    help="server logging: one INFO line per review to /dev/null (production), or none")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of mutate, mutate-new, echo per concurrency (printed: medians over the rounds)")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    client = args.client
    if client == "auto":
        client = "wrk" if shutil.which("wrk") else "python"
    if client == "wrk" and not shutil.which("wrk"):
        raise SystemExit("--client wrk: wrk is not installed (Debian: apt-get install wrk)")
    if args.pin and (os.cpu_count() or 1) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    server_cpu, client_cpu = (SERVER_CPU, CLIENT_CPU) if args.pin else (None, None)
    body = request_template()
    with tempfile.TemporaryDirectory() as d:
        pki = Pki(Path(d))
        pki.issue()
        body_file = Path(d) / "body.json"
        body_file.write_bytes(body)
        apiserver, kubeconfig = start_cluster(Path(d))
        q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
        server = mp.Process(target=serve, args=(str(pki.cert_file), str(pki.key_file), str(kubeconfig), server_cpu,
                                                args.executor, args.log, q), daemon=True)
        server.start()
        port = q.get(timeout=60)

        runs = iter(range(1, 1 << 30))

        def measure(path: str, c: int, seconds: float, vary_pod: bool = False) -> tuple[Result, float]:
            """(req/s, p50, p99) and the server's CPU microseconds per request. Every request has its own uid;
            `vary_pod` gives every request its own pod too (no two reviews alike)."""
            assert server.pid is not None
            run_id = f"r{next(runs)}"
            cpu0 = cpu_seconds(server.pid)
            if client == "wrk":
                res = run_wrk(port, path, wrk_script(Path(d), body_file, vary_pod, run_id), c, seconds, client_cpu)
            else:
                res = run_python(port, str(pki.ca_file), path, body, vary_pod, run_id, c, seconds, client_cpu)
            return res, (cpu_seconds(server.pid) - cpu0) * 1e6 / (res[0] * seconds)

        print(f"cpus={os.cpu_count()} body={len(body)}B seconds={args.seconds} python={sys.version.split()[0]} "
              f"client={client} pin={'server:%d client:%d' % (SERVER_CPU, CLIENT_CPU) if args.pin else 'off'} "
              f"handlers={'executor' if args.executor else 'inline'} log={args.log}")
        print(f"{'conc':>4} {'endpoint':<10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'srv cpu us/req':>15}")
        try:
            measure("/mutate", 4, 1)  # warm-up: imports, caches, CEL compile
            for c in levels:
                rounds: list[dict[str, tuple[Result, float]]] = []
                for _ in range(args.rounds):  # interleaved, so a slow stretch of the machine hits all three alike
                    rounds.append({"mutate": measure("/mutate", c, args.seconds),
                                   "mutate-new": measure("/mutate", c, args.seconds, vary_pod=True),
                                   "echo": measure("/echo", c, args.seconds)})
                for name in ("mutate", "mutate-new", "echo"):
                    runs_of = [r[name] for r in rounds]
                    r = tuple(statistics.median(x[0][k] for x in runs_of) for k in range(3))
                    cpu = statistics.median(x[1] for x in runs_of)
                    print(f"{c:>4} {name:<10} {r[0]:>8.0f} {r[1]:>8.2f} {r[2]:>8.2f} {cpu:>15.0f}")
                for name in ("mutate", "mutate-new"):
                    ratios = sorted(r[name][0][0] / r["echo"][0][0] for r in rounds)
                    cpu_ratio = statistics.median(r["echo"][1] / r[name][1] for r in rounds)
                    print(f"{c:>4} ratio {name}/echo = {statistics.median(ratios):.2f} (rounds: "
                          f"{' '.join(f'{x:.2f}' for x in ratios)}; by server CPU per request {cpu_ratio:.2f})",
                          flush=True)
            templates = connect(str(kubeconfig)).list(
                connect(str(kubeconfig)).resource_api().claim_templates, "team-a")["items"]
            print(f"templates in team-a after the run: {[t['metadata']['name'] for t in templates]}")
        finally:
            server.terminate()
            apiserver.stop()


if __name__ == "__main__":
    main()
