"""The node lifecycle controller stand-in against kube-controller-manager's: two nodes, the same kubelet stops and
starts, on the stand-ins (`bridge.sandbox.nodelifecycle`, two kubelet simulators) and on a real control plane whose
node `n1` runs a real kubelet with containerd and `n2` the kubelet simulator (so the real controller judges both
kinds of heartbeat, and the real kubelet shows what a restart does to a pod marked not Ready).

What a platform engineer sees when a GPU node's kubelet dies is what this pins: the Node's conditions go Unknown
after the grace period, it gets the `unreachable` taints (NoSchedule at once, NoExecute through the zone's rate
limiter), its pods go not Ready; when every Node is down the controller assumes the fault is its own and takes the
NoExecute taints off again; a kubelet back clears its Node and lets the zone taint the other again. The periods are
shortened alike on both backends (`ClusterSpec.node_monitor`, `node_lease_duration`).

The second scenario is what follows on a real cluster 5 minutes later, shortened to 4 s (`ClusterSpec.
toleration_seconds`, kube-apiserver's DefaultTolerationSeconds flags): the taint eviction controller
(`bridge.sandbox.tainteviction`) deletes the pods whose `unreachable` toleration ran out, and they stay Terminating
until the kubelet is back.
"""

from __future__ import annotations

from typing import Any

import pytest

from bridge.kube import EVENTS, NODES, PODS, NotFound
from bridge.sandbox.apiserver.clock import parse_rfc3339
from bridge.sandbox.apiserver.tolerationseconds import DefaultTolerationSeconds
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.nodelifecycle import NodeMonitorTimes, logic
from bridge.sandbox.real.binaries import NODE
from tests.polling import wait_until
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, require_binaries
from tests.real.realnodes import probe_pod
from tests.sandbox_cluster import create_pod_namespaces, spec_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

NS = "team"
TIMES = NodeMonitorTimes(monitor_period=1.0, grace_period=6.0, startup_grace_period=10.0, eviction_rate=2.0)
# (not 1.0: a stopped zone limiter reports a rate of 1, so a zone leaving full disruption would never taint again)
LEASE_S = 2  # renewed every 0.5 s


def _ready(api: Any, node: str) -> str:
    return logic.ready_status(api.get(NODES, node)) or ""


def _taints(api: Any, node: str) -> list[tuple[str, str, bool]]:
    """(key, effect, has timeAdded) of the node's taints, sorted."""
    return sorted((t["key"], t["effect"], bool(t.get("timeAdded")))
                  for t in (api.get(NODES, node).get("spec") or {}).get("taints") or [])


def _conditions(api: Any, node: str) -> list[tuple[str, str, str, str]]:
    return sorted((c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
                  for c in (api.get(NODES, node).get("status") or {}).get("conditions") or [])


def _pod_ready(api: Any, name: str) -> str:
    return str(_pod_condition(api, name).get("status", ""))


def _pod_condition(api: Any, name: str, ctype: str = "Ready") -> dict[str, Any]:
    conditions = (api.get(PODS, name, NS).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == ctype), {})


UNREACHABLE = "node.kubernetes.io/unreachable"


def scenario(cluster: SandboxCluster) -> dict[str, Any]:
    api = cluster.api
    seen: dict[str, Any] = {}
    create_pod_namespaces(cluster, NS)
    api.create(PODS, probe_pod("web", node="n1"), NS)
    wait_until(lambda: _pod_ready(api, "web") == "True", 60, "the pod on n1 to be Ready")
    seen["before"] = {"n1": _taints(api, "n1"), "n2": _taints(api, "n2")}
    ready_since = [_pod_condition(api, "web")["lastTransitionTime"]]

    cluster.stop_kubelet("n1")
    # both taints: each comes from its own worker (NoSchedule at the Node event, NoExecute through the zone queue),
    # in either order (a loaded real kube-controller-manager showed the NoExecute one first)
    wait_until(lambda: {(UNREACHABLE, "NoExecute", True), (UNREACHABLE, "NoSchedule", True)} <= set(_taints(api, "n1")),
               60, "n1 to be tainted unreachable, NoSchedule and NoExecute")
    wait_until(lambda: _pod_ready(api, "web") == "False", 20, "the pod on n1 to be marked not Ready")
    ready_since.append(_pod_condition(api, "web")["lastTransitionTime"])
    seen["n1 down"] = {"n1 conditions": _conditions(api, "n1"), "n1": _taints(api, "n1"), "n2": _taints(api, "n2"),
                       "pod phase": api.get(PODS, "web", NS)["status"]["phase"],
                       "pod ContainersReady": _pod_condition(api, "web", "ContainersReady").get("status")}

    cluster.stop_kubelet("n2")
    wait_until(lambda: _ready(api, "n2") == "Unknown", 60, "n2 to go Unknown")
    wait_until(lambda: (UNREACHABLE, "NoExecute", True) not in _taints(api, "n1"), 20,
               "the NoExecute taint to come off n1 (every node down: master disruption mode)")
    wait_until(lambda: (UNREACHABLE, "NoSchedule", True) in _taints(api, "n2"), 20, "n2's NoSchedule taint")
    # n2 itself may keep a NoExecute taint: the zone's tainter can taint it between the pass that queues it and the
    # same pass's switch to master disruption mode, which removes only the taints the pass's Node copies show (a race
    # in kube-controller-manager, seen on v1.38.0-beta.0 and on the stand-in alike)
    seen["both down"] = {"n1": _taints(api, "n1"),
                         "n2 NoSchedule": (UNREACHABLE, "NoSchedule", True) in _taints(api, "n2")}

    cluster.restart_kubelet("n1")
    wait_until(lambda: _ready(api, "n1") == "True" and _taints(api, "n1") == [], 60, "n1 back and untainted")
    wait_until(lambda: (UNREACHABLE, "NoExecute", True) in _taints(api, "n2"), 30,
               "n2 tainted unreachable:NoExecute once a node is Ready again")
    wait_until(lambda: _pod_ready(api, "web") == "True", 30, "the pod on n1 Ready again")
    ready_since.append(_pod_condition(api, "web")["lastTransitionTime"])
    seen["n1 back"] = {"n1": _taints(api, "n1"), "n2": _taints(api, "n2"), "n2 ready": _ready(api, "n2"),
                       # the pod's Ready condition changed twice, each time with a new transition time
                       "pod Ready transitions": ready_since[0] < ready_since[1] < ready_since[2]}
    return seen


def _spec(backend: str, **fields: Any) -> Any:
    real = {"real_kubelets": True, "simulated_nodes": ("n2",)} if backend == "real" else {}
    return spec_for_tests((NodeSpec("n1", "1xH100-80GB"), NodeSpec("n2", "1xH100-80GB")), backend=backend,
                          version=REAL_LINE, node_monitor=TIMES, node_lease_duration=LEASE_S, **real, **fields)


EXPECTED = {
    "before": {"n1": [], "n2": []},
    "n1 down": {
        "n1 conditions": [
            ("DiskPressure", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."),
            ("MemoryPressure", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."),
            ("PIDPressure", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."),
            ("Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."),
        ],
        "n1": [(UNREACHABLE, "NoExecute", True), (UNREACHABLE, "NoSchedule", True)],
        "n2": [],
        "pod phase": "Running",
        "pod ContainersReady": "True",  # the controller marks Ready alone
    },
    "both down": {"n1": [(UNREACHABLE, "NoSchedule", True)], "n2 NoSchedule": True},
    "n1 back": {"n1": [], "n2": [(UNREACHABLE, "NoExecute", True), (UNREACHABLE, "NoSchedule", True)],
                "n2 ready": "Unknown", "pod Ready transitions": True},
}


def test_a_stopped_kubelets_node_goes_unknown_and_tainted_on_the_stand_ins_as_on_kube_controller_manager() -> None:
    require_binaries(REAL_LINE, CONTROL_PLANE + NODE + ("kubelet",))
    seen = {}
    for backend in ("standin", "real"):
        with SandboxCluster(_spec(backend)).start(timeout=180) as cluster:
            seen[backend] = scenario(cluster)
    assert seen["real"] == EXPECTED, "kube-controller-manager itself no longer does what this test expects"
    assert seen["standin"] == seen["real"]


# -- taint-based eviction -------------------------------------------------------------------------------------------

EVICTION_TOLERATIONS = DefaultTolerationSeconds(not_ready=300, unreachable=4)  # kube-apiserver's flags, on both


def _deleting(api: Any, name: str) -> bool:
    try:
        return bool(api.get(PODS, name, NS)["metadata"].get("deletionTimestamp"))
    except NotFound:
        return True


def _gone(api: Any, name: str) -> bool:
    try:
        api.get(PODS, name, NS)
        return False
    except NotFound:
        return True


def _evictions(api: Any) -> list[tuple[str, str, str, str]]:
    return sorted((e["involvedObject"]["name"], e["type"], e["message"], (e.get("source") or {}).get("component", ""))
                  for e in api.list(EVENTS, NS)["items"] if e.get("reason") == "TaintManagerEviction")


def eviction_scenario(cluster: SandboxCluster) -> dict[str, Any]:
    api = cluster.api
    seen: dict[str, Any] = {}
    create_pod_namespaces(cluster, NS)
    forever = {"tolerations": [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]}
    for name, extra in (("defaulted", None), ("forever", forever)):
        api.create(PODS, probe_pod(name, node="n1", extra=extra), NS)
    wait_until(lambda: all(_pod_ready(api, p) == "True" for p in ("defaulted", "forever")), 60, "both pods Ready")
    seen["tolerations"] = {p: api.get(PODS, p, NS)["spec"]["tolerations"] for p in ("defaulted", "forever")}

    cluster.stop_kubelet("n1")
    wait_until(lambda: (UNREACHABLE, "NoExecute", True) in _taints(api, "n1"), 60, "n1 tainted unreachable:NoExecute")
    tainted = next(t["timeAdded"] for t in api.get(NODES, "n1")["spec"]["taints"] if t["effect"] == "NoExecute")
    wait_until(lambda: _deleting(api, "defaulted"), 30, "the pod with the default toleration to be evicted")
    wait_until(lambda: len(_evictions(api)) == 1, 10, "the eviction's Event")
    evicted = api.get(PODS, "defaulted", NS)
    disruption = _pod_condition(api, "defaulted", "DisruptionTarget")
    seen["evicted"] = {
        "phase": evicted["status"]["phase"],  # the kubelet is gone: nothing ends it
        "grace": evicted["metadata"].get("deletionGracePeriodSeconds"),
        # deleted once its 4 s toleration ran out (the deletion time is the DELETE's plus the 1 s grace; both
        # stamps in whole seconds): at least 4 s after the taint
        "deleted 4 s after the taint":
            parse_rfc3339(evicted["metadata"]["deletionTimestamp"]) - parse_rfc3339(tainted) >= 4,
        # (the real one also writes `lastProbeTime: null`, Go's nil time; the emulator leaves a null out)
        "DisruptionTarget": {k: v for k, v in disruption.items() if k != "lastTransitionTime" and v is not None},
        "transition time": bool(disruption.get("lastTransitionTime")),
        "forever deleting": _deleting(api, "forever"),
        "events": _evictions(api),
    }

    cluster.restart_kubelet("n1")
    wait_until(lambda: _gone(api, "defaulted"), 60, "the restarted kubelet to finish the evicted pod")
    wait_until(lambda: _ready(api, "n1") == "True" and _taints(api, "n1") == [], 60, "n1 back and untainted")
    wait_until(lambda: _pod_ready(api, "forever") == "True", 30, "the pod tolerating for ever Ready again")
    seen["n1 back"] = {"forever": api.get(PODS, "forever", NS)["status"]["phase"], "events": len(_evictions(api))}
    return seen


def _default(key: str, seconds: int) -> dict[str, Any]:
    return {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}


EVICTION_EXPECTED = {
    "tolerations": {
        "defaulted": [_default("node.kubernetes.io/not-ready", 300), _default(UNREACHABLE, 4)],
        # its own toleration of the key counts: only not-ready's default is added
        "forever": [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"},
                    _default("node.kubernetes.io/not-ready", 300)],
    },
    "evicted": {
        "phase": "Running", "grace": 1, "deleted 4 s after the taint": True,
        "DisruptionTarget": {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                             "message": "Taint manager: deleting due to NoExecute taint", "observedGeneration": 1},
        "transition time": True,
        "forever deleting": False,
        "events": [("defaulted", "Normal", f"Marking for deletion Pod {NS}/defaulted", "taint-eviction-controller")],
    },
    "n1 back": {"forever": "Running", "events": 1},
}


def test_pods_on_a_node_whose_kubelet_stopped_are_evicted_after_their_toleration_on_the_stand_ins_as_for_real(
) -> None:
    """DefaultTolerationSeconds (kube-apiserver) gives every pod its `unreachable` toleration; once the node is
    tainted `unreachable:NoExecute`, the taint eviction controller (kube-controller-manager) deletes the pods whose
    toleration ran out. The pod stays Terminating while the kubelet is down; the kubelet back finishes it."""
    require_binaries(REAL_LINE, CONTROL_PLANE + NODE + ("kubelet",))
    seen = {}
    for backend in ("standin", "real"):
        with SandboxCluster(_spec(backend, toleration_seconds=EVICTION_TOLERATIONS)).start(timeout=180) as cluster:
            seen[backend] = eviction_scenario(cluster)
    assert seen["real"] == EVICTION_EXPECTED, "the real components no longer do what this test expects"
    assert seen["standin"] == seen["real"]
