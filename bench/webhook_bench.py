"""Webhook throughput and latency over TLS, against a bare echo endpoint on the same server in the same run.

    .venv/bin/python bench/webhook_bench.py [--seconds 3] [--concurrency 1,16,64] [--asyncio-echo]

The server runs in its own process (as in production); load comes from client processes with one keep-alive TLS
connection per simulated API-server connection (concurrency = connections). For each concurrency it measures
`/mutate` (a realistic Deployment pod with 2 GPUs and a GFD nodeSelector in a `dra` namespace: full review,
translation, CEL, JSONPatch) and `/echo` (the request body written back, no parsing) and prints reviews/s, p50,
p99 and the ratio mutate/echo. `--asyncio-echo` also measures the same echo on an asyncio-streams TLS server, the
alternative server stack. Targets (issue 5): p99 < 10 ms at concurrency 16 on 2 cores; mutate >= 60% of echo.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing as mp
import os
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.webhook.app import Admitter  # noqa: E402
from bridge.webhook.facts import ClusterFacts  # noqa: E402
from bridge.webhook.metrics import WebhookMetrics  # noqa: E402
from bridge.webhook.policy import PolicyConfig  # noqa: E402
from bridge.webhook.review import ReviewConfig  # noqa: E402
from bridge.webhook.server import WebhookServer  # noqa: E402
from bridge.webhook.tls import ReloadingContext, server_context  # noqa: E402
from tests.webhook.pki import Pki  # noqa: E402
from tests.webhook.pods import admission_review, container, deployment_pod  # noqa: E402


def serve_threaded(cert: str, key: str, ready: mp.Queue) -> None:  # type: ignore[type-arg]
    import logging

    logging.disable(logging.INFO)  # one INFO line per review would measure the log handler
    metrics = WebhookMetrics()
    admitter = Admitter(ReviewConfig(PolicyConfig(), ClusterFacts("v1", 1, 35), "claims"),
                        lambda ns: {"dra-bridge.io/mode": "dra"}, None, None, metrics)
    srv = WebhookServer({"/mutate": admitter.handle, "/echo": lambda body: (200, body)},
                        ReloadingContext(cert, key), host="127.0.0.1", port=0, metrics=metrics)
    ready.put(srv.port)
    srv.serve_forever()


def serve_asyncio(cert: str, key: str, ready: mp.Queue) -> None:  # type: ignore[type-arg]
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context(cert, key))
        ready.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


def client(port: int, ca: str, path: str, body: bytes, threads: int, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    ctx = ssl.create_default_context(cafile=ca)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    start_at = time.monotonic() + 0.5  # all connections made before the clock starts
    stop_at = start_at + seconds

    def run(i: int) -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
        conn.connect()
        conn.sock.setsockopt(6, 1, 1)  # TCP_NODELAY
        while time.monotonic() < start_at:
            time.sleep(0.001)
        mine = latencies[i]
        while True:
            t0 = time.perf_counter()
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            t1 = time.perf_counter()
            if resp.status != 200:
                raise SystemExit(f"{path}: HTTP {resp.status}")
            if time.monotonic() > stop_at:
                break
            mine.append(t1 - t0)
        conn.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put([x for lst in latencies for x in lst])


def measure(port: int, ca: str, path: str, body: bytes, concurrency: int, seconds: float) -> tuple[float, float, float]:
    procs_n = 1 if concurrency == 1 else 2
    per = [concurrency // procs_n + (1 if i < concurrency % procs_n else 0) for i in range(procs_n)]
    q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    procs = [mp.Process(target=client, args=(port, ca, path, body, n, seconds, q)) for n in per]
    for p in procs:
        p.start()
    lat = sorted(x for _ in procs for x in q.get(timeout=seconds + 120))
    for p in procs:
        p.join()
    rate = len(lat) / seconds
    return rate, lat[len(lat) // 2] * 1000, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--asyncio-echo", action="store_true")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    body = json.dumps(admission_review(deployment_pod(container("trainer", 2), container("sidecar"),
                                                      node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
                                       "team-a")).encode()
    with tempfile.TemporaryDirectory() as d:
        pki = Pki(Path(d))
        pki.issue()
        servers = [("threaded", serve_threaded)] + ([("asyncio", serve_asyncio)] if args.asyncio_echo else [])
        ports: dict[str, int] = {}
        procs = []
        for name, fn in servers:
            q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
            p = mp.Process(target=fn, args=(str(pki.cert_file), str(pki.key_file), q), daemon=True)
            p.start()
            procs.append(p)
            ports[name] = q.get(timeout=30)
        print(f"cpus={os.cpu_count()} body={len(body)}B seconds={args.seconds} python={sys.version.split()[0]}")
        print(f"{'conc':>4} {'endpoint':<16} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
        try:
            for c in levels:
                m = measure(ports["threaded"], str(pki.ca_file), "/mutate", body, c, args.seconds)
                e = measure(ports["threaded"], str(pki.ca_file), "/echo", body, c, args.seconds)
                print(f"{c:>4} {'mutate':<16} {m[0]:>8.0f} {m[1]:>8.2f} {m[2]:>8.2f}")
                print(f"{c:>4} {'echo (threaded)':<16} {e[0]:>8.0f} {e[1]:>8.2f} {e[2]:>8.2f}")
                if "asyncio" in ports:
                    a = measure(ports["asyncio"], str(pki.ca_file), "/", body, c, args.seconds)
                    print(f"{c:>4} {'echo (asyncio)':<16} {a[0]:>8.0f} {a[1]:>8.2f} {a[2]:>8.2f}")
                print(f"{c:>4} ratio mutate/echo = {m[0] / e[0]:.2f}")
        finally:
            for p in procs:
                p.terminate()


if __name__ == "__main__":
    main()
