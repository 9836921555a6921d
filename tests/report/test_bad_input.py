"""Bad input as an operator meets it: every case exits 2 with one clear line naming the file or object, prints
nothing on stdout, writes no report file and no manifests (nothing half-done)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge.cli import main
from bridge.report import build_report
from bridge.report.shape import find_malformed, object_problem
from bridge.report.sources import MalformedInput
from tests.report.conftest import EXAMPLE, cluster, container, deployment, spec


def _snapshot_with(tmp_path: Path, name: str, content: bytes) -> Path:
    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLE, snap)
    (snap / name).write_bytes(content)
    return snap


def _run_cli(tmp_path: Path, snapshot: Path):  # type: ignore[no-untyped-def]
    report, fixes = tmp_path / "report.html", tmp_path / "fixes"
    res = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(snapshot), "-o", "html", "--file", str(report),
                                    "--emit-manifests", str(fixes)], catch_exceptions=False)
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    assert not report.exists() and not fixes.exists()
    assert "Traceback" not in res.stderr
    return res.stderr


_GARBAGE_LIST = b"apiVersion: v1\nkind: List\nitems:\n- 42\n- {kind: Pod, metadata: {name: p}}\n"


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("picture.yaml", b"\x89PNG\r\n\x1a\n\x00\x00binary", "picture.yaml: cannot read"),
        ("notes.yaml", b"this: is: not yaml: [", "notes.yaml: not valid YAML"),
        ("pods-extra.yaml.gz", gzip.compress(b"kind: Pod\nmetadata: {name: x}\n" * 50, mtime=0)[:40], "truncated gzip data"),
        ("garbage.yaml", _GARBAGE_LIST, "garbage.yaml: expected a Kubernetes object or List, found int"),
        ("nokind.yaml", b"kind: List\nitems:\n- {metadata: {name: x}}\n",
         "nokind.yaml: item 1 of a `kind: List` has no 'kind'"),
        ("nokind-object.yaml", b"metadata: {name: x}\n", "nokind-object.yaml: an object without 'kind'"),
        ("meta.yaml", b"kind: List\nitems:\n- {kind: Pod, metadata: 5}\n", "meta.yaml: a Pod whose metadata is not"),
        ("name.yaml", b"kind: Pod\nmetadata: {name: 7, namespace: a}\n", "name.yaml: a Pod whose metadata"),
        ("containers.yaml", b"kind: Pod\nmetadata: {name: p, namespace: a}\nspec: {containers: app}\n",
         "Pod a/p: spec.containers: expected a list, found a string"),
        ("limits.yaml",
         b"kind: Pod\nmetadata: {name: p, namespace: a}\nspec: {containers: [{name: c, resources: {limits: [1]}}]}\n",
         "Pod a/p: spec.containers[0].resources.limits: expected a mapping, found a list"),
        ("node.yaml", b"kind: Node\nmetadata: {name: n}\nstatus: {capacity: {1: 2}}\n",
         "Node n: status.capacity: key 1 is not a string"),
    ],
)
def test_bad_file_in_a_snapshot_exits_2_and_names_it(tmp_path: Path, name: str, content: bytes, expected: str) -> None:
    err = _run_cli(tmp_path, _snapshot_with(tmp_path, name, content))
    assert err.startswith("Error: ") and expected in err.splitlines()[0]


def test_missing_path_and_empty_directory_exit_2(tmp_path: Path) -> None:
    assert "does not exist" in _run_cli(tmp_path, tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no .yaml/.yml/.json files found" in _run_cli(tmp_path, empty)


def test_files_that_are_not_snapshot_files_are_skipped(tmp_path: Path) -> None:
    snap = _snapshot_with(tmp_path, "README.md", b"# how this snapshot was made\n")
    (snap / "kubectl.log").write_text("error: the server doesn't have a resource type\n")
    res = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(snap), "-o", "json"])
    assert res.exit_code == 1 and res.stdout.startswith("{")


def test_malformed_field_names_the_object_through_the_library() -> None:
    bad = deployment("web", pod_spec=spec(container({"nvidia.com/gpu": 1})))
    bad["spec"]["replicas"] = "many"
    with pytest.raises(MalformedInput, match=r"Deployment team/web: spec.replicas: expected a whole number, found 'many'"):
        build_report(cluster(bad))


def test_well_formed_example_has_no_shape_problem() -> None:
    from bridge.report import load_snapshot

    assert find_malformed(load_snapshot(EXAMPLE).objects) is None


def test_shape_check_accepts_nulls_and_names_nested_paths() -> None:
    ok = {"kind": "Pod", "metadata": {"name": "p", "namespace": "a", "labels": None},
          "spec": {"containers": [{"name": "c", "resources": None, "env": None}], "affinity": None}}
    assert object_problem(ok) is None
    bad = {"kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
           "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
               "nodeSelectorTerms": [{"matchExpressions": "nvidia.com/gpu.product"}]}}}}}
    assert object_problem(bad) == ("Pod a/p: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                                   ".nodeSelectorTerms[0].matchExpressions: expected a list, found a string")


# ---- files that are not what they claim to be: one line, exit 2, never a hang, a traceback or a MemoryError


def _deep_json(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


_LONG = b"1" * 5000  # an integer of more digits than Python turns into an int (sys.get_int_max_str_digits: 4300)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("bad-date.yaml", b"kind: Pod\nmetadata: {name: p, namespace: a, creationTimestamp: 2026-13-01T00:00:00Z}\n",
         "bad-date.yaml: not valid YAML/JSON: a value that cannot be read: month must be in 1..12"),
        ("long.yaml", b"kind: Pod\nmetadata: {name: p, namespace: a}\nspec: {priority: " + _LONG + b"}\n",
         "long.yaml: not valid YAML/JSON: an integer of 5000 digits (at most 4300 are read)"),
        ("version.json", b'{"major": ' + _LONG + b"}",
         "version.json: not valid JSON for a version document: an integer of 5000 digits (at most 4300 are read)"),
        ("unreadable.json", b'{"pods": ' + _LONG + b"}",
         "unreadable.json: expected a JSON object of resource -> reason: an integer of 5000 digits"),
        ("more-nodes.json", b'{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n"}, "x": ' + _LONG
         + b"}]}", "more-nodes.json: not valid YAML/JSON: an integer of 5000 digits"),
        ("more-pods.json", b'{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}, "spec": '
         b'{"priority": ' + _LONG + b"}}]}", "more-pods.json: not valid YAML/JSON: an integer of 5000 digits"),
        ("more-pods.json", b'{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": '
         + _LONG + b"}}]}", "more-pods.json: not valid YAML/JSON: an integer of 5000 digits"),
    ],
    ids=["a date that does not exist", "a long integer in YAML", "in version.json", "in unreadable.json",
         "in a Node List", "in a Pod's field the report reads", "in a Pod's field the report skips"],
)
def test_a_value_python_cannot_hold_exits_2_and_names_the_file(tmp_path: Path, name: str, content: bytes,
                                                                expected: str) -> None:
    """A date that does not exist (unquoted YAML makes it a timestamp) or an integer of thousands of digits: one
    line naming the file, not a ValueError traceback."""
    err = _run_cli(tmp_path, _snapshot_with(tmp_path, name, content))
    assert err.startswith("Error: ") and expected in err.splitlines()[0] and len(err.splitlines()) == 1


def test_json_nested_deeper_than_the_parser_follows_is_named(tmp_path: Path) -> None:
    err = _run_cli(tmp_path, _snapshot_with(tmp_path, "deep.json", _deep_json(100_000)))
    assert "deep.json: nested too deeply to parse" in err.splitlines()[0] and len(err.splitlines()) == 1


def test_deep_yaml_is_named_too(tmp_path: Path) -> None:
    err = _run_cli(tmp_path, _snapshot_with(tmp_path, "deep.yaml", _deep_json(100_000)))
    assert "deep.yaml:" in err.splitlines()[0] and len(err.splitlines()) == 1


def test_a_deep_value_inside_an_otherwise_valid_object_is_an_input_error(tmp_path: Path) -> None:
    """Deep enough to load, too deep to copy into a remediation manifest: still exit 2 with one line."""
    quota = (b'{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "team-vision"},'
             b' "spec": {"hard": {"requests.nvidia.com/gpu": "4"}, "scopeSelector": ' + _deep_json(900) + b"}}")
    snap = _snapshot_with(tmp_path, "quota.json", quota)
    res = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(snap), "--emit-manifests",
                                    str(tmp_path / "fixes")], catch_exceptions=False)
    assert res.exit_code in (1, 2) and "Traceback" not in res.output
    if res.exit_code == 2:
        assert "nested too deeply" in res.stderr and len(res.stderr.splitlines()) == 1


def test_a_symlink_to_dev_zero_is_refused_not_read(tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLE, snap)
    (snap / "zero.yaml").symlink_to("/dev/zero")
    err = _run_cli(tmp_path, snap)
    assert "zero.yaml: a character device, not a regular file" in err.splitlines()[0]
    alone = tmp_path / "alone.json"
    alone.symlink_to("/dev/zero")
    assert "alone.json: a character device, not a regular file" in _run_cli(tmp_path, alone)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    """Run as a separate process with a deadline: a reader that opened the FIFO would block forever."""
    import os
    import subprocess
    import sys

    snap = tmp_path / "snap"
    shutil.copytree(EXAMPLE, snap)
    os.mkfifo(snap / "pipe.json")
    fifo_root = tmp_path / "root.json"
    os.mkfifo(fifo_root)
    for target, name in ((snap, "pipe.json"), (fifo_root, "root.json")):
        res = subprocess.run([sys.executable, "-m", "bridge", "migrate-report", "--snapshot", str(target)],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and res.stdout == ""
        assert f"{name}: a FIFO, not a regular file" in res.stderr and "Traceback" not in res.stderr


def test_files_over_the_size_limit_are_refused_before_reading(tmp_path: Path) -> None:
    snap = _snapshot_with(tmp_path, "big.yaml", b"# padding\n" * 200_000)  # 2 MB
    res = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(snap), "--max-file-size", "1Mi"])
    assert res.exit_code == 2 and "big.yaml: 1.9 MiB, more than 1.0 MiB, the per-file limit (--max-file-size)" \
        in res.stderr.splitlines()[0]
    assert CliRunner().invoke(main, ["migrate-report", "--snapshot", str(snap), "--max-file-size", "4Mi",
                                     "-o", "json"]).exit_code == 1  # the limit is overridable


def test_a_gzip_bomb_is_cut_off_at_the_limit(tmp_path: Path) -> None:
    bomb = gzip.compress(b" " * (8 * 2**20))  # 8 MiB of spaces in a few KiB
    snap = _snapshot_with(tmp_path, "bomb.yaml.gz", bomb)
    res = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(snap), "--max-file-size", "1Mi"],
                             env={"BRIDGE_REPORT_MAX_FILE_SIZE": ""})
    assert res.exit_code == 2 and "bomb.yaml.gz: decompresses to more than 1.0 MiB" in res.stderr


def test_the_size_limit_is_validated_and_settable_by_environment(tmp_path: Path) -> None:
    assert CliRunner().invoke(main, ["migrate-report", "--snapshot", str(EXAMPLE), "--max-file-size", "lots"]
                              ).exit_code == 2
    res = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(EXAMPLE)],
                             env={"BRIDGE_REPORT_MAX_FILE_SIZE": "1Ki"})
    assert res.exit_code == 2 and "the per-file limit" in res.stderr
    assert "BRIDGE_REPORT_MAX_FILE_SIZE" in CliRunner().invoke(main, ["migrate-report", "--help"]).output


# ---- hostile objects in the cluster (issue 27): one object's problem is a finding on it, never the whole report --

DEEP = "[" * 50_000 + "]" * 50_000  # 100 KB: RecursionError in json.loads, which the annotation readers let escape
BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"] + [
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)]
    + ["version: *i", "flags: {migStrategy: single}", ""])  # 516 bytes in the issue: 87 s and 5.65 GB in str()


def test_a_live_report_of_a_cluster_with_hostile_objects_names_each_on_its_object_and_exits_as_usual(
        tmp_path: Path) -> None:
    """A node whose split status and decision record are deep JSON (the live report once refused the whole cluster,
    exit 2), a workload asking "1e400" GPUs (exit 1 with a traceback), a device-plugin config that is a YAML alias
    bomb. The report still reads the cluster: exit 1 for its blockers, as for the example alone."""
    import json

    from bridge.kube import CONFIG_MAPS, DEPLOYMENTS, NODES, connect
    from bridge.sandbox.apiserver import ApiServer

    with ApiServer(version="1.36.2") as srv:
        srv.load_dir(EXAMPLE)
        kc = srv.write_kubeconfig(tmp_path / "kc")
        api = connect(kc)
        api.patch(NODES, "gpu-h100-1", {"metadata": {"annotations": {
            "dra-bridge.io/split-status": DEEP, "dra-bridge.io/split-decision": DEEP}}})
        api.create(CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "bomb", "namespace": "default"},
                                 "data": {"config.yaml": BOMB}}, "default")
        pod_spec = spec(container({"nvidia.com/gpu": 1}))
        pod_spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1e400"
        api.create(DEPLOYMENTS, deployment("huge", "team-vision", pod_spec=pod_spec), "team-vision")
        res = CliRunner().invoke(main, ["migrate-report", "--kubeconfig", str(kc), "-o", "json"],
                                 catch_exceptions=False)
    assert res.exit_code == 1, res.output
    found = {(f["rule"], f["object"]["name"]): f["message"] for f in json.loads(res.stdout)["findings"]}
    assert "nested deeper than 64 levels" in found[("DRB013", "gpu-h100-1")]
    assert "nested deeper than 64 levels" in found[("DRB014", "gpu-h100-1")]
    assert "is out of range" in found[("DRB057", "huge")]
    assert any(rule == "DRB056" and "YAML aliases are not accepted" in message
               for (rule, _), message in found.items())


def test_the_table_escapes_control_characters_in_finding_messages() -> None:
    """Issue 27 item 10: messages quote what the cluster holds (a pending reason from a node's split status, a
    config value): ESC or CR there must not reach the terminal."""
    from dataclasses import replace

    from bridge.report import load_snapshot, run_report
    from bridge.report.findings import Finding, ObjectRef
    from bridge.report.render.table import render_table

    report = run_report(load_snapshot(EXAMPLE)).report
    sneaky = Finding("DRB013", "warning", ObjectRef("Node", "", "gpu-h100-1"),
                     "the node daemon has not moved 1 GPU(s) yet: \x1b]0;owned\x07gpu-1 held\r", "fix \x1b[2J")
    text = render_table(replace(report, findings=[sneaky]), colour=False)
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "\\x1b]0;owned\\x07gpu-1 held\\r" in text and "fix \\x1b[2J" in text


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32"])
def test_a_snapshot_saved_as_utf16_or_utf32_with_a_byte_order_mark_reads_as_its_utf8_original(
        tmp_path: Path, codec: str) -> None:
    """PowerShell's '>' writes `kubectl get -o json` as UTF-16 LE with a byte-order mark: such a snapshot gives the
    same report as the UTF-8 one (every file converted, JSON and YAML alike)."""
    snap = tmp_path / EXAMPLE.name  # the report names the snapshot by its directory
    shutil.copytree(EXAMPLE, snap)
    for f in snap.iterdir():
        if f.suffix in (".yaml", ".json"):
            bom = {"utf-16-be": b"\xfe\xff"}.get(codec, b"")  # "utf-16" and "utf-32" write their own mark
            f.write_bytes(bom + f.read_text(encoding="utf-8").encode(codec))
    original = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(EXAMPLE), "-o", "json"])
    converted = CliRunner().invoke(main, ["migrate-report", "--snapshot", str(snap), "-o", "json"])
    assert converted.exit_code == original.exit_code, converted.stderr
    assert converted.stdout.replace(str(snap), str(EXAMPLE)) == original.stdout


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\xff\xfe\x41\xd8", "it starts with a UTF-16 byte-order mark but is not UTF-16 text"),
        (b"kind: Pod\nmetadata: {name: \xc3\x28}\n",
         "not UTF-8 text ('utf-8' codec can't decode byte 0xc3 in position 27: invalid continuation byte). Save it "
         "as UTF-8"),
    ],
)
def test_text_in_no_encoding_read_is_named_with_what_to_save_it_as(tmp_path: Path, content: bytes,
                                                                   expected: str) -> None:
    err = _run_cli(tmp_path, _snapshot_with(tmp_path, "odd.yaml", content))
    assert err.startswith("Error: ") and "odd.yaml: cannot read: " + expected in err.splitlines()[0]
