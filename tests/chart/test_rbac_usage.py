"""The chart's RBAC is enough: every request the real node daemon and the real webhook make against the API
emulator, through their ordinary work, is one their chart role grants.

Each component talks through a kubeconfig with a bearer token naming it; the emulator does not authenticate, so
the token only labels the requests, which a recorder around the emulator's request handler collects. Requests are
turned into authorization attributes (verb, API group, resource, subresource, namespace, name) the way
k8s.io/apiserver pkg/endpoints/request/requestinfo.go does, and checked against the rules RBAC would match
(k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go: group, resource incl. "resource/subresource", verb,
resourceNames). Discovery (/api, /apis, /version, /openapi) is open to every authenticated user (system:discovery).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.kube import EVENTS, NAMESPACES, NODES, PODS, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.apiserver import http as emulator_http
from bridge.sandbox.kubelet import KubeletSimulator
from bridge.sandbox.kubelet.simulator import KubeletConfig
from bridge.webhook.app import WebhookOptions, build, live_facts
from bridge.webhook.facts import facts_from_discovery
from bridge.webhook.metrics import WebhookMetrics
from tests.chart.test_rbac import grants
from tests.dra.cluster import DRIVER, NODE, gpu, make_claim, make_pod
from tests.node.test_dual_api_e2e import NodeProc
from tests.polling import wait_until
from tests.webhook.pki import Pki
from tests.webhook.pods import admission_review, container, deployment_pod
from tests.webhook.test_e2e_guarantees import post

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Attrs:
    verb: str
    group: str
    resource: str  # "pods" or "pods/status"
    namespace: str
    name: str


def request_attributes(method: str, path: str, query: dict[str, str]) -> Attrs | None:
    """requestinfo.go's RequestInfoFactory for the paths our clients use; None for non-resource requests."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return None
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        if len(parts) < 3:
            return None
        group, rest = parts[1], parts[3:]
    if not rest:
        return None
    watch = False
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    elif rest[0] == "namespaces" and len(rest) == 2:
        namespace = rest[1]  # the namespace object itself: resource namespaces, name = namespace
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource += "/" + rest[2]
    if method == "GET":
        verb = "watch" if watch or query.get("watch") in ("true", "1") else ("get" if name else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}[method]
    return Attrs(verb, group, resource, namespace, name)


def allowed(attrs: Attrs, rules: set[tuple[str, str, str, str, str]]) -> bool:
    for scope, group, resource, verb, name in rules:
        if (group, resource, verb) != (attrs.group, attrs.resource, attrs.verb):
            continue
        if scope != "cluster" and scope != attrs.namespace:
            continue
        if name and name != attrs.name:
            continue
        return True
    return False


@contextmanager
def recorded() -> Iterator[list[tuple[str, str, str, dict[str, str]]]]:
    """(token, method, path, query) of every request the emulator handles meanwhile."""
    calls: list[tuple[str, str, str, dict[str, str]]] = []
    original = emulator_http.Handler._handle

    def record(self: Any, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        calls.append((token, method, path, dict(query)))
        original(self, method, path, query, raw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(emulator_http.Handler, "_handle", record)
        yield calls


def kubeconfig_as(base: Path, token: str) -> Path:
    cfg = yaml.safe_load(base.read_text())
    for user in cfg["users"]:
        user["user"] = {"token": token}
    out = base.with_name(f"kubeconfig-{token}")
    out.write_text(yaml.safe_dump(cfg))
    return out


def made_by(calls: list[tuple[str, str, str, dict[str, str]]], token: str) -> set[Attrs]:
    out = set()
    for who, method, path, query in calls:
        if who == token and (attrs := request_attributes(method, path, query)) is not None:
            out.add(attrs)
    return out


def refused(requests: set[Attrs], rules: set[tuple[str, str, str, str, str]]) -> list[str]:
    return sorted(f"{a.verb} {a.group or 'core'}/{a.resource} ns={a.namespace or '-'} name={a.name or '-'}"
                  for a in requests if not allowed(a, rules))


@pytest.mark.parametrize(("method", "path", "query", "attrs"), [
    ("GET", "/api/v1/nodes/n1", {}, Attrs("get", "", "nodes", "", "n1")),
    ("GET", "/api/v1/pods", {"watch": "true", "fieldSelector": "spec.nodeName=n1"}, Attrs("watch", "", "pods", "", "")),
    ("GET", "/api/v1/watch/namespaces", {}, Attrs("watch", "", "namespaces", "", "")),
    ("GET", "/api/v1/namespaces/team-a", {}, Attrs("get", "", "namespaces", "team-a", "team-a")),
    ("PUT", "/apis/resource.k8s.io/v1/namespaces/a/resourceclaims/c/status", {},
     Attrs("update", "resource.k8s.io", "resourceclaims/status", "a", "c")),
    ("DELETE", "/apis/resource.k8s.io/v1/resourceslices", {}, Attrs("deletecollection", "resource.k8s.io",
                                                                    "resourceslices", "", "")),
    ("GET", "/apis/resource.k8s.io/v1", {}, None),
    ("GET", "/version", {}, None),
])
def test_requests_become_the_attributes_rbac_authorizes(method: str, path: str, query: dict[str, str],
                                                        attrs: Attrs | None) -> None:
    assert request_attributes(method, path, query) == attrs


def test_a_request_outside_the_role_is_reported(installed: Any) -> None:
    rules = grants(installed())["dra-bridge-node"]
    asks = {Attrs("get", "", "secrets", "kube-system", "x"), Attrs("patch", "", "nodes/status", "", "n1"),
            Attrs("deletecollection", "resource.k8s.io", "resourceslices", "", ""),
            Attrs("get", "resource.k8s.io", "resourceclaims", "team-a", "gpu")}
    assert refused(asks, rules) == ["deletecollection resource.k8s.io/resourceslices ns=- name=-",
                                    "get core/secrets ns=kube-system name=x", "patch core/nodes/status ns=- name=n1"]


def test_the_node_daemons_requests_are_all_granted_by_its_role(installed: Any, short_tmp: Path) -> None:
    rules = grants(installed())["dra-bridge-node"]
    with recorded() as calls, ApiServer() as srv:
        base = srv.write_kubeconfig(short_tmp / "kubeconfig")
        api = connect(str(base))
        api.create(NODES, {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": NODE, "annotations": {"dra-bridge.io/dra-devices": "2"}}})
        # The kubelet posts the Node's status (allocatable), which a legacy -> DRA move waits for.
        kubelet = KubeletSimulator(short_tmp / "kl", kube=connect(str(base)), node_name=NODE,
                                   dra_call_timeout=20, dra_health_retry=0.2,
                                   config=KubeletConfig(register_node=True, node_status_frequency=0.5)).start()
        args = ["--node-name", NODE, "--devices", "simulated:8xH100-80GB", "--kubelet-root", str(short_tmp / "kl"),
                "--device-plugin-dir", str(short_tmp / "kl" / "device-plugins"),
                "--state-dir", str(short_tmp / "st"), "--cdi-root", str(short_tmp / "cdi"),
                "--kubeconfig", str(kubeconfig_as(base, "node")), "--http-address", "off", "--split-grace", "0.3"]
        proc = NodeProc(args)
        try:
            assert kubelet.dra is not None
            kubelet.dra.wait_for_plugin(DRIVER, 60)
            slices = api.resource_api().slices
            wait_until(lambda: any(s["spec"].get("devices") for s in api.list(slices)["items"]), 60, "the slice")
            pod = make_pod(api, "team-a", "trainer", ["gpu"])
            make_claim(api, "team-a", "gpu", pod, [gpu("gpu-7")])
            kubelet.dra.prepare_pod_with_retry(pod, timeout=30)
            node = api.get(NODES, NODE)
            node["metadata"]["annotations"]["dra-bridge.io/dra-devices"] = "0"
            api.update(NODES, node)  # gpu-7 is held: the move is refused with an Event, then done once it is free
            wait_until(lambda: api.list(EVENTS, "default")["items"], 30, "the refusal Event")
            # the pod ends: its kubelet unprepares the claim, the pod goes, the claim with it (an allocated claim of
            # a bound pod holds its GPU, prepared or not)
            kubelet.dra.unprepare_pod_with_retry(pod, timeout=30)
            api.delete(PODS, "trainer", "team-a", grace_period_seconds=0)
            api.delete(api.resource_api().claims, "gpu", "team-a")
            wait_until(lambda: not any(s["spec"].get("devices") for s in api.list(slices)["items"]), 60,
                       "every GPU back on the device plugin")
        finally:
            assert proc.stop() == 0, proc.lines[-20:]
            cleanup = NodeProc([*args, "--cleanup"])  # the uninstall path deletes the node's slices
            rc = cleanup.p.wait(60)
            cleanup.stop()
            kubelet.stop()
            assert rc == 0, cleanup.lines[-20:]
    made = made_by(calls, "node")
    assert {a.resource for a in made} >= {"nodes", "resourceslices", "resourceclaims", "deviceclasses", "events"}, made
    assert not refused(made, rules), refused(made, rules)


def test_the_webhooks_requests_are_all_granted_by_its_role(installed: Any, tmp_path: Path) -> None:
    rules = grants(installed())["dra-bridge-webhook"]
    pki = Pki(tmp_path)
    pki.issue()
    with recorded() as calls, ApiServer(version="1.35.0") as srv:
        base = srv.write_kubeconfig(tmp_path / "kubeconfig")
        admin = connect(str(base))
        for ns, mode in (("team-a", "dra"), ("team-b", "shadow")):
            admin.create(NAMESPACES, {"metadata": {"name": ns, "labels": {"dra-bridge.io/mode": mode}}})
        admin.create(NAMESPACES, {"metadata": {"name": "dra-bridge"}})
        api = connect(str(kubeconfig_as(base, "webhook")))
        options = WebhookOptions(str(pki.cert_file), str(pki.key_file), port=0, host="127.0.0.1", target="auto",
                                 namespace="dra-bridge")
        facts, metrics = facts_from_discovery(api.discovery()), WebhookMetrics()
        live = live_facts(options, api, facts, metrics)  # the node informer, the dry-run check, the DeviceClass GET
        server, cache, events = build(options, api, facts, metrics, live=live)
        stop = threading.Event()
        cache.start(stop)
        live.start(stop)
        events.start()
        server.start()
        try:
            assert cache.wait_synced(20) and live.wait_ready(20)
            assert live.current().claims_kept is True
            pods = [(deployment_pod(container("main", 2)), "team-a"),          # translated: a template is created
                    (deployment_pod(container("main", extra={"nvidia.com/mig-1g.10gb": 1})), "team-a"),  # Event
                    (deployment_pod(container("main", 1)), "team-b")]          # shadow
            for pod, ns in pods:
                post(server.port, pki.ca_file, json.dumps(admission_review(pod, ns)).encode())
            wait_until(lambda: admin.list(EVENTS, "team-a")["items"], 20, "the Event about the MIG pod")
        finally:
            stop.set()
            server.shutdown()
            events.stop()
    made = made_by(calls, "webhook")
    assert {a.resource for a in made} >= {"namespaces", "resourceclaimtemplates", "events", "nodes", "pods",
                                          "deviceclasses"}, made
    assert not refused(made, rules), refused(made, rules)


def test_the_controllers_requests_are_all_granted_by_its_role(installed: Any, tmp_path: Path) -> None:
    from bridge.controller.app import App, AppOptions, LeaseOptions
    from bridge.controller.loop import ControllerOptions
    from bridge.controller.model import Policy
    from bridge.kube import CONFIG_MAPS
    from tests.controller.test_controller_emulator import add_dra_pod, add_node, events

    values = {"controller": {"enabled": True, "dryRun": False, "policyConfigMap": "split-policy"}}
    rules = grants(installed(values))["dra-bridge-controller"]
    with recorded() as calls, ApiServer() as srv:
        base = srv.write_kubeconfig(tmp_path / "kubeconfig")
        admin = connect(str(base))
        for ns in ("team-a", "dra-bridge"):
            admin.create(NAMESPACES, {"metadata": {"name": ns}})
        admin.create(CONFIG_MAPS, {"metadata": {"name": "split-policy", "namespace": "dra-bridge"},
                                   "data": {"policy.yaml": "maxMovesPerMinute: 100\n"}}, "dra-bridge")
        add_node(admin, "n1", ["legacy"] * 8)
        api = connect(str(kubeconfig_as(base, "controller")))
        options = AppOptions(
            controller=ControllerOptions(policy=Policy(max_moves_per_minute=100, cooldown_s=60), interval_s=0.1,
                                         resync_s=0.5, policy_configmap=("dra-bridge", "split-policy")),
            lease=LeaseOptions(namespace="dra-bridge", lease_duration=2.0, renew_deadline=1.5, retry_period=0.25),
            identity="c-0", http_address=("127.0.0.1", 0))
        app = App(api, options).start()
        try:
            add_dra_pod(admin, "train", 4)
            wait_until(lambda: events(admin, "SplitTargetChanged"), 30, "the controller's split change")
        finally:
            app.stop()
    made = made_by(calls, "controller")
    assert {a.resource for a in made} >= {"nodes", "pods", "resourceclaims", "leases", "configmaps", "events"}, made
    assert {a.verb for a in made if a.resource == "nodes"} >= {"patch"}
    assert not refused(made, rules), refused(made, rules)
