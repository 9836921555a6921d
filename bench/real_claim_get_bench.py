"""The claim GET of every NodePrepareResources, against a real kube-apiserver: our client vs a bare HTTPS request.

    .venv/bin/python bench/real_claim_get_bench.py [--gets 2000] [--rounds 5] [--profile]

Only etcd and kube-apiserver v1.37.2 run (no controller manager, no scheduler): nothing else talks to the server.
Issue 25 item 3b: a prepare's read phase (about 3 ms of its 6.5-7 ms on the 2-core machine) is one GET of the
claim. This splits that GET three ways, each a mean per GET over the same interleaved calls:
  server   kube-apiserver's own `apiserver_request_duration_seconds` for GET resourceclaims (`_sum`/`_count`
           difference across the run: from its handler chain's entry to the response written; authn, authz, the
           quorum read from etcd and the encoding are in it)
  bare     `http.client` on one kept-alive TLS connection with the same token: the floor any client pays
  ours     `RestKube.get` (`bridge.kube.connect` on a token kubeconfig, as the node daemon reads claims)
and prints p50/p99 of bare and ours, ours - bare (our client's own cost per GET), and the machine's load.

Credentials as the daemon's: a ServiceAccount token from the TokenRequest API, bound to a ClusterRole that may get
ResourceClaims (the chart's node role does that and more). The claim is allocated like one the scheduler wrote
(one device result, a node selector, one `reservedFor` entry), so the body has the size a prepare reads.
`--profile` adds a cProfile of our GETs (the 15 costliest functions by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import json
import pstats
import ssl
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.realbench import AdminHttps, api_server_alone, hist_sum, load, parse_metrics, pct  # noqa: E402
from bridge.kube import connect  # noqa: E402
from bridge.kube.api import NAMESPACES, Resource  # noqa: E402
from bridge.kube.client import RestKube  # noqa: E402
from tests.dra.cluster import gpu, make_claim  # noqa: E402

NS = "bench"
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                                 False)


class BareHttps:
    """One kept-alive TLS connection with a bearer token: what every client pays, nothing more."""

    def __init__(self, port: int, ca: Path, token: str) -> None:
        ctx = ssl.create_default_context(cafile=str(ca))
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    def get(self, path: str) -> bytes:
        self.conn.request("GET", path, headers=self.headers)
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {resp.status}: {data[:200]!r}")
        return data


def reader_token(admin: RestKube) -> str:
    """A ServiceAccount that may get ResourceClaims, and a token for it (TokenRequest, one hour)."""
    admin.create(NAMESPACES, {"metadata": {"name": NS}})
    admin.create(SERVICE_ACCOUNTS, {"metadata": {"name": "reader", "namespace": NS}}, NS)
    admin.create(CLUSTER_ROLES, {"metadata": {"name": "bench-claim-reader"}, "rules": [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]}]})
    admin.create(CLUSTER_ROLE_BINDINGS, {
        "metadata": {"name": "bench-claim-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-claim-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}]})
    req = admin.create(SERVICE_ACCOUNTS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                          "metadata": {"name": "reader", "namespace": NS},
                                          "spec": {"expirationSeconds": 3600}}, NS, subresource="token")
    return str(req["status"]["token"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gets", type=int, default=2000, help="GETs per client per round (default 2000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; medians are printed (default 5)")
    ap.add_argument("--profile", action="store_true", help="cProfile our client's GETs after the rounds")
    args = ap.parse_args()

    print(f"load average before: {load()}", flush=True)
    with api_server_alone("bench-claim-get-") as plane:
        admin = connect(plane.admin_kubeconfig)
        token = reader_token(admin)
        pod = {"metadata": {"name": "pod-0", "uid": "00000000-0000-4000-8000-000000000000"}}
        claim = make_claim(admin, NS, "claim-0", pod, [gpu("gpu-0")])
        claims = admin.resource_api().claims
        path = claims.path(NS, "claim-0")
        ours = connect(plane.kubeconfig_with_token("reader", token, NS))
        assert plane.ca is not None
        bare = BareHttps(plane.port, plane.ca.pair.cert, token)
        assert json.loads(bare.get(path))["metadata"]["uid"] == claim["metadata"]["uid"]
        assert ours.get(claims, "claim-0", NS)["metadata"]["uid"] == claim["metadata"]["uid"]
        admin_https = AdminHttps(plane)  # /metrics as the admin (the reader may not read it)

        def server_time() -> tuple[float, float]:
            """(`_sum`, `_count`) of the API server's own GET resourceclaims histogram."""
            return hist_sum(parse_metrics(admin_https.get("/metrics")), "apiserver_request_duration_seconds",
                            verb="GET", resource="resourceclaims")

        def get_bare() -> object:
            return bare.get(path)

        def get_ours() -> object:
            return ours.get(claims, "claim-0", NS)

        size = len(bare.get(path))
        print(f"claim body {size} bytes; {args.gets} GETs per client per round, interleaved", flush=True)
        rows: dict[str, list[float]] = {k: [] for k in ("server", "bare p50", "bare p99", "ours p50", "ours p99",
                                                        "ours-bare p50", "ours mean", "bare mean")}
        for rnd in range(1, args.rounds + 1):
            times: dict[Callable[[], object], list[float]] = {get_bare: [], get_ours: []}
            s0, c0 = server_time()
            for i in range(args.gets):
                for get in (get_bare, get_ours) if i % 2 else (get_ours, get_bare):  # each goes first half the time
                    t = time.perf_counter()
                    get()
                    times[get].append(time.perf_counter() - t)
            s1, c1 = server_time()
            t_bare, t_ours = times[get_bare], times[get_ours]
            server = (s1 - s0) / max(1.0, c1 - c0)
            ms = 1000.0
            vals = {"server": server * ms,
                    "bare p50": pct(t_bare, 50) * ms, "bare p99": pct(t_bare, 99) * ms,
                    "ours p50": pct(t_ours, 50) * ms, "ours p99": pct(t_ours, 99) * ms,
                    "ours-bare p50": (pct(t_ours, 50) - pct(t_bare, 50)) * ms,
                    "ours mean": statistics.fmean(t_ours) * ms, "bare mean": statistics.fmean(t_bare) * ms}
            for k, v in vals.items():
                rows[k].append(v)
            print(f"round {rnd}: " + ", ".join(f"{k} {v:.3f}" for k, v in vals.items()) + " ms", flush=True)
        print("\nmedians over the rounds (ms per GET):")
        med = {name: statistics.median(series) for name, series in rows.items()}
        for name, value in med.items():
            print(f"  {name:<14} {value:7.3f}")
        print(f"  ours/bare p50  {med['ours p50'] / med['bare p50']:7.2f}x")
        print(f"  server share of bare mean {med['server'] / med['bare mean']:.0%}")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.gets):
                get_ours()
            prof.disable()
            print(f"\ncProfile of {args.gets} GETs through RestKube (own time):")
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
