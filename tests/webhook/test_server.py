"""The webhook over real HTTPS: AdmissionReview in, patch out; health; certificate rotation; hostile input."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from bridge.webhook.app import Admitter
from bridge.webhook.facts import ClusterFacts
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.policy import PolicyConfig
from bridge.webhook.review import ReviewConfig
from bridge.webhook.server import WebhookServer
from bridge.webhook.tls import ReloadingContext
from tests.polling import wait_until
from tests.webhook.conftest import decode_patch
from tests.webhook.pki import Pki
from tests.webhook.pods import admission_review, container, deployment_pod

LABELS = {"team-a": {"dra-bridge.io/mode": "dra"}, "team-b": {"dra-bridge.io/mode": "shadow"}}


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    p = Pki(tmp_path)
    p.issue()
    return p


@pytest.fixture
def server(pki: Pki) -> Iterator[WebhookServer]:
    metrics = WebhookMetrics()
    admitter = Admitter(ReviewConfig(PolicyConfig(), ClusterFacts("v1", 1, 35), "claims"), LABELS.get, None, None,
                        metrics, peek_labels=LABELS.get)
    # as production wires it: the review on the event loop (the labels here never miss)
    srv = WebhookServer({"/mutate": admitter.handle_inline}, ReloadingContext(str(pki.cert_file), str(pki.key_file)),
                        host="127.0.0.1", port=0, metrics=metrics, max_body=256 * 1024, io_timeout=2.0,
                        inline=["/mutate"])
    with srv:
        yield srv


def client_context(pki: Pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    return ctx


def request(pki: Pki, srv: WebhookServer, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=client_context(pki), timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def post_review(pki: Pki, srv: WebhookServer, review: dict[str, Any]) -> dict[str, Any]:
    status, body, _ = request(pki, srv, "POST", "/mutate", json.dumps(review).encode())
    assert status == 200, body
    return json.loads(body)


def test_mutate_returns_a_json_patch_for_a_gpu_pod_in_a_dra_namespace(pki: Pki, server: WebhookServer) -> None:
    review = admission_review(deployment_pod(container("main", 2)), "team-a")
    out = post_review(pki, server, review)
    assert out["kind"] == "AdmissionReview" and out["apiVersion"] == "admission.k8s.io/v1"
    assert out["response"]["uid"] == review["request"]["uid"] and out["response"]["allowed"] is True
    ops = decode_patch(out)
    assert {"op": "add", "path": "/spec/containers/0/resources/claims", "value": [{"name": "gpu-main"}]} in ops


def test_many_reviews_share_one_keep_alive_connection(pki: Pki, server: WebhookServer) -> None:
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=client_context(pki), timeout=10)
    try:
        for ns in ("team-a", "team-b", "other") * 5:
            body = json.dumps(admission_review(deployment_pod(container("main", 1)), ns)).encode()
            conn.request("POST", "/mutate", body=body)
            resp = conn.getresponse()
            assert resp.status == 200
            assert json.loads(resp.read())["response"]["allowed"] is True
    finally:
        conn.close()


def test_health_readiness_and_metrics(pki: Pki, server: WebhookServer) -> None:
    assert request(pki, server, "GET", "/healthz")[:2] == (200, b"ok\n")
    assert request(pki, server, "GET", "/readyz")[0] == 200
    post_review(pki, server, admission_review(deployment_pod(container("main", 1)), "team-a"))
    status, body, _ = request(pki, server, "GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert 'dra_bridge_webhook_reviews_total{mode="dra",outcome="translated",target="claims"} 1.0' in text
    assert "dra_bridge_webhook_review_duration_seconds_count 1.0" in text


def test_readyz_reports_why_it_is_not_ready(pki: Pki) -> None:
    srv = WebhookServer({}, ReloadingContext(str(pki.cert_file), str(pki.key_file)), host="127.0.0.1", port=0,
                        ready=lambda: (False, "namespace cache not synced"))
    with srv:
        status, body, _ = request(pki, srv, "GET", "/readyz")
    assert status == 503 and b"namespace cache not synced" in body


def peer_certificate(pki: Pki, srv: WebhookServer) -> x509.Certificate:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw:
        with client_context(pki).wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_rotated_certificate_is_served_to_new_connections_without_restart(pki: Pki, server: WebhookServer) -> None:
    before = peer_certificate(pki, server)
    keep_alive = http.client.HTTPSConnection("127.0.0.1", server.port, context=client_context(pki), timeout=10)
    keep_alive.request("GET", "/healthz")
    assert keep_alive.getresponse().read() == b"ok\n"
    rotated = pki.issue(cn="dra-bridge-webhook-rotated")
    deadline = time.monotonic() + 20
    while peer_certificate(pki, server).serial_number != rotated.serial_number:
        assert time.monotonic() < deadline, "rotated certificate never served"
        time.sleep(0.05)
    assert before.serial_number != rotated.serial_number
    # the connection opened before the rotation keeps working
    keep_alive.request("GET", "/healthz")
    assert keep_alive.getresponse().read() == b"ok\n"
    keep_alive.close()


def test_half_written_rotation_keeps_serving_the_old_certificate(pki: Pki, server: WebhookServer) -> None:
    serial = peer_certificate(pki, server).serial_number
    pki.key_file.write_text("-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n")
    assert peer_certificate(pki, server).serial_number == serial
    assert request(pki, server, "GET", "/healthz")[0] == 200
    rotated = pki.issue()
    deadline = time.monotonic() + 20
    while peer_certificate(pki, server).serial_number != rotated.serial_number:
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_tls_below_1_2_is_refused(pki: Pki, server: WebhookServer) -> None:
    ctx = client_context(pki)
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    try:
        ctx.set_ciphers("ALL:@SECLEVEL=0")
    except ssl.SSLError:
        pass
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                tls.recv(100)


def test_oversized_body_is_refused_with_413_before_it_is_read(pki: Pki, server: WebhookServer) -> None:
    status, body, headers = request(pki, server, "POST", "/mutate", b"x" * (300 * 1024))
    assert status == 413
    assert b"exceeds the 262144-byte limit" in body
    assert headers.get("Connection") == "close"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x00\xffnot json", b"not JSON"),
        (b"[1, 2, 3]", b"JSON object"),
        (b'{"kind": "Pod", "apiVersion": "v1"}', b"expected kind AdmissionReview"),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}', b"no request"),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}', b"no uid"),
    ],
)
def test_garbage_gets_400_with_a_message(pki: Pki, server: WebhookServer, body: bytes, message: bytes) -> None:
    status, out, _ = request(pki, server, "POST", "/mutate", body)
    assert status == 400
    doc = json.loads(out)
    assert doc["code"] == 400 and message.decode() in doc["message"]


def test_malformed_pod_is_admitted_untranslated_with_a_warning(pki: Pki, server: WebhookServer) -> None:
    review = admission_review(deployment_pod(container("main", 1)), "team-a")
    review["request"]["object"]["spec"]["containers"] = {"not": "a list"}
    out = post_review(pki, server, review)
    assert out["response"]["allowed"] is True and "patch" not in out["response"]
    assert "containers is not a list" in out["response"]["warnings"][0]


def test_unknown_paths_methods_and_missing_length_get_clear_errors(pki: Pki, server: WebhookServer) -> None:
    assert request(pki, server, "GET", "/nope")[0] == 404
    assert request(pki, server, "GET", "/mutate")[0] == 405
    assert request(pki, server, "DELETE", "/mutate")[0] == 405
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        with client_context(pki).wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
            reply = tls.recv(4096)
    assert reply.startswith(b"HTTP/1.1 411") and b"Content-Length" in reply


def test_silent_and_slow_clients_do_not_block_others(pki: Pki, server: WebhookServer) -> None:
    silent = socket.create_connection(("127.0.0.1", server.port), timeout=5)  # never starts TLS
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    slow_tls = client_context(pki).wrap_socket(slow, server_hostname="localhost")
    slow_tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"kind\":")  # then stalls
    try:
        assert request(pki, server, "GET", "/healthz")[0] == 200
        review = admission_review(deployment_pod(container("main", 1)), "team-a")
        assert post_review(pki, server, review)["response"]["allowed"] is True
        # the stalled request is dropped after the server's I/O timeout (2 s here), not kept forever
        slow_tls.settimeout(15)
        assert slow_tls.recv(100) == b""
    finally:
        silent.close()
        slow_tls.close()


def test_plain_http_to_the_tls_port_is_dropped(pki: Pki, server: WebhookServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = raw.recv(100)
        except ConnectionResetError:
            data = b""
    assert not data.startswith(b"HTTP/1.1 200")
    assert request(pki, server, "GET", "/healthz")[0] == 200


def raw_exchange(pki: Pki, srv: WebhookServer, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:
        with client_context(pki).wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(data)
            chunks = []
            while chunk := tls.recv(65536):
                chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        (b"HELLO\r\n\r\n", b"400", b"malformed request line"),
        (b"GET /healthz HTTP/2.0\r\n\r\n", b"400", b"malformed request line"),
        (b"POST /mutate HTTP/1.1\r\nHost x\r\n\r\n", b"400", b"malformed header line"),
        (b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", b"400", b"conflicting"),
        (b"POST /mutate HTTP/1.1\r\nContent-Length: -5\r\n\r\n", b"400", b"invalid Content-Length"),
        (b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n", b"431", b"request head exceeds"),
    ],
)
def test_malformed_http_gets_a_status_with_a_message_and_the_connection_closed(
        pki: Pki, server: WebhookServer, data: bytes, status: bytes, message: bytes) -> None:
    reply = raw_exchange(pki, server, data)  # returns only once the server has closed the connection
    assert reply.startswith(b"HTTP/1.1 " + status)
    assert message in reply and b"Connection: close" in reply
    assert request(pki, server, "GET", "/healthz")[0] == 200


def test_keep_alive_connection_answers_pipelined_requests_in_order(pki: Pki, server: WebhookServer) -> None:
    body = json.dumps(admission_review(deployment_pod(container("main", 1)), "team-a")).encode()
    post = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    reply = raw_exchange(pki, server, post + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + post
                         + b"GET /readyz HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert reply.count(b"HTTP/1.1 ") == reply.count(b"HTTP/1.1 200 OK\r\n") == 4
    assert reply.count(b'"allowed":true') == 2 and reply.endswith(b"ok\n")


def test_a_blocking_handler_does_not_stall_other_connections(pki: Pki) -> None:
    release = threading.Event()
    entered = threading.Event()

    def slow(body: bytes) -> tuple[int, bytes]:
        entered.set()
        release.wait(20)  # stands in for a slow API call on a cache miss
        return 200, body

    srv = WebhookServer({"/slow": slow, "/fast": lambda body: (200, body)},
                        ReloadingContext(str(pki.cert_file), str(pki.key_file)), host="127.0.0.1", port=0,
                        inline=["/fast"])
    with srv, ThreadPoolExecutor(2) as pool:
        stuck = pool.submit(request, pki, srv, "POST", "/slow", b"{}")
        assert entered.wait(30), "the slow request never reached its handler"  # it blocks from here on
        assert request(pki, srv, "GET", "/healthz")[0] == 200
        assert request(pki, srv, "POST", "/fast", b'{"x":1}')[:2] == (200, b'{"x":1}')
        assert not stuck.done()
        release.set()
        assert stuck.result(20)[:2] == (200, b"{}")


def test_a_handler_that_raises_gets_500_with_a_message_and_the_server_keeps_serving(pki: Pki) -> None:
    def broken(body: bytes) -> tuple[int, bytes]:
        raise KeyError("boom")

    srv = WebhookServer({"/inline": broken, "/pooled": broken},
                        ReloadingContext(str(pki.cert_file), str(pki.key_file)), host="127.0.0.1", port=0,
                        inline=["/inline"])
    with srv:
        for path in ("/inline", "/pooled"):
            status, body, _ = request(pki, srv, "POST", path, b"{}")
            assert status == 500 and json.loads(body)["message"] == "internal error: KeyError"
        assert request(pki, srv, "GET", "/healthz")[0] == 200


def test_shutdown_closes_connections_and_leaves_no_threads(pki: Pki) -> None:
    before = set(threading.enumerate())
    srv = WebhookServer({"/mutate": lambda body: (200, body)},
                        ReloadingContext(str(pki.cert_file), str(pki.key_file)), host="127.0.0.1", port=0)
    srv.start()
    assert request(pki, srv, "POST", "/mutate", b"{}")[0] == 200  # starts a pool thread too
    idle = client_context(pki).wrap_socket(socket.create_connection(("127.0.0.1", srv.port), timeout=10),
                                           server_hostname="localhost")
    srv.shutdown()
    try:
        assert idle.recv(100) == b""
    except (ConnectionError, ssl.SSLError):
        pass  # aborted: also closed
    finally:
        idle.close()
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()


def test_a_port_in_use_is_a_clear_error(pki: Pki, server: WebhookServer) -> None:
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{server.port}"):
        WebhookServer({}, ReloadingContext(str(pki.cert_file), str(pki.key_file)), host="127.0.0.1",
                      port=server.port)


def test_inline_paths_must_have_handlers(pki: Pki) -> None:
    with pytest.raises(ValueError, match="/nope"):
        WebhookServer({}, ReloadingContext(str(pki.cert_file), str(pki.key_file)), host="127.0.0.1", port=0,
                      inline=["/nope"])


def test_an_inline_handler_can_defer_blocking_work_to_the_pool(pki: Pki) -> None:
    release = threading.Event()
    threads: list[str] = []

    def maybe_blocking(body: bytes) -> tuple[int, bytes] | Callable[[], tuple[int, bytes]]:
        if body == b"cached":
            threads.append(threading.current_thread().name)
            return 200, b"fast"

        def slow() -> tuple[int, bytes]:  # stands in for a namespace GET on a cache miss
            threads.append(threading.current_thread().name)
            release.wait(20)
            return 200, b"slow"
        return slow

    srv = WebhookServer({"/mutate": maybe_blocking}, ReloadingContext(str(pki.cert_file), str(pki.key_file)),
                        host="127.0.0.1", port=0, inline=["/mutate"])
    with srv, ThreadPoolExecutor(1) as pool:
        stuck = pool.submit(request, pki, srv, "POST", "/mutate", b"miss")
        wait_until(lambda: threads, 30, "the deferred work to run in the pool")  # it blocks from here on
        assert request(pki, srv, "POST", "/mutate", b"cached")[:2] == (200, b"fast")
        assert not stuck.done()
        release.set()
        assert stuck.result(20)[:2] == (200, b"slow")
    assert threads[0].startswith("webhook-handler") and threads[1] == "webhook-https"


def test_a_large_review_arriving_in_many_records_is_answered(pki: Pki, server: WebhookServer) -> None:
    review = admission_review(deployment_pod(container("main", 1)), "team-a")
    review["request"]["object"]["metadata"]["annotations"] = {f"note-{i}": "x" * 1000 for i in range(200)}
    body = json.dumps(review).encode()
    assert 150 * 1024 < len(body) < 256 * 1024  # many 16 KiB TLS records, under the 256 KiB limit
    out = post_review(pki, server, review)
    assert out["response"]["uid"] == review["request"]["uid"] and out["response"]["allowed"] is True
