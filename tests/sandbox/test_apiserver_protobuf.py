"""The emulator speaks `application/vnd.kubernetes.protobuf` the way kubectl and client-go do: the `k8s\\x00` envelope,
Go's zero-value rules, inline fields, and a JSON fallback that never drops a field."""

from __future__ import annotations

import base64
import json

import pytest

from bridge._proto.k8s.api import core_pb2
from bridge._proto.k8s.apimachinery import runtime_pb2
from bridge.sandbox.apiserver import protobuf as pb

from .conftest import http

# `kubectl create ns foo` (kubectl v1.32.4) as it left kubectl: every non-pointer field written, zero or not.
KUBECTL_CREATE_NS = bytes.fromhex(
    "6b387300" "0a0f0a02763112094e616d657370616365121b0a130a03666f6f12001a00220"
    "02a0032003800420012001a020a001a002200"
)


def _envelope(api_version: str, kind: str, msg: object) -> bytes:
    env = runtime_pb2.Unknown()
    env.typeMeta.apiVersion, env.typeMeta.kind = api_version, kind
    env.raw = msg.SerializeToString()  # type: ignore[attr-defined]
    return pb.MAGIC + env.SerializeToString()


def test_kubectls_namespace_decodes_to_what_a_json_client_would_have_sent() -> None:
    assert pb.decode(KUBECTL_CREATE_NS) == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo"},
                                            "spec": {}, "status": {}}


def test_zero_scalars_are_dropped_unless_go_keeps_them() -> None:
    pod = core_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace, pod.metadata.generateName = "p", "ns", ""
    spec = pod.spec
    spec.terminationGracePeriodSeconds = 0  # *int64: 0 means "kill at once", must survive
    spec.hostNetwork = False  # plain bool with omitempty: unset
    spec.nodeName = ""
    c = spec.containers.add()
    c.name, c.image, c.tty = "main", "busybox", False
    st = pod.status.containerStatuses.add()
    st.name, st.restartCount, st.ready = "main", 0, False  # no omitempty: kept at zero
    obj = pb.decode(_envelope("v1", "Pod", pod))
    assert obj["spec"] == {"terminationGracePeriodSeconds": 0, "containers": [{"name": "main", "image": "busybox"}]}
    assert obj["status"]["containerStatuses"] == [{"name": "main", "restartCount": 0, "ready": False}]
    assert obj["metadata"] == {"name": "p", "namespace": "ns"}


def test_special_types_round_trip_through_their_json_forms() -> None:
    obj = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "creationTimestamp": "2025-03-04T05:06:07Z", "labels": {"a": "b"}},
        "spec": {
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "500m"}},
                            "ports": [{"containerPort": 80}],
                            "livenessProbe": {"httpGet": {"port": "http", "path": "/healthz"}}}],
            "volumes": [{"name": "cfg", "configMap": {"name": "cm", "defaultMode": 420}}],
        },
    }
    back = pb.decode(pb.encode(obj))
    assert back == obj  # Time, Quantity, IntOrString (string form), inline VolumeSource and ProbeHandler


def test_secret_bytes_are_base64_in_json_and_raw_on_the_wire() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque",
              "data": {"k": base64.b64encode(b"\x00\xffvalue").decode()}}
    wire = pb.encode(secret)
    env = runtime_pb2.Unknown()
    env.ParseFromString(wire[4:])
    msg = core_pb2.Secret()
    msg.ParseFromString(env.raw)
    assert msg.data["k"] == b"\x00\xffvalue"
    assert pb.decode(wire) == secret


def test_fields_the_server_does_not_know_are_refused_not_dropped() -> None:
    ns = core_pb2.Namespace()
    ns.metadata.name = "x"
    raw = ns.SerializeToString() + bytes([0xB8, 0x3E, 0x01])  # field 999, varint 1
    env = runtime_pb2.Unknown()
    env.typeMeta.apiVersion, env.typeMeta.kind, env.raw = "v1", "Namespace", raw
    with pytest.raises(pb.ProtobufError, match="999"):
        pb.decode(pb.MAGIC + env.SerializeToString())


def test_an_object_with_a_field_our_messages_lack_is_not_encodable() -> None:
    with pytest.raises(pb.NotEncodable, match="spec.notAField"):
        pb.encode({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"notAField": 1}})
    with pytest.raises(pb.NotEncodable):
        pb.encode({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}})


def test_bad_envelopes_are_clear_errors() -> None:
    with pytest.raises(pb.ProtobufError, match="k8s"):
        pb.decode(b'{"kind": "Pod"}')
    with pytest.raises(pb.ProtobufError, match="not available as protobuf") as err:
        pb.decode(_envelope("apps/v1", "Deployment", core_pb2.Namespace()))
    assert err.value.unsupported_kind


def _request(srv, method: str, path: str, body: bytes | None = None, **headers: str):  # type: ignore[no-untyped-def]
    return http(srv, method, path, body, **headers)


def test_protobuf_create_and_read_over_http(server) -> None:  # type: ignore[no-untyped-def]
    code, headers, body = _request(server, "POST", "/api/v1/namespaces", KUBECTL_CREATE_NS,
                                   **{"Content-Type": pb.CONTENT_TYPE,
                                      "Accept": "application/vnd.kubernetes.protobuf,application/json"})
    assert code == 201 and headers["Content-Type"] == pb.CONTENT_TYPE
    created = pb.decode(body)
    assert created["metadata"]["name"] == "foo" and created["metadata"]["uid"] and created["status"]["phase"] == "Active"
    code, headers, body = _request(server, "GET", "/api/v1/namespaces", Accept=pb.CONTENT_TYPE)
    assert code == 200 and "foo" in {i["metadata"]["name"] for i in pb.decode(body)["items"]}
    code, headers, body = _request(server, "GET", "/api/v1/namespaces/nope", Accept=pb.CONTENT_TYPE)
    assert code == 404 and pb.decode(body)["reason"] == "NotFound"


def test_kinds_without_a_message_fall_back_to_json_or_406(server) -> None:  # type: ignore[no-untyped-def]
    code, headers, body = _request(server, "GET", "/apis/apps/v1/deployments",
                                   Accept="application/vnd.kubernetes.protobuf,application/json")
    assert code == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["kind"] == "DeploymentList"
    code, headers, body = _request(server, "GET", "/apis/apps/v1/deployments", Accept=pb.CONTENT_TYPE)
    assert code == 406 and headers["Content-Type"] == pb.CONTENT_TYPE  # the Status itself has a protobuf form
    assert pb.decode(body)["reason"] == "NotAcceptable"
    code, _, body = _request(server, "POST", "/apis/apps/v1/namespaces/default/deployments",
                             _envelope("apps/v1", "Deployment", core_pb2.Namespace()),
                             **{"Content-Type": pb.CONTENT_TYPE})
    assert code == 415 and b"send it as JSON" in body


def test_protobuf_watch_frames(server) -> None:  # type: ignore[no-untyped-def]
    code, headers, body = _request(server, "GET", "/api/v1/namespaces?watch=true&timeoutSeconds=1",
                                   Accept="application/vnd.kubernetes.protobuf;stream=watch")
    assert code == 200 and headers["Content-Type"].startswith(pb.CONTENT_TYPE)
    events = list(pb.read_watch_frames(body))
    assert {"default", "kube-system"} <= {obj["metadata"]["name"] for kind, obj in events if kind == "ADDED"}


@pytest.mark.parametrize(("message", "field", "number", "keep_zero"), [
    # field numbers from kubernetes/api core/v1 generated.proto and kubernetes/apimachinery meta/v1, runtime
    ("ObjectMeta", "name", 1, False), ("ObjectMeta", "labels", 11, False), ("ObjectMeta", "annotations", 12, False),
    ("ObjectMeta", "ownerReferences", 13, False), ("ObjectMeta", "managedFields", 17, False),
    ("Pod", "spec", 2, False), ("Pod", "status", 3, False),
    ("PodSpec", "terminationGracePeriodSeconds", 4, True), ("PodSpec", "nodeName", 10, False),
    ("PodSpec", "automountServiceAccountToken", 21, True), ("PodSpec", "resourceClaims", 39, False),
    ("Container", "name", 1, True), ("Container", "resources", 8, False),
    ("Secret", "data", 2, False), ("Secret", "type", 3, False), ("Secret", "immutable", 5, True),
    ("Toleration", "tolerationSeconds", 5, True), ("ContainerStatus", "restartCount", 5, True),
    ("Unknown", "raw", 2, True), ("Status", "code", 6, False), ("WatchEvent", "object", 2, False),
])
def test_wire_facts_of_our_messages(message: str, field: str, number: int, keep_zero: bool) -> None:
    from bridge._proto.k8s import wire_pb2
    from bridge._proto.k8s.apimachinery import meta_pb2

    module = {"ObjectMeta": meta_pb2, "Status": meta_pb2, "WatchEvent": meta_pb2, "Unknown": runtime_pb2}.get(message, core_pb2)
    fd = getattr(module, message).DESCRIPTOR.fields_by_name[field]
    assert fd.number == number
    assert fd.GetOptions().Extensions[wire_pb2.keep_zero] is keep_zero
