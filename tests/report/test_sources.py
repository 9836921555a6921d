"""Snapshot loading: every kubectl output shape, gzip, version/discovery files, and clear errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from bridge.report.sources import SnapshotError, load_snapshot

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "a"}}


def test_list_multi_document_yaml_and_single_objects_are_all_read(tmp_path: Path) -> None:
    (tmp_path / "list.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [NODE]}))
    (tmp_path / "pods.yaml").write_text("apiVersion: v1\nkind: PodList\nitems:\n- kind: Pod\n  metadata: {name: p2}\n"
                                        "---\nkind: Pod\nmetadata: {name: p3}\n---\n")
    sub = tmp_path / "more"
    sub.mkdir()
    (sub / "one.yml").write_text(json.dumps(POD))
    data = load_snapshot(tmp_path)
    assert [n["metadata"]["name"] for n in data.of("Node")] == ["n1"]
    assert sorted(p["metadata"]["name"] for p in data.of("Pod")) == ["p1", "p2", "p3"]


@pytest.mark.parametrize("plain", [False, True])
def test_the_items_of_a_kind_list_as_the_api_server_writes_them_take_the_lists_kind_and_api_version(
        tmp_path: Path, plain: bool) -> None:
    """`kubectl get --raw /api/v1/pods` (or /api/v1/nodes, /apis/resource.k8s.io/v1/deviceclasses) writes a `<Kind>List`
    whose items have neither kind nor apiVersion (`kubectl get -o json` adds them back); an item that has a kind
    keeps its own, and its own apiVersion."""
    def raw(kind: str, api_version: str, *items: dict) -> str:
        return json.dumps({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "7"},
                           "items": list(items)})

    (tmp_path / "pods.json").write_text(raw("PodList", "v1", {"metadata": {"name": "p0", "namespace": "a"}}, POD))
    (tmp_path / "nodes.json").write_text(raw("NodeList", "v1", {"metadata": {"name": "n1"}}))
    (tmp_path / "classes.yaml").write_text(yaml.safe_dump(json.loads(raw(
        "DeviceClassList", "resource.k8s.io/v1", {"metadata": {"name": "c1"}},
        {"kind": "DeviceClass", "apiVersion": "resource.k8s.io/v1beta1", "metadata": {"name": "c2"}}))))
    data = load_snapshot(tmp_path, plain_json=plain)
    assert [(p["kind"], p["metadata"]["name"]) for p in data.of("Pod")] == [("Pod", "p0"), ("Pod", "p1")]
    assert data.of("Node") == [{"metadata": {"name": "n1"}, "kind": "Node", "apiVersion": "v1"}]
    assert [(c["apiVersion"], c["metadata"]["name"]) for c in data.of("DeviceClass")] == [
        ("resource.k8s.io/v1", "c1"), ("resource.k8s.io/v1beta1", "c2")]
    assert data.resource_versions() == ("v1", "v1beta1") and not data.other_kinds


@pytest.mark.parametrize("plain", [False, True])
def test_an_item_without_kind_in_a_kind_list_is_an_error_naming_the_file_and_the_item(tmp_path: Path,
                                                                                        plain: bool) -> None:
    """A `kind: List` holds objects of any kind: each must say which."""
    (tmp_path / "all.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                                   "items": [NODE, {"metadata": {"name": "p1", "namespace": "a"}}]}))
    with pytest.raises(SnapshotError, match=r"all.json: item 2 of a `kind: List` has no 'kind' \(only a <Kind>List"):
        load_snapshot(tmp_path, plain_json=plain)


def test_gzipped_files_and_a_single_file_path(tmp_path: Path) -> None:
    f = tmp_path / "all.json.gz"
    f.write_bytes(gzip.compress(json.dumps({"kind": "List", "items": [NODE, POD]}).encode()))
    data = load_snapshot(f)
    assert len(data.of("Node")) == 1 and len(data.of("Pod")) == 1


def test_version_file_in_both_formats_and_api_versions(tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_text(json.dumps(NODE))
    (tmp_path / "version.json").write_text(json.dumps({"serverVersion": {"gitVersion": "v1.36.1-eks-1", "major": "1",
                                                                          "minor": "36+"}}))
    (tmp_path / "api-versions.txt").write_text("v1\nresource.k8s.io/v1\nresource.k8s.io/v1beta2\n")
    data = load_snapshot(tmp_path)
    assert (data.version.major, data.version.minor, data.version.git_version) == (1, 36, "v1.36.1-eks-1")
    assert data.resource_versions() == ("v1", "v1beta2")
    (tmp_path / "version.json").write_text(json.dumps({"gitVersion": "v1.34.2"}))
    assert load_snapshot(tmp_path).version.minor == 34


def test_served_versions_are_inferred_from_objects_without_discovery(tmp_path: Path) -> None:
    (tmp_path / "dc.yaml").write_text("apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {name: x}\n")
    data = load_snapshot(tmp_path)
    assert data.api_versions is None and data.resource_versions() == ("v1beta1",)


def test_unknown_kinds_are_counted_not_lost(tmp_path: Path) -> None:
    (tmp_path / "svc.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    assert load_snapshot(tmp_path).other_kinds == {"Service": 1}


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("bad.yaml", "kind: Pod\n  metadata: [", "not valid YAML"),
        ("nokind.yaml", "metadata: {name: x}\n", "without 'kind'"),
        ("scalar.yaml", "just a string\n", "expected a Kubernetes object"),
        ("broken.json.gz", "not gzip", "cannot read"),
        ("version.json", "{not json", "not valid JSON"),
    ],
)
def test_bad_files_fail_with_the_file_named(tmp_path: Path, name: str, content: str, expected: str) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(SnapshotError, match=expected) as err:
        load_snapshot(tmp_path)
    assert name in str(err.value)


def test_an_integer_too_long_for_python_is_an_error_naming_the_json_file(tmp_path: Path) -> None:
    """The standard-library reading (the reference for the fast one): one SnapshotError, not a ValueError."""
    (tmp_path / "nodes.json").write_bytes(b'{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n"}, '
                                          b'"spec": {"x": ' + b"7" * 4301 + b"}}]}")
    with pytest.raises(SnapshotError, match=r"nodes.json: not valid YAML/JSON: an integer of 4301 digits \(at most "
                                            r"4300 are read\)"):
        load_snapshot(tmp_path, plain_json=True)


@pytest.mark.parametrize("plain", [False, True])
def test_json_objects_one_after_the_other_are_all_read(tmp_path: Path, plain: bool) -> None:
    """What `kubectl get pod a -o json; kubectl get pod b -o json` or `kubectl get pods -o json --watch` writes:
    JSON documents one after the other, each read (YAML does not take them: no `---` between)."""
    pod2 = {**POD, "metadata": {"name": "p2", "namespace": "a"}}
    (tmp_path / "pods.json").write_text(json.dumps(POD, indent=4) + "\n" + json.dumps(pod2, indent=4) + "\n"
                                        + json.dumps({"kind": "List", "items": [NODE]}))
    data = load_snapshot(tmp_path, plain_json=plain)
    assert [p["metadata"]["name"] for p in data.of("Pod")] == ["p1", "p2"] and data.of("Node") == [NODE]
    (tmp_path / "pods.json").write_text(json.dumps(POD) + " {not json")
    with pytest.raises(SnapshotError, match="pods.json: not valid YAML/JSON"):
        load_snapshot(tmp_path, plain_json=plain)


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="no such file"):
        load_snapshot(tmp_path / "nope")
    with pytest.raises(SnapshotError, match="no .yaml"):
        load_snapshot(tmp_path)
