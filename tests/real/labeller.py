"""A second mutating webhook for the reinvocation tests: TLS on loopback, it adds a label to every pod it is sent."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import threading
from pathlib import Path
from typing import Any

from bridge.kube.api import Obj
from bridge.sandbox.apiserver.tls import write_self_signed


class Labeller:
    """A second mutating webhook (TLS on loopback) that labels every pod it is sent: registered under a name that
    sorts after ours, so the API server calls it after ours, sees the object change and reinvokes ours."""

    def __init__(self, directory: Path) -> None:
        cert, key = write_self_signed(directory, "127.0.0.1")
        self.ca = cert.read_bytes()
        self.calls = 0
        labeller = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                labeller.calls += 1
                patch = [{"op": "add", "path": "/metadata/labels", "value": {"labelled-by": "zz"}}]
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                    "uid": review["request"]["uid"], "allowed": True, "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(patch).encode()).decode()}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def registration(self, namespace: str) -> Obj:
        return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "zz-labeller"}, "webhooks": [{
                    "name": "labels.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                    "failurePolicy": "Fail", "timeoutSeconds": 5,
                    "clientConfig": {"url": f"https://127.0.0.1:{self.server.server_address[1]}/",
                                     "caBundle": base64.b64encode(self.ca).decode()},
                    "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                               "resources": ["pods"]}],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}]}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
