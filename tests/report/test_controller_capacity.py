"""DRB032 and DRB037 with `bridge controller` in the picture: how the report knows a controller runs and acts, what it
can move (pins, the policy's floors, GPUs a namespace's own pods free), and what the findings say when one runs and
when the split must be raised (or lowered) by hand."""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from bridge.controller.app import DEFAULT_LEASE as APP_LEASE
from bridge.report import run_report
from bridge.cli.controller import controller as controller_command
from bridge.report.splitcontroller import DEFAULT_LEASE, VALUED_OPTIONS, controller_args, detect, reference_time
from bridge.report.sources import ClusterData
from tests.controller.status_docs import gpu_node
from tests.report.conftest import (
    REPO,
    bridge_class,
    cluster,
    container,
    deployment,
    findings,
    gpu_device,
    namespace,
    node,
    pod,
    resource_slice,
    spec,
)

Obj = dict[str, Any]
NOW = "2025-06-01T12:00:00Z"  # the split-status documents' `updated`: the snapshot's newest timestamp
SCHEMA = json.loads((REPO / "bridge" / "report" / "render" / "report.schema.json").read_text())


def lease(holder: str = "dra-bridge-controller-7d9f_x2", renew: str = NOW, name: str = DEFAULT_LEASE,
          ns: str = "dra-bridge", duration: int = 15) -> Obj:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": ns},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renew}}


def controller_deployment(*args: str, ns: str = "dra-bridge", replicas: int = 2, ready: int | None = 2,
                          env: dict[str, str] | None = None, command: list[str] | None = None) -> Obj:
    c: Obj = {"name": "controller", "image": "ghcr.io/dra-bridge/dra-bridge:0.1.0",
              "command": ["bridge", "controller"] if command is None else command, "args": list(args)}
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    d: Obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dra-bridge-controller",
                                                                           "namespace": ns},
              "spec": {"replicas": replicas, "selector": {"matchLabels": {"c": "c"}},
                       "template": {"metadata": {"labels": {"c": "c"}}, "spec": {"containers": [c]}}}}
    if ready is not None:
        d["status"] = {"readyReplicas": ready}
    return d


def record(node_name: str = "a", dry: bool = False, time: str = NOW, controller: str = "ctl-1") -> str:
    return json.dumps({"version": 1, "time": time, "controller": controller, "dryRun": dry, "previous": "0",
                       "target": "2", "fromDra": 0, "toDra": 2, "moves": 2, "direction": "to-dra",
                       "reason": "pending DRA pods", "pods": [], "podCount": 0})


def bridge_node(name: str, sides: list[str], **kw: Any) -> Obj:
    """A bridge node as its daemon reports it (split status), with the allocatable its legacy side gives."""
    n = gpu_node(name, sides, **kw)
    n["status"]["allocatable"] = {"nvidia.com/gpu": str(sides.count("legacy"))}
    n["status"]["nodeInfo"] = {"containerRuntimeVersion": "containerd://2.0.4"}
    return n


def empty_slices(*names: str) -> list[Obj]:
    """The empty ResourceSlice the bridge publishes for a node with every GPU on the legacy side."""
    return [resource_slice(n, []) for n in names]


def two_idle_nodes(**kw: Any) -> list[Obj]:
    return [bridge_node("a", ["legacy"] * 4, **kw), bridge_node("b", ["legacy"] * 4), *empty_slices("a", "b")]


def app(replicas: int = 3, gpus: int = 2, ns: str = "team") -> Obj:
    return deployment("app", ns, replicas, spec(container({"nvidia.com/gpu": gpus})))


def dra_team(*extra: Obj, replicas: int = 3) -> ClusterData:
    return cluster(namespace("team", "dra"), bridge_class(), app(replicas), *extra)


# ---- how the report knows --------------------------------------------------------------------------------------

def test_the_lease_name_is_the_controllers_own() -> None:
    assert DEFAULT_LEASE == APP_LEASE


def test_nothing_of_a_controller_in_the_input_means_absent() -> None:
    c = detect(cluster(namespace("team")))
    assert (c.state, c.acting) == ("absent", False)
    assert "no Deployment runs `bridge controller`" in c.evidence


def test_a_held_lease_and_its_deployment_without_dry_run_act_with_the_deployments_policy() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "split-policy", "namespace": "dra-bridge"},
          "data": {"policy.yaml": "pools:\n  training: {minLegacyShare: 0.5}\n"}}
    c = detect(cluster(lease(), cm, controller_deployment("--no-dry-run", "--min-legacy-share=0.25",
                                                          "--policy-configmap", "dra-bridge/split-policy",
                                                          "--pool-label", "team.example/pool")))
    assert (c.state, c.identity, c.pool_label) == ("acting", "dra-bridge-controller-7d9f_x2", "team.example/pool")
    assert (c.policy.min_legacy_share, c.policy.share("training")) == (0.25, 0.5)
    assert "Lease dra-bridge/dra-bridge-controller is held by dra-bridge-controller-7d9f_x2" in c.evidence
    assert "runs it without --dry-run" in c.evidence


def test_the_charts_default_dry_run_is_seen_in_arguments_and_environment() -> None:
    assert detect(cluster(lease(), controller_deployment("--dry-run"))).state == "dry-run"
    # the variable counts when no flag is given; a flag given later wins over an earlier one and over the variable
    assert detect(cluster(lease(), controller_deployment(env={"BRIDGE_CONTROLLER_DRY_RUN": "true"}))).state == "dry-run"
    env_and_flag = controller_deployment("--dry-run", "--no-dry-run", env={"BRIDGE_CONTROLLER_DRY_RUN": "true"})
    assert detect(cluster(lease(), env_and_flag)).state == "acting"


def test_a_controller_container_is_recognised_however_it_is_started() -> None:
    assert controller_args({"command": ["bridge", "controller"], "args": ["--dry-run"]}) == ["--dry-run"]
    assert controller_args({"command": ["/usr/local/bin/bridge", "controller", "--x"]}) == ["--x"]
    assert controller_args({"command": ["python", "-m", "bridge", "controller"]}) == []
    assert controller_args({"image": "ghcr.io/dra-bridge/dra-bridge:1", "args": ["controller", "--y"]}) == ["--y"]
    assert controller_args({"command": ["bridge", "webhook"]}) is None
    assert controller_args({"image": "busybox", "args": ["controller"]}) is None


def test_an_expired_or_released_lease_means_no_replica_leads() -> None:
    dep = controller_deployment("--no-dry-run")
    later_node = node("cpu-1", 0)
    later_node["status"]["conditions"] = [{"type": "Ready", "status": "True",
                                           "lastHeartbeatTime": "2025-06-01T12:05:00Z"}]
    expired = detect(cluster(lease(), dep, later_node))  # renewed 5 minutes before the newest heartbeat
    assert expired.state == "not-running" and "no replica holds its Lease" in expired.evidence
    released = detect(cluster(lease(holder=""), dep))
    assert released.state == "not-running"
    data = cluster(lease(), dep)
    data.taken_at = reference_time(cluster(lease())) + 3600  # a live scan an hour after the last renewal
    assert detect(data).state == "not-running"


def test_a_scaled_down_or_unready_deployment_does_not_run() -> None:
    assert detect(cluster(controller_deployment(replicas=0, ready=0))).evidence.endswith("is scaled to 0")
    unready = detect(cluster(controller_deployment(ready=0)))
    assert unready.state == "not-running" and "no ready replica (0 of 2)" in unready.evidence


def test_without_leases_in_the_input_ready_replicas_are_taken_as_running() -> None:
    c = detect(cluster(controller_deployment("--no-dry-run")))
    assert c.state == "acting" and "the input holds no Leases" in c.evidence


def test_a_lease_without_a_deployment_takes_its_mode_from_the_holders_own_decisions() -> None:
    holder = "ctl-1"
    dry = detect(cluster(lease(holder=holder), bridge_node("a", ["legacy"] * 4, annotations={
        "dra-bridge.io/split-decision": record(dry=True, controller=holder)})))
    assert dry.state == "dry-run" and not dry.policy_known
    unknown = detect(cluster(lease(holder=holder)))
    assert unknown.state == "unknown-mode" and "cannot be told" in unknown.evidence
    # another controller's records say nothing about this holder
    other = detect(cluster(lease(holder=holder), bridge_node("a", ["legacy"] * 4, annotations={
        "dra-bridge.io/split-decision": record(controller="someone-else")})))
    assert other.state == "unknown-mode"


def test_decision_records_alone_count_while_they_are_fresh() -> None:
    fresh = detect(cluster(bridge_node("a", ["legacy"] * 4, annotations={
        "dra-bridge.io/split-decision": record()})))
    assert fresh.state == "acting" and "recorded a decision on node a" in fresh.evidence
    dry = detect(cluster(bridge_node("a", ["legacy"] * 4, annotations={
        "dra-bridge.io/split-decision": record(dry=True)})))
    assert dry.state == "dry-run"
    stale_node = bridge_node("a", ["legacy"] * 4, annotations={
        "dra-bridge.io/split-decision": record(time="2025-06-01T10:00:00Z")})
    stale = detect(cluster(stale_node))
    assert stale.state == "absent" and "records changes, not heartbeats" in stale.evidence


def test_an_invalid_policy_configmap_keeps_the_flags_policy_and_says_so() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "namespace": "dra-bridge"},
          "data": {"policy.yaml": "minLegacyshare: 0.5\n"}}
    c = detect(cluster(lease(), cm, controller_deployment("--min-legacy-share", "0.25", "--policy-configmap=dra-bridge/p")))
    assert c.policy.min_legacy_share == 0.25
    assert any("refused by the controller" in n and "minLegacyshare" in n for n in c.policy_notes)


def test_a_custom_lease_name_from_the_arguments_is_the_one_read() -> None:
    dep = controller_deployment("--lease-name=my-lease")
    assert detect(cluster(lease(name="my-lease"), dep)).state == "acting"
    assert detect(cluster(lease(), dep)).state == "not-running"  # the default name is not its Lease


def vendor_plugin_pod(node_name: str) -> list[Obj]:
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin-daemonset",
                                                                     "namespace": "gpu-operator"},
          "spec": {"selector": {"matchLabels": {"app": "dp"}}, "template": {"metadata": {"labels": {"app": "dp"}},
                   "spec": {"containers": [{"name": "dp", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"}]}}}}
    p = pod("nvidia-device-plugin-x", "gpu-operator", spec(container()), node=node_name)
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": True,
                                         "name": "nvidia-device-plugin-daemonset", "uid": "u"}]
    return [ds, p]


# ---- DRB032 ----------------------------------------------------------------------------------------------------

def test_no_controller_the_finding_gives_the_exact_annotate_commands() -> None:
    (f,) = findings(dra_team(*two_idle_nodes()), "DRB032")
    assert f.severity == "blocker"
    assert f.message.startswith("needs 6 GPUs in 3 pods: 0 matching on DRA now, so 3 pod(s) asking 6 GPU(s) would "
                                "stay Pending; no bridge controller is known to run")
    assert "raising the split by hand can move 8 free legacy GPUs on 2 nodes, enough for all of them" in f.message
    assert f.details["commands"] == ["kubectl annotate node a dra-bridge.io/dra-devices=all --overwrite",
                                     "kubectl annotate node b dra-bridge.io/dra-devices=2 --overwrite"]
    assert f.fix.startswith("Raise the split: kubectl annotate node a dra-bridge.io/dra-devices=all --overwrite; ")


def test_a_running_controller_makes_it_an_info_naming_what_is_there_and_what_it_can_move() -> None:
    (f,) = findings(dra_team(*two_idle_nodes(), lease(), controller_deployment("--no-dry-run")), "DRB032")
    assert f.severity == "info"
    assert f.message.startswith("needs 6 GPUs in 3 pods: 0 matching on DRA now; the controller can move 8 free legacy "
                                "GPUs on 2 nodes, enough for all of them (Lease dra-bridge/dra-bridge-controller")
    assert (f.details["movableDevices"], f.details["pendingAloneWithMoves"], f.details["controller"]) == (8, 0, "acting")


def test_a_dry_run_controller_moves_nothing_so_the_split_is_raised_by_hand() -> None:
    (f,) = findings(dra_team(*two_idle_nodes(), lease(), controller_deployment("--dry-run")), "DRB032")
    assert f.severity == "blocker" and "bridge controller runs in dry run (" in f.message
    assert "and changes nothing" in f.message and f.details["commands"]


def test_what_fits_as_it_is_needs_no_finding_whatever_the_controller() -> None:
    dra_now = [bridge_node("a", ["dra"] * 6 + ["legacy"] * 2, target="6"),
               resource_slice("a", [gpu_device(i) for i in range(6)])]
    assert findings(dra_team(*dra_now), "DRB032") == []
    assert findings(dra_team(*dra_now, lease(), controller_deployment()), "DRB032") == []


def test_pinned_nodes_are_not_the_controllers_to_change() -> None:
    nodes = [bridge_node("a", ["legacy"] * 4, annotations={"dra-bridge.io/split-pinned": "true"}),
             bridge_node("b", ["legacy"] * 4), *empty_slices("a", "b")]
    (f,) = findings(dra_team(*nodes, lease(), controller_deployment()), "DRB032")
    assert f.severity == "blocker"
    assert "the controller can move 4 free legacy GPUs on 1 node: 1 pod(s) asking 2 GPU(s) would still stay " \
        "Pending" in f.message
    assert "it may not change 1 bridge node (a: pinned: annotation dra-bridge.io/split-pinned=true)" in f.message
    assert "unpin nodes" in f.fix


def test_the_policys_minimum_legacy_share_holds_gpus_back() -> None:
    (f,) = findings(dra_team(*two_idle_nodes(), lease(), controller_deployment("--min-legacy-share=0.5")), "DRB032")
    assert f.severity == "blocker" and f.details["heldBackByPolicy"] == {"": 4}
    assert "the policy keeps 4 free legacy GPU(s) in pool (default) (minimum legacy share 0.5)" in f.message
    assert f.details["pendingAloneWithMoves"] == 1 and "lower the policy's minimum legacy share" in f.fix


def test_per_pool_floors_apply_to_their_pool_only() -> None:
    nodes = [bridge_node("a", ["legacy"] * 4, labels={"dra-bridge.io/pool": "inference"}),
             bridge_node("b", ["legacy"] * 4, labels={"dra-bridge.io/pool": "training"}), *empty_slices("a", "b")]
    dep = controller_deployment("--pool-min-legacy-share", "inference=1")
    (f,) = findings(dra_team(*nodes, lease(), dep, replicas=2), "DRB032")
    assert (f.severity, f.details["movableDevices"], f.details["heldBackByPolicy"]) == ("info", 4, {"inference": 4})


def test_gpus_a_namespaces_own_legacy_pods_hold_count_as_freed_when_they_are_replaced() -> None:
    """The demo's case: team-a flipped to dra keeps old device-plugin pods until they are replaced; every other
    GPU is busy. Their GPUs come free as they are replaced, and the controller moves them."""
    a = bridge_node("a", ["dra", "dra"] + ["legacy"] * 6, held=range(8), target="2")
    tmpl = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpu-2", "namespace": "team-a"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName":
                                                                                   "gpu.dra-bridge.io", "count": 2}}]}}}}
    v2 = pod("train-a-v2", "team-a", spec(container(name="main", resources={"claims": [{"name": "g"}]}),
                                          resourceClaims=[{"name": "g", "resourceClaimTemplateName": "gpu-2"}]),
             node="a")
    objs = [namespace("team-a", "dra"), namespace("team-b"), bridge_class(), a, tmpl, v2,
            resource_slice("a", [gpu_device(0), gpu_device(1)]),
            pod("train-a", "team-a", spec(container({"nvidia.com/gpu": 2})), node="a"),
            pod("infer-a", "team-a", spec(container({"nvidia.com/gpu": 1})), node="a"),
            pod("sweep-b", "team-b", spec(container({"nvidia.com/gpu": 3})), node="a")]
    without = findings(cluster(*objs), "DRB032")
    assert [(f.object.name, f.severity) for f in without if f.object.name == "team-a"] == [("team-a", "blocker")]
    (f,) = [f for f in findings(cluster(*objs, lease(), controller_deployment()), "DRB032") if f.object.name == "team-a"]
    assert f.severity == "info"
    assert ("needs 5 GPUs in 3 pods: 2 matching on DRA now; the controller can move 3 legacy GPUs on 1 node (0 free "
            "now, 3 held by this namespace's own device-plugin pods and freed as they are replaced), enough for all "
            "of them") in f.message
    assert f.details["freedByNamespace"] == 3


def test_gpus_pending_legacy_pods_will_take_are_not_movable() -> None:
    waiting = pod("legacy-wait", "team-b", spec(container({"nvidia.com/gpu": 4})), node="", phase="Pending")
    del waiting["spec"]["nodeName"]
    objs = [namespace("team-b"), *two_idle_nodes(), lease(), controller_deployment(), waiting]
    (f,) = [f for f in findings(dra_team(*objs), "DRB032") if f.object.name == "team"]
    assert f.severity == "blocker" and f.details["movableDevices"] == 4  # one node's 4 GPUs go to the legacy pod


def test_an_assumed_split_is_judged_as_before_without_moves() -> None:
    fs = findings(dra_team(*two_idle_nodes(), lease(), controller_deployment()), "DRB032", assume_split="1")
    assert [f.severity for f in fs] == ["blocker"] and "movableDevices" not in fs[0].details
    assert "2 matching on DRA at split 1 per node, so 3 pod(s) asking 6 GPU(s) would stay Pending" in fs[0].message


def test_together_in_wave_order_with_the_controllers_moves_is_an_info() -> None:
    dra_now = [bridge_node("a", ["dra"] * 4 + ["legacy"] * 4, target="4"),
               resource_slice("a", [gpu_device(i) for i in range(4)])]
    objs = [namespace("first", "dra"), namespace("second", "shadow"), bridge_class(), *dra_now,
            app(2, 2, "first"), app(2, 2, "second"), lease(), controller_deployment()]
    fs = findings(cluster(*objs), "DRB032")
    assert [(f.object.name, f.severity) for f in fs] == [("second", "info")]
    assert fs[0].message.startswith("fits alone (4 GPUs); together with first (on DRA before its wave 1) it does "
                                    "not fit as things are; the controller can move")
    without = findings(cluster(*objs[:-2]), "DRB032")
    assert [(f.object.name, f.severity) for f in without] == [("second", "warning")]


def test_a_stale_split_status_without_the_bridge_is_not_a_bridge_node() -> None:
    """The annotation stays on a Node after the bridge is uninstalled; only its slices or its DaemonSet's pods say
    the bridge serves the node."""
    stale = bridge_node("a", ["legacy"] * 4)
    (f,) = findings(dra_team(stale), "DRB032")
    assert "commands" not in f.details and "no bridge node has free legacy GPUs" in f.message
    assert findings(dra_team(stale, *vendor_plugin_pod("a")), "DRB010") == []


def test_bridge_nodes_without_a_readable_status_are_named() -> None:
    bare = node("dark", 4, labels={"dra-bridge.io/node": "true"})
    objs = [resource_slice("dark", [])]  # the bridge publishes its pool even with every GPU legacy
    (f,) = findings(dra_team(bare, *objs), "DRB032")
    assert "no bridge node has free legacy GPUs these pods match and can run on (1 bridge node publish" in f.message
    assert "dark" in f.message


def test_json_carries_the_controller_and_the_moves_and_follows_the_schema() -> None:
    data = dra_team(*two_idle_nodes(), lease(), controller_deployment())
    doc = json.loads(run_report(data, output="json").text)
    jsonschema.validate(doc, SCHEMA)
    assert doc["splitController"]["state"] == "acting"
    moves = doc["namespaces"][0]["capacity"]["moves"]
    assert (moves["by"], moves["devices"], moves["fitsAlone"], moves["fitsInWaveOrder"]) == ("controller", 8, True, True)
    assert sum(moves["perNode"].values()) == 6
    table = run_report(data).text
    assert any(line.startswith("team ") and "fits, moving" in line for line in table.splitlines())


# ---- DRB037 ----------------------------------------------------------------------------------------------------

def pending(name: str, gpus: int, ns: str = "team-b") -> Obj:
    p = pod(name, ns, spec(container({"nvidia.com/gpu": gpus})), node="", phase="Pending")
    del p["spec"]["nodeName"]
    return p


def dra_heavy_node() -> list[Obj]:
    """4 GPUs on DRA, free; 4 legacy ones held."""
    return [bridge_node("c", ["dra"] * 4 + ["legacy"] * 4, held=[4, 5, 6, 7], target="4"),
            resource_slice("c", [gpu_device(i) for i in range(4)])]


def test_legacy_pods_waiting_for_gpus_on_the_dra_side_get_the_lower_split_command() -> None:
    (f,) = findings(cluster(namespace("team-b"), *dra_heavy_node(), pending("sweep-0", 2)), "DRB037")
    assert f.severity == "warning"
    assert f.message.startswith("1 pending pod(s) asking nvidia.com/gpu (2 GPUs: sweep-0) fit no free GPU on the "
                                "legacy side, and no bridge controller is known to run")
    assert "moving 2 free DRA GPUs back on 1 node serves them" in f.message
    assert f.details["commands"] == ["kubectl annotate node c dra-bridge.io/dra-devices=2 --overwrite"]


def test_a_legacy_pod_nominated_to_a_node_waits_for_its_preemption_victims_and_gets_no_split_command() -> None:
    # kube-scheduler preempted c's legacy pods for it: their GPUs are its own once they stop (the controller does
    # not move GPUs for it either, bridge.controller.demand).
    preemptor = pending("sweep-0", 2)
    preemptor["status"]["nominatedNodeName"] = "c"
    assert findings(cluster(namespace("team-b"), *dra_heavy_node(), preemptor), "DRB037") == []


def test_with_the_controller_acting_they_are_an_info() -> None:
    (f,) = findings(cluster(namespace("team-b"), *dra_heavy_node(), pending("sweep-0", 2), lease(),
                            controller_deployment()), "DRB037")
    assert f.severity == "info" and "the controller can move 2 free DRA GPUs back on 1 node" in f.message


def test_pods_that_fit_free_legacy_gpus_or_a_vendor_node_are_left_to_the_scheduler() -> None:
    free_legacy = [bridge_node("c", ["dra"] * 4 + ["legacy"] * 4, target="4"),
                   resource_slice("c", [gpu_device(i) for i in range(4)])]
    assert findings(cluster(namespace("team-b"), *free_legacy, pending("sweep-0", 2)), "DRB037") == []
    vendor = node("vendor-1", 8)
    assert findings(cluster(namespace("team-b"), *dra_heavy_node(), vendor, pending("sweep-0", 2)), "DRB037") == []
    picky = pending("sweep-1", 2)
    picky["spec"]["nodeSelector"] = {"pool": "elsewhere"}
    assert [f.severity for f in findings(cluster(namespace("team-b"), *dra_heavy_node(), vendor, picky),
                                         "DRB037")] == ["warning"]


def test_pods_nothing_can_serve_are_a_warning_with_the_controllers_reason() -> None:
    (f,) = findings(cluster(namespace("team-b"), *dra_heavy_node(), pending("huge", 16), lease(),
                            controller_deployment()), "DRB037")
    assert f.severity == "warning" and "the controller cannot serve 1 of them:" in f.message
    assert f.details["blocked"] == 1


def test_no_pending_pods_no_finding() -> None:
    assert findings(cluster(namespace("team-b"), *dra_heavy_node()), "DRB037") == []


def test_a_controller_that_may_change_no_node_says_which_it_may_not() -> None:
    pinned = [bridge_node("a", ["legacy"] * 4, annotations={"dra-bridge.io/split-pinned": "true"}),
              bridge_node("b", ["legacy"] * 4, labels={"dra-bridge.io/dra-devices": "0"}), *empty_slices("a", "b")]
    (f,) = findings(dra_team(*pinned, lease(), controller_deployment()), "DRB032")
    assert f.severity == "blocker"
    assert "bridge controller runs (" in f.message
    assert "no bridge node it may change has free legacy GPUs these pods match and can run on (it may not change 2 bridge nodes" \
        in f.message


def test_the_report_reads_every_option_of_bridge_controller_that_takes_a_value_with_its_value() -> None:
    """`--name value` must not be read as a bare flag followed by a stray word: the report knows each such option."""
    takes_value = {opt[2:] for p in controller_command.params if not getattr(p, "is_flag", False)
                   for opt in p.opts if opt.startswith("--")}
    assert VALUED_OPTIONS == takes_value
