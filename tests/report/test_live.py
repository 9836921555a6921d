"""Live mode against the API emulator loaded with the example snapshot: same findings as snapshot mode, partial
results on Forbidden, and a `snapshot` round trip."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge.cli import main
from bridge.kube import connect
from bridge.report import build_report, load_snapshot
from bridge.report.live import Progress, load_live
from bridge.report.sources import KINDS
from bridge.sandbox.apiserver import ApiServer
from tests.report.conftest import EXAMPLE, load_example


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    with ApiServer(version="1.36.2") as srv:
        load_example(srv)
        yield srv


@pytest.fixture
def kubeconfig(server: ApiServer, tmp_path: Path) -> Path:
    return server.write_kubeconfig(tmp_path / "kubeconfig")


def _without_crds():  # type: ignore[no-untyped-def]
    """The example as the emulator serves it: every built-in kind, none of the CRDs (the emulator serves no
    ClusterPolicy or Kueue queue, and skips the example's crds.yaml.gz)."""
    data = load_snapshot(EXAMPLE)
    for kind in ("ClusterPolicy", "ClusterQueue", "LocalQueue"):
        data.objects[kind] = []
    return data


def _facts(report) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [(f.rule, f.severity, f.object.kind, f.object.namespace, f.object.name, f.message) for f in report.findings]


def test_live_scan_gives_the_same_findings_as_the_snapshot(kubeconfig: Path) -> None:
    snap = build_report(load_snapshot(EXAMPLE))
    progress_out = io.StringIO()
    live_data = load_live(connect(kubeconfig), progress=Progress(progress_out, enabled=True), page_size=7)
    live = build_report(live_data)
    assert live_data.unreadable == {}
    assert _facts(live) == _facts(snap)
    assert [(r.name, r.status) for r in live.namespaces] == [(r.name, r.status) for r in snap.namespaces]
    assert "scanning pods" in progress_out.getvalue()  # pages of 7 drive the progress line


def test_forbidden_resource_is_named_and_the_rest_is_scanned(server: ApiServer, kubeconfig: Path) -> None:
    server.faults.fail(count=1000, status=403, path_regex=r"/resourcequotas")
    try:
        data = load_live(connect(kubeconfig))
    finally:
        server.faults.clear()
    assert data.unreadable["resourcequotas"] == ("forbidden: the credentials may not list resourcequotas (add a "
                                                 "ClusterRole rule: verbs [list] on resourcequotas)")
    assert len(data.of("Pod")) == len(load_snapshot(EXAMPLE).of("Pod"))
    report = build_report(data)
    assert any(f.rule == "DRB000" and f.object.name == "resourcequotas" for f in report.findings)
    assert not any(f.rule == "DRB030" for f in report.findings)


def test_forbidden_group_resource_names_its_api_group_in_the_cli_output(server: ApiServer, kubeconfig: Path) -> None:
    server.faults.fail(count=1000, status=403, path_regex=r"/resourceslices")
    try:
        res = CliRunner().invoke(main, ["migrate-report", "--kubeconfig", str(kubeconfig), "-o", "json"],
                                 catch_exceptions=False)
    finally:
        server.faults.clear()
    doc = json.loads(res.stdout)
    gap = next(f for f in doc["findings"] if f["rule"] == "DRB000")
    assert gap["object"] == {"kind": "Resource", "namespace": "", "name": "resourceslices"}
    assert "may not list resourceslices.resource.k8s.io" in gap["message"]
    assert "get/list" in gap["fix"]
    assert len(doc["nodes"]) == len(build_report(load_snapshot(EXAMPLE)).nodes)  # the rest was still scanned


def test_applying_the_emitted_manifests_clears_their_findings(tmp_path: Path) -> None:
    """The remediation YAML is accepted by the API emulator (schema-validated create), and a rescan of the cluster
    with it applied no longer reports what it fixes."""
    import yaml

    from bridge.report import run_report

    before = run_report(load_snapshot(EXAMPLE))
    docs = [d for name, text in sorted(before.manifests.items()) if name.endswith(".yaml")
            for d in yaml.safe_load_all(text)]
    replaced = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in docs}
    assert ("ResourceQuota", "team-vision", "gpu-quota") in replaced
    example = _without_crds()
    kept = [o for kind in KINDS for o in example.of(kind)
            if (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) not in replaced]
    with ApiServer(version="1.36.2") as srv:
        srv.load_objects(kept)
        assert srv.load_objects(docs) == len(docs)
        after = build_report(load_live(connect(srv.write_kubeconfig(tmp_path / "kc"))))
    assert [f for f in before.report.findings if f.rule == "DRB030"]
    assert not [f for f in after.findings if f.rule == "DRB030"]
    mig = next(d for d in docs if d["kind"] == "DeviceClass")
    assert mig["spec"]["extendedResourceName"] == "nvidia.com/mig-1g.10gb"
    assert any((c.get("metadata") or {}).get("name") == mig["metadata"]["name"] for c in after.model.device_classes)


def test_snapshot_command_round_trip(kubeconfig: Path, tmp_path: Path) -> None:
    out = tmp_path / "snap"
    res = CliRunner().invoke(main, ["migrate-report", "--kubeconfig", str(kubeconfig), "snapshot", "--out", str(out)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert json.loads((out / "version.json").read_text())["serverVersion"]["gitVersion"] == "v1.36.2"
    again = build_report(load_snapshot(out))
    assert _facts(again) == _facts(build_report(load_snapshot(EXAMPLE)))


def _lists(out: Path) -> dict[str, object]:
    return {p.name: json.loads(p.read_bytes()) for p in sorted(out.glob("*.json"))}


def test_a_live_snapshot_writes_what_the_server_sends_as_the_whole_scan_would(kubeconfig: Path, tmp_path: Path) -> None:
    from bridge.report.live import snapshot_live, write_snapshot

    api = connect(kubeconfig)
    progress_out = io.StringIO()
    snap = snapshot_live(api, tmp_path / "paged", progress=Progress(progress_out, enabled=True), page_size=7)
    whole = load_live(api, whole=True)
    write_snapshot(whole, tmp_path / "whole")
    assert _lists(tmp_path / "paged") == _lists(tmp_path / "whole")
    assert sorted(p.name for p in (tmp_path / "paged").iterdir()) == sorted(p.name for p in snap.files)
    assert snap.counts == {kind: len(whole.of(kind)) for kind in KINDS} and snap.counts["Pod"] > 7
    assert snap.unreadable == {} and "scanning pods" in progress_out.getvalue()


def test_every_file_of_a_snapshot_reaches_the_disk_before_its_name_does(kubeconfig: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file of a snapshot, live or written from data, is fsynced under its hidden name before it is renamed to
    its own, and the directory after: a power cut leaves the older file or the whole new one, never an empty file
    under the final name."""
    from bridge.report.live import snapshot_live, write_snapshot

    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def recorded_fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def recorded_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("rename", str(dst)))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    api = connect(kubeconfig)
    for out, files in ((tmp_path / "live", lambda out: snapshot_live(api, out).files),
                       (tmp_path / "data", lambda out: write_snapshot(load_live(api, whole=True), out))):
        events.clear()
        written = files(out)
        assert len(written) > len(KINDS) - 1
        for path in written:
            at = events.index(("rename", str(path)))
            assert any(kind == "fsync" and Path(what).parent == out and Path(what).name.startswith(f".{path.name}.")
                       for kind, what in events[:at]), (path, events[:at])
            assert ("fsync", str(out)) in events[at:], (path, events[at:])


def test_a_snapshot_that_fails_midway_leaves_the_directory_as_it_was(server: ApiServer, kubeconfig: Path,
                                                                     tmp_path: Path) -> None:
    """The API server refuses the pod list outright (400): no file of the new snapshot is written, not even the lists
    read before it, and an older snapshot in the directory stays whole."""
    out = tmp_path / "snap"
    first = CliRunner().invoke(main, ["migrate-report", "--kubeconfig", str(kubeconfig), "snapshot", "--out", str(out)],
                               catch_exceptions=False)
    assert first.exit_code == 0, first.output
    before = _lists(out)
    server.faults.fail(count=1000, status=400, path_regex=r"/pods$")
    try:
        res = CliRunner().invoke(main, ["migrate-report", "--kubeconfig", str(kubeconfig), "snapshot", "--out",
                                        str(out)], catch_exceptions=False)
    finally:
        server.faults.clear()
    assert res.exit_code == 2 and "Error:" in res.output and "Traceback" not in res.output, res.output
    assert _lists(out) == before and not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_a_snapshot_names_only_its_own_unreadable_resources(server: ApiServer, kubeconfig: Path,
                                                           tmp_path: Path) -> None:
    """Written into the directory of an older snapshot that could not read quotas, a snapshot that read everything
    leaves no unreadable.json behind to say otherwise."""
    from bridge.report.live import snapshot_live

    out = tmp_path / "snap"
    server.faults.fail(count=1000, status=403, path_regex=r"/resourcequotas")
    try:
        first = snapshot_live(connect(kubeconfig), out)
    finally:
        server.faults.clear()
    assert "resourcequotas" in first.unreadable and load_snapshot(out).unreadable.keys() == {"resourcequotas"}
    second = snapshot_live(connect(kubeconfig), out)
    assert second.unreadable == {} and load_snapshot(out).unreadable == {}
    assert not (out / "unreadable.json").exists() and second.counts["ResourceQuota"] > 0


def test_a_snapshot_into_a_path_that_cannot_be_a_directory_says_so(kubeconfig: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    res = CliRunner().invoke(main, ["migrate-report", "--kubeconfig", str(kubeconfig), "snapshot", "--out",
                                    str(blocker / "snap")], catch_exceptions=False)
    assert res.exit_code == 2 and f"cannot write the snapshot to {blocker / 'snap'}" in res.output, res.output


def test_a_snapshot_whose_list_starts_again_writes_each_object_once(tmp_path: Path) -> None:
    """A continue token that expires mid-list (the server's history moved on) lists again from the first page: the
    file written so far starts again too."""
    from bridge.report.live import snapshot_live

    class Churn(Progress):
        def update(self, label: str, count: int) -> None:
            if label == "configmaps" and count == 100 and not churned:
                churned.append(True)
                for i in range(20):
                    srv.load_objects([{"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": f"late-{i:02d}", "namespace": "default"}}])

    churned: list[bool] = []
    with ApiServer(version="1.36.2", history_limit=5) as srv:
        srv.load_objects([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i:03d}",
                                                                                "namespace": "default"}}
                          for i in range(250)])
        snap = snapshot_live(connect(srv.write_kubeconfig(tmp_path / "kc")), tmp_path / "snap",
                             progress=Churn(), page_size=100)
    names = [o["metadata"]["name"] for o in load_snapshot(tmp_path / "snap").of("ConfigMap")]
    assert churned and len(names) == len(set(names)) == snap.counts["ConfigMap"] == 270


def test_live_cli_report_exit_code(kubeconfig: Path) -> None:
    res = CliRunner().invoke(main, ["migrate-report", "--kubeconfig", str(kubeconfig), "-o", "json"],
                             catch_exceptions=False)
    assert res.exit_code == 1 and json.loads(res.output)["status"] == "blocked"


def test_wave_plan_commands_run_against_the_cluster_and_match_the_kubectl_form(tmp_path: Path) -> None:
    """Each wave-plan step, run with the real `bridge namespace set`, leaves exactly the label its kubectl
    equivalent names; after the whole plan every planned namespace is in its last mode."""
    import shlex

    from bridge.report import run_report
    from bridge.webhook.policy import MODE_LABEL as WEBHOOK_MODE_LABEL

    plan = run_report(load_snapshot(EXAMPLE)).report.waves
    assert plan
    with ApiServer(version="1.36.2") as srv:
        srv.load_dir(EXAMPLE)
        kc = srv.write_kubeconfig(tmp_path / "kc")
        api = connect(kc)
        for step in plan:
            argv = shlex.split(step.bridge_command)
            assert argv[:3] == ["bridge", "namespace", "set"]
            res = CliRunner().invoke(main, [*argv[1:], "--kubeconfig", str(kc)], catch_exceptions=False)
            assert res.exit_code == 0, res.output
            kubectl = shlex.split(step.kubectl_command)
            assert kubectl[:3] == ["kubectl", "label", "namespace"] and kubectl[3] == step.namespace
            assert "--overwrite" in kubectl
            key, value = kubectl[4].split("=")
            assert key == WEBHOOK_MODE_LABEL
            labels = build_report(load_live(api)).model.namespaces[step.namespace].labels  # type: ignore[union-attr]
            assert labels[key] == value == step.mode


def test_optional_crds_are_listed_only_where_the_server_serves_them() -> None:
    from bridge.kube.api import Discovery
    from bridge.report.live import optional_resources

    bare = Discovery("v1.34.2", 1, 34, {"v1": {"pods": {}}})
    assert optional_resources(bare) == []
    full = Discovery("v1.34.2", 1, 34, {
        "nvidia.com/v1": {"clusterpolicies": {}},
        "kueue.x-k8s.io/v1beta2": {"clusterqueues": {}, "localqueues": {}},
        "kueue.x-k8s.io/v1beta1": {"clusterqueues": {}, "localqueues": {}},
    })
    assert [(r.kind, r.group, r.version) for r in optional_resources(full)] == [
        ("ClusterPolicy", "nvidia.com", "v1"), ("ClusterQueue", "kueue.x-k8s.io", "v1beta2"),
        ("LocalQueue", "kueue.x-k8s.io", "v1beta2")]


def test_snapshot_files_are_named_by_the_resource_plural(tmp_path: Path) -> None:
    from bridge.report.live import write_snapshot

    names = {p.name for p in write_snapshot(load_snapshot(EXAMPLE), tmp_path)}
    assert {"deviceclasses.json", "priorityclasses.json", "resourceslices.json", "clusterpolicies.json"} <= names
    assert not any(n.endswith("sss.json") or n == "priorityclasss.json" for n in names)


def test_a_live_scan_reads_claims_templates_and_leaders_leases_but_not_node_heartbeats(tmp_path: Path) -> None:
    """One Lease per node lives in kube-node-lease: the scan leaves them out (a field selector), and reads the Leases
    components elect leaders with, `bridge controller`'s among them, whose renewal it judges by its own clock."""
    import datetime as dt

    from bridge.kube.leaderelection import micro_time

    now = micro_time(dt.datetime.now(dt.timezone.utc))
    leases = [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": now}}
              for name, ns, holder in (("gpu-h100-1", "kube-node-lease", "gpu-h100-1"),
                                       ("dra-bridge-controller", "dra-bridge", "ctl-0_abc"))]
    example = _without_crds()
    with ApiServer(version="1.36.2") as srv:
        srv.load_objects([o for kind in KINDS for o in example.of(kind)])
        srv.load_objects(leases)
        data = load_live(connect(srv.write_kubeconfig(tmp_path / "kc")))
    assert sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in data.of("Lease")) == [
        ("dra-bridge", "dra-bridge-controller"), ("kube-system", "kube-scheduler")]
    assert {o["metadata"]["name"] for o in data.of("ResourceClaimTemplate")} == {"dra-bridge-gpu-1-fd1f7326"}
    assert len(data.of("ResourceClaim")) == 2 and data.taken_at is not None
    report = build_report(data)
    assert report.controller.state == "unknown-mode"  # held by its Lease, but no Deployment or decision says how
    asr = next(w for w in report.workloads if w.name == "asr-inference")
    assert (asr.api, asr.pods_by_api) == ("dra", {"dra": 2})


def _replica(name: str) -> dict:  # type: ignore[type-arg]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "main", "image": "cuda", "ports": [{"containerPort": 80}],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending", "podIP": "10.0.0.1"}}


def test_a_live_scan_keeps_of_each_pod_what_the_report_reads_and_shares_what_replicas_repeat(tmp_path: Path) -> None:
    with ApiServer(version="1.36.2") as srv:
        srv.load_objects([_replica("web-1"), _replica("web-2")])
        api = connect(srv.write_kubeconfig(tmp_path / "kc"))
        cut = {p["metadata"]["name"]: p for p in load_live(api, page_size=1).of("Pod")}
        whole = {p["metadata"]["name"]: p for p in load_live(api, whole=True).of("Pod")}
    assert cut.keys() == whole.keys() == {"web-1", "web-2"}
    assert whole["web-1"]["status"]["podIP"] == "10.0.0.1" and "podIP" not in cut["web-1"]["status"]
    assert cut["web-1"]["kind"] == "Pod" and cut["web-1"]["status"]["phase"] == "Pending"
    assert cut["web-1"]["spec"]["containers"] is cut["web-2"]["spec"]["containers"], "one list, across pages too"
    assert cut["web-1"]["spec"]["containers"][0]["resources"] == whole["web-1"]["spec"]["containers"][0]["resources"]
    assert "ports" not in cut["web-1"]["spec"]["containers"][0]
    assert whole["web-1"]["spec"]["containers"] is not whole["web-2"]["spec"]["containers"]


def test_a_live_scan_keeps_of_each_node_what_a_snapshot_scan_keeps(tmp_path: Path) -> None:
    """A real kubelet's Node (tests/controller/data: managedFields, the image list) as the emulator serves it: the scan
    drops what no reader reads, as the fast reading of a snapshot's file does (bridge.report.jsonlists)."""
    node = json.loads((Path(__file__).parents[1] / "controller" / "data" / "real-node.json").read_text())
    with ApiServer(version="1.36.2") as srv:
        srv.load_objects([node])
        api = connect(srv.write_kubeconfig(tmp_path / "kc"))
        cut = load_live(api).of("Node")
        whole = load_live(api, whole=True).of("Node")
    assert [n["metadata"]["name"] for n in cut] == [node["metadata"]["name"]] and cut[0]["kind"] == "Node"
    assert "managedFields" in whole[0]["metadata"] and whole[0]["status"]["images"]
    assert "managedFields" not in cut[0]["metadata"] and "images" not in cut[0]["status"]
    assert cut[0]["status"]["allocatable"] == whole[0]["status"]["allocatable"]
    assert cut[0]["metadata"]["annotations"] == whole[0]["metadata"]["annotations"]


def test_a_page_the_schema_does_not_read_is_parsed_whole(kubeconfig: Path) -> None:
    from bridge.kube import PODS
    from bridge.report.jsonlists import Reader

    api = connect(kubeconfig)
    plain = api.list(PODS, page_size=5)
    refused = api.list(PODS, page_size=5, page_decoder=lambda raw: None)
    assert refused["items"] == plain["items"] and len(plain["items"]) > 5
    assert Reader().page(b'{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"p"}},{"kind":"Node",'
                         b'"metadata":{"name":"n"}}]}') is None, "a list that mixes kinds is left to the plain path"
