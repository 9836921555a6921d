"""What a real cluster does that a sandbox cluster does not, played for the guide tests: the DaemonSet and Deployment
controllers and the container runtime, for exactly the workloads the guides install.

The sandbox (bridge/sandbox/cluster) runs the API emulator, kubelet simulators that run pods, and the scheduler and
claim-controller stand-ins; it has no DaemonSet or Deployment controller and starts no containers. A guide installs
the chart with Helm and hands nodes over with labels, so something must turn "a DaemonSet selects this node" into
"the node daemon runs there". `Workloads` does, by polling the API (every `interval`):

* **DaemonSets** (kubernetes pkg/controller/daemon/daemon_controller.go): a node should run a daemon pod when the pod
  template's `nodeSelector` and required node affinity match its labels (k8s.io/component-helpers
  scheduling/corev1/nodeaffinity: terms ORed, expressions ANDed; `matchFields` on `metadata.name`); the sandbox's
  nodes have no taints, so tolerations never decide. A pod is created per such node, bound to it and owned by the
  DaemonSet (as the controller creates them; the report reads which agent runs where from these pods); a node that
  stops matching has its pod deleted; a template change (a `helm upgrade`) replaces the pods one node at a time
  (`RollingUpdate`, `maxSurge: 0`). The status fields `kubectl rollout status` reads are kept.
* **Deployments** (pkg/controller/deployment): the chart's controller runs `spec.replicas` processes (they elect a
  leader through their Lease); the webhook runs ONE process whatever the replica count (the sandbox sends every
  review to one address). A template change starts the new replicas beside the old ones, which stop once the new
  ones serve (surge first, as the chart's 2-replica Deployments roll). Status counts what runs. The teams'
  Deployments (no process behind them: their pods are run by the kubelet simulators) get `UserDeployments`:
  ReplicaSets per template and rolling updates, so `kubectl rollout restart` replaces pods as on a real cluster.
* **Containers**: instead of an image, each pod's container is the matching real process on this machine:
  - the GPU Operator's device plugin -> `VendorDevicePlugin` (tests/guides/vendor.py) on the node's kubelet sockets;
  - the chart's node daemon -> `bridge node` with the chart's arguments, except what only exists on a real node:
    the host paths become the node's sandbox directories, `nvml` becomes the node's simulated GPUs, the driver
    root, device root and CDI hook are dropped (no driver here), the health port is off, the API is reached
    through the sandbox kubeconfig instead of the in-cluster service account, and `--split-grace` is 0.5 s (the
    test timing of tests/sandbox_cluster.py);
  - the chart's controller -> `bridge controller` with the chart's arguments, the kubeconfig, the downward-API
    environment, a free health port and a 0.5 s decision interval (test timing);
  - the chart's webhook -> `bridge webhook` with the chart's arguments on a free loopback port with a throwaway
    certificate (cert-manager does not run here). The API emulator calls webhooks by URL only
    (bridge/sandbox/apiserver/admission.py), so this process is registered by URL exactly as the chart registers
    it by Service (a copy of the chart's MutatingWebhookConfiguration with `clientConfig.url`, as
    `bridge sandbox cluster --webhook` does; its entry is named `by-url.pods.dra-bridge.io`, so `bridge namespace`
    checks the chart's own entry, as on a real cluster), and the chart's Service gets an EndpointSlice listing the
    running pod, as the EndpointSlice controller would; calls the emulator makes through the chart's Service-based
    registration fail and are ignored (`failurePolicy: Ignore`).
* A daemon pod is created once its process is serving (device plugin and DRA registered with the node's kubelet,
  webhook answering `/healthz`): the kubelet simulator reports a pod Ready as soon as it runs, so creating the pod
  after the process is ready is what makes "Ready" mean what the chart's readiness probes make it mean.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import string
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bridge.kube.api import (
    DAEMON_SETS,
    DEPLOYMENTS,
    ENDPOINT_SLICES,
    MUTATING_WEBHOOKS,
    NODES,
    PODS,
    REPLICA_SETS,
    KubeAPI,
    Obj,
)
from bridge.kube.errors import AlreadyExists, KubeError, NotFound
from bridge.sandbox.apiserver.tls import write_self_signed
from bridge.sandbox.cluster import SandboxCluster, SandboxNode
from bridge.sandbox.cluster.processes import ChildProcess
from bridge.sandbox.cluster.webhook import free_port
from tests.guides.vendor import RESOURCE, VendorDevicePlugin

log = logging.getLogger(__name__)

VENDOR_NAMESPACE = "gpu-operator"
VENDOR_DS = "nvidia-device-plugin-daemonset"
DRIVER = "gpu.dra-bridge.io"
TEST_SPLIT_GRACE = "0.5"
TEST_CONTROLLER_INTERVAL = "0.5s"


# -- node selection (k8s.io/component-helpers scheduling/corev1/nodeaffinity) -----------------------------------------

def _expression_matches(expr: Obj, labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator", ""), list(expr.get("values") or [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    raise ValueError(f"unknown node selector operator {op!r}")


def _term_matches(term: Obj, node: Obj) -> bool:
    labels = node["metadata"].get("labels") or {}
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no objects
    if not all(_expression_matches(e, labels) for e in exprs):
        return False
    return all(_expression_matches(f, {"metadata.name": node["metadata"]["name"]}) for f in fields)


def should_run(pod_spec: Obj, node: Obj) -> bool:
    """Whether a DaemonSet with this pod template runs a pod on `node` (nodeSelector AND required affinity)."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(_term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])


def template_hash(template: Obj) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _suffix() -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=5))


def _answers(url: str, ca: bytes | None = None) -> bool:
    """One quick GET: 200 or not."""
    import ssl
    import urllib.error
    import urllib.request

    ctx = ssl.create_default_context(cadata=ca.decode()) if ca else None
    try:
        with urllib.request.urlopen(url, timeout=0.5, context=ctx) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False


# -- one running pod: its object and the process standing in for its container -------------------------------------------

@dataclass
class Instance:
    role: str  # vendor, node, controller, webhook
    owner: tuple[str, str, str]  # kind, namespace, name
    node: str
    revision: str
    stop: Callable[[], None]
    serving: Callable[[], bool] = lambda: True  # the readiness probe: the process serves
    pod: str = ""
    ready: bool = False
    process: ChildProcess | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _argv_map(args: list[str]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for a in args:
        key, sep, value = a.partition("=")
        out.append((key, value if sep else None))
    return out


def _argv(pairs: list[tuple[str, str | None]]) -> list[str]:
    return [k if v is None else f"{k}={v}" for k, v in pairs]


def _set(pairs: list[tuple[str, str | None]], key: str, value: str | None) -> list[tuple[str, str | None]]:
    kept = [(k, v) for k, v in pairs if k != key]
    return kept + [(key, value)]


def _drop(pairs: list[tuple[str, str | None]], *keys: str) -> list[tuple[str, str | None]]:
    return [(k, v) for k, v in pairs if k not in keys]


class Workloads:
    """See the module docstring."""

    def __init__(self, cluster: SandboxCluster, *, interval: float = 0.2,
                 labeller: OperatorLabeller | None = None) -> None:
        self.cluster = cluster
        self.labeller = labeller
        self.api: KubeAPI = cluster.api
        self.interval = interval
        assert cluster.work_dir is not None
        self.dir = cluster.work_dir / "standins"
        self.dir.mkdir(exist_ok=True)
        self.instances: dict[tuple[str, str, str, str], Instance] = {}  # (kind, ns, name, node or replica)
        self.vendor: dict[str, VendorDevicePlugin] = {}
        self.errors: list[str] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.user_deployments = UserDeployments(self.api)

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> Workloads:
        self._thread = threading.Thread(target=self._run, name="guide-workloads", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            for inst in list(self.instances.values()):
                inst.stop()
            self.instances.clear()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.reconcile()
            except KubeError as err:
                log.warning("guide workloads: %s", err)
            except Exception as err:  # keep playing the controllers; the test sees the error list
                log.exception("guide workloads failed")
                self.errors.append(repr(err))

    # -- reconcile --------------------------------------------------------------------------------------------------

    def reconcile(self) -> None:
        if self.labeller is not None:
            self.labeller.reconcile()
        nodes = {n["metadata"]["name"]: n for n in self.api.list(NODES)["items"]}
        wanted: dict[tuple[str, str, str, str], tuple[Obj, str]] = {}
        daemonsets = self.api.list(DAEMON_SETS)["items"]
        for ds in daemonsets:
            kind = self._role(ds)
            if kind is None:
                continue
            tmpl = ds["spec"]["template"]
            for name, node in nodes.items():
                if should_run(tmpl.get("spec") or {}, node):
                    wanted[("DaemonSet", ds["metadata"]["namespace"], ds["metadata"]["name"], name)] = (ds, kind)
        deployments = self.api.list(DEPLOYMENTS)["items"]
        pods = self.api.list(PODS)["items"]
        self.user_deployments.reconcile([d for d in deployments if self._role(d) is None], pods)
        for dep in deployments:
            kind = self._role(dep)
            if kind is None:
                continue
            replicas = int(dep["spec"].get("replicas", 1) or 0)
            count = min(replicas, 1) if kind == "webhook" else replicas
            revision = template_hash(dep["spec"]["template"])
            for i in range(count):  # keyed by revision: a new template's replicas start beside the old ones
                wanted[("Deployment", dep["metadata"]["namespace"], dep["metadata"]["name"], f"{revision}-{i}")] = \
                    (dep, kind)
        with self._lock:
            # Gone or changed. A DaemonSet's pod is replaced one node at a time, the old one stopped first (the chart's
            # RollingUpdate: maxUnavailable 1, maxSurge 0). A Deployment's new replicas start beside the old ones,
            # which stop once all new ones serve (the chart's default strategy surges; maxUnavailable 0 for 2).
            replaced: set[tuple[str, str, str]] = set()
            for key, inst in list(self.instances.items()):
                want = wanted.get(key)
                if want is not None and template_hash(want[0]["spec"]["template"]) == inst.revision:
                    continue
                if key[0] == "Deployment":
                    new = [k for k in wanted if k[:3] == key[:3]]
                    if new and not all(k in self.instances and self.instances[k].ready for k in new):
                        continue
                elif want is not None:
                    if key[:3] in replaced:
                        continue
                    replaced.add(key[:3])
                self._remove(key, inst)
            # A pod deleted by someone else (`kubectl delete pod`): its container stops; the pod is created again.
            live = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods
                    if not p["metadata"].get("deletionTimestamp")}
            for key, inst in list(self.instances.items()):
                if inst.ready and (key[1], inst.pod) not in live:
                    inst.pod = ""
                    self._remove(key, inst)
            # Started but not serving yet: the pod appears once the process serves (see the module docstring).
            for key, inst in list(self.instances.items()):
                if not inst.ready:
                    self._check_ready(key, inst, wanted[key][0])
            for key, (obj, kind) in wanted.items():
                if key in self.instances or key[:3] in replaced:
                    continue
                try:
                    self.instances[key] = self._start_instance(key, obj, kind)
                except Exception as err:
                    log.exception("guide workloads: starting %s failed", key)
                    self.errors.append(f"starting {key}: {err!r}")
        for ds in daemonsets:
            if self._role(ds) is not None:
                self._ds_status(ds, sum(1 for k in wanted if k[:3] == ("DaemonSet", ds["metadata"]["namespace"],
                                                                         ds["metadata"]["name"])))
        for dep in deployments:
            if self._role(dep) is not None:
                self._deploy_status(dep)

    @staticmethod
    def _role(obj: Obj) -> str | None:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        if labels.get("app") == VENDOR_DS or labels.get("app.kubernetes.io/name") == "nvidia-device-plugin":
            return "vendor"  # the GPU Operator's, or NVIDIA's standalone chart's
        if labels.get("app.kubernetes.io/name") == "dra-bridge":
            component = labels.get("app.kubernetes.io/component")
            if component in ("node", "controller", "webhook"):
                return component
        return None

    # -- starting and stopping one instance ----------------------------------------------------------------------------

    def _check_ready(self, key: tuple[str, str, str, str], inst: Instance, owner: Obj) -> None:
        """A process that serves gets its pod; one that died is forgotten (restarted on the next pass, as a
        crash-looping container is)."""
        if inst.process is not None and not inst.process.alive():
            self.errors.append(f"{key}: the process exited:\n{inst.process.log_tail()}")
            self._remove(key, inst)
            return
        if not inst.serving():
            return
        try:
            inst.pod = self._create_pod(owner, key, inst)
            inst.ready = True
        except KubeError as err:
            self.errors.append(f"creating the pod of {key}: {err}")

    def _start_instance(self, key: tuple[str, str, str, str], owner: Obj, kind: str) -> Instance:
        revision = template_hash(owner["spec"]["template"])
        o = (owner["kind"] if "kind" in owner else key[0], key[1], key[2])
        if kind == "vendor":
            sn = self.cluster.node(key[3])
            plugin = VendorDevicePlugin(sn.name, sn.spec.gpus, sn.kubelet.device_plugin_dir).start()
            self.vendor[sn.name] = plugin
            return Instance(kind, o, sn.name, revision, plugin.stop)
        container = owner["spec"]["template"]["spec"]["containers"][0]
        if kind == "node":
            sn = self.cluster.node(key[3])
            proc = ChildProcess(f"bridge node {sn.name}", self._node_argv(container, sn),
                                self.dir / f"node-{sn.name}-{_suffix()}.log",
                                env=self._env(container, node=sn.name, pod_namespace=key[1])).start()
            return Instance(kind, o, sn.name, revision, lambda: proc.stop(10), serving=lambda: self._node_serving(sn),
                            process=proc)
        if kind == "controller":
            port = free_port()
            proc = ChildProcess(f"bridge controller {key[3]}", self._controller_argv(container, port),
                                self.dir / f"controller-{key[3]}-{_suffix()}.log",
                                env=self._env(container, node=self.cluster.nodes[0].name, pod_namespace=key[1],
                                              pod_name=f"{key[2]}-{key[3]}")).start()
            return Instance(kind, o, self.cluster.nodes[0].name, revision, lambda: proc.stop(10),
                            serving=lambda: _answers(f"http://127.0.0.1:{port}/healthz"), process=proc)
        if kind == "webhook":
            return self._start_webhook(owner, container, o, revision)
        raise AssertionError(kind)

    def _remove(self, key: tuple[str, str, str, str], inst: Instance) -> None:
        del self.instances[key]
        if inst.pod:
            try:
                self.api.delete(PODS, inst.pod, key[1])
            except NotFound:
                pass
        inst.stop()
        if inst.role == "vendor":
            self.vendor.pop(inst.node, None)
        for cfg in inst.extra.get("configs", []):
            try:
                self.api.delete(MUTATING_WEBHOOKS, cfg)
            except NotFound:
                pass
        for sl in inst.extra.get("slices", []):
            try:
                self.api.delete(ENDPOINT_SLICES, sl, key[1])
            except NotFound:
                pass

    # -- the processes -------------------------------------------------------------------------------------------------

    def _env(self, container: Obj, *, node: str, pod_namespace: str, pod_name: str = "") -> dict[str, str]:
        out = {"BRIDGE_KUBECONFIG": str(self.cluster.kubeconfig),
               "BRIDGE_CONTROLLER_KUBECONFIG": str(self.cluster.kubeconfig)}
        fields = {"spec.nodeName": node, "metadata.namespace": pod_namespace, "metadata.name": pod_name}
        for e in container.get("env") or []:
            if "value" in e:
                out[e["name"]] = str(e["value"])
            ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if ref in fields:
                out[e["name"]] = fields[ref]
        out.pop("NVIDIA_VISIBLE_DEVICES", None)
        out.pop("NVIDIA_DRIVER_CAPABILITIES", None)
        return out

    def _node_argv(self, container: Obj, node: SandboxNode) -> list[str]:
        pairs = _argv_map(list(container.get("args") or []))
        pairs = _drop(pairs, "--driver-root", "--dev-root", "--cdi-hook-path", "--host-root")
        devices = dict(pairs).get("--devices") or "nvml"
        if devices == "nvml":
            pairs = _set(pairs, "--devices", f"simulated:{node.spec.gpus}")
        for key, value in (("--kubelet-root", str(node.kubelet_root)),
                           ("--device-plugin-dir", str(node.kubelet_root / "device-plugins")),
                           ("--cdi-root", str(node.cdi_root)),
                           ("--state-dir", str(node.state_dir)), ("--claims-dir", str(node.claims_dir)),
                           ("--http-address", "off"),
                           ("--split-grace", TEST_SPLIT_GRACE), ("--log-format", "json")):
            pairs = _set(pairs, key, value)
        return [sys.executable, "-m", "bridge", *container.get("command", ["bridge", "node"])[1:], *_argv(pairs)]

    def _controller_argv(self, container: Obj, port: int) -> list[str]:
        pairs = _argv_map(list(container.get("args") or []))
        for key, value in (("--http-address", f"127.0.0.1:{port}"), ("--interval", TEST_CONTROLLER_INTERVAL),
                           ("--log-format", "json")):
            pairs = _set(pairs, key, value)
        return [sys.executable, "-m", "bridge", "controller", *_argv(pairs)]

    @staticmethod
    def _node_serving(node: SandboxNode) -> bool:
        """What the chart's readiness probe (`/readyz`) says: registered with the kubelet through both APIs."""
        dra = node.kubelet.dra
        plugin = node.kubelet.devices.endpoint(RESOURCE) or ""
        return plugin.endswith("dra-bridge-nvidia.com-gpu.sock") and dra is not None and bool(dra.plugin(DRIVER))

    def _start_webhook(self, owner: Obj, container: Obj, o: tuple[str, str, str], revision: str) -> Instance:
        ns, name = o[1], o[2]
        d = self.dir / f"webhook-{_suffix()}"
        d.mkdir()
        cert, key = write_self_signed(d, "127.0.0.1")
        ca = cert.read_bytes()
        port = free_port()
        pairs = _argv_map(list(container.get("args") or []))
        for k, v in (("--port", str(port)), ("--bind-address", "127.0.0.1"), ("--tls-cert-file", str(cert)),
                     ("--tls-key-file", str(key)), ("--kubeconfig", str(self.cluster.kubeconfig)),
                     ("--log-format", "json")):
            pairs = _set(pairs, k, v)
        proc = ChildProcess(f"bridge webhook {name}", [sys.executable, "-m", "bridge", "webhook", *_argv(pairs)],
                            d / "webhook.log",
                            env=self._env(container, node=self.cluster.nodes[0].name, pod_namespace=ns)).start()
        inst = Instance("webhook", o, self.cluster.nodes[0].name, revision, lambda: proc.stop(10),
                        serving=lambda: _answers(f"https://127.0.0.1:{port}/healthz", ca), process=proc)
        inst.extra.update(port=port, ca=ca)
        return inst

    # -- the objects ---------------------------------------------------------------------------------------------------

    def _create_pod(self, owner: Obj, key: tuple[str, str, str, str], inst: Instance) -> str:
        kind = "DaemonSet" if key[0] == "DaemonSet" else "ReplicaSet"
        meta = owner["metadata"]
        tmpl = owner["spec"]["template"]
        spec = json.loads(json.dumps(tmpl.get("spec") or {}))
        spec["nodeName"] = inst.node
        spec.pop("affinity", None)  # bound directly: the DaemonSet controller's node affinity is moot
        labels = dict((tmpl.get("metadata") or {}).get("labels") or {})
        labels["controller-revision-hash"] = inst.revision
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": f"{meta['name']}-" if kind == "DaemonSet" else
                            f"{meta['name']}-{inst.revision}-", "namespace": meta["namespace"], "labels": labels,
                            "annotations": dict((tmpl.get("metadata") or {}).get("annotations") or {}),
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind,
                                                 "name": meta["name"] if kind == "DaemonSet" else
                                                 f"{meta['name']}-{inst.revision}",
                                                 "uid": meta["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": spec}
        created = self.api.create(PODS, pod, meta["namespace"])
        name = str(created["metadata"]["name"])
        if key[0] == "Deployment" and self._role(owner) == "webhook":
            self._register_webhook(owner, inst, name)
        return name

    def _register_webhook(self, owner: Obj, inst: Instance, pod: str) -> None:
        import base64

        ns = owner["metadata"]["namespace"]
        url = f"https://127.0.0.1:{inst.extra['port']}/mutate"
        ca = base64.b64encode(inst.extra["ca"]).decode()
        configs = []
        for cfg in self.api.list(MUTATING_WEBHOOKS)["items"]:
            hooks = [h for h in cfg.get("webhooks") or []
                     if ((h.get("clientConfig") or {}).get("service") or {}).get("namespace") == ns]
            if not hooks or cfg["metadata"]["name"].endswith("-by-url"):
                continue
            # Named apart from the chart's entry (pods.dra-bridge.io), so `bridge namespace` checks the chart's
            # registration, as it would on a real cluster, and not this stand-in's.
            copy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": cfg["metadata"]["name"] + "-by-url",
                                 "labels": {"app.kubernetes.io/managed-by": "guide-tests"}},
                    "webhooks": [{**h, "name": "by-url." + h["name"], "clientConfig": {"url": url, "caBundle": ca}}
                                 for h in hooks]}
            try:
                self.api.create(MUTATING_WEBHOOKS, copy)
            except AlreadyExists:
                self.api.patch(MUTATING_WEBHOOKS, copy["metadata"]["name"], {"webhooks": copy["webhooks"]})
            configs.append(copy["metadata"]["name"])
        inst.extra["configs"] = configs
        ip = None
        for _ in range(100):
            ip = ((self.api.get(PODS, pod, ns).get("status") or {}).get("podIP"))
            if ip:
                break
            time.sleep(0.05)
        service = owner["metadata"]["name"]
        slice_name = f"{service}-{_suffix()}"
        self.api.create(ENDPOINT_SLICES, {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": slice_name, "namespace": ns,
                         "labels": {"kubernetes.io/service-name": service,
                                    "endpointslice.kubernetes.io/managed-by": "guide-tests"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip or "10.0.0.1"], "conditions": {"ready": True},
                           "nodeName": inst.node, "targetRef": {"kind": "Pod", "name": pod, "namespace": ns}}],
            "ports": [{"name": "https", "port": int(inst.extra["port"]), "protocol": "TCP"}]}, ns)
        inst.extra["slices"] = [slice_name]

    def _ds_status(self, ds: Obj, desired: int) -> None:
        meta = ds["metadata"]
        key = ("DaemonSet", meta["namespace"], meta["name"])
        revision = template_hash(ds["spec"]["template"])
        with self._lock:
            mine = [i for k, i in self.instances.items() if k[:3] == key]
        ready = sum(1 for i in mine if i.ready)
        updated = sum(1 for i in mine if i.revision == revision)
        status = {"desiredNumberScheduled": desired, "currentNumberScheduled": len(mine), "numberMisscheduled": 0,
                  "numberReady": ready, "numberAvailable": ready, "updatedNumberScheduled": updated,
                  "observedGeneration": meta.get("generation", 1)}
        if status.get("numberUnavailable", 0) or desired - ready > 0:
            status["numberUnavailable"] = desired - ready
        if {k: (ds.get("status") or {}).get(k) for k in status} != status:
            try:
                self.api.patch(DAEMON_SETS, meta["name"], {"status": status}, meta["namespace"], subresource="status")
            except (NotFound, KubeError):
                pass

    def _deploy_status(self, dep: Obj) -> None:
        meta = dep["metadata"]
        key = ("Deployment", meta["namespace"], meta["name"])
        with self._lock:
            mine = [i for k, i in self.instances.items() if k[:3] == key]
        revision = template_hash(dep["spec"]["template"])
        ready = sum(1 for i in mine if i.ready)
        status = {"replicas": len(mine), "readyReplicas": ready, "availableReplicas": ready,
                  "updatedReplicas": sum(1 for i in mine if i.revision == revision),
                  "observedGeneration": meta.get("generation", 1)}
        if {k: (dep.get("status") or {}).get(k) for k in status} != status:
            try:
                self.api.patch(DEPLOYMENTS, meta["name"], {"status": status}, meta["namespace"], subresource="status")
            except (NotFound, KubeError):
                pass

    # -- for the tests -------------------------------------------------------------------------------------------------

    def running(self, kind: str) -> dict[str, Instance]:
        """Instances of one role (vendor, node, controller, webhook) by node (or replica index)."""
        with self._lock:
            return {k[3]: i for k, i in self.instances.items() if i.role == kind and i.ready}


def standalone_objects(values: Obj) -> list[Obj]:
    """NVIDIA's standalone chart's device-plugin DaemonSet for release `nvdp` in `nvidia-device-plugin`, with the node
    affinity of `values` (NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin/templates/
    daemonset-device-plugin.yml and _helpers.tpl: name `<release>-nvidia-device-plugin`, labels
    `app.kubernetes.io/name`/`instance`; `affinity` from the values)."""
    labels = {"app.kubernetes.io/name": "nvidia-device-plugin", "app.kubernetes.io/instance": "nvdp"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nvidia-device-plugin"}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": {"name": "nvdp-nvidia-device-plugin", "namespace": "nvidia-device-plugin", "labels": labels},
         "spec": {"selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"affinity": values["affinity"],
                                        "containers": [{"name": "nvidia-device-plugin-ctr",
                                                        "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                                                        "command": ["nvidia-device-plugin"]}]}}}},
    ]


def gpu_operator_objects() -> list[Obj]:
    """The GPU Operator's device-plugin DaemonSet as the operator creates it (NVIDIA/gpu-operator
    assets/state-device-plugin/0500_daemonset.yaml: name, labels, nodeSelector, priority; one container standing for
    its image), in its namespace."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": VENDOR_NAMESPACE}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": {"name": VENDOR_DS, "namespace": VENDOR_NAMESPACE, "labels": {"app": VENDOR_DS}},
         "spec": {"selector": {"matchLabels": {"app": VENDOR_DS}},
                  "template": {"metadata": {"labels": {"app": VENDOR_DS}},
                               "spec": {"nodeSelector": {"nvidia.com/gpu.deploy.device-plugin": "true"},
                                        "priorityClassName": "system-node-critical",
                                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                         "effect": "NoSchedule"}],
                                        "containers": [{"name": "nvidia-device-plugin",
                                                        "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                                                        "env": [{"name": "DEVICE_ID_STRATEGY", "value": "uuid"},
                                                                {"name": "DEVICE_LIST_STRATEGY",
                                                                 "value": "envvar"}]}]}}}},
    ]


class OperatorLabeller:
    """The GPU Operator's node labelling (NVIDIA/gpu-operator controllers/state_manager.go `gpuStateLabels`,
    nodelabeling_controller.go): on a node with `nvidia.com/gpu.present=true` it adds
    `nvidia.com/gpu.deploy.device-plugin=true` only when the label is missing, so a `false` an operator set stays."""

    def __init__(self, api: KubeAPI) -> None:
        self.api = api

    def reconcile(self) -> None:
        for node in self.api.list(NODES)["items"]:
            labels = node["metadata"].get("labels") or {}
            if labels.get("nvidia.com/gpu.present") == "true" and "nvidia.com/gpu.deploy.device-plugin" not in labels:
                self.api.patch(NODES, node["metadata"]["name"],
                               {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "true"}}})




def _count(value: Any, replicas: int, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        exact = replicas * int(text[:-1]) / 100
        return int(-(-exact // 1)) if round_up else int(exact // 1)
    return int(text)


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class UserDeployments:
    """The Deployment controller for the teams' Deployments (kubernetes pkg/controller/deployment rolling.go,
    sync.go): one ReplicaSet per pod-template hash, owned by the Deployment; pods owned by it. A template change
    (`kubectl rollout restart` sets an annotation in it) rolls: new pods up to `replicas + maxSurge`, old pods deleted
    while at least `replicas - maxUnavailable` pods are ready (defaults 25% / 25%: surge rounded up, unavailable
    down). Pods get no node: the sandbox's scheduler stand-in binds them, and the webhook sees them as it sees any
    new pod. Status: the fields `kubectl rollout status` reads."""

    def __init__(self, api: KubeAPI) -> None:
        self.api = api

    def reconcile(self, deployments: list[Obj], all_pods: list[Obj]) -> None:
        pods = [p for p in all_pods if (p["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "ReplicaSet"]
        for dep in deployments:
            self._sync(dep, pods)

    def _sync(self, dep: Obj, all_pods: list[Obj]) -> None:
        meta, spec = dep["metadata"], dep["spec"]
        ns, name = meta["namespace"], meta["name"]
        replicas = int(spec.get("replicas", 1))
        rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        surge = _count(rolling.get("maxSurge", "25%"), replicas, True)
        unavailable = _count(rolling.get("maxUnavailable", "25%"), replicas, False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        revision = template_hash(spec["template"])
        rs_name = f"{name}-{revision}"
        self._ensure_replicaset(dep, rs_name, revision)
        mine = [p for p in all_pods if p["metadata"]["namespace"] == ns
                and p["metadata"]["ownerReferences"][0]["name"].startswith(f"{name}-")
                and p["metadata"]["ownerReferences"][0]["name"][len(name) + 1:].isalnum()
                and not p["metadata"].get("deletionTimestamp")]
        new = [p for p in mine if p["metadata"]["ownerReferences"][0]["name"] == rs_name]
        old = [p for p in mine if p not in new]
        ready = sum(1 for p in mine if _ready(p))
        if len(new) > replicas:
            for p in sorted(new, key=_ready)[:len(new) - replicas]:
                self._delete(p)
            new = new[:replicas]
        room = min(replicas - len(new), replicas + surge - len(new) - len(old))
        for _ in range(max(0, room)):
            new.append(self._create_pod(dep, rs_name, revision))
        # Old pods go while enough stay ready: the not-ready ones first.
        can_delete = ready - (replicas - unavailable)
        for p in sorted(old, key=_ready):
            if not _ready(p):
                self._delete(p)
                continue
            if can_delete <= 0:
                break
            self._delete(p)
            can_delete -= 1
        status = {"observedGeneration": meta.get("generation", 1), "replicas": len(new) + len(old),
                  "updatedReplicas": len(new), "readyReplicas": ready, "availableReplicas": ready,
                  "unavailableReplicas": max(0, replicas - ready)}
        if {k: (dep.get("status") or {}).get(k) for k in status} != status:
            try:
                self.api.patch(DEPLOYMENTS, name, {"status": status}, ns, subresource="status")
            except KubeError:
                pass

    def _ensure_replicaset(self, dep: Obj, rs_name: str, revision: str) -> None:
        meta = dep["metadata"]
        tmpl = json.loads(json.dumps(dep["spec"]["template"]))
        tmpl.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = revision
        selector = json.loads(json.dumps(dep["spec"]["selector"]))
        selector.setdefault("matchLabels", {})["pod-template-hash"] = revision
        try:
            self.api.create(REPLICA_SETS, {
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": rs_name, "namespace": meta["namespace"],
                             "labels": dict(tmpl["metadata"]["labels"]),
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                                  "uid": meta["uid"], "controller": True,
                                                  "blockOwnerDeletion": True}]},
                "spec": {"replicas": int(dep["spec"].get("replicas", 1)), "selector": selector, "template": tmpl}},
                meta["namespace"])
        except AlreadyExists:
            pass

    def _create_pod(self, dep: Obj, rs_name: str, revision: str) -> Obj:
        meta = dep["metadata"]
        tmpl = dep["spec"]["template"]
        rs = self.api.get(REPLICA_SETS, rs_name, meta["namespace"])
        labels = {**((tmpl.get("metadata") or {}).get("labels") or {}), "pod-template-hash": revision}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": f"{rs_name}-", "namespace": meta["namespace"], "labels": labels,
                            "annotations": dict((tmpl.get("metadata") or {}).get("annotations") or {}),
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
                                                 "uid": rs["metadata"]["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": json.loads(json.dumps(tmpl.get("spec") or {}))}
        return self.api.create(PODS, pod, meta["namespace"])

    def _delete(self, pod: Obj) -> None:
        try:
            self.api.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
        except NotFound:
            pass
