"""Request throughput of the API emulator vs a bare `http.server` endpoint, same process, same HTTP stack.

    .venv/bin/python bench/apiserver_bench.py [--seconds 2] [--pods 1000]

One keep-alive `http.client` connection, sequential requests (the emulator's per-request cost, not concurrency):
  baseline  GET of a fixed JSON body (the size of one pod) from a bare BaseHTTPRequestHandler on a
            ThreadingHTTPServer with HTTP/1.1 and TCP_NODELAY (what the emulator is built on)
  GET       one pod
  LIST      all pods in a namespace holding --pods pods (one response with all of them)
  CREATE    a new pod per request (schema + metadata validation on, as in tests)
Printed: requests/s, and each emulator number as a ratio of the baseline.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.sandbox.apiserver import ApiServer  # noqa: E402


def pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "labels": {"app": "bench", "tier": "gpu"}},
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.0-base",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


def measure(seconds: float, call: Callable[[int], None]) -> float:
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        call(n)
        n += 1
    return n / (time.perf_counter() - start)


def request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None) -> bytes:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    if resp.status >= 300:
        raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {data[:200]!r}")
    return data


def baseline_server(body: bytes) -> ThreadingHTTPServer:
    class Fixed(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            super().setup()

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Fixed)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each measurement")
    parser.add_argument("--pods", type=int, default=1000, help="pods in the namespace for LIST")
    args = parser.parse_args()

    with ApiServer(history_limit=10_000) as srv:
        srv.load_objects([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}])
        conn = http.client.HTTPConnection("127.0.0.1", srv.port)
        for i in range(args.pods):
            request(conn, "POST", "/api/v1/namespaces/bench/pods", json.dumps(pod(f"pod-{i:05d}")).encode())
        one = request(conn, "GET", "/api/v1/namespaces/bench/pods/pod-00000")

        httpd = baseline_server(one)
        base_conn = http.client.HTTPConnection("127.0.0.1", httpd.server_address[1])
        baseline = measure(args.seconds, lambda n: request(base_conn, "GET", "/"))
        get = measure(args.seconds, lambda n: request(conn, "GET", "/api/v1/namespaces/bench/pods/pod-00000"))
        list_bytes = len(request(conn, "GET", "/api/v1/namespaces/bench/pods"))
        lst = measure(args.seconds, lambda n: request(conn, "GET", "/api/v1/namespaces/bench/pods"))
        create = measure(
            args.seconds,
            lambda n: request(conn, "POST", "/api/v1/namespaces/bench/pods", json.dumps(pod(f"new-{n:07d}")).encode()),
        )
        base_conn.close()
        conn.close()
        httpd.shutdown()
        httpd.server_close()

    print(f"python {sys.version.split()[0]}, one keep-alive connection, {args.seconds:.1f} s per measurement")
    print(f"{'request':<34}{'req/s':>10}{'vs baseline':>14}")
    print(f"{'baseline: fixed JSON (' + str(len(one)) + ' B)':<34}{baseline:>10.0f}{1.0:>14.3f}")
    print(f"{'GET one pod':<34}{get:>10.0f}{get / baseline:>14.3f}")
    print(f"{'LIST ' + str(args.pods) + ' pods (' + str(list_bytes // 1024) + ' KiB)':<34}{lst:>10.1f}{lst / baseline:>14.4f}")
    print(f"{'CREATE pod (validated)':<34}{create:>10.0f}{create / baseline:>14.3f}")


if __name__ == "__main__":
    main()
