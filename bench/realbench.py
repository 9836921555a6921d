"""What the benches on the real backend share: the admin's HTTPS client for the real kube-apiserver (raw paths such
as the node proxy to a kubelet's `/metrics`, or `/metrics` of the API server itself), Prometheus text parsed into
plain numbers, percentiles and the machine's load.

    raw = AdminHttps(cluster)                       # the plane's CA and admin client certificate (system:masters)
    text = raw.get("/api/v1/nodes/node-0/proxy/metrics")
    samples = parse_metrics(text)                   # {(name, (("label", "value"), ...)): value}
    hist_sum(samples, "kubelet_dra_operations_duration_seconds", operation_name="PrepareResources")

Per-event durations from a histogram whatever its buckets: the benches scrape before and after one event (one pod
start at a time) and take the difference of `_sum` and `_count`. The kubelet's DRA histograms start at a 100 ms
bucket (kubernetes `pkg/kubelet/metrics/metrics.go` `DRADurationBuckets = ExponentialBucketsRange(.1, 40, 15)`), so
their buckets alone cannot tell 3 ms from 90 ms; the `_sum` difference of one event is its exact duration.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import ssl
import statistics
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from bridge.sandbox.cluster import SandboxCluster
    from bridge.sandbox.real.plane import ControlPlane

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def build_go(source: Path, what: str) -> Path | None:
    """The Go program in `source` (its go.mod, go.sum when there is one, and *.go) built once per content under
    ~/.cache/dra-bridge/bench; None, saying so, without a Go toolchain (`what` names what is then left out)."""
    go = shutil.which("go")
    if go is None:
        print(f"no `go` on PATH: {what} is left out (scripts/build_real.py needs Go too)", flush=True)
        return None
    files = sorted(f for f in source.iterdir() if f.name in ("go.mod", "go.sum") or f.suffix == ".go")
    digest = hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in files)).hexdigest()
    out = Path.home() / ".cache" / "dra-bridge" / "bench" / f"{source.name}-{digest[:12]}"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
        subprocess.run([go, "build", "-trimpath", "-o", str(tmp), "."], cwd=source, check=True,
                       env=dict(os.environ, CGO_ENABLED="0", GOFLAGS="", GOTOOLCHAIN="local"))
        tmp.rename(out)
    return out


@contextlib.contextmanager
def api_server_alone(prefix: str) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver v1.37 only (no controller manager, no scheduler: nothing else talks to the server), in
    a temporary directory named `prefix`...; stopped and removed on exit."""
    from bridge.sandbox.real.binaries import Binaries
    from bridge.sandbox.real.plane import ControlPlane, PlaneOptions

    with tempfile.TemporaryDirectory(prefix=prefix) as work:
        plane = ControlPlane(Path(work), Binaries("1.37"), PlaneOptions(managers=False)).start()
        try:
            yield plane
        finally:
            plane.stop()


class AdminHttps:
    """One keep-alive HTTPS connection to the real API server as the admin (a new one after any failure)."""

    def __init__(self, where: SandboxCluster | ControlPlane) -> None:
        """`where`: a cluster on the real backend, or a control plane of its own (started)."""
        from bridge.sandbox.real.plane import ControlPlane

        plane = where if isinstance(where, ControlPlane) else where.plane
        if plane is None or plane.ca is None or plane.admin is None:
            raise RuntimeError("AdminHttps needs a started control plane (a cluster on the real backend)")
        self.host, self.port = "127.0.0.1", plane.port
        self.ctx = ssl.create_default_context(cafile=str(plane.ca.pair.cert))
        self.ctx.load_cert_chain(str(plane.admin.cert), str(plane.admin.key))
        self._conn: http.client.HTTPSConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)
            try:
                self._conn.request(method, path, body=body, headers=headers or {})
                resp = self._conn.getresponse()
                return resp.status, resp.read()
            except (OSError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def get(self, path: str) -> str:
        status, data = self.request("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status}: {data[:300]!r}")
        return data.decode()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def parse_metrics(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def total(samples: Samples, name: str, /, **labels: str) -> float:
    """The sum of every sample named `name` whose labels include `labels` (a label may be called `name` too)."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def hist_sum(samples: Samples, name: str, /, **labels: str) -> tuple[float, float]:
    """(`_sum`, `_count`) of a histogram, over the label sets that include `labels`."""
    return total(samples, f"{name}_sum", **labels), total(samples, f"{name}_count", **labels)


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank on the sorted values)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def summary(values: Sequence[float]) -> str:
    if not values:
        return "n=0"
    return (f"n={len(values):<4d} p50 {statistics.median(values) * 1000:8.1f} ms  p99 {pct(values, 99) * 1000:8.1f} "
            f"ms  max {max(values) * 1000:8.1f} ms  mean {statistics.fmean(values) * 1000:8.1f} ms")


def ratio(values: Sequence[float], base: Sequence[float], p: float) -> float:
    return pct(values, p) / pct(base, p) if base and values and pct(base, p) > 0 else float("nan")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of the processes (from /proc/<pid>/stat), 0 for those gone."""
    tick = os.sysconf("SC_CLK_TCK")
    out = 0.0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out += (int(fields[11]) + int(fields[12])) / tick
    return out
