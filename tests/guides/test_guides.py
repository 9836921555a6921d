"""Each migration guide, run command by command against one sandbox cluster, in order, with what its Verify section
promises checked in the cluster (and in the commands' output), not just the exit codes.

The guides are the stages of one migration (tests/guides/world.py); each test runs its guide after the earlier ones.
"""

from __future__ import annotations

import json

import pytest

from bridge.kube.api import NAMESPACES, PODS, RESOURCE_QUOTAS
from tests.guides import checks, markdown
from tests.guides.checks import eventually, no_gpu_shared
from tests.guides.world import GuideWorld

NODE, NODE2, NS = "gpu-a", "gpu-b", "team-a"
# A test run alone runs every earlier guide first: minutes on a loaded machine.
pytestmark = pytest.mark.timeout(600)


def test_01_first_node_is_handed_over_and_its_running_pods_keep_their_gpus(world: GuideWorld) -> None:
    ran = world.run("01-first-node", through="before")
    pods_before = {k: p["metadata"]["uid"] for k, p in checks.running_gpu_pods(world).items()
                   if p["spec"].get("nodeName") == NODE}
    gpus_before = checks.legacy_devices(world, NODE)
    assert sorted(pods_before) == sorted(gpus_before) and len(pods_before) == 2, (pods_before, gpus_before)
    for name in pods_before:
        assert name.split("/")[1] in ran["before"].stdout  # the listing the guide tells you to keep
    assert NODE in ran["before"].stdout and "true" in ran["before"].stdout  # gpu.deploy.device-plugin=true

    ran = world.run("01-first-node", through="installed")
    assert "STATUS: deployed" in ran["install"].stdout
    assert ran["installed"].stdout.split("\n")[1].split()[1:3] == ["0", "0"]  # DESIRED 0, CURRENT 0
    assert set(world.workloads.vendor) == {NODE, NODE2} and not world.workloads.running("node")

    ran = world.run("01-first-node", through="image")
    # The image is pulled on the node while the vendor plugin still serves it; the check pod is gone after.
    assert f"pulled on {NODE}" in ran["image"].stdout and set(world.workloads.vendor) == {NODE, NODE2}
    assert not [p for p in world.api.list(PODS, "dra-bridge")["items"]
                if p["metadata"]["name"] == "dra-bridge-image-check" and not p["metadata"].get("deletionTimestamp")]

    ran = world.run("01-first-node", through="verify")
    # The vendor plugin left the node before the bridge came; the bridge runs there and only there.
    assert set(world.workloads.vendor) == {NODE2}
    assert set(world.workloads.running("node")) == {NODE}
    # The same pods, not restarted, on the same GPUs, adopted by the bridge: every GPU legacy, the holders listed.
    assert {k: p["metadata"]["uid"] for k, p in checks.running_gpu_pods(world).items()
            if p["spec"].get("nodeName") == NODE} == pods_before
    assert checks.legacy_devices(world, NODE) == gpus_before
    status = checks.split_status(world, NODE)
    assert status["state"] == "converged" and status["counts"] == {"legacy": 8, "dra": 0, "withdrawn": 0}
    held = {d["uuid"]: d["holders"] for d in status["devices"] if d["holders"]}
    for name, uuids in gpus_before.items():
        for uuid in uuids:
            assert any(f"pod {name} " in h for h in held[uuid]), (uuid, held)
    out = ran["verify"].stdout
    assert "state: converged" in out and "0 of 8 GPUs on DRA" in out
    assert all(name.split("/")[1] in out for name in pods_before)
    assert "\n8\n" in out  # allocatable nvidia.com/gpu is the node's GPU count again
    assert checks.allocatable_gpus(world, NODE) == 8
    no_gpu_shared(world)

    # Troubleshooting: restarting the node daemon is safe (re-registers, re-adopts, nothing moves).
    old = world.workloads.running("node")[NODE].pod
    ran = world.run("01-first-node")
    new = world.workloads.running("node")[NODE].pod
    assert new != old
    assert checks.legacy_devices(world, NODE) == gpus_before
    eventually(lambda: _assert(checks.allocatable_gpus(world, NODE) == 8), "allocatable after the restart")
    assert "dra-bridge.io/node" in ran["labels"].stdout.split("\n")[0].replace(" ", "") or "NODE" in \
        ran["labels"].stdout
    no_gpu_shared(world)


def test_02_report_blockers_are_worked_through_until_it_exits_0(world: GuideWorld) -> None:
    ran = world.run("02-report", through="plan")
    out = ran["report"].stdout
    assert "Overall: blocked" in out and "DRB020" in out and "DRB030" in out
    assert _row(out, "team-c")[2] == "blocked" and _row(out, "gpu-a")[1] == "bridge" \
        and _row(out, "gpu-b")[1] == "device-plugin"
    clone = world.home / "clone"
    fixes = sorted(p.name for p in (clone / "fixes").iterdir() if not p.name.startswith("."))  # not its index
    assert fixes == ["mig-1g.10gb.yaml", "quota-team-b-gpus.yaml", "wave-plan.sh"]
    assert (clone / "report.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert '"$BRIDGE" namespace set team-a shadow' in ran["plan"].stdout  # the wave plan, printed by `cat`
    assert "team-c: DRB020" in ran["plan"].stdout  # blocked: not planned

    ran = world.run("02-report", through="assume")
    quota = world.api.get(RESOURCE_QUOTAS, "gpus", "team-b")
    assert quota["spec"]["hard"]["gpu.dra-bridge.io.deviceclass.resource.k8s.io/devices"] == "4"
    (notebook,) = checks.running_gpu_pods(world, "team-c").values()
    assert checks.api_of(notebook) == "legacy" and "mig" not in json.dumps(notebook["spec"])
    assert ran["assume"].stdout.strip() == "0"  # with 2 GPUs per node on DRA, no capacity finding is left

    ran = world.run("02-report", through="verify")
    out = ran["verify"].stdout  # exit 0 checked by the runner: no blockers
    assert "Overall: blocked" not in out and "DRB020" not in out and "DRB030" not in out
    assert 'namespace set team-c shadow' in out and 'namespace set team-c dra' in out

    ran = world.run("02-report")
    assert (world.home / "clone" / "my-cluster").is_dir() and (world.home / "clone" / "offline.md").exists()
    assert "team-c" in (world.home / "clone" / "offline.md").read_text()


def test_03_first_namespace_goes_through_shadow_to_dra_and_only_new_pods_change(world: GuideWorld) -> None:
    world.run("02-report")
    ran = world.run("03-first-namespace", through="shadow-restart")
    assert "legacy -> shadow" in ran["shadow"].stdout and "WARNING" not in ran["shadow"].stderr
    # `set` returned once the webhook applied shadow (a dry-run probe pod), so the restart's pods were recorded
    assert "a GPU pod created in team-a now gets shadow from the webhook" in ran["shadow"].stdout
    pods = checks.running_gpu_pods(world, NS)
    assert len(pods) == 2
    for p in pods.values():  # shadow: recorded, not changed
        assert checks.api_of(p) == "legacy"
        record = json.loads(p["metadata"]["annotations"]["dra-bridge.io/shadow-translation"])
        assert record["ok"] is True and record["target"] == "claims"

    ran = world.run("03-first-namespace", through="metric")
    row = _row(ran["findings"].stdout, NS)
    assert row[1] == "shadow" and row[6] == "2"  # SHADOW-OK
    assert "0 never reached the webhook" in ran["findings"].stdout
    assert all(name.split("/")[1] in ran["findings"].stdout for name in pods)
    (metric,) = [ln for ln in ran["metric"].stdout.splitlines() if 'mode="shadow"' in ln]
    assert float(metric.split()[-1]) >= 2

    ran = world.run("03-first-namespace", through="move")
    # the guide waits for the slice; the daemon's status annotation follows (written at most once a second, after a
    # move's last step): wait for it rather than read it once
    def converged() -> dict:
        status = checks.split_status(world, NODE)
        assert status["state"] == "converged" and status["counts"]["dra"] == 2
        return status

    status = eventually(converged, f"{NODE}'s split status to show 2 DRA GPUs, converged", timeout=30)
    assert len(checks.slice_devices(world, NODE)) == 2 and checks.allocatable_gpus(world, NODE) == 6
    for p in pods.values():  # the running pods kept their GPUs through the move
        assert p["metadata"]["name"] in json.dumps(status["devices"])

    ran = world.run("03-first-namespace", through="verify")
    assert "now gets dra from the webhook: translated (claims)" in ran["dra"].stdout
    now = checks.running_gpu_pods(world, NS)
    assert len(now) == 2 and not set(now) & set(pods)  # replaced ...
    assert all(checks.api_of(p) == "dra" for p in now.values())  # ... by pods that get GPUs through DRA
    on_dra = {d["name"] for d in checks.split_status(world, NODE)["devices"] if d["side"] == "dra"}
    held = checks.dra_devices(world, NODE)
    assert sorted(held) == sorted(now) and {v[0].split("/")[1] for v in held.values()} == on_dra
    assert not [k for k in checks.legacy_devices(world, NODE) if k.startswith(f"{NS}/")]  # the old pods' GPUs: back
    row = _row(ran["verify"].stdout, NS)
    assert row[1] == "dra" and row[3] == "0" and row[4] == "2"  # LEGACY-GPU-PODS 0, TRANSLATED 2
    assert "allocated,reserved" in ran["verify"].stdout and "\n6\n" in ran["verify"].stdout
    no_gpu_shared(world)
    ran = world.run("03-first-namespace")
    assert '"dra-bridge.io/translated":"claims"' in ran["probe"].stdout  # by hand: what a new GPU pod gets now
    assert "gpu-probe" not in json.dumps(world.pods(NS))  # a dry run: nothing created


def test_04_gpus_move_only_when_free_and_the_controller_acts_only_after_its_dry_run(world: GuideWorld) -> None:
    world.run("03-first-namespace")  # where guide 04 starts (run here when this test runs alone)
    others = {k: (p["metadata"]["uid"], p["spec"]["nodeName"]) for k, p in checks.running_gpu_pods(world).items()
              if p["spec"]["nodeName"] == NODE2}
    gpus_before = checks.legacy_devices(world, NODE2)
    ran = world.run("04-node-split", through="status")
    # One node at a time with guide 01's checks: gpu-b's image pulled, its split converged, all legacy.
    out = ran["hand-over"].stdout
    assert f"pulled on {NODE2}" in out and f"handed over {NODE2}: every GPU on the device-plugin side" in out
    assert f"handed over: {NODE2}" in out and "blocked by the report" not in out
    assert set(world.workloads.running("node")) == {NODE, NODE2} and not world.workloads.vendor
    assert {k: (p["metadata"]["uid"], p["spec"]["nodeName"]) for k, p in checks.running_gpu_pods(world).items()
            if p["spec"]["nodeName"] == NODE2} == others
    assert checks.legacy_devices(world, NODE2) == gpus_before and sorted(gpus_before) == sorted(others)
    assert "0 of 8 GPUs on DRA" in ran["status"].stdout

    ran = world.run("04-node-split", through="all")
    status = checks.split_status(world, NODE2)
    held = {d["name"] for d in status["devices"] if d["holders"]}
    busy = len(others)
    assert status["state"] == "converging" and status["counts"] == {"legacy": busy, "dra": 8 - busy, "withdrawn": 0}
    assert {p["device"] for p in status["pending"]} == held and all(p["phase"] == "held" for p in status["pending"])
    assert "will move when free" in ran["all"].stdout
    assert checks.legacy_devices(world, NODE2) == gpus_before  # nobody was evicted

    ran = world.run("04-node-split", through="names")
    # the guide waits for allocatable and the slice; the status annotations follow within a second or so
    def node2_back_on_legacy() -> None:
        assert checks.split_status(world, NODE2)["counts"]["dra"] == 0

    eventually(node2_back_on_legacy, f"{NODE2}'s split status to count no DRA GPU", timeout=30)
    annotation = world.node(NODE)["metadata"]["annotations"]["dra-bridge.io/dra-devices"]
    assert annotation == ",".join(checks.slice_devices(world, NODE)) and annotation.count(",") == 1

    def node_converged() -> None:
        assert checks.split_status(world, NODE)["state"] == "converged"

    eventually(node_converged, f"{NODE}'s split status to be converged", timeout=30)

    ran = world.run("04-node-split", through="demand")
    assert len(world.workloads.running("controller")) == 2
    args = ran["controller-dry-run"].stdout.splitlines()[-1]
    assert '"--dry-run"' in args and '"--policy-configmap=dra-bridge/dra-bridge-split-policy"' in args
    decision = json.loads(world.node(NODE)["metadata"]["annotations"]["dra-bridge.io/split-decision"])
    assert decision["dryRun"] is True and decision["target"] == "4" and decision["previous"] == annotation
    assert world.node(NODE)["metadata"]["annotations"]["dra-bridge.io/dra-devices"] == annotation  # nothing written
    assert "SplitTargetWouldChange" in ran["demand"].stdout
    assert len(checks.running_gpu_pods(world, NS)) == 2  # the two new trainers wait

    ran = world.run("04-node-split", through="verify")
    logs = "".join(p.read_text() for p in world.workloads.dir.glob("controller-*.log"))
    assert "policy: min legacy share 0.25" in logs  # the ConfigMap's policy, not the flags'
    assert "InvalidPolicy" not in logs
    assert world.node(NODE)["metadata"]["annotations"]["dra-bridge.io/dra-devices"] == "4"
    assert "SplitTargetChanged" in ran["verify"].stdout
    trainers = checks.running_gpu_pods(world, NS)
    assert len(trainers) == 4 and all(checks.api_of(p) == "dra" for p in trainers.values())
    assert sorted(checks.dra_devices(world, NODE)) == sorted(trainers)
    assert checks.legacy_devices(world, NODE2) == gpus_before
    no_gpu_shared(world)
    ran = world.run("04-node-split")
    assert "No resources found" in ran["policy-events"].stderr  # no InvalidPolicy Event: the policy is in force


def test_05_finishing_leaves_every_gpu_pod_on_dra_and_the_legacy_side_empty(world: GuideWorld) -> None:
    world.run("04-node-split")
    ran = world.run("05-finishing", through="replace")
    assert "namespace set team-a" not in ran["waves"].stdout  # already dra: not planned again
    modes = {n: (world.api.get(NAMESPACES, n)["metadata"].get("labels") or {}).get("dra-bridge.io/mode")
             for n in ("team-a", "team-b", "team-c")}
    assert modes == {"team-a": "dra", "team-b": "dra", "team-c": "dra"}
    pods = checks.running_gpu_pods(world)
    assert len(pods) == 6 and all(checks.api_of(p) == "dra" for p in pods.values()), pods.keys()

    ran = world.run("05-finishing", through="verify")
    assert not world.workloads.running("controller")
    for node in (NODE, NODE2):
        def all_dra(node: str = node) -> None:  # the guide waits for the slices; the status follows
            status = checks.split_status(world, node)
            assert status["state"] == "converged" and status["counts"]["dra"] == 8

        eventually(all_dra, f"{node}'s split status to show 8 DRA GPUs, converged", timeout=30)
        assert checks.allocatable_gpus(world, node) == 0 and not checks.legacy_devices(world, node)
    table = ran["verify"].stdout.split("LEGACY-GPUS", 1)[1].splitlines()[1:3]
    assert [ln.split() for ln in table] == [[NODE, "0"], [NODE2, "0"]]
    no_gpu_shared(world)
    world.run("05-finishing")


def test_06_rolling_back_every_stage_returns_the_cluster_to_the_vendor_device_plugin(world: GuideWorld) -> None:
    world.run("05-finishing")
    world.run("06-rolling-back", through="stage3")
    pods = checks.running_gpu_pods(world)
    assert len(pods) == 4 and all(checks.api_of(p) == "legacy" for p in pods.values())
    for node in (NODE, NODE2):
        # the daemon's status annotation follows its ledger (written at most once a second, after a move's last
        # step): wait for it rather than read it once
        def no_dra(node: str = node) -> None:
            assert checks.split_status(world, node)["counts"]["dra"] == 0

        eventually(no_dra, f"{node}'s split status to count no DRA GPU", timeout=30)
    no_gpu_shared(world)

    ran = world.run("06-rolling-back", through="verify")
    assert set(world.workloads.vendor) == {NODE, NODE2} and not world.workloads.running("node")
    assert {k: p["metadata"]["uid"] for k, p in checks.running_gpu_pods(world).items()} == \
        {k: p["metadata"]["uid"] for k, p in pods.items()}  # handing the nodes back restarted nobody
    for node in (NODE, NODE2):
        assert checks.allocatable_gpus(world, node) == 8
        assert sum(len(v) for v in checks.legacy_devices(world, node).values()) == \
            sum(1 for p in pods.values() if p["spec"]["nodeName"] == node)
    assert not world.api.list(world.api.resource_api().slices)["items"]
    assert not world.api.list(world.api.resource_api().claims)["items"]
    report = json.loads((world.home / "clone" / "after-rollback.json").read_text())
    assert {n["name"]: n["backends"] for n in report["nodes"]} == {NODE: ["device-plugin"], NODE2: ["device-plugin"]}
    assert all(n["mode"] == "legacy" for n in report["namespaces"])
    no_gpu_shared(world)


def test_every_command_of_every_guide_ran(world: GuideWorld) -> None:
    """What the story above ran (blocks marked real-cluster-only excepted; those marked real-backend run in
    tests/guides/test_real_cluster.py, the standalone-chart ones in tests/guides/test_first_node_standalone.py)."""
    world.run("06-rolling-back")
    expected = {(b.guide, b.line) for name in markdown.guide_names() for b in markdown.load(name).commands()
                if b.runs_in("gpu-operator")}
    assert expected - set(world.ran) == set()


def _row(table: str, first: str) -> list[str]:
    for line in table.splitlines():
        cells = line.split()
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{table}")


def _assert(cond: bool) -> bool:
    assert cond
    return True
