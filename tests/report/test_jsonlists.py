"""The fast reading of JSON snapshot files (`bridge.report.jsonlists`: msgspec, Pods slimmed to the fields the report
reads, their identical parts shared) gives the report the plain reading (`json.loads`, every field) gives: the same
findings, the same JSON, table and manifests, the same error for a file it cannot read, on the example cluster, on
the scale bench's generated cluster and on hostile files."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from bridge.report import run_report
from bridge.report.jsonlists import NODE_SCHEMA, NOT_READ, POD_SCHEMA, REPLICASET_SCHEMA, SHARED_TYPES, Reader
from bridge.report.shape import _META, SCHEMAS
from bridge.report.sources import SnapshotError, load_snapshot
from tests.report.conftest import EXAMPLE, REPO

Obj = dict[str, Any]


def _outcome(snap: Path, plain: bool, split: str = "current") -> Any:
    """Everything the report says about `snap` (or the error it stops with)."""
    try:
        data = load_snapshot(snap, plain_json=plain)
        result = run_report(data, output="json", assume_split=split)
        table = run_report(data, output="table", assume_split=split).text
    except SnapshotError as err:
        return ("error", type(err).__name__, str(err))
    return result.text, table, result.manifests, result.exit_code


def _same_report(snap: Path, splits: tuple[str, ...] = ("current",)) -> None:
    for split in splits:
        fast, plain = _outcome(snap, False, split), _outcome(snap, True, split)
        assert fast == plain, split


def _write_list(path: Path, items: list[Obj]) -> None:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}))


def _example_as_json(tmp_path: Path) -> Path:
    """The example cluster (YAML) written as one JSON List per kind, as `kubectl get -o json` writes them."""
    data = load_snapshot(EXAMPLE, plain_json=True)
    out = tmp_path / "json-snapshot"
    out.mkdir()
    for kind, objs in data.objects.items():
        if objs:
            _write_list(out / f"{kind.lower()}s.json", json.loads(json.dumps(objs, default=str)))
    for name in ("version.json", "api-versions.txt"):
        (out / name).write_bytes((EXAMPLE / name).read_bytes())
    return out


# Custom resources: the API server writes their list items whole, kind and apiVersion included.
_CUSTOM_KINDS = ("ClusterPolicy", "ClusterQueue", "LocalQueue")


def _example_as_raw(tmp_path: Path, fmt: str = "json") -> Path:
    """The example cluster as `kubectl get --raw /api/v1/pods` (and so on) writes it: one `<Kind>List` per kind and
    apiVersion, `kind` first, items without `kind` and `apiVersion` but for custom resources'. `fmt` "yaml": the same
    documents as YAML (what `yq -P` makes of them)."""
    data = load_snapshot(EXAMPLE, plain_json=True)
    out = tmp_path / "raw" / "snapshot"
    out.mkdir(parents=True)
    for kind, objs in data.objects.items():
        for api_version in sorted({o["apiVersion"] for o in objs}):
            items = [o if kind in _CUSTOM_KINDS else {k: v for k, v in o.items() if k not in ("kind", "apiVersion")}
                     for o in objs if o["apiVersion"] == api_version]
            doc = json.loads(json.dumps({"kind": f"{kind}List", "apiVersion": api_version,
                                         "metadata": {"resourceVersion": "4711"}, "items": items}, default=str))
            name = f"{kind.lower()}s-{api_version.replace('/', '-')}.{fmt}"
            (out / name).write_text(json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc, sort_keys=False))
    for name in ("version.json", "api-versions.txt"):
        (out / name).write_bytes((EXAMPLE / name).read_bytes())
    return out


def _bench_generate() -> Any:
    spec = importlib.util.spec_from_file_location("report_bench", REPO / "bench" / "report_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.generate


def test_the_example_cluster_as_json_gives_the_same_report(tmp_path: Path) -> None:
    snap = _example_as_json(tmp_path)
    data = load_snapshot(snap)
    assert len(data.of("Pod")) == len(load_snapshot(EXAMPLE).of("Pod")) > 10
    _same_report(snap, ("current", "all", "1"))


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_lists_as_the_api_server_writes_them_give_the_report_kubectl_get_output_gives(tmp_path: Path,
                                                                                     fmt: str) -> None:
    """`kubectl get --raw` lists (a PodList, a NodeList, a ResourceClaimList..., their items without kind and
    apiVersion): the report of `kubectl get -o json` output, from the fast reading and the plain one."""
    raw = _example_as_raw(tmp_path, fmt)
    pods = json.loads((raw / "pods-v1.json").read_text()) if fmt == "json" else None
    assert pods is None or (pods["kind"], "kind" in pods["items"][0]) == ("PodList", False)
    kubectl = tmp_path / "kubectl" / "snapshot"
    kubectl.parent.mkdir()
    _example_as_json(tmp_path).rename(kubectl)  # the same directory name: the report names it
    for split in ("current", "all", "1"):
        want = _outcome(kubectl, True, split)
        assert want[0] != "error"
        assert _outcome(raw, False, split) == want, split
        assert _outcome(raw, True, split) == want, split


def test_the_scale_bench_cluster_gives_the_same_report(tmp_path: Path) -> None:
    """bench/report_bench.py's generator, small: its Pod Lists take the fast reading, and the report is the same."""
    _bench_generate()(tmp_path, 60, 1500, 60)
    _same_report(tmp_path, ("current", "all", "3"))


def _resolve(tp: Any, field: str = "") -> Any:
    """The schema as nested dicts and one-item lists; None where a value is kept whole."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) in (typing.Required, typing.NotRequired):
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) is list:
        return [_resolve(typing.get_args(tp)[0])]
    if isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__annotations__"):
        shared = SHARED_TYPES.get(field, {})
        return {k: _resolve(shared[k] if v is msgspec.Raw else v, k)
                for k, v in typing.get_type_hints(tp, include_extras=True).items()}
    return None


def _project(value: Any, schema: Any) -> Any:
    if schema is None:
        return value
    if isinstance(schema, dict) and isinstance(value, dict):
        return {k: _project(v, schema[k]) for k, v in value.items() if k in schema}
    if isinstance(schema, list) and isinstance(value, list):
        return [_project(v, schema[0]) for v in value]
    return value


def test_pods_are_the_plain_objects_less_the_fields_no_reader_reads(tmp_path: Path) -> None:
    """Key order included; the rest of the objects are the plain path's exactly."""
    _bench_generate()(tmp_path / "bench", 20, 300, 20)
    for root in (tmp_path / "bench", _example_as_json(tmp_path), _example_as_raw(tmp_path)):
        fast, plain = load_snapshot(root), load_snapshot(root, plain_json=True)
        for kind, schema in (("Pod", POD_SCHEMA), ("ReplicaSet", REPLICASET_SCHEMA), ("Node", NODE_SCHEMA)):
            slim = [_project(p, _resolve(schema)) for p in plain.of(kind)]
            assert json.dumps(fast.of(kind)) == json.dumps(slim), kind
            assert fast.of(kind) != plain.of(kind) or not slim or kind == "Node"  # fields were left out
        for kind in fast.objects:
            if kind not in ("Pod", "ReplicaSet", "Node"):
                assert json.dumps(fast.of(kind)) == json.dumps(plain.of(kind)), kind


# What a real kubelet writes into its Node (kube-apiserver and kubelet v1.37.2, tests/controller/data), with the
# volume fields a node with attached volumes has besides.
_REAL_NODE = REPO / "tests" / "controller" / "data" / "real-node.json"
_UNREAD_NODE_FIELDS = {"metadata": ("managedFields",), "status": ("images", "volumesInUse", "volumesAttached")}


def _real_node(name: str) -> Obj:
    node: Obj = json.loads(_REAL_NODE.read_text())
    node["metadata"]["name"] = name
    node["status"]["volumesInUse"] = ["kubernetes.io/csi/ebs.csi.aws.com^vol-1"]
    node["status"]["volumesAttached"] = [{"name": "kubernetes.io/csi/ebs.csi.aws.com^vol-1", "devicePath": ""}]
    return node


def _example_with_real_nodes(tmp_path: Path) -> Path:
    root = _example_as_json(tmp_path)
    nodes = json.loads((root / "nodes.json").read_text())["items"]
    _write_list(root / "nodes.json", [*nodes, _real_node("real-a"), _real_node("real-b")])
    return root


def test_nodes_are_the_plain_objects_less_the_fields_a_real_node_makes_large(tmp_path: Path) -> None:
    """managedFields, the kubelet's image list and its volume lists go; every other field stays, in its order."""
    root = _example_with_real_nodes(tmp_path)
    fast, plain = load_snapshot(root), load_snapshot(root, plain_json=True)
    expected = [{k: ({f: x for f, x in v.items() if f not in _UNREAD_NODE_FIELDS.get(k, ())}
                     if isinstance(v, dict) else v) for k, v in n.items()} for n in plain.of("Node")]
    assert json.dumps(fast.of("Node")) == json.dumps(expected)
    real = next(n for n in fast.of("Node") if n["metadata"]["name"] == "real-a")
    assert list(real["status"]) == ["capacity", "allocatable", "conditions", "addresses", "daemonEndpoints",
                                    "nodeInfo", "runtimeHandlers", "features", "declaredFeatures"]
    assert "managedFields" not in real["metadata"] and real["metadata"]["annotations"]
    whole = json.loads(_REAL_NODE.read_text())
    assert len(json.dumps(real)) < len(json.dumps(whole)) * 3 // 4


def test_real_nodes_give_the_same_report_from_either_reading(tmp_path: Path) -> None:
    _same_report(_example_with_real_nodes(tmp_path), ("current", "all"))


def _paths(schema: Any, prefix: str = "") -> set[str]:
    out = set()
    if isinstance(schema, dict):
        for k, v in schema.items():
            out.add(f"{prefix}.{k}")
            out |= _paths(v, f"{prefix}.{k}")
    elif isinstance(schema, list):
        out |= _paths(schema[0], prefix + "[]")
    return out


@pytest.mark.parametrize(("kind", "schema"), [("Pod", POD_SCHEMA), ("ReplicaSet", REPLICASET_SCHEMA),
                                              ("Node", NODE_SCHEMA)])
def test_every_field_the_shape_check_names_is_kept(kind: str, schema: type) -> None:
    """So that a malformed-input error names the same object and field from either reading."""
    kept = _resolve(schema)

    def covered(path: str) -> bool:
        node: Any = kept
        for part in path.strip(".").replace("[]", ".[]").split("."):
            if node is None:
                return True  # kept whole from here
            if part == "[]":
                if not isinstance(node, list):
                    return False
                node = node[0]
            elif not isinstance(node, dict) or part not in node:
                return False
            else:
                node = node[part]
        return True

    wanted = _paths({"metadata": _META, **SCHEMAS[kind]})
    assert wanted and not [p for p in sorted(wanted) if not covered(p)]


def test_pods_with_the_same_parts_share_one_object(tmp_path: Path) -> None:
    _bench_generate()(tmp_path, 20, 300, 20)
    pods = load_snapshot(tmp_path).of("Pod")
    by_owner: dict[str, list[Obj]] = {}
    for p in pods:
        by_owner.setdefault(p["metadata"]["ownerReferences"][0]["name"], []).append(p)
    replicas = next(ps for ps in by_owner.values() if len(ps) > 2)
    assert replicas[0]["spec"]["containers"] is replicas[1]["spec"]["containers"]
    assert replicas[0]["metadata"]["labels"] is replicas[1]["metadata"]["labels"]
    assert replicas[0]["metadata"] is not replicas[1]["metadata"]


def test_the_memory_of_shared_parts_is_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Past MAX_SHARED distinct parts the memo starts again; the objects are the same."""
    import bridge.report.jsonlists as jl

    _bench_generate()(tmp_path, 20, 300, 20)
    want = json.dumps(load_snapshot(tmp_path).of("Pod"))
    monkeypatch.setattr(jl, "MAX_SHARED", 3)
    assert json.dumps(load_snapshot(tmp_path).of("Pod")) == want


def _pod(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "c", "image": "i",
                                                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                     **spec},
            "status": {"phase": "Running"}}


def _replicaset(name: str, template: Any = None) -> Obj:
    pod = _pod(name)
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"replicas": 2, "template": template if template is not None else
                     {"metadata": {"annotations": {"dra-bridge.io/translate": "false"}}, "spec": pod["spec"]}}}


_POD_LIST_HEAD = b'{"apiVersion":"v1","kind":"List","items":['


_RAW_POD_LIST_HEAD = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":['


def _without_kind(obj: Obj) -> Obj:
    """`obj` as an item of a List the API server writes: no kind, no apiVersion."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def _hostile_lists() -> list[tuple[str, bytes]]:
    good = json.dumps(_pod("ok")).encode()
    bare = json.dumps(_without_kind(_pod("ok"))).encode()

    def with_value(value: bytes, where: str = "skipped") -> bytes:
        """A Pod List whose second Pod has `value` in a field the fast reading skips, or in one it keeps."""
        body = json.dumps(_pod("odd", ports="@@")).encode() if where == "skipped" else \
            json.dumps(_pod("odd", priorityClassName="@@")).encode()
        return _POD_LIST_HEAD + good + b"," + body.replace(b'"@@"', value) + b"]}"

    # Near where json.loads gives up (the recursion limit, counted from where it is called), on both sides of it
    # and within the margin the fast reading keeps (bridge.report.jsonlists._DEPTH_MARGIN).
    deeps = [sys.getrecursionlimit() - n for n in (0, 10, 20, 60, 150)]
    cases = [
        ("invalid UTF-8 in a skipped field", with_value(b'"\xff\xfe"')),
        ("invalid UTF-8 in a kept field", with_value(b'"\xff\xfe"', "kept")),
        ("NaN", with_value(b"NaN")),
        ("Infinity kept", with_value(b"Infinity", "kept")),
        ("a number beyond a double, skipped", with_value(b"1e400")),
        ("a number beyond a double, kept", with_value(b"1e400", "kept")),
        ("a big integer, kept", with_value(b"123456789012345678901234567890", "kept")),
        # More digits than Python turns into an int (sys.get_int_max_str_digits, 4300): json.loads stops with an error
        ("an integer too long for Python, skipped", with_value(b"7" * 4301)),
        ("an integer too long for Python, kept", with_value(b"7" * 4301, "kept")),
        ("a negative integer too long for Python, skipped", with_value(b"-" + b"7" * 9000)),
        ("an integer too long for Python, shared", _POD_LIST_HEAD + json.dumps(_pod("p", affinity="@@")).encode()
         .replace(b'"@@"', b"7" * 4301) + b"]}"),
        ("an integer as long as Python takes", with_value(b"7" * 4300)),
        ("digits too long for an integer, in a string", with_value(b'"' + b"7" * 9000 + b'"')),
        ("a lone surrogate", with_value(b'"\\ud800"', "kept")),
        ("a surrogate pair", with_value(b'"\\ud83d\\ude00"', "kept")),
        ("control character", with_value(b'"a\x01b"', "kept")),
        ("non-ASCII UTF-8", with_value('"é€😀"'.encode(), "kept")),
        ("byte order mark", b"\xef\xbb\xbf" + _POD_LIST_HEAD + good + b"]}"),
        ("two documents", _POD_LIST_HEAD + good + b"]}" + _POD_LIST_HEAD + good + b"]}"),
        ("a non-Pod item", _POD_LIST_HEAD + good + b',{"kind":"Node","metadata":{"name":"n"}}]}'),
        ("a nested List item", _POD_LIST_HEAD + good + b',{"kind":"List","items":[' + good + b"]}]}"),
        ("metadata null", _POD_LIST_HEAD + good + b',{"kind":"Pod","metadata":null}]}'),
        ("name not a string", _POD_LIST_HEAD + good + b',{"kind":"Pod","metadata":{"name":5}}]}'),
        ("no metadata", _POD_LIST_HEAD + good + b',{"kind":"Pod"}]}'),
        ("containers a string", _POD_LIST_HEAD + json.dumps(_pod("p", containers="app")).encode() + b"]}"),
        ("an env entry not an object", _POD_LIST_HEAD + json.dumps(
            _pod("p", containers=[{"name": "c", "env": [5]}])).encode() + b"]}"),
        ("spec null", _POD_LIST_HEAD + good + b',{"kind":"Pod","metadata":{"name":"p"},"spec":null}]}'),
        ("duplicate keys", _POD_LIST_HEAD + good[:-1] + b',"spec":{"nodeName":"x"},"metadata":{"name":"q","namespace'
         b'":"b"}}]}'),
        ("kind not a List", b'{"kind":"Pod","items":[' + good + b"]}"),
        *[(f"{deep} deep in a skipped field", with_value(b"[" * deep + b"]" * deep)) for deep in deeps],
        *[(f"{deep} deep in a kept field", with_value(b"[" * deep + b"]" * deep, "kept")) for deep in deeps],
        *[(f"{deep} deep in a shared field", _POD_LIST_HEAD + json.dumps(_pod("p", affinity="@@")).encode().replace(
            b'"@@"', b"[" * deep + b"]" * deep) + b"]}") for deep in deeps],
        ("trailing garbage", _POD_LIST_HEAD + good + b"]} x"),
        ("a ReplicaSet List", _POD_LIST_HEAD + json.dumps(_replicaset("rs")).encode() + b"]}"),
        ("a ReplicaSet whose template is a string", _POD_LIST_HEAD + json.dumps(_replicaset("rs", "tmpl")).encode()
         + b"]}"),
        ("a ReplicaSet whose replicas are not a number", _POD_LIST_HEAD + json.dumps(
            {**_replicaset("rs"), "spec": {"replicas": "many"}}).encode() + b"]}"),
        ("ReplicaSets and Pods", _POD_LIST_HEAD + json.dumps(_replicaset("rs")).encode() + b"," + good + b"]}"),
        # Lists as the API server writes them (`kubectl get --raw`): the items without kind and apiVersion
        ("a PodList as the API server writes it", _RAW_POD_LIST_HEAD + bare + b"," + bare.replace(b"ok", b"ok2")
         + b"]}"),
        ("a PodList whose items have and lack a kind", _RAW_POD_LIST_HEAD + bare + b"," + good + b"]}"),
        ("a PodList with a Node in it", _RAW_POD_LIST_HEAD + bare + b',{"kind":"Node","metadata":{"name":"n"}}]}'),
        ("a PodList item whose kind is null", _RAW_POD_LIST_HEAD + bare + b',{"kind":null,"metadata":{"name":"p"}}]}'),
        ("a PodList item whose kind is empty", _RAW_POD_LIST_HEAD + bare + b',{"kind":"","metadata":{"name":"p"}}]}'),
        ("a List item without kind", _POD_LIST_HEAD + good + b"," + bare + b"]}"),
        ("a NodeList with a Pod and an item without kind", b'{"kind":"NodeList","apiVersion":"v1","items":[' + good
         + b"," + bare + b"]}"),
        ("a ReplicaSetList as the API server writes it", b'{"kind":"ReplicaSetList","apiVersion":"apps/v1","items":['
         + json.dumps(_without_kind(_replicaset("rs"))).encode() + b"]}"),
        ("empty", b""),
    ]
    return cases


@pytest.mark.parametrize(("what", "content"), _hostile_lists(), ids=[c[0] for c in _hostile_lists()])
def test_a_hostile_pod_list_gets_the_plain_readings_answer(tmp_path: Path, what: str, content: bytes) -> None:
    snap = tmp_path / "snap"
    snap.mkdir()
    for name in ("version.json", "api-versions.txt", "nodes.yaml", "namespaces.yaml"):
        (snap / name).write_bytes((EXAMPLE / name).read_bytes())
    (snap / "pods.json").write_bytes(content)
    (snap / "more-pods.json").write_bytes(_POD_LIST_HEAD + json.dumps(_pod("owned")).encode().replace(
        b'"namespace"', b'"ownerReferences":[{"kind":"ReplicaSet","name":"rs","controller":true}],"namespace"') + b"]}")
    fast, plain = _outcome(snap, False), _outcome(snap, True)
    assert fast == plain


def test_the_reader_refuses_what_it_would_read_differently() -> None:
    reader = Reader()
    good = json.dumps(_pod("ok")).encode()
    assert reader.pod_items(_POD_LIST_HEAD + good + b"]}") is not None
    assert reader.pod_items(_POD_LIST_HEAD + good[:-2] + b',"x":"\xff"}}]}') is None  # not UTF-8, though skipped
    assert reader.document(b'{"a": NaN}') is NOT_READ  # json.loads takes it
    assert reader.document(b'["\\ud800"]') is NOT_READ
    assert reader.document(b'{"a": 1}') == {"a": 1}


def test_pod_replicaset_and_node_lists_as_the_api_server_writes_them_take_the_fast_reading() -> None:
    """Their items have no kind (`kubectl get --raw`): they are the List's kind, as on the plain path; an item
    without kind in a `kind: List`, or an item of another kind, leaves the file to the plain reading."""
    reader, bare = Reader(), json.dumps(_without_kind(_pod("ok"))).encode()
    got = reader.items(_RAW_POD_LIST_HEAD + bare + b"]}")
    assert got is not None and got[0] == "Pod" and got[1][0]["kind"] == "Pod"
    assert list(got[1][0]) == ["metadata", "spec", "status", "kind"]  # where the plain path puts it
    rs = json.dumps(_without_kind(_replicaset("rs"))).encode()
    got = reader.items(b'{"kind":"ReplicaSetList","apiVersion":"apps/v1","items":[' + rs + b"]}")
    assert got is not None and got[0] == "ReplicaSet" and got[1][0]["kind"] == "ReplicaSet"
    node = json.dumps(_without_kind(_real_node("n"))).encode()
    got = reader.items(b'{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[' + node
                       + b"]}")
    assert got is not None and got[0] == "Node" and got[1][0]["kind"] == "Node"
    assert "images" not in got[1][0]["status"]
    assert reader.items(_POD_LIST_HEAD + json.dumps(_pod("ok")).encode() + b"," + bare + b"]}") is None
    assert reader.items(_RAW_POD_LIST_HEAD + bare + b',{"kind":"Node","metadata":{"name":"n"}}]}') is None


def test_an_integer_too_long_for_python_is_found_wherever_it_starts() -> None:
    """The fast reading samples the file for runs of digits (bridge.report.jsonlists._long_digits): a run one digit
    longer than Python converts is found at every offset from the samples; a file with none is read."""
    reader, limit = Reader(), sys.get_int_max_str_digits()
    good = json.dumps(_pod("ok", ports="@@")).encode()
    assert reader.pod_items(_POD_LIST_HEAD + good.replace(b'"@@"', b"[" + b"1," * limit + b"1]") + b"]}") is not None
    for pad in range(limit + 2):
        odd = good.replace(b'"@@"', b"[" + b" " * pad + b"7" * (limit + 1) + b"]")
        assert reader.pod_items(_POD_LIST_HEAD + odd + b"]}") is None, pad


@pytest.mark.parametrize("last", [b"", b"\xff"])
def test_files_read_in_turn_into_one_buffer_keep_their_own_bytes(tmp_path: Path, last: bytes) -> None:
    """A large file, then smaller ones (one not ASCII, one not UTF-8 at all): each is read as itself, not with what
    an earlier one left in the reused buffer."""
    snap = tmp_path / "snap"
    snap.mkdir()
    for name in ("version.json", "api-versions.txt", "nodes.yaml", "namespaces.yaml"):
        (snap / name).write_bytes((EXAMPLE / name).read_bytes())
    many = [_pod(f"p{i}", ports=[{"name": "x" * 50}]) for i in range(300)]
    (snap / "a-pods.json").write_text(json.dumps({"kind": "List", "items": many}))
    odd = json.dumps({"kind": "List", "items": [_pod("q", ports="@@")]}).encode().replace(b'"@@"', '"é"'.encode())
    (snap / "b-pods.json").write_bytes(odd)
    (snap / "c-pods.json").write_bytes(b'{"kind":"List","items":[' + json.dumps(_pod("r")).encode()[:-1]
                                      + b',"x":"' + last + b'"}]}')
    fast, plain = _outcome(snap, False), _outcome(snap, True)
    assert fast == plain
    assert (fast[0] == "error") == bool(last)
