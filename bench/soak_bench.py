"""Soak: both kubelet APIs of a real `bridge node`, and the real `bridge webhook`, under normal and hostile load, for
a fixed bounded time.

    .venv/bin/python bench/soak_bench.py [--seconds 30] [--normal-threads 2] [--hostile-threads 2] [--half-sent 300]

Set-up: the API emulator and the kubelet simulator (device manager, plugin watcher + DRA manager, PodResources) in
this process; one `bridge node --dra on --dra-devices 2` subprocess with 8 simulated GPUs (gpu-0..5 legacy, gpu-6/7
DRA) and its health endpoint on loopback; one `bridge webhook` subprocess (`--self-signed`, `--client-ca-file`: only
the "API server" certificate this bench holds may post reviews; `--max-templates-per-namespace 20`) with the
namespace `soak` in `dra` mode. Two phases of `--seconds` each:

1. quiet: only the normal callers (the baseline, same processes);
2. hostile: the normal callers again, plus `--hostile-threads` threads cycling through every case of `HOSTILE`.

Normal calls (what a kubelet, the API server and a probe do), each timed: device-plugin Allocate (1 legacy GPU) and
GetPreferredAllocation (2 of the 6 legacy GPUs), DRA NodePrepareResources + NodeUnprepareResources of a claim
allocated on a DRA-side GPU (one claim per normal thread), registration GetInfo, GET /healthz, and an AdmissionReview
of a 1-GPU pod posted with the API server's client certificate.

Hostile cases beyond the kubelet APIs: `--half-sent` connections to /healthz that send half a request and hold it
2 s (the endpoint keeps 64 open, evicting the oldest that has not sent a whole request when a new one comes, and
cuts each at 10 s: the normal GET /healthz keeps being answered), forged AdmissionReviews without a client
certificate (403), and reviews with the certificate but a new selector each time (a new template each: the
namespace cap stops them). Issue 27's inputs: a GPU count of "1e30000000" (as kube-apiserver sends it on) and 100
containers of "1e-9" (what it makes of "1e-2000000"), both left untranslated at no cost; every template of ours
deleted (the next review creates its template again: it must exist); the kubelet's device-manager checkpoint, which
the daemon reads on every evaluation (each prepare ends with one), replaced for 1 s by a symlink to /dev/zero, a
FIFO, a 1 GiB sparse file or 200 KB of nested JSON (legacy holders unknown meanwhile, nothing read unbounded); and
a 200 KB `dra-devices` annotation on the Node for 1 s (refused by name, the split stays).

Printed: p50/p99/max per normal call and in all, for each phase, with the hostile/quiet p99 ratio; errors among the
normal calls; the outcome (gRPC status / HTTP code) counts of every hostile case; RSS, open fds and threads of both
processes after the quiet phase, after the hostile phase, and once settled; the templates in the namespace at the
end (at most the cap). Nothing is asserted.

Adding a hostile case: write `def case(t: Targets) -> None` that makes one hostile call (an RpcError is recorded
by its status code, an HttpError by its text, anything else as an error) and add it to `HOSTILE`.

Not here: an API server that stalls during a prepare. The emulator serves the normal callers too, so stalling it
would stall the baseline; tests/dra/test_prepare_grpc.py measures that case (20 claims during an outage, and a
hanging API server, answered within the kubelet's deadline).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import ssl
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as dp_pb  # noqa: E402
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc  # noqa: E402
from bridge._proto.dra.v1 import dra_pb2 as dra_pb  # noqa: E402
from bridge._proto.dra.v1 import dra_pb2_grpc as dra_grpc  # noqa: E402
from bridge._proto.drahealth.v1alpha1 import drahealth_pb2 as health_pb  # noqa: E402
from bridge._proto.drahealth.v1alpha1 import drahealth_pb2_grpc as health_grpc  # noqa: E402
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2 as reg_pb  # noqa: E402
from bridge._proto.pluginregistration.v1 import pluginregistration_pb2_grpc as reg_grpc  # noqa: E402
from bridge.inventory.simulated import devices_from_spec  # noqa: E402
from bridge.kube import NAMESPACES, NODES, KubeAPI, connect  # noqa: E402
from bridge.kube.errors import KubeError  # noqa: E402
from bridge.sandbox.apiserver import ApiServer  # noqa: E402
from bridge.sandbox.kubelet import KubeletSimulator  # noqa: E402
from tests.webhook.pki import Pki  # noqa: E402
from tests.webhook.pods import admission_review, container, deployment_pod  # noqa: E402

NODE = "soak-node"
DRIVER = "gpu.dra-bridge.io"
RESOURCE = "nvidia.com/gpu"
NS = "soak"


@dataclass
class Targets:
    """What every call needs: stubs on the daemon's three sockets, the GPUs by side, the claims, the health URL."""

    dp: dp_grpc.DevicePluginStub
    dra: dra_grpc.DRAPluginStub
    health: health_grpc.DRAResourceHealthStub
    reg: reg_grpc.RegistrationStub
    sockets: dict[str, str]
    legacy: list[str]
    dra_side: list[str]
    claims: list[dra_pb.Claim]
    healthz: str
    webhook: Webhook
    api: KubeAPI
    kubelet_root: Path


@dataclass
class Webhook:
    """The webhook subprocess: its port, its serving CA, and the client certificate the "API server" presents."""

    port: int
    server_ca: Path
    client: tuple[Path, Path]
    counter: list[int] = field(default_factory=lambda: [0])
    lock: threading.Lock = field(default_factory=threading.Lock)

    def post(self, review: dict[str, Any], with_certificate: bool) -> tuple[int, dict[str, Any]]:
        ctx = ssl.create_default_context(cafile=str(self.server_ca))
        if with_certificate:
            ctx.load_cert_chain(*self.client)
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=10)
        try:
            conn.request("POST", "/mutate", json.dumps(review).encode(), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    def next(self) -> int:
        with self.lock:
            self.counter[0] += 1
            return self.counter[0]


def gpu_review(n_gpus: int | str = 1, selector: str = "", containers: int = 1) -> dict[str, Any]:
    pod = deployment_pod(*[container(f"c{i}", n_gpus) for i in range(containers)],
                         node_selector={"nvidia.com/gpu.product": selector} if selector else None)
    return admission_review(pod, NS)


class HttpError(Exception):
    """A hostile HTTP case's outcome, recorded by its code."""


# ---- normal calls ------------------------------------------------------------------------------------------------

def normal_calls(t: Targets, worker: int) -> list[tuple[str, Callable[[], object]]]:
    gpu = t.legacy[worker % len(t.legacy)]
    claim = t.claims[worker % len(t.claims)]

    def prepare_unprepare() -> None:
        resp = t.dra.NodePrepareResources(dra_pb.NodePrepareResourcesRequest(claims=[claim]), timeout=45)
        if resp.claims[claim.uid].error:
            raise RuntimeError(f"prepare: {resp.claims[claim.uid].error}")
        resp2 = t.dra.NodeUnprepareResources(dra_pb.NodeUnprepareResourcesRequest(claims=[claim]), timeout=45)
        if resp2.claims[claim.uid].error:
            raise RuntimeError(f"unprepare: {resp2.claims[claim.uid].error}")

    def healthz() -> None:
        with urllib.request.urlopen(t.healthz, timeout=10) as r:
            if r.status != 200:
                raise RuntimeError(f"/healthz {r.status}")

    def review() -> None:
        code, body = t.webhook.post(gpu_review(1), with_certificate=True)
        if code != 200 or "patch" not in body.get("response", {}):
            raise RuntimeError(f"review {code}: {str(body)[:120]}")

    return [
        ("dp Allocate", lambda: t.dp.Allocate(dp_pb.AllocateRequest(container_requests=[
            dp_pb.ContainerAllocateRequest(devices_ids=[gpu])]), timeout=30)),
        ("dp GetPreferredAllocation", lambda: t.dp.GetPreferredAllocation(dp_pb.PreferredAllocationRequest(
            container_requests=[dp_pb.ContainerPreferredAllocationRequest(available_deviceIDs=t.legacy,
                                                                         allocation_size=2)]), timeout=30)),
        ("dra Prepare+Unprepare", prepare_unprepare),
        ("reg GetInfo", lambda: t.reg.GetInfo(reg_pb.InfoRequest(), timeout=1)),  # the kubelet's 1 s deadline
        ("GET /healthz", healthz),
        ("webhook review (API server)", review),
    ]


# ---- hostile cases -----------------------------------------------------------------------------------------------

def dp_preferred_10k_unknown(t: Targets) -> None:
    t.dp.GetPreferredAllocation(dp_pb.PreferredAllocationRequest(container_requests=[
        dp_pb.ContainerPreferredAllocationRequest(available_deviceIDs=[f"GPU-x-{i}" for i in range(10_000)],
                                                  allocation_size=5_000)]), timeout=30)


def dp_preferred_dra_side_listed(t: Targets) -> None:
    resp = t.dp.GetPreferredAllocation(dp_pb.PreferredAllocationRequest(container_requests=[
        dp_pb.ContainerPreferredAllocationRequest(available_deviceIDs=(t.legacy + t.dra_side) * 500,
                                                  allocation_size=8)]), timeout=30)
    if set(resp.container_responses[0].deviceIDs) & set(t.dra_side):
        raise RuntimeError("GetPreferredAllocation returned a DRA-side GPU")


def dp_allocate_10k_duplicates(t: Targets) -> None:
    t.dp.Allocate(dp_pb.AllocateRequest(container_requests=[
        dp_pb.ContainerAllocateRequest(devices_ids=[t.legacy[0]] * 10_000)]), timeout=30)


def dp_allocate_one_gpu_two_containers(t: Targets) -> None:
    t.dp.Allocate(dp_pb.AllocateRequest(container_requests=[
        dp_pb.ContainerAllocateRequest(devices_ids=[t.legacy[0]]),
        dp_pb.ContainerAllocateRequest(devices_ids=[t.legacy[0]])]), timeout=30)


def dp_allocate_huge_id(t: Targets) -> None:
    t.dp.Allocate(dp_pb.AllocateRequest(container_requests=[
        dp_pb.ContainerAllocateRequest(devices_ids=["GPU-" + "x" * 200_000])]), timeout=30)


def dp_allocate_dra_side(t: Targets) -> None:
    t.dp.Allocate(dp_pb.AllocateRequest(container_requests=[
        dp_pb.ContainerAllocateRequest(devices_ids=[t.dra_side[0]])]), timeout=30)


def _stream_flood(open_stream: Callable[[], Any], n: int = 10) -> None:
    streams = [open_stream() for _ in range(n)]
    errors: list[grpc.RpcError] = []
    for s in streams:
        try:
            next(s)
        except grpc.RpcError as err:
            errors.append(err)
    for s in streams:
        s.cancel()
    if errors:
        raise errors[0]  # recorded by status: RESOURCE_EXHAUSTED beyond the limit


def dp_listandwatch_flood(t: Targets) -> None:
    _stream_flood(lambda: t.dp.ListAndWatch(dp_pb.Empty(), timeout=30))


def dra_health_stream_flood(t: Targets) -> None:
    _stream_flood(lambda: t.health.NodeWatchResources(health_pb.NodeWatchResourcesRequest(), timeout=30))


def dra_prepare_missing_claim(t: Targets) -> None:
    resp = t.dra.NodePrepareResources(dra_pb.NodePrepareResourcesRequest(claims=[
        dra_pb.Claim(namespace=NS, name="does-not-exist", uid="00000000-0000-0000-0000-000000000000")]), timeout=45)
    if not next(iter(resp.claims.values())).error:
        raise RuntimeError("a claim that does not exist was prepared")


def dra_prepare_bad_claims_in_one_call(t: Targets) -> None:
    """One NodePrepareResources with three bad claims: an empty namespace, a real claim's UID under a wrong name, a
    claim that does not exist. Each gets its own error; the call itself succeeds (per-claim means per-claim)."""
    real = t.claims[0]
    bad = [dra_pb.Claim(namespace="", name="no-namespace", uid="00000000-0000-0000-0000-00000000000a"),
           dra_pb.Claim(namespace=real.namespace, name=real.name + "-wrong", uid=real.uid),
           dra_pb.Claim(namespace=NS, name="does-not-exist", uid="00000000-0000-0000-0000-00000000000b")]
    resp = t.dra.NodePrepareResources(dra_pb.NodePrepareResourcesRequest(claims=bad), timeout=45)
    errored = sum(1 for c in bad if resp.claims[c.uid].error)
    raise HttpError(f"{errored} of {len(bad)} claims answered with their own error")


def raw_garbage(t: Targets) -> None:
    for path in t.sockets.values():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(path)
            s.sendall(os.urandom(4096))


def healthz_half_sent(t: Targets) -> None:
    """`--half-sent` connections to /healthz, each sending half a request, held 2 s, then closed. Outcome: how many
    were still open after the 2 s, how many the server had closed (evicted for newer connections) or answered 503."""
    port = int(t.healthz.rsplit(":", 1)[1].split("/", 1)[0])
    conns = []
    for _ in range(HALF_SENT[0]):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        conns.append(s)
    time.sleep(2.0)
    outcome: Counter[str] = Counter()
    for s in conns:
        s.setblocking(False)
        try:
            data = s.recv(64)
            outcome["503" if data.startswith(b"HTTP/1.0 503") else "closed by the server" if not data else "answered"] += 1
        except BlockingIOError:
            outcome["still open"] += 1
        except OSError:
            outcome["closed by the server"] += 1
        s.close()
    raise HttpError(", ".join(f"{v} {k}" for k, v in sorted(outcome.items())))


def webhook_forged_without_certificate(t: Targets) -> None:
    code, _ = t.webhook.post(gpu_review(1, f"FORGED-{t.webhook.next()}"), with_certificate=False)
    raise HttpError(str(code))


def webhook_new_template_each_review(t: Targets) -> None:
    code, body = t.webhook.post(gpu_review(1, f"NEW-{t.webhook.next()}"), with_certificate=True)
    translated = "patch" in body.get("response", {})
    warned = " ".join(body.get("response", {}).get("warnings") or [])
    raise HttpError(f"{code} " + ("translated" if translated else "capped" if "the limit" in warned else warned[:60]))


def _review_outcome(t: Targets, review: dict[str, Any]) -> None:
    code, body = t.webhook.post(review, with_certificate=True)
    raise HttpError(f"{code} " + ("translated" if "patch" in body.get("response", {}) else "untranslated"))


def webhook_huge_exponent(t: Targets) -> None:
    _review_outcome(t, gpu_review("1e30000000"))  # kube-apiserver keeps this text (quantity.go's int64 fast path)


def webhook_sub_nano_containers(t: Targets) -> None:
    _review_outcome(t, gpu_review("1e-9", containers=100))  # what the API server makes of "1e-2000000"


def webhook_templates_deleted(t: Targets) -> None:
    """Delete every template of ours, then review an ordinary pod: the template it references must exist."""
    templates = t.api.resource_api().claim_templates
    for item in t.api.list(templates, NS)["items"]:
        try:
            t.api.delete(templates, item["metadata"]["name"], NS)
        except KubeError:
            pass  # the other hostile thread deleted it first
    code, body = t.webhook.post(gpu_review(1), with_certificate=True)
    names = {i["metadata"]["name"] for i in t.api.list(templates, NS)["items"]}
    used = {m.group(1) for m in re.finditer(r'"resourceClaimTemplateName":\s*"([^"]+)"',
                                            _patch_text(body.get("response", {})))}
    raise HttpError(f"{code} " + ("template exists" if used and used <= names else
                                  "template missing (recreated by the next review)" if used else "untranslated"))


def _patch_text(response: dict[str, Any]) -> str:
    import base64

    return base64.b64decode(response["patch"]).decode() if "patch" in response else ""


_SWAP_LOCK = threading.Lock()
_SWAPS = ["symlink to /dev/zero", "FIFO", "1 GiB sparse file", "200 KB nested JSON"]


def node_kubelet_checkpoint_swapped(t: Targets) -> None:
    """The kubelet's device-manager checkpoint replaced by something else for 1 s, then put back."""
    if not _SWAP_LOCK.acquire(blocking=False):
        raise HttpError("skipped (the other thread is swapping)")
    try:
        path = t.kubelet_root / "device-plugins" / "kubelet_internal_checkpoint"
        saved = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        kind = _SWAPS[0]
        _SWAPS.append(_SWAPS.pop(0))
        path.unlink(missing_ok=True)
        if kind.startswith("symlink"):
            path.symlink_to("/dev/zero")
        elif kind == "FIFO":
            os.mkfifo(path)
        elif kind.startswith("1 GiB"):
            path.touch()
            os.truncate(path, 1 << 30)
        else:
            path.write_text("[" * 100_000 + "]" * 100_000)
        time.sleep(1.0)
        path.unlink(missing_ok=True)
        if saved is not None:
            tmp = path.with_name(path.name + ".soak")
            tmp.write_bytes(saved)
            os.replace(tmp, path)
        raise HttpError(kind)
    finally:
        _SWAP_LOCK.release()


def node_hostile_split_annotation(t: Targets) -> None:
    """A 200 KB dra-devices annotation on the Node for 1 s (the daemon refuses it by name; the split stays)."""
    if not _SWAP_LOCK.acquire(blocking=False):
        raise HttpError("skipped (the other thread is swapping)")
    try:
        t.api.patch(NODES, NODE, {"metadata": {"annotations": {"dra-bridge.io/dra-devices": "gpu-" + "9" * 200_000}}})
        time.sleep(1.0)
        t.api.patch(NODES, NODE, {"metadata": {"annotations": {"dra-bridge.io/dra-devices": None}}})
        raise HttpError("set and removed")
    finally:
        _SWAP_LOCK.release()


HALF_SENT = [300]  # --half-sent

HOSTILE: dict[str, Callable[[Targets], None]] = {
    "dp GetPreferredAllocation 10,000 unknown IDs, size 5,000": dp_preferred_10k_unknown,
    "dp GetPreferredAllocation listing DRA-side GPUs": dp_preferred_dra_side_listed,
    "dp Allocate 10,000 duplicate IDs": dp_allocate_10k_duplicates,
    "dp Allocate one GPU in two containers": dp_allocate_one_gpu_two_containers,
    "dp Allocate a 200,000-character ID": dp_allocate_huge_id,
    "dp Allocate a DRA-side GPU": dp_allocate_dra_side,
    "dp 10 ListAndWatch streams at once": dp_listandwatch_flood,
    "dra 10 health streams at once": dra_health_stream_flood,
    "dra NodePrepareResources of a missing claim": dra_prepare_missing_claim,
    "dra one prepare: empty namespace, wrong name, missing claim": dra_prepare_bad_claims_in_one_call,
    "raw garbage bytes on all three sockets": raw_garbage,
    "GET /healthz: --half-sent half-sent requests held 2 s": healthz_half_sent,
    "webhook: forged review without the client certificate": webhook_forged_without_certificate,
    "webhook: review needing a new template every time": webhook_new_template_each_review,
    "webhook: a GPU count of 1e30000000": webhook_huge_exponent,
    "webhook: 100 containers of 1e-9 GPUs": webhook_sub_nano_containers,
    "webhook: every template of ours deleted, then a review": webhook_templates_deleted,
    "node: kubelet checkpoint replaced for 1 s": node_kubelet_checkpoint_swapped,
    "node: a 200 KB dra-devices annotation for 1 s": node_hostile_split_annotation,
}


# ---- running -----------------------------------------------------------------------------------------------------

@dataclass
class Record:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter[str] = field(default_factory=Counter)
    hostile: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    lock: threading.Lock = field(default_factory=threading.Lock)


def run_phase(t: Targets, seconds: float, normal_threads: int, hostile_threads: int) -> Record:
    rec = Record()
    stop = threading.Event()

    def normal(worker: int) -> None:
        calls = normal_calls(t, worker)
        i = 0
        while not stop.is_set():
            name, call = calls[i % len(calls)]
            i += 1
            start = time.perf_counter()
            try:
                call()
            except Exception as err:  # noqa: BLE001 - counted, reported
                with rec.lock:
                    rec.errors[f"{name}: {type(err).__name__}: {str(err)[:120]}"] += 1
                continue
            with rec.lock:
                rec.latencies[name].append(time.perf_counter() - start)

    def hostile(worker: int) -> None:
        cases = list(HOSTILE.items())
        i = worker
        while not stop.is_set():
            name, case = cases[i % len(cases)]
            i += 1
            try:
                case(t)
                outcome = "OK"
            except grpc.RpcError as err:
                outcome = err.code().name if isinstance(err, grpc.Call) else "RpcError"
            except HttpError as err:
                outcome = str(err)
            except Exception as err:  # noqa: BLE001 - counted, reported
                outcome = f"{type(err).__name__}: {str(err)[:80]}"
            with rec.lock:
                rec.hostile[name][outcome] += 1

    threads = [threading.Thread(target=normal, args=(i,), daemon=True) for i in range(normal_threads)]
    threads += [threading.Thread(target=hostile, args=(i,), daemon=True) for i in range(hostile_threads)]
    for th in threads:
        th.start()
    stop.wait(seconds)
    stop.set()
    for th in threads:
        th.join(60)
    return rec


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))] if s else float("nan")


def proc_usage(pid: int) -> tuple[float, int, int]:
    """(RSS in MiB, open fds, threads) of a process, from /proc."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]) / 1024, len(os.listdir(f"/proc/{pid}/fd")), int(status["Threads"])


def make_claim(api: KubeAPI, name: str, device: str) -> dict[str, Any]:
    claims = api.resource_api().claims
    claim = api.create(claims, {
        "apiVersion": f"resource.k8s.io/{api.resource_api().version}", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
    }, NS)
    claim["status"] = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}
    return api.update(claims, claim, NS, subresource="status")


def wait(cond: Callable[[], object], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"soak: timed out waiting for {what}")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def report(title: str, rec: Record) -> dict[str, float]:
    print(f"\n== {title}")
    p99s: dict[str, float] = {}
    every: list[float] = []
    for name, lat in sorted(rec.latencies.items()):
        every += lat
        p99s[name] = pct(lat, 99)
        print(f"  {name:28s} n={len(lat):6d}  p50 {pct(lat, 50) * 1000:8.2f} ms  p99 {p99s[name] * 1000:8.2f} ms  "
              f"max {max(lat) * 1000:8.2f} ms")
    p99s["all"] = pct(every, 99)
    print(f"  {'all normal calls':28s} n={len(every):6d}  p50 {pct(every, 50) * 1000:8.2f} ms  "
          f"p99 {p99s['all'] * 1000:8.2f} ms")
    print(f"  errors among normal calls: {sum(rec.errors.values())}")
    for err, n in rec.errors.most_common(10):
        print(f"    {n:5d} x {err}")
    for name, outcomes in rec.hostile.items():
        print(f"  hostile: {name:58s} " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    return p99s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each phase (default 30)")
    ap.add_argument("--normal-threads", type=int, default=2)
    ap.add_argument("--hostile-threads", type=int, default=2)
    ap.add_argument("--half-sent", type=int, default=300, help="connections of the half-sent /healthz case")
    args = ap.parse_args()
    HALF_SENT[0] = args.half_sent

    tmp = Path(tempfile.mkdtemp(prefix="soak-", dir="/tmp"))
    root = tmp / "kl"
    gpus = devices_from_spec("8xH100-80GB", NODE)
    srv = ApiServer().start()
    kubeconfig = srv.write_kubeconfig(tmp / "kc")
    api = connect(kubeconfig)
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": NS, "labels": {"dra-bridge.io/mode": "dra"}}})
    # the webhook's own namespace: its dry-run check (does the API server keep pod claims?) runs there, and until
    # it answers nothing is translated
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dra-bridge"}})
    kubelet = KubeletSimulator(root, kube=api, node_name=NODE).start()
    port = free_port()
    (tmp / "clients").mkdir()
    apiserver_ca = Pki(tmp / "clients")
    webhook = Webhook(free_port(), tmp / "wh" / "ca.crt", apiserver_ca.issue_client("kube-apiserver-webhook-client"))
    hook = subprocess.Popen(
        [sys.executable, "-m", "bridge", "webhook", "--kubeconfig", str(kubeconfig), "--port", str(webhook.port),
         "--self-signed", str(tmp / "wh"), "--client-ca-file", str(apiserver_ca.ca_file),
         "--max-templates-per-namespace", "20", "--namespace", "dra-bridge", "--log-level", "warning"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp / "webhook.log", "w"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "node", "--node-name", NODE, "--devices", "simulated:8xH100-80GB",
         "--kubelet-root", str(root),
         "--device-plugin-dir", str(root / "device-plugins"), "--state-dir", str(tmp / "st"), "--cdi-root", str(tmp / "cdi"),
         "--kubeconfig", str(kubeconfig), "--dra", "on", "--dra-devices", "2", "--split-grace", "0.3",
         "--http-address", f"127.0.0.1:{port}", "--log-level", "warning"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp / "node.log", "w"))
    channels: list[grpc.Channel] = []
    try:
        sockets = {"device plugin": str(root / "device-plugins" / "dra-bridge-nvidia.com-gpu.sock"),
                   "dra": str(root / "plugins" / DRIVER / "dra.sock"),
                   "registration": str(root / "plugins_registry" / f"{DRIVER}-reg.sock")}
        wait(lambda: proc.poll() is not None or all(Path(p).is_socket() for p in sockets.values()), "the sockets")
        if proc.poll() is not None:
            raise SystemExit(f"bridge node exited: see {tmp / 'node.log'}")
        wait(lambda: kubelet.devices.resource(RESOURCE).allocatable == 6, "6 legacy GPUs allocatable at the kubelet")

        def webhook_up() -> bool:
            if hook.poll() is not None:
                raise SystemExit(f"bridge webhook exited: see {tmp / 'webhook.log'}")
            try:
                code, body = webhook.post(gpu_review(1), with_certificate=True)
            except OSError:
                return False
            return code == 200 and "patch" in body.get("response", {})

        wait(webhook_up, f"the webhook to translate (see {tmp / 'webhook.log'})")
        stubs = {}
        for key, path in sockets.items():
            ch = grpc.insecure_channel("unix://" + path)
            channels.append(ch)
            stubs[key] = ch
        claims = []
        for i, g in enumerate(gpus[6:]):
            c = make_claim(api, f"soak-claim-{i}", f"gpu-{g.index}")
            claims.append(dra_pb.Claim(namespace=NS, name=c["metadata"]["name"], uid=c["metadata"]["uid"]))
        t = Targets(dp=dp_grpc.DevicePluginStub(stubs["device plugin"]), dra=dra_grpc.DRAPluginStub(stubs["dra"]),
                    health=health_grpc.DRAResourceHealthStub(stubs["dra"]),
                    reg=reg_grpc.RegistrationStub(stubs["registration"]), sockets=sockets,
                    legacy=[g.uuid for g in gpus[:6]], dra_side=[g.uuid for g in gpus[6:]], claims=claims,
                    healthz=f"http://127.0.0.1:{port}/healthz", webhook=webhook, api=api, kubelet_root=root)

        print(f"soak: bridge node pid {proc.pid}, {args.seconds:g} s per phase, {args.normal_threads} normal and "
              f"{args.hostile_threads} hostile threads, {len(HOSTILE)} hostile cases")
        run_phase(t, min(3.0, args.seconds), args.normal_threads, 0)  # warm-up: pools, caches, first CDI writes
        procs = {"bridge node": proc.pid, "bridge webhook": hook.pid}
        usage: dict[str, dict[str, tuple[float, int, int]]] = {k: {} for k in procs}

        def sample(label: str) -> None:
            for name, pid in procs.items():
                usage[name][label] = proc_usage(pid)

        sample("after warm-up")
        quiet = report("quiet (normal calls only: the baseline)", run_phase(t, args.seconds, args.normal_threads, 0))
        sample("after quiet phase")
        hostile = report("hostile (normal calls + hostile cases)",
                         run_phase(t, args.seconds, args.normal_threads, args.hostile_threads))
        sample("after hostile phase")
        time.sleep(12)  # past the health endpoint's 10 s connection deadline; cancelled streams end
        sample("settled 12 s later")
        print("\n== p99 of normal calls, hostile / quiet")
        for name in sorted(quiet):
            if name in hostile:
                print(f"  {name:28s} {hostile[name] * 1000:8.2f} / {quiet[name] * 1000:8.2f} ms = "
                      f"{hostile[name] / quiet[name]:5.2f}x")
        for name, samples in usage.items():
            print(f"\n== {name} process")
            for label, (rss, fds, threads) in samples.items():
                print(f"  {label:22s} RSS {rss:7.1f} MiB   open fds {fds:4d}   threads {threads:4d}")
            before, settled = samples["after quiet phase"], samples["settled 12 s later"]
            print(f"  hostile phase: RSS {settled[0] - before[0]:+.1f} MiB, fds {settled[1] - before[1]:+d}, threads "
                  f"{settled[2] - before[2]:+d} (settled vs before)")
        templates = api.list(api.resource_api().claim_templates, NS)["items"]
        print(f"\n== ResourceClaimTemplates in {NS}: {len(templates)} (cap 20)")
        hook.send_signal(signal.SIGTERM)
        hook.wait(60)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        print(f"  SIGTERM -> exit {rc} in {time.monotonic() - t0:.2f} s; sockets left: "
              f"{[p for p in sockets.values() if Path(p).exists()]}")
    finally:
        for ch in channels:
            ch.close()
        for child in (proc, hook):
            if child.poll() is None:
                child.kill()
                child.wait(30)
        kubelet.stop()
        api.close()
        srv.stop()


if __name__ == "__main__":
    main()
