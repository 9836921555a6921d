"""OpenAPI documents, server-side field validation and `as=Table` answers: what kubectl reads before and after it
writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge.sandbox.apiserver import negotiation
from bridge.sandbox.apiserver.printers import human_duration, printer_for
from bridge.sandbox.apiserver.registry import default_registry
from bridge.sandbox.apiserver.tables import to_table

from .conftest import http, pod

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"


def _get(srv, path: str, accept: str = "application/json", method: str = "GET", body: Any = None,
         ctype: str = "application/json"):  # type: ignore[no-untyped-def]
    data = json.dumps(body).encode() if body is not None else None
    return http(srv, method, path, data, Accept=accept, **{"Content-Type": ctype})


def test_v3_root_points_at_a_hashed_document_per_group_version(server) -> None:  # type: ignore[no-untyped-def]
    code, _, body = _get(server, "/openapi/v3")
    paths = json.loads(body)["paths"]
    assert {"api/v1", "apis/resource.k8s.io/v1", "apis/apps/v1"} <= set(paths)
    assert "apis/resource.k8s.io/v1beta1" not in paths  # not served by default, so not documented
    url = paths["apis/resource.k8s.io/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/resource.k8s.io/v1?hash=")
    code, headers, body = _get(server, url)
    assert code == 200 and headers["Cache-Control"] == "public, immutable"
    doc = json.loads(body)
    patch = doc["paths"]["/apis/resource.k8s.io/v1/deviceclasses/{name}"]["patch"]
    # What kubectl's QueryParamVerifierV3 looks for before leaving validation to the server.
    assert patch["x-kubernetes-group-version-kind"] == {"group": "resource.k8s.io", "version": "v1", "kind": "DeviceClass"}
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    schema = doc["components"]["schemas"]["io.k8s.api.resource.v1.DeviceClass"]
    assert schema["properties"]["spec"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.resource.v1.DeviceClassSpec"}]
    assert "enum" not in schema["properties"]["apiVersion"] and schema["properties"]["kind"]["type"] == "string"
    containers = json.loads(_get(server, paths["api/v1"]["serverRelativeURL"])[2])["components"]["schemas"][
        "io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name" and containers["x-kubernetes-patch-strategy"] == "merge"
    assert _get(server, "/openapi/v3/apis/nope/v1")[0] == 404


def test_v2_is_served_as_json_and_refused_as_gnostic_protobuf(server) -> None:  # type: ignore[no-untyped-def]
    code, _, body = _get(server, "/openapi/v2")
    doc = json.loads(body)
    assert code == 200 and doc["swagger"] == "2.0"
    assert doc["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] == {"type": "string", "format": "int-or-string"}
    assert "/api/v1/namespaces/{namespace}/pods/{name}" in doc["paths"]
    assert _get(server, "/openapi/v2", accept="application/com.github.proto-openapi.spec.v2@v1.0+protobuf")[0] == 406


def test_strict_field_validation_names_every_unknown_field(server) -> None:  # type: ignore[no-untyped-def]
    body = pod("p")
    body["spec"]["containers"][0]["imagePullPolice"] = "Always"
    body["spec"]["bogus"] = 1
    code, _, answer = _get(server, "/api/v1/namespaces/default/pods?fieldValidation=Strict", method="POST", body=body)
    message = json.loads(answer)["message"]
    assert code == 400
    assert 'strict decoding error: unknown field "spec.containers[0].imagePullPolice", unknown field "spec.bogus"' in message
    code, headers, _ = _get(server, "/api/v1/namespaces/default/pods", method="POST", body=body)  # default: Warn
    warnings = headers.get_all("Warning") or []
    assert code == 201 and any('unknown field \\"spec.bogus\\"' in w for w in warnings), warnings
    code, _, answer = _get(server, "/api/v1/namespaces/default/pods/p?fieldValidation=Strict", method="PATCH",
                           body={"metadata": {"labels": {"a": "b"}}, "spec": {"$setElementOrder/containers": [], "nope": 1}},
                           ctype="application/strategic-merge-patch+json")
    assert code == 422 and 'unknown field "spec.nope"' in json.loads(answer)["message"]  # a patch: 422 on `patch`
    assert _get(server, "/api/v1/namespaces/default/pods?fieldValidation=Loud", method="POST", body=pod("q"))[0] == 422


def test_negotiation_follows_q_and_specificity() -> None:
    assert negotiation.choices(None) == [negotiation.Choice("application/json")]
    assert [c.media for c in negotiation.choices("application/vnd.kubernetes.protobuf,application/json")] == [
        negotiation.PROTOBUF, negotiation.JSON]
    assert negotiation.choices("application/json;q=0.5,application/vnd.kubernetes.protobuf")[0].media == negotiation.PROTOBUF
    table = negotiation.choices(TABLE)
    assert table[0] == negotiation.Choice("application/json", "Table", "v1") and table[-1].convert is None
    assert negotiation.choices("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io") == []
    assert negotiation.choices("text/html") == []
    assert negotiation.choices("*/*")[0].media == negotiation.JSON


def test_kubectl_get_pods_shows_the_real_columns(server) -> None:  # type: ignore[no-untyped-def]
    _get(server, "/api/v1/namespaces/default/pods", method="POST", body=pod("web", node="n1"))
    code, headers, body = _get(server, "/api/v1/namespaces/default/pods", accept=TABLE)
    table = json.loads(body)
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
    assert [c["priority"] for c in table["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert table["columnDefinitions"][0]["description"].startswith("Name must be unique within a namespace")
    row = table["rows"][0]
    assert row["cells"][:4] == ["web", "0/1", "Pending", "0"] and row["cells"][6] == "n1"
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["metadata"]["name"] == "web"
    assert table["metadata"]["resourceVersion"]
    full = json.loads(_get(server, "/api/v1/namespaces/default/pods/web?includeObject=Object", accept=TABLE)[2])
    assert full["rows"][0]["object"]["spec"]["nodeName"] == "n1" and full["rows"][0]["object"]["kind"] == "Pod"
    assert _get(server, "/api/v1/namespaces/default/pods?includeObject=All", accept=TABLE)[0] == 400


def _running_pod(**status: Any) -> dict[str, Any]:
    obj = pod("p")
    obj["metadata"]["creationTimestamp"] = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj["status"] = status
    return obj


def test_pod_status_cells_follow_the_printer() -> None:
    rt = default_registry().get("", "v1", "pods")
    assert rt is not None
    ago = (datetime.now(UTC) - timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    crash = _running_pod(phase="Running", podIP="10.0.0.5", containerStatuses=[{
        "name": "main", "ready": False, "restartCount": 4,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago}}}])
    cells = to_table(rt, crash)["rows"][0]["cells"]
    assert cells[1:4] == ["0/1", "CrashLoopBackOff", "4 (3m ago)"] and cells[4] == "5m" and cells[5] == "10.0.0.5"
    running = _running_pod(phase="Running", containerStatuses=[{"name": "main", "ready": True, "restartCount": 0,
                                                                "state": {"running": {}}}])
    assert to_table(rt, running)["rows"][0]["cells"][1:3] == ["1/1", "Running"]
    done = _running_pod(phase="Succeeded", containerStatuses=[{"name": "main", "ready": False, "restartCount": 0,
                                                               "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}])
    row = to_table(rt, done)["rows"][0]
    assert row["cells"][2] == "Completed" and row["conditions"][0]["reason"] == "Succeeded"
    init = _running_pod(phase="Pending", initContainerStatuses=[{"name": "setup", "ready": False, "restartCount": 0,
                                                                 "state": {"running": {}}}])
    init["spec"]["initContainers"] = [{"name": "setup", "image": "i"}]
    assert to_table(rt, init)["rows"][0]["cells"][2] == "Init:0/1"


def test_node_cells_and_wide_columns() -> None:
    rt = default_registry().get("", "v1", "nodes")
    assert rt is not None
    node = {"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/gpu": "", "kubernetes.io/role": "worker"}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}],
                       "nodeInfo": {"kubeletVersion": "v1.34.2", "osImage": "Ubuntu"}}}
    table = to_table(rt, node)
    assert [c["name"] for c in table["columnDefinitions"]][:5] == ["Name", "Status", "Roles", "Age", "Version"]
    assert table["rows"][0]["cells"] == ["n1", "Ready,SchedulingDisabled", "gpu,worker", "<unknown>", "v1.34.2",
                                         "10.1.2.3", "<none>", "Ubuntu", "<unknown>", "<unknown>"]


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "<invalid>"), (-1, "0s"), (59, "59s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (3 * 3600 + 60, "3h1m"),
    (9 * 3600, "9h"), (50 * 3600, "2d2h"), (10 * 86400, "10d"), (800 * 86400, "2y70d"), (9 * 365 * 86400, "9y"),
])
def test_age_is_apimachinerys_human_duration(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_every_served_kind_has_its_printer_or_the_generic_columns() -> None:
    reg = default_registry()
    for rt in reg.all():
        printer = printer_for(rt.group, rt.plural)
        assert printer.columns[0].name in ("Name", "Last Seen")
    assert [c.name for c in printer_for("resource.k8s.io", "resourceslices").columns] == ["Name", "Node", "Driver", "Pool", "Age"]
    assert [c.name for c in printer_for("example.com", "widgets").columns] == ["Name", "Created At"]


def test_watch_as_table_sends_headers_once(server) -> None:  # type: ignore[no-untyped-def]
    _get(server, "/api/v1/namespaces/default/pods", method="POST", body=pod("a"))
    _get(server, "/api/v1/namespaces/default/pods", method="POST", body=pod("b"))
    code, _, body = _get(server, "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1", accept=TABLE)
    events = [json.loads(line) for line in body.splitlines() if line.strip()]
    tables = [e["object"] for e in events if e["type"] == "ADDED"]
    assert len(tables) == 2 and tables[0]["columnDefinitions"] and tables[1]["columnDefinitions"] is None
