"""Instructions per request of the webhook's review path and of its echo path, counted by callgrind in one process.

    .venv/bin/python bench/webhook_review_cost.py [--requests 192] [--concurrency 16] [--keep DIR]

Why: `bench/webhook_bench.py` measures throughput, which a shared machine moves by tens of percent from run to run.
An instruction count does not move: this script runs the same server as that bench (its `wire`: the API emulator's
namespace `team-a` in dra mode, the informer-fed namespace cache, the live facts with a whole-GPU and a MIG node,
the template ensurer, `/mutate` as `Admitter.handle_inline` and `/echo` on one `WebhookServer`) inside
`valgrind --tool=callgrind`, and counts the instructions of each phase (callgrind dumps its counters each time the
process calls `os.getppid`, the phase marker; nothing else on these paths calls it).

Phases, each `--requests` requests after a warm-up (the template created, the TLS connections open):

* handler `review, new pod`: `Admitter.handle_inline(body)` called directly, every body a new pod (its own
  generateName and uid) - the review path alone, what a stream of unrelated pods costs beyond the server;
* handler `review, memo hit`: the same pod each time (the replicas of one Deployment), only the uid differs;
* server `echo`, `mutate-new`, `mutate`: the same requests over TLS from a client process outside valgrind,
  `--concurrency` keep-alive connections sending in lockstep (each round one request per connection, then every
  answer read), so the server sees several requests per loop wake-up as under wrk's closed loop.

The counts include everything the server process runs in those phases (all threads: the event loop, TLS, the
informers' idle wake-ups). In a closed loop at saturation throughput is about inversely proportional to the server
CPU per request, so `echo / mutate-new` instructions predicts the throughput ratio of webhook_bench's
`mutate-new/echo` (time per instruction differs somewhat between TLS/JSON C code and Python bytecode, so the
prediction is approximate; the counts themselves repeat within about 1%). Target (issue 11): mutate-new >= 0.5 of
echo at concurrency 16. `--keep DIR` keeps the callgrind files, one per phase (`callgrind_annotate` reads them).
Needs valgrind (Debian package `valgrind`); takes a minute or two.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from callgrind import MARKER, totals  # noqa: E402
from webhook_bench import request_body, request_template, start_cluster  # noqa: E402

from tests.webhook.pki import Pki  # noqa: E402

PHASES = (("handler", "review, new pod"), ("handler", "review, memo hit"),
          ("server", "echo"), ("server", "mutate-new"), ("server", "mutate"))


# --- inside valgrind: the server and the handler phases -------------------------------------------------------

def inner(args: argparse.Namespace) -> None:
    from webhook_bench import quiet_logging, wire

    quiet_logging("off")
    srv, admitter = wire(args.cert, args.key, args.kubeconfig, check_interval=86400.0)
    srv.start()
    template = request_template()
    n = args.requests

    def handle(body: bytes) -> None:
        reply = admitter.handle_inline(body)
        if callable(reply):  # a cache miss: the blocking remainder (only in the warm-up, which creates the template)
            reply = reply()
        assert isinstance(reply, tuple) and reply[0] == 200, reply

    handle(request_body(template, 0, True, "warm"))  # creates the template; afterwards every review is inline
    for i in range(1, 4):
        assert not callable(admitter.handle_inline(request_body(template, i, True, "warm")))
    print(srv.port, flush=True)
    bodies = {name: [request_body(template, i, vary, name) for i in range(n)]
              for name, vary in (("new", True), ("same", False))}
    for line in sys.stdin:
        command = line.split()
        if command[0] == "mark":
            os.getppid()
        elif command[0] == "handler":
            for body in bodies[command[1]]:
                handle(body)
            os.getppid()  # end of the phase: nothing else belongs in it
        elif command[0] == "quit":
            break
        print("ok", flush=True)
    srv.shutdown()


# --- outside: the cluster, the client, the counts --------------------------------------------------------------

class Client:
    """`concurrency` keep-alive TLS connections, driven in lockstep."""

    def __init__(self, port: int, ca: str, concurrency: int) -> None:
        ctx = ssl.create_default_context(cafile=ca)
        self.conns = []
        for _ in range(concurrency):
            sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conns.append((sock, sock.makefile("rb")))

    def round(self, path: str, bodies: list[bytes]) -> None:
        for (sock, _), body in zip(self.conns, bodies):
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        for _, reader in self.conns:
            status = reader.readline()
            length = 0
            while (header := reader.readline()) not in (b"\r\n", b""):
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":", 1)[1])
            reader.read(length)
            if status.split()[1:2] != [b"200"]:
                raise SystemExit(f"{path}: {status.decode().strip()}")

    def run(self, path: str, template: bytes, n: int, vary_pod: bool, run_id: str) -> None:
        c = len(self.conns)
        for start in range(0, n, c):
            self.round(path, [request_body(template, i, vary_pod, run_id) for i in range(start, min(n, start + c))])

    def close(self) -> None:
        for sock, reader in self.conns:
            reader.close()
            sock.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=192, help="requests per phase")
    ap.add_argument("--concurrency", type=int, default=16, help="client connections in the server phases")
    ap.add_argument("--keep", metavar="DIR", help="copy the callgrind files (one per phase) here")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cert", help=argparse.SUPPRESS)
    ap.add_argument("--key", help=argparse.SUPPRESS)
    ap.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args)
        return
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    n, c = args.requests, args.concurrency
    if n < 1 or c < 1:
        raise SystemExit("--requests and --concurrency must be at least 1")
    template = request_template()
    with tempfile.TemporaryDirectory() as d:
        pki = Pki(Path(d))
        pki.issue()
        apiserver, kubeconfig = start_cluster(Path(d))
        out = Path(d) / "cg"
        out.mkdir()
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", f"--dump-before={MARKER}",
               "--dump-instr=no", "--compress-strings=no", sys.executable, __file__, "--inner", "--requests", str(n),
               "--cert", str(pki.cert_file), "--key", str(pki.key_file), "--kubeconfig", str(kubeconfig)]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, bufsize=1)
        assert proc.stdin is not None and proc.stdout is not None

        def ask(command: str) -> None:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(command + "\n")
            proc.stdin.flush()
            if proc.stdout.readline().strip() != "ok":
                raise SystemExit(f"the server under valgrind did not answer {command!r} (exit {proc.poll()})")

        try:
            line = proc.stdout.readline()
            if not line.strip().isdigit():
                raise SystemExit(f"the server under valgrind did not start (exit {proc.wait()})")
            port = int(line)
            ask("mark")  # dump 1: start-up and warm-up
            ask("handler new")
            ask("handler same")
            client = Client(port, str(pki.ca_file), c)
            for path in ("/echo", "/mutate"):  # warm every connection
                client.round(path, [request_body(template, i, True, "warm-srv") for i in range(c)])
            for path, vary, run_id in (("/echo", False, "echo"), ("/mutate", True, "srv-new"), ("/mutate", False, "srv-same")):
                ask("mark")
                client.run(path, template, n, vary, run_id)
            ask("mark")
            client.close()
            proc.stdin.write("quit\n")
            proc.stdin.flush()
            proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
            apiserver.stop()
        counts = totals(out, proc.pid)
        # numbered dumps: 1 start-up, 2 new, 3 same, 4 the client's warm-up, 5 echo, 6 mutate-new, 7 mutate (the
        # rest, to the exit, is the unnumbered file)
        if len(counts) != 7:
            raise SystemExit(f"expected 7 callgrind dumps, found {len(counts)}: was {MARKER} renamed, or called "
                             "by something else?")
        per = dict(zip(PHASES, (counts[1] / n, counts[2] / n, counts[4] / n, counts[5] / n, counts[6] / n)))
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            for f in out.iterdir():
                shutil.copy(f, args.keep)
    print(f"python={sys.version.split()[0]} requests/phase={n} concurrency={c} (instructions per request)")
    for (where, name), value in per.items():
        print(f"{where:<8} {name:<18} {value:>12,.0f}")
    echo, new, same = per[("server", "echo")], per[("server", "mutate-new")], per[("server", "mutate")]
    print(f"predicted throughput ratio: mutate-new/echo = {echo / new:.2f}  mutate/echo = {echo / same:.2f}  "
          f"(target mutate-new >= 0.50)")


if __name__ == "__main__":
    main()
