"""`SandboxCluster`: a whole GPU cluster on loopback, for tests, `bridge demo` and trying the bridge out.

    spec = ClusterSpec(nodes=nodes_from_count(2, "8xH100-80GB"), kubernetes_version="1.36", bridge=True, split="4")
    with SandboxCluster(spec) as cluster:          # start() ... stop()
        api = cluster.api                          # a KubeAPI on the emulator (bridge.kube)
        cluster.kubeconfig                         # the kubeconfig file, for processes and kubectl
        cluster.node("node-0").kubelet             # the node's KubeletSimulator
        cluster.wait_pod_phase("ns", "pod", "Running")

What runs, in start order (stop is the reverse, and leaves nothing behind: sockets, temp dirs, processes):
1. the API emulator (`ApiServer`) at the Kubernetes version's served `resource.k8s.io` versions, with graceful
   pod deletion (the kubelets finish deleted pods, as real kubelets do);
2. with `bridge`, the bridge's DeviceClass (as `examples/deviceclass.yaml`);
3. one kubelet simulator per node (in this process): it registers its Node with the node's labels (plus GPU
   Feature Discovery's), posts the Node's status, renews its Lease and runs the pods bound to it;
4. the control plane (`controlplane.stand_ins`): the scheduler, claim-controller, node lifecycle and taint eviction
   controller stand-ins (`spec.node_monitor` sets the node lifecycle controller's periods, as kube-controller-manager's
   flags on the real backend; `spec.toleration_seconds` the emulator's DefaultTolerationSeconds, as kube-apiserver's);
5. with `bridge`, one real `bridge node` process per node with simulated GPUs (`--devices simulated:<gpus>`), its
   split from the node's spec or the cluster's; the cluster waits until every node daemon is registered with its
   kubelet through both APIs;
6. with `webhook`, the real `bridge webhook` process, registered in the emulator (TLS, CA bundle);
7. with `controller`, the real `bridge controller` process (one replica, no Lease; `controller.py`), started last
   so that its first decision sees every node daemon's split status; the cluster waits for its `/readyz`.

Work files live under one short temp directory (unix socket paths are limited to 107 bytes), removed on stop
unless the caller passed `work_dir`. Child processes get SIGTERM if this process dies (`orphanguard`).
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from bridge.inventory.faults import append_fault
from bridge.inventory.simulated import devices_from_spec
from bridge.kube.api import NODES, PODS, KubeAPI, Obj
from bridge.kube.errors import KubeError, NotFound
from bridge.ledger.target import evaluate_request, requested_split
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.cluster.controller import ControllerStartError, SandboxController
from bridge.sandbox.cluster.controlplane import Controller, stand_ins
from bridge.sandbox.cluster.processes import ChildProcess
from bridge.sandbox.cluster.spec import ClusterSpec, NodeSpec, check
from bridge.sandbox.cluster.webhook import SandboxWebhook
from bridge.sandbox.kubelet import KubeletConfig, KubeletSimulator, MachineInfo
from bridge.sandbox.kubelet.pods import PrepareFailure

if TYPE_CHECKING:
    from bridge.sandbox.real.chartrbac import ChartCredentials
    from bridge.sandbox.real.node import RealNode
    from bridge.sandbox.real.plane import ControlPlane
    from bridge.sandbox.real.proxy import KubeProxy

log = logging.getLogger(__name__)

DRIVER = "gpu.dra-bridge.io"
GPU_RESOURCE = "nvidia.com/gpu"
SPLIT_ANNOTATION = "dra-bridge.io/dra-devices"
_MAX_WORK_DIR = 40  # bytes: leaves room for <work>/n99/kl/plugins_registry/<driver>-<pod uid>-reg.sock


def _allocatable(node: Obj | None, resource: str) -> int:
    value = ((node or {}).get("status") or {}).get("allocatable", {}).get(resource, "0")
    return int(value) if str(value).isdigit() else 0


class ClusterError(RuntimeError):
    """The cluster could not start; the message says which part and why (with its log's tail)."""


def device_class(api_version: str, driver: str = DRIVER) -> Obj:
    """The bridge's DeviceClass, as examples/deviceclass.yaml (resource.k8s.io/v1) and deviceclass-v1beta1.yaml."""
    return {"apiVersion": f"resource.k8s.io/{api_version}", "kind": "DeviceClass",
            "metadata": {"name": driver, "labels": {"app.kubernetes.io/name": "dra-bridge",
                                                    "app.kubernetes.io/component": "deviceclass"}},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


FAULTS_FILE = "simulated-faults.jsonl"  # in each node daemon's state dir: `SandboxCluster.gpu_fault` appends to it


@dataclass
class SandboxNode:
    spec: NodeSpec
    root: Path  # the node's work directory
    kubelet: KubeletSimulator | None  # the kubelet simulator (None on a real node)
    daemon: ChildProcess | None = None
    real: RealNode | None = None  # a real kubelet + containerd (the real backend with real_kubelets)
    http_port: int = 0  # the node daemon's /readyz and /metrics (real nodes)
    retired: list[ChildProcess] = field(default_factory=list)  # earlier daemon instances (rollouts, restarts)

    @property
    def sim(self) -> KubeletSimulator:
        """The kubelet simulator; only on the stand-in kubelets (a real node has `real` instead)."""
        if self.kubelet is None:
            raise AttributeError(f"node {self.name} runs a real kubelet: use .real (bridge.sandbox.real.node)")
        return self.kubelet

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kubelet_root(self) -> Path:
        return self.real.kubelet_root if self.real is not None else self.root / "kl"

    @property
    def state_dir(self) -> Path:
        return self.real.state_dir if self.real is not None else self.root / "state"

    @property
    def cdi_root(self) -> Path:
        return self.real.cdi_root if self.real is not None else self.root / "cdi"

    @property
    def faults_file(self) -> Path:
        """The daemon's --simulated-faults file (in its state dir), as this machine sees it."""
        return self.state_dir / FAULTS_FILE

    @property
    def claims_dir(self) -> Path:
        """The daemon's --claims-dir, one per node (the chart's /var/run/dra-bridge on each host), as this machine
        sees it: never this machine's own /var/run/dra-bridge, which every node would share."""
        return self.real.claims_dir if self.real is not None else self.root / "run"


class SandboxCluster:
    def __init__(self, spec: ClusterSpec, *, work_dir: Path | None = None, kubeconfig_out: Path | None = None,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.spec = check(spec)
        self._given_work_dir = work_dir
        self.kubeconfig_out = kubeconfig_out
        self.host, self.port = host, port
        self.work_dir: Path | None = None
        self.server: ApiServer | None = None  # the API emulator (stand-in backend)
        self.plane: ControlPlane | None = None  # the real control plane (real backend)
        self.credentials: ChartCredentials | None = None  # the chart's ServiceAccounts (real backend, chart_rbac)
        self.proxy: KubeProxy | None = None  # kube-proxy for the real nodes' Services (real backend, services)
        self.nodes: list[SandboxNode] = []
        self.controllers: list[Controller] = []
        self.control_plane = ""
        self.webhook: SandboxWebhook | None = None
        self.controller: SandboxController | None = None
        self._api: KubeAPI | None = None
        self._started = False

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> SandboxCluster:
        if self._started:
            raise RuntimeError("SandboxCluster already started")
        self._started = True
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.work_dir = self._make_work_dir()
        if self.spec.backend == "real":
            self._start_real_plane(deadline)
        else:
            self.server = ApiServer(host=self.host, port=self.port, version=self.spec.api_version,
                                    resource_versions=self.spec.resource_versions,
                                    toleration_seconds=self.spec.toleration_seconds).start()
            self.port = self.server.port
            self.server.write_kubeconfig(self.kubeconfig)
            if self.kubeconfig_out is not None:
                self.server.write_kubeconfig(self.kubeconfig_out)
        from bridge.kube import connect

        self._api = connect(str(self.kubeconfig))
        if self.spec.bridge:
            self._api.create(self._api.resource_api().device_classes,
                             device_class(self._api.resource_api().version))
        if self.plane is not None and self.spec.real_kubelets:
            self._start_real_nodes(deadline)
        real = {node.name for node in self.nodes}
        for i, n in enumerate(self.spec.nodes):
            if n.name in real:
                continue
            root = self.work_dir / f"n{i}"
            kubelet = KubeletSimulator(root / "kl", kube=connect(str(self._node_kubeconfig(n.name))), node_name=n.name,
                                       config=KubeletConfig(
                                           version=self.spec.kubernetes_version, register_node=True, run_pods=True,
                                           node_status_frequency=self.spec.node_status_frequency,
                                           node_lease_duration=self.spec.node_lease_duration,
                                           sync_retry=self.spec.sync_retry,
                                           resync_interval=self.spec.resync_interval,
                                           dra_reconcile_period=self.spec.dra_reconcile_period,
                                           machine=MachineInfo(labels=n.all_labels())))
            self.nodes.append(SandboxNode(n, root, kubelet))
            kubelet.start()
        order = [n.name for n in self.spec.nodes]
        self.nodes.sort(key=lambda node: order.index(node.name))
        for node in self.nodes:
            if node.kubelet is not None:
                assert node.kubelet.node_status is not None
                if not node.kubelet.node_status.wait_registered(max(1.0, deadline - time.monotonic())):
                    raise ClusterError(f"the kubelet of {node.name} could not register its Node: "
                                       f"{node.kubelet.node_status.last_error}")
            split = node.spec.split
            if split is not None:
                self._api.patch(NODES, node.name, {"metadata": {"annotations": {SPLIT_ANNOTATION: split}}})
        if self.plane is None:
            self.controllers, self.control_plane = stand_ins(self._api, self.spec.kubernetes_version,
                                                             self.spec.node_monitor)
        else:
            self.control_plane = (f"kube-scheduler and kube-controller-manager {self.plane.bin.version} (real, "
                                  f"built from source)")
        if self.plane is not None and self.spec.chart_rbac:
            from bridge.sandbox.real.chartrbac import ChartCredentials, ChartError

            try:
                self.credentials = ChartCredentials(self.plane, self._api, Path(self.spec.chart_rbac)).install()
            except ChartError as err:
                raise ClusterError(str(err)) from err
        if self.spec.bridge:
            for node in self.nodes:
                node.daemon = ChildProcess(f"bridge node {node.name}", self._node_argv(node),
                                           node.root / "node.log").start()
            for node in self.nodes:
                self._wait_daemon(node, deadline)
        if self.spec.webhook:
            self.webhook = SandboxWebhook(self.work_dir, self._component_kubeconfig("webhook"),
                                          extra_args=self.spec.webhook_args)
            self.webhook.start(self._api, timeout=max(1.0, deadline - time.monotonic()))
        if self.spec.controller:
            self.controller = SandboxController(self.work_dir, self._component_kubeconfig("controller"),
                                                interval=self.spec.controller_interval,
                                                extra_args=self.spec.controller_args)
            try:
                self.controller.start(timeout=max(1.0, deadline - time.monotonic()))
            except ControllerStartError as err:
                raise ClusterError(str(err)) from err
        log.info("sandbox cluster running", extra={"nodes": len(self.nodes), "api": self.url})

    def _make_work_dir(self) -> Path:
        if self._given_work_dir is not None:
            d = self._given_work_dir.resolve()
            d.mkdir(parents=True, exist_ok=True)
        else:
            d = Path(tempfile.mkdtemp(prefix="brc-", dir="/tmp" if Path("/tmp").is_dir() else None))
        if len(str(d).encode()) > _MAX_WORK_DIR:
            if self._given_work_dir is None:
                shutil.rmtree(d, ignore_errors=True)
            raise ClusterError(f"work directory {d} is {len(str(d).encode())} bytes long; unix socket paths below "
                               f"it would pass the 107-byte limit: use one of at most {_MAX_WORK_DIR} bytes")
        return d

    def _start_real_plane(self, deadline: float) -> None:
        """etcd, kube-apiserver, kube-controller-manager and kube-scheduler of the spec's line, built from source."""
        from bridge.sandbox.real.binaries import Binaries, BinariesMissing, line_of
        from bridge.sandbox.real.plane import ControlPlane, PlaneOptions
        from bridge.sandbox.real.process import StartError

        assert self.work_dir is not None
        binaries = Binaries(line_of(self.spec.kubernetes_version))
        self.plane = ControlPlane(self.work_dir / "cp", binaries,
                                  PlaneOptions(host=self.host,
                                               apiserver_args=(*self.spec.toleration_seconds.flags(),
                                                               *self.spec.apiserver_args),
                                               controller_manager_args=tuple(self.spec.node_monitor.flags()),
                                               apiserver_bind="0.0.0.0" if self.spec.services else None))
        try:
            self.plane.start(timeout=max(1.0, deadline - time.monotonic()))
        except (BinariesMissing, StartError) as err:
            raise ClusterError(str(err)) from err
        self.port = self.plane.port
        self.plane.write_admin_kubeconfig(self.kubeconfig)
        if self.kubeconfig_out is not None:
            self.plane.write_admin_kubeconfig(self.kubeconfig_out)

    def _component_kubeconfig(self, component: str, node: str | None = None) -> Path:
        """The credentials a bridge component runs with: the admin kubeconfig, or with `chart_rbac` the token of
        the ServiceAccount the chart gives it (a node daemon's bound to a pod on its node)."""
        if self.credentials is None:
            return self.kubeconfig
        return self.credentials.token_kubeconfig(component, node=node)

    def _node_kubeconfig(self, node_name: str) -> Path:
        """The credentials a node's kubelet uses: on the real backend its own client certificate
        (`system:node:<name>` in `system:nodes`), which the Node authorizer and NodeRestriction confine to that
        node, as on a real cluster; the emulator has no authorization (one kubeconfig for all)."""
        if self.plane is None:
            return self.kubeconfig
        return self.plane.kubeconfig_for(f"kubelet-{node_name}", f"system:node:{node_name}", "system:nodes")

    def _start_real_nodes(self, deadline: float) -> None:
        """A real kubelet and containerd per node (bridge.sandbox.real.node), started side by side."""
        from concurrent.futures import ThreadPoolExecutor

        from bridge.sandbox.real.binaries import Binaries, BinariesMissing, NODE, cache_root, line_of
        from bridge.sandbox.real.images import ImageBuildError, build_pause, build_probe
        from bridge.sandbox.real.node import RealNode
        from bridge.sandbox.real.plane import primary_ipv4

        assert self.plane is not None and self.work_dir is not None
        # the nodes' programs: the plane's line, or the older one of spec.kubelet_version (a node not yet upgraded)
        node_bin = Binaries(line_of(self.spec.kubelet_version)) if self.spec.kubelet_version else self.plane.bin
        try:
            node_bin.require(NODE + ("kubelet",))
            images = [build_pause(cache_root() / "images"), build_probe(cache_root() / "images")]
        except (BinariesMissing, ImageBuildError) as err:
            raise ClusterError(str(err)) from err
        node_ip = primary_ipv4()
        if node_ip is None:
            raise ClusterError("real kubelets need this machine's non-loopback IPv4 address as their node IP (a "
                               "kubelet refuses a loopback one), and this machine has no default route")
        cluster_id = self.work_dir.name
        for i, n in enumerate(self.spec.nodes):
            if n.name in self.spec.simulated_nodes:
                continue
            root = self.work_dir / f"n{i}"
            real = RealNode(root, node_bin, self.plane, name=n.name, index=i, cluster_id=cluster_id,
                            devices=devices_from_spec(n.gpus, n.name), labels=n.all_labels(),
                            images=images, node_ip=node_ip, node_status_frequency=self.spec.node_status_frequency,
                            kubelet_config={"nodeLeaseDurationSeconds": self.spec.node_lease_duration})
            self.nodes.append(SandboxNode(n, root, None, real=real))
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            futures = [pool.submit(node.real.start, max(1.0, deadline - time.monotonic()))
                       for node in self.nodes if node.real is not None]
            errors = [f.exception() for f in futures]
        failed = [e for e in errors if e is not None]
        if failed:
            raise ClusterError(f"a real node did not start: {failed[0]}") from failed[0]
        for node in self.nodes:
            self._wait_node_ready(node.name, deadline)
        if self.spec.services:
            from bridge.sandbox.real.proxy import KubeProxy, ProxyError

            self.proxy = KubeProxy(self.work_dir / "kube-proxy", self.plane.bin,
                                   kubeconfig=self.plane.kubeconfig_for("kube-proxy", "system:kube-proxy"),
                                   node_name=self.nodes[0].name, cluster_cidr="10.64.0.0/10")
            try:
                self.proxy.start(max(1.0, deadline - time.monotonic()))
            except ProxyError as err:
                self.proxy = None
                raise ClusterError(str(err)) from err

    def _wait_node_ready(self, name: str, deadline: float) -> None:
        last = "not registered"
        while time.monotonic() < deadline:
            try:
                obj = self.api.get(NODES, name)
                conds = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}
                ready = conds.get("Ready") or {}
                if ready.get("status") == "True":
                    return
                last = f"Ready={ready.get('status')} ({ready.get('reason')}: {ready.get('message')})"
            except NotFound:
                pass
            except KubeError as err:
                last = str(err)
            time.sleep(0.2)
        node = self.node(name)
        tail = node.real.kubelet.component.child.log_tail(20) if (
            node.real is not None and node.real.kubelet is not None and node.real.kubelet.component) else ""
        raise ClusterError(f"node {name} was not Ready in time: {last}\n{tail}")

    def _wait_daemon_ready(self, node: SandboxNode, deadline: float) -> None:
        """A daemon on a real node is registered with the real kubelet through both APIs when its /readyz says so
        (device-plugin registration acknowledged, DRA plugin registration acknowledged)."""
        import http.client

        assert node.daemon is not None
        last = ""
        while time.monotonic() < deadline:
            if not node.daemon.alive():
                raise ClusterError(f"bridge node {node.name} exited with status "
                                   f"{node.daemon.proc and node.daemon.proc.returncode}:\n{node.daemon.log_tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", node.http_port, timeout=2)
                conn.request("GET", "/readyz")
                resp = conn.getresponse()
                last = resp.read(500).decode(errors="replace")
                conn.close()
                if resp.status == 200:
                    return
            except OSError as err:
                last = str(err)
            time.sleep(0.1)
        raise ClusterError(f"bridge node {node.name} did not register with the kubelet (device plugin and DRA) in "
                           f"time ({last.strip()}):\n{node.daemon.log_tail()}")

    # -- node lifecycle (real nodes): what a DaemonSet rollout, a crash and a kubelet restart do ---------------------

    def start_daemon_instance(self, name: str, timeout: float = 60.0) -> ChildProcess:
        """Start another `bridge node` instance on a real node with a new pod UID, as a DaemonSet's surge rollout
        does (`maxSurge: 1`: the new pod starts before the old one stops); it becomes the node's `daemon` once
        ready (standby until the old one exits, then it takes over). The old instance keeps running: stop it
        with `node.daemon` of before, or `stop_daemon_instance`."""
        import uuid

        node = self.node(name)
        if node.real is None:
            raise ClusterError("daemon instances with pod UIDs are a real-node operation")
        old = node.daemon
        pod_uid = str(uuid.uuid4())
        proc = ChildProcess(f"bridge node {name} ({pod_uid[:8]})", self._node_argv(node, pod_uid=pod_uid),
                            node.root / f"node-{pod_uid[:8]}.log").start()
        node.daemon = proc
        try:
            self._wait_daemon_ready(node, time.monotonic() + timeout)
        except ClusterError:
            node.daemon = old
            proc.stop()
            raise
        if old is not None:
            node.retired.append(old)
        return proc

    def kill_daemon(self, name: str) -> None:
        """SIGKILL the node's daemon (a crash: no cleanup)."""
        node = self.node(name)
        assert node.daemon is not None and node.daemon.proc is not None
        node.daemon.proc.kill()
        node.daemon.proc.wait()

    def restart_daemon(self, name: str, timeout: float = 60.0) -> None:
        """Start the node's daemon again (after `kill_daemon` or a stop) and wait until it serves both APIs."""
        node = self.node(name)
        if node.daemon is not None:
            node.daemon.stop()
            node.retired.append(node.daemon)
        node.daemon = ChildProcess(f"bridge node {name}", self._node_argv(node), node.root / "node.log").start()
        self._wait_daemon(node, time.monotonic() + timeout)

    def restart_kubelet(self, name: str, timeout: float = 60.0) -> None:
        """Start the node's kubelet again (same root dir, same state), with its pods left running: a stop and a
        start, or the start after `stop_kubelet`. On a stand-in node the new kubelet lists its pods again, takes
        over those the runtime still runs and kills the others (`bridge.sandbox.kubelet.pods`)."""
        node = self.node(name)
        if node.kubelet is not None:
            if node.kubelet.running:
                node.kubelet.stop()
            node.kubelet.start()
            return
        if node.real is None or node.real.kubelet is None:
            raise ClusterError("restart_kubelet is for real nodes")
        node.real.kubelet.restart(timeout)

    def reboot_node(self, name: str, timeout: float = 120.0) -> None:
        """Power-cycle a node (`RealNode.reboot`: every process killed at once, /run emptied, a new boot ID,
        /var/lib kept; the same on a stand-in node, `_reboot_stand_in`), then, once its kubelet runs, start its node
        daemon again and wait until the daemon serves both APIs and the Node is Ready."""
        node = self.node(name)
        deadline = time.monotonic() + timeout
        if node.kubelet is not None:
            self._reboot_stand_in(node)
        elif node.real is None or node.real.kubelet is None:
            raise ClusterError(f"node {name} has no kubelet to reboot")
        else:
            node.real.reboot(timeout)
        if node.daemon is not None:  # killed with the node
            self.restart_daemon(name, max(1.0, deadline - time.monotonic()))
        self._wait_node_ready(name, deadline)

    def _reboot_stand_in(self, node: SandboxNode) -> None:
        """`RealNode.reboot` on a stand-in node: the daemon killed, the kubelet stopped and its pods' containers
        gone with the power (`PodRunner.power_off`), the node's tmpfs directories emptied (the claim records and the
        CDI specs: /var/run on a real node), a new boot ID, then the kubelet started (its checkpoints kept)."""
        if node.daemon is not None and node.daemon.proc is not None and node.daemon.proc.poll() is None:
            self.kill_daemon(node.name)
        sim = node.sim
        if sim.running:
            sim.stop()
        if sim.pods is not None:
            sim.pods.power_off()
        for tmpfs in (node.claims_dir, node.cdi_root):
            if tmpfs.is_dir():
                for entry in tmpfs.iterdir():
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
        self._boot_id_file(node, new=True)
        sim.start()
        # the node daemon is a DaemonSet pod: the kubelet starts it in its first batch, so it can never be there
        # before that batch is admitted (reboot_node starts it after this)
        if sim.pods is not None and not sim.pods.sources_ready.wait(60):
            raise ClusterError(f"the kubelet of {node.name} did not admit its pods within 60 s of the reboot")

    def stop_kubelet(self, name: str) -> None:
        """Stop a real node's kubelet and leave it down: its pods keep running in containerd, nothing on the node
        reacts to the API, and the Node's lease lapses (kube-controller-manager marks it NotReady after its grace).
        `restart_kubelet` or `upgrade_kubelet` brings it back. On a stand-in node the simulator stops the same way
        (its pods' containers run on, its Lease lapses, and the node lifecycle controller stand-in marks the Node
        Unknown after `spec.node_monitor.grace_period`)."""
        node = self.node(name)
        if node.kubelet is not None:
            node.kubelet.stop()
            return
        if node.real is None or node.real.kubelet is None:
            raise ClusterError("stop_kubelet is for real nodes")
        node.real.kubelet.stop()

    def upgrade_kubelet(self, name: str, version: str, timeout: float = 60.0) -> None:
        """Upgrade a real node's kubelet in place: stop it (if `stop_kubelet` has not) and start the kubelet of
        release `version` on the same root dir, state, config and ports, its pods left running (what an in-place
        node upgrade does: drain is the operator's choice, and this is the case without one). `version` must be
        newer than the kubelet's and within the skew policy of the control plane (`spec.kubelet_skew_problem`)."""
        from bridge.sandbox.apiserver.profiles import parse_minor
        from bridge.sandbox.cluster.spec import kubelet_skew_problem
        from bridge.sandbox.real.binaries import Binaries, BinariesMissing, line_of

        node = self.node(name)
        if node.real is None or node.real.kubelet is None or self.plane is None:
            raise ClusterError("upgrade_kubelet is for real nodes")
        running = node.real.kubelet.bin.line
        problem = kubelet_skew_problem(version, self.plane.bin.line)
        if not problem and parse_minor(line_of(version)) <= parse_minor(running):
            problem = f"the kubelet of {name} runs {running} already: an upgrade goes to a newer line"
        if problem:
            raise ClusterError(f"upgrade_kubelet {name} to {version}: {problem}")
        target = Binaries(line_of(version))
        try:
            target.require(("kubelet",))
        except BinariesMissing as err:
            raise ClusterError(str(err)) from err
        node.real.kubelet.upgrade(target, timeout)

    def _node_argv(self, node: SandboxNode, pod_uid: str | None = None) -> list[str]:
        argv = [sys.executable, "-m", "bridge", "node", "--node-name", node.name,
                "--devices", f"simulated:{node.spec.gpus}", "--kubelet-root", str(node.kubelet_root),
                "--device-plugin-dir", str(node.kubelet_root / "device-plugins"),
                "--state-dir", str(node.state_dir), "--claims-dir", str(node.claims_dir),
                "--cdi-root", str(node.cdi_root), "--simulated-faults", str(node.faults_file),
                "--kubeconfig", str(self._component_kubeconfig("node", node.name)), "--dra", "on",
                "--http-address", "off",
                "--log-format", "json"]
        if self.spec.split is not None:
            argv += ["--dra-devices", self.spec.split]
        if self.spec.split_grace is not None:
            argv += ["--split-grace", str(self.spec.split_grace)]
        if node.real is not None:
            # inside the node's mount namespace, at a GPU node's default paths (--kubelet-root /var/lib/kubelet,
            # --device-plugin-dir /var/lib/kubelet/device-plugins, --state-dir /var/lib/dra-bridge,
            # --cdi-root /var/run/cdi: the node's own there), the claim records on its tmpfs /run as the chart puts
            # them (--claims-dir /var/run/dra-bridge), with the node's
            # fake GPU files, CDI names in the CRI field (containerd applies them), and /readyz to wait on
            from bridge.sandbox.real.node import CLAIMS_DIR
            from bridge.sandbox.real.process import free_port

            for flag in ("--kubelet-root", "--device-plugin-dir", "--state-dir", "--claims-dir", "--cdi-root",
                         "--simulated-faults"):
                i = argv.index(flag)
                del argv[i:i + 2]
            node.http_port = free_port()
            argv[argv.index("--http-address") + 1] = f"127.0.0.1:{node.http_port}"
            argv += ["--claims-dir", CLAIMS_DIR, "--simulated-faults", f"/var/lib/dra-bridge/{FAULTS_FILE}",
                     "--dev-root", node.real.GPU_ROOT, "--driver-root", node.real.GPU_ROOT,
                     "--device-list-strategy", "cdi-cri", "--pod-uid", pod_uid or f"sandbox-{node.name}"]
            return node.real.ns.enter(argv + list(self.spec.node_args))
        return argv + ["--boot-id-file", str(self._boot_id_file(node))] + list(self.spec.node_args)

    @staticmethod
    def _boot_id_file(node: SandboxNode, *, new: bool = False) -> Path:
        """A stand-in node's boot ID (a real node has its own in its namespace): made at its first use, a fresh
        one at each reboot (`new`)."""
        path = node.root / "boot_id"
        if new or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{uuid.uuid4()}\n")
        return path

    def _wait_daemon(self, node: SandboxNode, deadline: float) -> None:
        if node.kubelet is None:
            self._wait_daemon_ready(node, deadline)
            return
        dra = node.kubelet.dra
        assert node.daemon is not None and dra is not None
        while time.monotonic() < deadline:
            if not node.daemon.alive():
                raise ClusterError(f"bridge node {node.name} exited with status {node.daemon.proc and node.daemon.proc.returncode}:"
                                   f"\n{node.daemon.log_tail()}")
            if node.kubelet.devices.resource(GPU_RESOURCE).connected and dra.plugin(DRIVER) is not None:
                return
            time.sleep(0.05)
        raise ClusterError(f"bridge node {node.name} did not register with its kubelet (device plugin and DRA) in "
                           f"time:\n{node.daemon.log_tail()}")

    def stop(self, grace: float = 10.0) -> None:
        """Stop everything in reverse order and remove the work directory (unless the caller gave it)."""
        if self.controller is not None:
            code = self.controller.stop(grace)
            if code not in (0, None):
                log.warning("bridge controller exited with status %s", code)
        if self.webhook is not None:
            self.webhook.stop(grace)
        for node in self.nodes:
            for retired in node.retired:
                retired.stop(grace)
            if node.daemon is not None:
                code = node.daemon.stop(grace)
                if code not in (0, None):
                    log.warning("bridge node %s exited with status %s", node.name, code)
        for c in self.controllers:
            c.stop(5.0)
        self.controllers = []
        problems: list[str] = []
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        for node in self.nodes:
            if node.kubelet is not None:
                node.kubelet.stop()
            if node.real is not None:
                problems += [f"{node.name}: {p}" for p in node.real.stop()]
        if problems:
            log.warning("the real nodes did not clean up everything: %s", "; ".join(problems))
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.plane is not None:
            self.plane.stop()
            self.plane = None
        if self.work_dir is not None and self._given_work_dir is None:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> SandboxCluster:
        """`with SandboxCluster(spec) as c` starts it (default timeout); `with SandboxCluster(spec).start(t) as c`
        uses the one already started, with its own timeout."""
        return self if self._started else self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- access -----------------------------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        assert self.work_dir is not None, "start() the cluster first"
        return self.work_dir / "kubeconfig"

    @property
    def api(self) -> KubeAPI:
        assert self._api is not None, "start() the cluster first"
        return self._api

    @property
    def url(self) -> str:
        if self.plane is not None:
            return self.plane.url
        assert self.server is not None, "start() the cluster first"
        return self.server.url

    def node(self, name: str) -> SandboxNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in this sandbox (nodes: {', '.join(n.name for n in self.nodes)})")

    def describe(self) -> str:
        """What runs where, for people."""
        if self.plane is not None:
            api_line = f"kube-apiserver {self.url}  ({self.plane.bin.version}, real; logs in {self.plane.dir})"
        else:
            api_line = (f"API emulator  {self.url}  (Kubernetes v{self.spec.api_version}, resource.k8s.io "
                        f"{','.join(self.spec.resource_versions)})")
        lines = [api_line,
                 f"kubeconfig    {self.kubeconfig_out or self.kubeconfig}",
                 f"control plane {self.control_plane}"]
        for n in self.nodes:
            if n.real is not None:
                lines.append(f"node {n.name}: {n.spec.gpus} (fake device and driver files at its /run/nvidia/driver), "
                             f"real kubelet and containerd in its own mount namespace; its /var/lib, /run, "
                             f"/var/log are {n.root}/var-lib, run, log; logs {n.root}/kubelet.log, "
                             f"{n.root}/containerd/containerd.log")
            else:
                lines.append(f"node {n.name}: {n.spec.gpus}, kubelet simulator under {n.kubelet_root}")
            if n.daemon is not None:
                lines.append(f"  bridge node pid {n.daemon.pid}, log {n.daemon.log_path}")
                lines.append(f"  GPU faults: append {{\"gpu\": 0, \"xid\": 79}} to {n.faults_file}")
        if self.webhook is not None and self.webhook.process is not None:
            lines.append(f"webhook       {self.webhook.url} pid {self.webhook.process.pid}, log "
                         f"{self.webhook.process.log_path}")
        if self.controller is not None and self.controller.process is not None:
            lines.append(f"controller    {self.controller.url}/metrics pid {self.controller.process.pid}, log "
                         f"{self.controller.process.log_path}")
        lines.append(f"work dir      {self.work_dir}" + ("" if self._given_work_dir else " (removed on stop)"))
        return "\n".join(lines)

    # -- waiting (tests, demo) --------------------------------------------------------------------------------------

    def prepare_failures(self) -> list[PrepareFailure]:
        """Every pod start that failed because NodePrepareResources failed, on every node (what users waited for:
        each one is a pod left Pending until its kubelet's next resync, 60-90 s on a real node). Kubelet simulators
        only: a real kubelet reports them as the pod's `FailedPrepareDynamicResources` Events."""
        return [f for node in self.nodes if node.kubelet is not None and node.kubelet.pods is not None
                for f in node.kubelet.pods.prepare_failures]

    def gpu_fault(self, node: str, gpu: int | str, *, xid: int | None = None, healthy: bool | None = None,
                  reason: str = "") -> None:
        """Make a simulated GPU of `node` fail (an XID, or unhealthy) or recover, as NVML would tell its daemon:
        `gpu` is its UUID or minor number (`bridge.inventory.faults`; the daemon reads it within 100 ms)."""
        target = next((n for n in self.nodes if n.name == node), None)
        if target is None:
            raise KeyError(f"no node {node!r} in this sandbox cluster")
        append_fault(target.faults_file, gpu, xid=xid, healthy=healthy, reason=reason)

    def pod(self, namespace: str, name: str) -> Obj | None:
        try:
            return self.api.get(PODS, name, namespace)
        except NotFound:
            return None

    def wait_pod_phase(self, namespace: str, name: str, phase: str, timeout: float = 60.0) -> Obj:
        """Wait for the pod's phase (`"Gone"` waits for the pod to be deleted); TimeoutError names the last state."""
        deadline = time.monotonic() + timeout
        last: Obj | None = None
        while time.monotonic() < deadline:
            try:
                last = self.pod(namespace, name)
            except KubeError:
                last = None
            current = "Gone" if last is None else (last.get("status") or {}).get("phase")
            if current == phase:
                return last or {}
            time.sleep(0.05)
        state = "gone" if last is None else (last.get("status") or {})
        raise TimeoutError(f"pod {namespace}/{name} not {phase} within {timeout:.0f}s; last status: {state}")

    def wait_daemons_settled(self, timeout: float = 60.0) -> None:
        """Wait until every node daemon applied the split its Node asks for now (annotation, else label, else the
        cluster's `split`, as the daemon reads it; so a split changed since start, by hand or by the controller, is
        what counts): the kubelet's healthy `nvidia.com/gpu` devices are the legacy side and the node's
        ResourceSlices hold the DRA side, each GPU counted once."""
        deadline = time.monotonic() + timeout
        behind: list[str] = []
        while time.monotonic() < deadline:
            behind = [why for n in self.nodes if (why := self._unsettled(n))]
            if not behind:
                return
            time.sleep(0.1)
        raise TimeoutError(f"the node daemons did not settle their splits within {timeout:.0f}s: {'; '.join(behind)}")

    def _unsettled(self, node: SandboxNode) -> str:
        """"" when the node serves the split it asks for, else what it serves instead."""
        devices = devices_from_spec(node.spec.gpus, node.name)
        total = len(devices)
        try:
            node_obj: Obj | None = self.api.get(NODES, node.name)
        except NotFound:
            node_obj = None
        result = evaluate_request(requested_split(node_obj, self.spec.split),
                                  [(f"gpu-{d.index}", d.uuid) for d in devices])
        if result.wanted is None:  # the daemon refuses it and keeps the split it had: waiting would never end
            raise ClusterError(f"node {node.name}: the split {result.request.describe()} is refused: "
                               f"{result.refusal}")
        want = result.wanted
        legacy = (node.kubelet.devices.resource(GPU_RESOURCE).allocatable if node.kubelet is not None
                  else _allocatable(node_obj, GPU_RESOURCE))
        slices = self.api.list(self.api.resource_api().slices, field_selector=f"spec.nodeName={node.name}")["items"]
        dra = sum(len(s["spec"].get("devices") or []) for s in slices)
        if (legacy, dra) == (total - want, want):
            return ""
        return (f"{node.name} asks {result.request.describe()}: {want} DRA / {total - want} legacy, serves {dra} "
                f"in its ResourceSlices / {legacy} healthy to the device plugin")
