"""The bridge's control-plane half on a real control plane: kube-apiserver, kube-controller-manager and kube-scheduler
v1.37.2 built from source, the kubelet simulators as nodes (each with its own `system:node` credential), the real
`bridge node` daemons and the real `bridge webhook`, registered as `bridge/sandbox/cluster/webhook.py` registers it.

What the real components decide here, and the stand-ins only model: the API server calls the webhook over TLS and
evaluates our `matchConditions`, `namespaceSelector`, `failurePolicy`, `reinvocationPolicy` and dry-run rules; it
validates what the webhook made (pod claim references, ResourceClaimTemplate schema, CEL compile and cost limits);
the resourceclaim controller and the scheduler turn the pods' claims and the 1.37 extended-resource name into
allocations from the node daemons' ResourceSlices; Leases and the audit log are the real ones. (The bridge's
processes use admin credentials here; running each with its chart RBAC is the next step.)

One cluster for the module (2 nodes, 4 of 8 GPUs on each side); every test creates its own namespaces and removes
them. The API server keeps an audit log of writes (metadata only), which shows which controller replica wrote.
"""

from __future__ import annotations

import json
import signal
import ssl
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bridge.cli import main as cli
from bridge.controller.nodestatus import node_view
from bridge.kube.api import DEPLOYMENTS, LEASES, MUTATING_WEBHOOKS, NAMESPACES, NODES, PODS, KubeAPI, Obj
from bridge.kube.errors import NotFound
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.processes import ChildProcess
from bridge.sandbox.cluster.webhook import WEBHOOK_NAMESPACE, free_port
from bridge.sandbox.real.binaries import LINES, Binaries
from bridge.sandbox.real.kubeconfig import write_kubeconfig
from bridge.sandbox.real.pki import TinyCA
from bridge.webhook.modeprobe import wait_applied
from bridge.webhook.policy import Mode
from tests.polling import wait_until
from tests.real.conftest import REAL_LINE, create_namespace, kubectl
from tests.real.labeller import Labeller
from tests.sandbox_cluster import spec_for_tests

GPU = "nvidia.com/gpu"
DRIVER = "gpu.dra-bridge.io"
EXTENDED = f"deviceclass.resource.kubernetes.io/{DRIVER}"
MODE, TARGET = "dra-bridge.io/mode", "dra-bridge.io/target"
TRANSLATED, RECORD = "dra-bridge.io/translated", "dra-bridge.io/translation"
SPLIT = "dra-bridge.io/dra-devices"
WRITES = ("create", "update", "patch", "delete", "deletecollection")

AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata", "verbs": list(WRITES)}, {"level": "None"}]}


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit") / "audit.log"


@pytest.fixture(scope="module")
def cluster(real_line: Binaries, audit_log: Path) -> Iterator[SandboxCluster]:
    policy = audit_log.with_name("policy.yaml")
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    nodes = (NodeSpec("node-0", split="4"), NodeSpec("node-1", split="4"))
    spec = spec_for_tests(nodes, backend="real", version=REAL_LINE, bridge=True, webhook=True,
                          apiserver_args=(f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}"))
    with SandboxCluster(spec) as c:
        c.wait_daemons_settled(90)
        yield c


@pytest.fixture
def namespaces(cluster: SandboxCluster) -> Iterator[Callable[..., str]]:
    """`make(name, mode=None, target=None)`: a namespace ready for pods (its ServiceAccount exists) and, for a
    mode, seen by the webhook (a dry-run probe shows the mode); all are deleted after the test."""
    made: list[str] = []

    def make(name: str, mode: str | None = None, target: str | None = None) -> str:
        labels = {k: v for k, v in ((MODE, mode), (TARGET, target)) if v}
        create_namespace(cluster.api, name, labels)
        made.append(name)
        if mode:
            assert wait_applied(cluster.api, name, Mode(mode), 30).ok, f"the webhook never applied {mode} to {name}"
        return name

    yield make
    for name in made:
        try:
            cluster.api.delete(NAMESPACES, name)
        except NotFound:
            pass


def gpu_pod(name: str, gpus: int = 1, **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta},
            "spec": {"containers": [{"name": "main", "image": "cuda",
                                     "resources": {"limits": {GPU: str(gpus)}}}]}}


def limits(pod: Obj, container: int = 0) -> dict[str, str]:
    return dict((pod["spec"]["containers"][container].get("resources") or {}).get("limits") or {})


def annotations(pod: Obj) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


def metric_sum(text: str, metric: str, **labels: str) -> float:
    """The sum of a metric's samples (Prometheus text format) whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(metric + "{") and not line.startswith(metric + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def webhook_reviews(cluster: SandboxCluster) -> float:
    """The webhook's own count of the AdmissionReviews it answered (its /metrics, over TLS)."""
    assert cluster.webhook is not None
    ctx = ssl.create_default_context(cadata=cluster.webhook.ca_pem.decode())
    with urllib.request.urlopen(f"https://127.0.0.1:{cluster.webhook.port}/metrics", context=ctx, timeout=10) as r:
        return metric_sum(r.read().decode(), "dra_bridge_webhook_reviews_total")


def apiserver_calls(cluster: SandboxCluster, webhook: str = "pods.dra-bridge.io") -> float:
    """kube-apiserver's count of its calls to a mutating webhook that were answered 200."""
    out = kubectl(cluster, "get", "--raw", "/metrics")
    assert out.returncode == 0, out.stderr
    return metric_sum(out.stdout, "apiserver_admission_webhook_request_total", name=webhook, type="admit",
                      code="200")


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


# -- the webhook, as the real API server calls it ------------------------------------------------------------------

def test_the_api_server_calls_the_webhook_over_tls_only_for_pods_our_match_conditions_select(
        cluster: SandboxCluster, namespaces: Callable[..., str]) -> None:
    ns = namespaces("mc", mode="dra")
    api = cluster.api
    before, called = webhook_reviews(cluster), apiserver_calls(cluster)
    plain = api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-gpu"},
                              "spec": {"containers": [{"name": "main", "image": "busybox"}]}}, ns)
    marked = api.create(PODS, gpu_pod("marked", annotations={TRANSLATED: "claims"}), ns)
    assert webhook_reviews(cluster) == before and apiserver_calls(cluster) == called  # neither was sent
    assert "resourceClaims" not in plain["spec"] and limits(marked) == {GPU: "1"}
    asks = api.create(PODS, gpu_pod("asks"), ns)
    assert webhook_reviews(cluster) == before + 1 and apiserver_calls(cluster) == called + 1
    assert annotations(asks)[TRANSLATED] in ("claims", "extended") and GPU not in limits(asks)


def test_a_legacy_namespace_is_never_sent_to_the_webhook(cluster: SandboxCluster,
                                                         namespaces: Callable[..., str]) -> None:
    unlabelled, legacy = namespaces("plain"), namespaces("old", mode="legacy")
    before = webhook_reviews(cluster)
    for ns in (unlabelled, legacy):
        pod = cluster.api.create(PODS, gpu_pod("train", 2), ns)
        assert limits(pod) == {GPU: "2"} and TRANSLATED not in annotations(pod)
    assert webhook_reviews(cluster) == before


def test_with_the_webhook_down_a_pod_in_a_dra_namespace_is_admitted_untranslated_and_status_names_it(
        cluster: SandboxCluster, namespaces: Callable[..., str]) -> None:
    """failurePolicy Ignore: the user sees a plain `pod/... created` (kube-apiserver only logs that it failed open);
    `bridge namespace status` is where it shows."""
    ns = namespaces("down")
    flip = run("namespace", "set", ns, "dra", "--strict", "--kubeconfig", str(cluster.kubeconfig))
    assert flip.exit_code == 0, flip.output
    assert cluster.webhook is not None
    cluster.webhook.stop()
    try:
        out = kubectl(cluster, "-n", ns, "create", "-f", "-", stdin=json.dumps(gpu_pod("late", 2)))
        assert (out.returncode, out.stdout.strip(), out.stderr) == (0, "pod/late created", "")
        pod = cluster.api.get(PODS, "late", ns)
        assert limits(pod) == {GPU: "2"} and "resourceClaims" not in pod["spec"] and not annotations(pod)
        status = run("namespace", "status", ns, "-o", "json", "--timeout", "5", "--kubeconfig", str(cluster.kubeconfig))
        assert status.exit_code == 0, status.output
        (report,) = json.loads(status.output)
        assert report["webhook"]["registered"] and report["webhook"]["reachable"] is False
        assert report["sinceFlip"]["untranslatedPods"] == ["late"]
    finally:
        cluster.webhook.restart()
    assert wait_applied(cluster.api, ns, Mode.DRA, 30).ok  # serving again: the next pod is translated


def test_a_later_webhooks_change_reinvokes_ours_and_our_match_conditions_keep_the_translation_single(
        cluster: SandboxCluster, namespaces: Callable[..., str], tmp_path: Path) -> None:
    ns = namespaces("reinvoke", mode="dra", target="claims")
    labeller = Labeller(tmp_path)
    cluster.api.create(MUTATING_WEBHOOKS, labeller.registration(ns))
    try:
        wait_until(lambda: cluster.api.create(PODS, gpu_pod("probe"), ns, dry_run=True)["metadata"].get("labels"),
                   30, "the API server to call the second webhook")
        before, labelled = webhook_reviews(cluster), labeller.calls
        pod = cluster.api.create(PODS, gpu_pod("translated", 2), ns)
        # ours, then the labeller; the reinvocation is asked for but our `not-translated-yet` condition is false
        assert webhook_reviews(cluster) == before + 1 and labeller.calls == labelled + 1
        assert pod["metadata"]["labels"] == {"labelled-by": "zz"} and annotations(pod)[TRANSLATED] == "claims"
        assert len(pod["spec"]["resourceClaims"]) == 1 and pod["spec"]["containers"][0]["resources"]["claims"] == [
            {"name": pod["spec"]["resourceClaims"][0]["name"]}]
        opted = cluster.api.create(PODS, gpu_pod("opted-out", annotations={"dra-bridge.io/translate": "false"}), ns)
        # nothing of ours on the pod: reinvoked after the labeller's change (IfNeeded), so called twice
        assert webhook_reviews(cluster) == before + 3 and limits(opted) == {GPU: "1"}
    finally:
        cluster.api.delete(MUTATING_WEBHOOKS, "zz-labeller")
        labeller.stop()


def test_a_server_side_dry_run_shows_the_translation_and_creates_no_template(
        cluster: SandboxCluster, namespaces: Callable[..., str]) -> None:
    for ns, target in ((namespaces("dry-claims", mode="dra", target="claims"), "claims"),
                       (namespaces("dry-extended", mode="dra", target="extended"), "extended")):
        out = kubectl(cluster, "-n", ns, "create", "--dry-run=server", "-o", "json", "-f", "-",
                      stdin=json.dumps(gpu_pod("preview", 2)))
        assert out.returncode == 0, out.stderr
        pod = json.loads(out.stdout)
        assert annotations(pod)[TRANSLATED] == target
        main = pod["spec"]["containers"][0]["resources"]
        if target == "claims":
            (claim,) = pod["spec"]["resourceClaims"]
            assert claim["resourceClaimTemplateName"].startswith("dra-bridge-gpu-2-")
            assert main["claims"] == [{"name": claim["name"]}] and GPU not in (main.get("limits") or {})
        else:
            assert main["limits"] == {EXTENDED: "2"} and "resourceClaims" not in pod["spec"]
        templates = kubectl(cluster, "-n", ns, "get", "resourceclaimtemplates,pods", "-o", "name")
        assert (templates.returncode, templates.stdout) == (0, "")  # nothing stored, no template made


# -- what the webhook makes, validated, allocated and run by the real components -----------------------------------

def deployment(name: str, template_spec: Obj, replicas: int = 2) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": template_spec}}}


def ctr(name: str, gpus: int, **extra: Any) -> Obj:
    return {"name": name, "image": "cuda", "resources": {"limits": {GPU: str(gpus)}}, **extra}


def running_pods(api: KubeAPI, ns: str, app: str, count: int) -> list[Obj]:
    def ready() -> list[Obj] | None:
        pods = [p for p in api.list(PODS, ns, label_selector=f"app={app}")["items"]
                if not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods) else None
    pods: list[Obj] = wait_until(ready, 120, f"{count} Running pods of {ns}/{app}", interval=0.5)
    return pods


def allocated_devices(api: KubeAPI, ns: str, claim: str) -> list[Obj]:
    results = ((api.get(api.resource_api().claims, claim, ns).get("status") or {}).get("allocation") or {})
    return list((results.get("devices") or {}).get("results") or [])


def test_a_deployments_pods_get_the_claims_we_promise_and_run_with_claims_templates(
        cluster: SandboxCluster, namespaces: Callable[..., str]) -> None:
    """Target `claims`: a GFD product and family node selector become a CEL selector in the template (compiled and
    cost-checked by the real API server), an init container and a sidecar share the pod's GPUs as under the device
    plugin (max(init, app + sidecars) = 2), the resourceclaim controller makes the claims, the scheduler allocates
    them from the node daemons' slices and the kubelet simulator runs the pods."""
    ns = namespaces("train-claims", mode="dra", target="claims")
    api = cluster.api
    spec = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.family": "hopper"},
            "initContainers": [ctr("prep", 1), ctr("logs", 1, restartPolicy="Always")],
            "containers": [ctr("main", 1)]}
    api.create(DEPLOYMENTS, deployment("train", spec), ns)
    for pod in running_pods(api, ns, "train", 2):
        record = json.loads(annotations(pod)[RECORD])
        assert annotations(pod)[TRANSLATED] == "claims" and record["devices"] == 2
        assert pod["spec"].get("nodeSelector") in (None, {})  # expressed fully in CEL, moved into the template
        claims = {c["name"]: c["resourceClaimTemplateName"] for c in pod["spec"]["resourceClaims"]}
        assert claims == record["claims"]
        for tname in set(claims.values()):
            template = api.get(api.resource_api().claim_templates, tname, ns)
            (request,) = template["spec"]["spec"]["devices"]["requests"]
            assert request["exactly"]["deviceClassName"] == DRIVER
            assert "productName.matches(" in request["exactly"]["selectors"][0]["cel"]["expression"]
        statuses = {s["name"]: s["resourceClaimName"] for s in pod["status"]["resourceClaimStatuses"]}
        devices = [d for claim in statuses.values() for d in allocated_devices(api, ns, claim)]
        assert len({d["device"] for d in devices}) == 2
        assert {(d["driver"], d["pool"]) for d in devices} == {(DRIVER, pod["spec"]["nodeName"])}
        want = {d["device"] for d in devices}

        def daemon_view() -> tuple[dict[str, Any], set[str]] | None:
            # The daemon writes its status annotation at most once a second, after the prepare that started the
            # pod: `bridge node status` may show the holders a moment after the pod is Running.
            node = run("node", "status", pod["spec"]["nodeName"], "-o", "json", "--kubeconfig",
                       str(cluster.kubeconfig))
            assert node.exit_code == 0, node.output
            state = json.loads(node.output)
            held = {d["name"] for d in state["status"]["devices"]
                    if any(pod["metadata"]["name"] in json.dumps(h) for h in d["holders"])}
            return (state, held) if held == want else None

        state, held = wait_until(daemon_view, timeout=30, what=f"bridge node status naming {want} held by the pod")
        assert (state["requested"]["value"], state["requested"]["source"], state["status"]["counts"]["dra"]) == (
            "4", "annotation", 4)
        assert held == {d["device"] for d in devices}  # the daemon's own view names the devices the claims got


def test_a_deployments_pods_get_the_claims_we_promise_and_run_with_the_extended_resource_name(
        cluster: SandboxCluster, namespaces: Callable[..., str]) -> None:
    """Target `extended` (KEP-5004, GA in 1.37): the pods ask `deviceclass.resource.kubernetes.io/gpu.dra-bridge.io`
    and the real scheduler makes and allocates one claim per pod."""
    ns = namespaces("train-extended", mode="dra", target="extended")
    api = cluster.api
    api.create(DEPLOYMENTS, deployment("serve", {"containers": [ctr("main", 2)]}), ns)
    for pod in running_pods(api, ns, "serve", 2):
        assert annotations(pod)[TRANSLATED] == "extended" and limits(pod) == {EXTENDED: "2"}
        claim = pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        devices = allocated_devices(api, ns, claim)
        assert len(devices) == 2 and {(d["driver"], d["pool"]) for d in devices} == {(DRIVER, pod["spec"]["nodeName"])}


# -- bridge namespace ------------------------------------------------------------------------------------------------

def test_namespace_set_flips_a_brand_new_namespace_and_waits_until_the_webhook_applies_each_mode(
        cluster: SandboxCluster, namespaces: Callable[..., str]) -> None:
    """Straight after `kubectl create namespace`, as a user would (should kube-controller-manager not have made the
    namespace's ServiceAccount yet, the wait's probes wait for it too), then each flip's wait until the webhook
    shows the new mode, and the pod created right after it gets that mode."""
    out = kubectl(cluster, "create", "namespace", "team-a")
    assert out.returncode == 0, out.stderr
    kube = ("--kubeconfig", str(cluster.kubeconfig))
    try:
        for mode, shows in (("dra", "translated (extended)"), ("shadow", "shadow record written"),
                            ("legacy", "not translated, no shadow record")):
            flip = run("namespace", "set", "team-a", mode, "--strict", *kube)
            assert flip.exit_code == 0, flip.output
            assert f"checked: a GPU pod created in team-a now gets {mode} from the webhook: {shows}" in flip.output
            pod = cluster.api.create(PODS, gpu_pod(f"after-{mode}"), "team-a")
            assert (annotations(pod).get(TRANSLATED), "dra-bridge.io/shadow-translation" in annotations(pod)) == {
                "dra": ("extended", False), "shadow": (None, True), "legacy": (None, False)}[mode]
        status = run("namespace", "status", "team-a", "-o", "json", *kube)
        assert status.exit_code == 0, status.output
        (report,) = json.loads(status.output)
        assert (report["mode"], report["translatedPods"], report["legacyGpuPods"]) == ("legacy", 1, 2)
    finally:
        cluster.api.delete(NAMESPACES, "team-a")


# -- bridge controller: two replicas, one Lease ----------------------------------------------------------------------

def audit_writes(audit_log: Path, user: str) -> list[Obj]:
    """The writes (create/update/patch/delete) the API server audited for `user`, answered or refused."""
    events = [json.loads(line) for line in audit_log.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("stage") == "ResponseComplete" and e["user"]["username"] == user
            and e["verb"] in WRITES]


def landed(events: list[Obj]) -> list[tuple[str, str, str]]:
    return [(e["verb"], e["objectRef"]["resource"], e["objectRef"].get("name", "")) for e in events
            if e["responseStatus"]["code"] < 300]


class Replica:
    """One `bridge controller` process with its own client certificate (user `dra-bridge-controller-<name>`)."""

    def __init__(self, cluster: SandboxCluster, name: str) -> None:
        assert cluster.plane is not None and cluster.work_dir is not None
        self.identity, self.user, self.port = f"ctl-{name}", f"dra-bridge-controller-{name}", free_port()
        kubeconfig = cluster.plane.kubeconfig_for(f"controller-{name}", self.user, "system:masters")
        self.process = ChildProcess(f"controller {name}", [
            sys.executable, "-m", "bridge", "controller", "--kubeconfig", str(kubeconfig), "--identity", self.identity,
            "--lease-namespace", WEBHOOK_NAMESPACE, "--lease-duration", "4s", "--renew-deadline", "3s",
            "--retry-period", "1s", "--interval", "0.5", "--cooldown", "0", "--http-address",
            f"127.0.0.1:{self.port}", "--log-format", "json"], cluster.work_dir / f"controller-{name}.log").start()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False


def lease_holder(api: KubeAPI) -> str:
    try:
        return str(api.get(LEASES, "dra-bridge-controller", WEBHOOK_NAMESPACE)["spec"].get("holderIdentity") or "")
    except NotFound:
        return ""


def no_pods_left(api: KubeAPI) -> bool:
    """Every pod the other tests made is gone (their namespaces are deleted after each test)."""
    return not [p for p in api.list(PODS)["items"] if p["metadata"]["namespace"] != "kube-system"]


def idle(api: KubeAPI, node: str) -> bool:
    """The node's daemon publishes its split as settled, with every GPU of both sides free."""
    view = node_view(api.get(NODES, node))
    return not view.frozen and view.dra_held == view.legacy_held == 0


def decision(api: KubeAPI, node: str) -> Obj:
    return json.loads(api.get(NODES, node)["metadata"]["annotations"]["dra-bridge.io/split-decision"])


def test_two_controller_replicas_elect_one_leader_whose_node_writes_land_and_killing_it_hands_over(
        cluster: SandboxCluster, namespaces: Callable[..., str], audit_log: Path) -> None:
    api = cluster.api
    wait_until(lambda: no_pods_left(api), 120, "the other tests' pods to be gone", interval=0.5)
    # A pod gone from the API may still hold its GPU on the node until the kubelet lets it go, and the controller
    # rightly moves one more GPU for it: wait until each daemon publishes every GPU of its node free.
    nodes = [node.name for node in cluster.nodes]
    wait_until(lambda: all(idle(api, n) for n in nodes), 90, "every node's GPUs to be free", interval=0.5)
    ns = namespaces("demand")
    replicas = {r.identity: r for r in (Replica(cluster, "a"), Replica(cluster, "b"))}
    try:
        wait_until(lambda: all(r.ready() for r in replicas.values()), 60, "both replicas' /readyz")
        leader = replicas[wait_until(lambda: lease_holder(api), 30, "a leader")]
        (follower,) = (r for r in replicas.values() if r is not leader)
        # 6 legacy GPUs where each node has 4: the leader moves 2 of a node's free DRA GPUs to the device plugin
        api.create(PODS, gpu_pod("big-1", 6), ns)
        first = cluster.wait_pod_phase(ns, "big-1", "Running", 90)["spec"]["nodeName"]
        assert api.get(NODES, first)["metadata"]["annotations"][SPLIT] == "2", decision(api, first)
        assert decision(api, first)["controller"] == leader.identity
        assert ("patch", "nodes", first) in landed(audit_writes(audit_log, leader.user))
        assert landed(audit_writes(audit_log, follower.user)) == []  # the follower wrote nothing, not even a Lease
        assert not [e for e in audit_writes(audit_log, follower.user) if e["objectRef"]["resource"] != "leases"]

        assert leader.process.proc is not None
        leader.process.proc.send_signal(signal.SIGKILL)  # no release: the follower waits out the lease
        wait_until(lambda: lease_holder(api) == follower.identity, 30, "the follower to take the lease")
        api.create(PODS, gpu_pod("big-2", 6), ns)
        second = cluster.wait_pod_phase(ns, "big-2", "Running", 90)["spec"]["nodeName"]
        assert second != first
        assert api.get(NODES, second)["metadata"]["annotations"][SPLIT] == "2", decision(api, second)
        assert decision(api, second)["controller"] == follower.identity
        writes = landed(audit_writes(audit_log, follower.user))
        assert ("update", "leases", "dra-bridge-controller") in writes and ("patch", "nodes", second) in writes
        lease = api.get(LEASES, "dra-bridge-controller", WEBHOOK_NAMESPACE)["spec"]
        assert lease["leaseTransitions"] >= 1
    finally:
        for r in replicas.values():
            r.process.stop()
        api.delete(NAMESPACES, ns)
        wait_until(lambda: no_pods_left(api), 120, "the demand pods to be gone", interval=0.5)
        for node in cluster.nodes:
            api.patch(NODES, node.name, {"metadata": {"annotations": {SPLIT: "4"}}})
        cluster.wait_daemons_settled(90)


# -- bridge migrate-report, live -------------------------------------------------------------------------------------

def report(cluster: SandboxCluster, kubeconfig: Path | None = None) -> tuple[int, Obj]:
    out = run("migrate-report", "-o", "json", "--timeout", "20", "--kubeconfig", str(kubeconfig or cluster.kubeconfig))
    return out.exit_code, json.loads(out.output) if out.output.startswith("{") else {"output": out.output}


def test_migrate_report_scans_the_live_cluster_and_a_blocker_makes_it_exit_1(
        cluster: SandboxCluster, namespaces: Callable[..., str]) -> None:
    code, doc = report(cluster)
    assert code == 0, doc
    assert (doc["kubernetesVersion"], doc["resourceApiVersions"][0]) == (LINES[REAL_LINE], "v1")
    assert {n["name"]: (n["backends"], n["gpus"], n["draDevices"]) for n in doc["nodes"]} == {
        "node-0": (["bridge"], 8, 4), "node-1": (["bridge"], 8, 4)}
    ns = namespaces("mig-team")
    mig = deployment("slices", {"containers": [{"name": "main", "image": "cuda",
                                                "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}, 1)
    cluster.api.create(DEPLOYMENTS, mig, ns)
    code, doc = report(cluster)
    assert code == 1, doc
    blockers = [(f["rule"], f["object"]) for f in doc["findings"] if f["severity"] == "blocker"]
    assert blockers == [("DRB020", {"kind": "Deployment", "namespace": ns, "name": "slices"})]


def test_a_snapshot_of_the_real_cluster_gives_the_findings_of_its_live_scan(cluster: SandboxCluster,
                                                                           tmp_path: Path) -> None:
    """`migrate-report snapshot` against the real kube-apiserver (its PodList and NodeList pages, items without kind)
    writes the Nodes whole, as the kubelet wrote them. The report from those files, every field read
    (`plain_json`), is the live scan's, which reads Pods and Nodes with the report's schema, and the report of the
    command reading the snapshot with that schema."""
    from bridge.report import load_snapshot, run_report

    code, live = report(cluster)
    out = tmp_path / "snap"
    res = run("migrate-report", "--timeout", "20", "--kubeconfig", str(cluster.kubeconfig), "snapshot", "--out",
              str(out))
    assert res.exit_code == 0, res.output
    nodes = json.loads((out / "nodes.json").read_text())["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["node-0", "node-1"]
    assert all(n["kind"] == "Node" and n["apiVersion"] == "v1" and n["metadata"]["managedFields"] for n in nodes)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    again = run("migrate-report", "--snapshot", str(out), "-o", "json")
    plain = json.loads(run_report(load_snapshot(out, plain_json=True), output="json").text)
    for doc in (json.loads(again.output), live):
        assert [(f["rule"], f["object"]) for f in doc["findings"]] == [(f["rule"], f["object"])
                                                                        for f in plain["findings"]]
        assert doc["nodes"] == plain["nodes"] and doc["nodes"]
    assert again.exit_code == code


def test_migrate_report_exits_2_naming_the_refusal_when_the_api_server_does_not_know_the_credential(
        cluster: SandboxCluster, tmp_path: Path) -> None:
    """A client certificate from another CA: the real server answers 401 to every request (the emulator
    authenticates nobody, so only a real run shows what the user reads)."""
    assert cluster.plane is not None and cluster.plane.ca is not None
    stranger = TinyCA(tmp_path / "other-ca").client("me", "me")
    kubeconfig = write_kubeconfig(tmp_path / "stranger.kubeconfig", cluster.url, cluster.plane.ca.pair.cert,
                                  client=stranger)
    code, doc = report(cluster, kubeconfig)
    assert code == 2, doc
    assert doc["output"] == "Error: the API server refused discovery (Unauthorized); check the credentials\n"
