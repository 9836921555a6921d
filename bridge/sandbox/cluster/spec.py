"""What a sandbox cluster consists of (pure): the Kubernetes version, the nodes with their simulated GPUs and
labels, and which real bridge components run on it.

Nodes come from a count and one GPU spec (`--nodes 2 --gpus 8xH100-80GB`: `node-0`, `node-1`) or from a YAML file:

    nodes:
      - name: gpu-a
        gpus: 8xH100-80GB          # a spec `bridge node --devices simulated:<spec>` accepts
        labels: {zone: a}          # registered by the node's kubelet (its --node-labels)
        split: "4"                 # dra-bridge.io/dra-devices on the Node (see `bridge node --help`)
      - name: gpu-b
        gpus: 4xA100-40GB,2xL4

Every node also gets the labels GPU Feature Discovery would put there for its first GPU (`nvidia.com/gpu.product`,
`nvidia.com/gpu.memory` in MiB, `nvidia.com/gpu.count`, `nvidia.com/gpu.present`), so GFD-label selectors work.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bridge.inventory.model import InventoryError
from bridge.inventory.simulated import devices_from_spec
from bridge.sandbox.apiserver.tolerationseconds import DefaultTolerationSeconds
from bridge.sandbox.kubelet.version import KubeletVersion, VersionError
from bridge.sandbox.nodelifecycle.controller import NodeMonitorTimes

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_NODES = 64
DEFAULT_GPUS = "8xH100-80GB"


class SpecError(ValueError):
    """The cluster description is unusable; the message names the field."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpus: str = DEFAULT_GPUS
    labels: Mapping[str, str] = field(default_factory=dict)
    split: str | None = None  # the Node's dra-bridge.io/dra-devices annotation

    def all_labels(self) -> dict[str, str]:
        return {**gfd_labels(self.name, self.gpus), **self.labels}


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[NodeSpec, ...]
    kubernetes_version: str = "1.34"
    bridge: bool = False  # a real `bridge node` per node
    webhook: bool = False  # the real `bridge webhook`, registered in the API emulator
    controller: bool = False  # the real `bridge controller` (one replica), setting each node's split from demand
    split: str | None = None  # `bridge node --dra-devices` (cluster default; a node's own split wins)
    node_status_frequency: float = 10.0  # the kubelets' nodeStatusUpdateFrequency
    sync_retry: float = 10.0  # the kubelets' pod-worker backoff after a sync error
    resync_interval: float = 60.0  # the kubelets' syncFrequency: a failed prepare is retried 60-90 s later
    dra_reconcile_period: float = 60.0  # the stand-in kubelets' DRA reconcile loop (claims of pods gone)
    split_grace: float | None = None  # `bridge node --split-grace`
    node_args: tuple[str, ...] = ()  # extra `bridge node` arguments
    webhook_args: tuple[str, ...] = ()  # extra `bridge webhook` arguments
    controller_interval: float = 5.0  # `bridge controller --interval` (seconds between decisions at most)
    controller_args: tuple[str, ...] = ()  # extra `bridge controller` arguments (--cooldown, --dry-run, ...)
    # "standin": the API emulator, scheduler/claim-controller stand-ins and kubelet simulators (Python, in this
    # process); "real": etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from source
    # (scripts/build_real.py), with kubelet simulators as nodes. `kubernetes_version` picks the built line there.
    backend: str = "standin"
    # real backend only: real kubelets with containerd and runc (bridge.sandbox.real.node) instead of the kubelet
    # simulators
    real_kubelets: bool = False
    # real kubelets only: the nodes that run the kubelet simulator all the same, beside the real ones under the one
    # control plane (a differential test: the same pods on both kinds of kubelet)
    simulated_nodes: tuple[str, ...] = ()
    # real backend only: a chart directory (charts/dra-bridge) whose rendered RBAC and admission policies are
    # applied, each bridge component then running with its ServiceAccount's token (bridge.sandbox.real.chartrbac)
    chart_rbac: str | None = None
    # real kubelets only: Services for the pods (one real kube-proxy in nftables mode; the API server listens on
    # this machine's address, the `kubernetes` Service's endpoint), so in-cluster clients reach it (the chart)
    services: bool = False
    # real backend only: extra kube-apiserver flags (e.g. an audit log: --audit-policy-file, --audit-log-path)
    apiserver_args: tuple[str, ...] = ()
    # real kubelets only: the real kubelets' release when it is older than the control plane's ("1.35" under a
    # 1.37 plane: a node not yet upgraded; `SandboxCluster.upgrade_kubelet` then upgrades it in place). None: the
    # control plane's. The skew policy bounds it: a kubelet is never newer than kube-apiserver and at most three
    # minors older (kubernetes.io/releases/version-skew-policy, "kubelet").
    kubelet_version: str | None = None
    # kube-controller-manager's node lifecycle flags, on either backend (the stand-in or the real one), and the
    # kubelets' nodeLeaseDurationSeconds (simulators and real kubelets); tests shorten them to see a stopped kubelet's
    # Node go Unknown within seconds
    node_monitor: NodeMonitorTimes = NodeMonitorTimes()
    node_lease_duration: int = 40
    # kube-apiserver's DefaultTolerationSeconds (the emulator's or the real one's flags): how long every pod that
    # names no such toleration of its own stays on a node tainted not-ready/unreachable NoExecute before the taint
    # eviction controller deletes it (300 s each by default)
    toleration_seconds: DefaultTolerationSeconds = DefaultTolerationSeconds()

    @property
    def version(self) -> KubeletVersion:
        return KubeletVersion.parse(self.kubernetes_version)

    @property
    def api_version(self) -> str:
        """MAJOR.MINOR.PATCH for the API emulator."""
        v = self.version
        return f"1.{v.minor}.{v.patch}"

    @property
    def resource_versions(self) -> tuple[str, ...]:
        """The resource.k8s.io versions a real API server of this release serves by default: `v1` alone from 1.34
        (the betas are disabled by default; see bridge/sandbox/apiserver/profiles.py)."""
        from bridge.sandbox.apiserver.profiles import profile_for

        return profile_for(f"1.{self.version.minor}").resource_versions


MAX_KUBELET_SKEW = 3  # minors a kubelet may be older than kube-apiserver (the skew policy, since 1.28)


def kubelet_skew_problem(kubelet: str, plane: str) -> str:
    """Why a real kubelet of release `kubelet` may not run under a control plane of release `plane` ('' when it
    may): it must be a built line, not newer than the plane and at most MAX_KUBELET_SKEW minors older."""
    from bridge.sandbox.apiserver.profiles import parse_minor
    from bridge.sandbox.real.binaries import line_of

    try:
        k, p = parse_minor(line_of(kubelet)), parse_minor(line_of(plane))
    except ValueError as err:
        return f"kubelet version: {err}"
    if k > p:
        return (f"a kubelet of 1.{k} under a 1.{p} control plane: a kubelet is never newer than kube-apiserver "
                f"(the version skew policy)")
    if p - k > MAX_KUBELET_SKEW:
        return (f"a kubelet of 1.{k} under a 1.{p} control plane: at most {MAX_KUBELET_SKEW} minors older "
                f"(the version skew policy)")
    return ""


def _gfd_family(major: int, minor: int) -> str:
    """GFD's compute capability -> family (NVIDIA/k8s-device-plugin internal/lm/resource.go `getArchFamily`, as of
    v0.18: 8.9 is ada-lovelace, 10.x and 12.x blackwell). Kept here, apart from the bridge's own GFD code, because a
    stand-in is written from upstream on its own."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell",
            12: "blackwell"}.get(major, "undefined")


def gfd_labels(node_name: str, gpus: str) -> dict[str, str]:
    """The labels NVIDIA GPU Feature Discovery sets, for the node's first GPU (gpu-feature-discovery `lm/`):
    product (the NVML name with spaces as '-': the simulated names have no characters GFD would strip), memory in
    MiB, count, and the compute capability with the family derived from it."""
    devices = devices_from_spec(gpus, node_name)
    first = devices[0]
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": first.product_name.replace(" ", "-"),
        "nvidia.com/gpu.memory": str(first.memory_bytes // 2**20),
        "nvidia.com/gpu.count": str(len(devices)),
    }
    major, _, minor = first.compute_capability.partition(".")
    if major.isdigit() and minor.isdigit() and int(major):
        labels.update({"nvidia.com/gpu.compute.major": major, "nvidia.com/gpu.compute.minor": minor,
                       "nvidia.com/gpu.family": _gfd_family(int(major), int(minor))})
    return labels


BACKENDS = ("standin", "real")


def check(spec: ClusterSpec) -> ClusterSpec:
    """Validate the whole description (raises SpecError naming the problem) and return it."""
    try:
        spec.version
    except VersionError as err:
        raise SpecError(f"kubernetes version: {err}") from err
    if spec.backend not in BACKENDS:
        raise SpecError(f"backend {spec.backend!r}: choose one of {', '.join(BACKENDS)}")
    if spec.chart_rbac and spec.backend != "real":
        raise SpecError("the chart's RBAC is enforced by a real API server only (backend=\"real\")")
    if spec.services and not spec.real_kubelets:
        raise SpecError("Services (kube-proxy) are for real kubelets' pods (real_kubelets=True)")
    if spec.real_kubelets and spec.backend != "real":
        raise SpecError("real kubelets run on the real backend only (backend=\"real\")")
    if spec.simulated_nodes and not spec.real_kubelets:
        raise SpecError("simulated_nodes names the exceptions among real kubelets (real_kubelets=True)")
    unknown = set(spec.simulated_nodes) - {n.name for n in spec.nodes}
    if unknown:
        raise SpecError(f"simulated_nodes names no node of the cluster: {', '.join(sorted(unknown))}")
    if spec.simulated_nodes and set(spec.simulated_nodes) >= {n.name for n in spec.nodes}:
        raise SpecError("simulated_nodes names every node: leave real_kubelets off for a cluster of simulators")
    if spec.apiserver_args and spec.backend != "real":
        raise SpecError("apiserver_args are kube-apiserver flags: they need the real backend")
    if spec.backend == "real":
        from bridge.sandbox.real.binaries import line_of

        try:
            line_of(spec.kubernetes_version)
        except ValueError as err:
            raise SpecError(str(err)) from err
    if spec.kubelet_version is not None:
        if not spec.real_kubelets:
            raise SpecError("kubelet_version is the real kubelets' release (real_kubelets=True)")
        problem = kubelet_skew_problem(spec.kubelet_version, spec.kubernetes_version)
        if problem:
            raise SpecError(problem)
    if not spec.nodes:
        raise SpecError("a cluster needs at least one node")
    if len(spec.nodes) > MAX_NODES:
        raise SpecError(f"at most {MAX_NODES} nodes (each runs a kubelet simulator, and a node daemon with --bridge)")
    seen: set[str] = set()
    for n in spec.nodes:
        if len(n.name) > 63 or not _DNS_SUBDOMAIN.match(n.name):
            raise SpecError(f"node name {n.name!r} is not a lower-case DNS name of at most 63 characters")
        if n.name in seen:
            raise SpecError(f"node name {n.name!r} is used twice")
        seen.add(n.name)
        try:
            devices_from_spec(n.gpus, n.name)
        except InventoryError as err:
            raise SpecError(f"node {n.name}: gpus {n.gpus!r}: {err}") from err
    if spec.webhook and not spec.bridge:
        raise SpecError("the webhook translates pods to the bridge's DRA devices: it needs the bridge nodes (--bridge)")
    if spec.controller and not spec.bridge:
        raise SpecError("the controller sets the split the bridge's node daemons apply: it needs the bridge nodes "
                        "(--bridge)")
    if spec.node_lease_duration < 1:
        raise SpecError(f"node lease duration must be at least 1 second, got {spec.node_lease_duration}")
    if min(spec.node_monitor.monitor_period, spec.node_monitor.grace_period,
           spec.node_monitor.startup_grace_period) <= 0:
        raise SpecError("the node monitor's period and grace periods must be > 0 seconds")
    if min(spec.toleration_seconds.not_ready, spec.toleration_seconds.unreachable) < 0:
        raise SpecError("the default toleration seconds must be >= 0")
    if spec.controller_interval <= 0:
        raise SpecError(f"controller interval must be > 0 seconds, got {spec.controller_interval:g}")
    return spec


def nodes_from_count(count: int, gpus: str = DEFAULT_GPUS, *, prefix: str = "node-") -> tuple[NodeSpec, ...]:
    if count < 1:
        raise SpecError(f"--nodes must be at least 1, got {count}")
    return tuple(NodeSpec(f"{prefix}{i}", gpus) for i in range(count))


def nodes_from_yaml(text: str, source: str = "nodes file") -> tuple[NodeSpec, ...]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SpecError(f"{source}: not YAML: {err}") from err
    items = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise SpecError(f"{source}: expected a mapping with a non-empty list under 'nodes'")
    out = []
    for i, item in enumerate(items):
        where = f"{source}: nodes[{i}]"
        if not isinstance(item, dict):
            raise SpecError(f"{where}: expected a mapping with name, gpus, labels, split")
        unknown = set(item) - {"name", "gpus", "labels", "split"}
        if unknown:
            raise SpecError(f"{where}: unknown field(s) {sorted(unknown)} (known: name, gpus, labels, split)")
        name, gpus = item.get("name"), item.get("gpus", DEFAULT_GPUS)
        labels: Any = item.get("labels") or {}
        split = item.get("split")
        if not isinstance(name, str) or not isinstance(gpus, str):
            raise SpecError(f"{where}: name and gpus must be strings")
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise SpecError(f"{where}: labels must map strings to strings (quote numbers: \"8\")")
        if split is not None and not isinstance(split, (str, int)):
            raise SpecError(f"{where}: split must be a string such as \"4\", \"all\" or \"gpu-6,gpu-7\"")
        out.append(NodeSpec(name, gpus, dict(labels), None if split is None else str(split)))
    return tuple(out)


def nodes_from_file(path: Path) -> tuple[NodeSpec, ...]:
    try:
        text = path.read_text()
    except OSError as err:
        raise SpecError(f"cannot read the nodes file {path}: {err.strerror}") from err
    return nodes_from_yaml(text, str(path))
