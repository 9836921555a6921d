"""The cheapest mutating webhook on our HTTPS shell: the floor a pod CREATE pays for calling any webhook.

    .venv/bin/python bench/echo_webhook.py DIR      (prints "port <n>" once it serves, then serves until killed)

`bench/real_webhook_create_bench.py` registers it for a third namespace beside `bridge webhook`'s, with the same
entry (`webhook_entry`: rules, matchConditions, objectSelector, fail open, 5 s, reinvocation) but its own
namespaceSelector, URL and CA. It runs the server `bridge webhook` runs (`WebhookServer`: the same event loop,
TLS and HTTP shell, the handler inline on the loop) and answers every AdmissionReview `allowed` with no patch, after
parsing it as any webhook must (its `request.uid` goes back in the answer). So `echo - plain` in that bench is what
the API server's webhook dispatch, the TLS round trip and an empty review cost a create on this machine, and
`dra - echo` is what our review and its patch add on top. The certificate (ECDSA P-256, for 127.0.0.1) is made in
DIR by `bridge.webhook.selfsigned`, as `bridge webhook --self-signed` makes its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.webhook.selfsigned import ensure_self_signed  # noqa: E402
from bridge.webhook.server import WebhookServer  # noqa: E402
from bridge.webhook.tls import ReloadingContext  # noqa: E402


def allow(body: bytes) -> tuple[int, bytes]:
    """AdmissionReview in, `allowed` with the request's uid out; a body that is not a review is a 400."""
    try:
        uid = json.loads(body)["request"]["uid"]
    except (ValueError, KeyError, TypeError) as err:
        return 400, json.dumps({"message": f"not an AdmissionReview: {err}"}).encode()
    return 200, json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                            "response": {"uid": uid, "allowed": True}}).encode()


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tls = ensure_self_signed(Path(sys.argv[1]), ["127.0.0.1"])
    server = WebhookServer({"/mutate": allow}, ReloadingContext(str(tls.cert_file), str(tls.key_file)),
                           host="127.0.0.1", port=0, inline=["/mutate"])
    print(f"port {server.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
