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
   Feature Discovery's), posts the Node's status and runs the pods bound to it;
4. the control plane (`controlplane.stand_ins`): the scheduler and claim-controller stand-ins;
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
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

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

log = logging.getLogger(__name__)

DRIVER = "gpu.dra-bridge.io"
GPU_RESOURCE = "nvidia.com/gpu"
SPLIT_ANNOTATION = "dra-bridge.io/dra-devices"
_MAX_WORK_DIR = 40  # bytes: leaves room for <work>/n99/kl/plugins_registry/<driver>-<pod uid>-reg.sock


class ClusterError(RuntimeError):
    """The cluster could not start; the message says which part and why (with its log's tail)."""


def device_class(api_version: str, driver: str = DRIVER) -> Obj:
    """The bridge's DeviceClass, as examples/deviceclass.yaml (resource.k8s.io/v1) and deviceclass-v1beta1.yaml."""
    return {"apiVersion": f"resource.k8s.io/{api_version}", "kind": "DeviceClass",
            "metadata": {"name": driver, "labels": {"app.kubernetes.io/name": "dra-bridge",
                                                    "app.kubernetes.io/component": "deviceclass"}},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


@dataclass
class SandboxNode:
    spec: NodeSpec
    root: Path  # the node's work directory
    kubelet: KubeletSimulator
    daemon: ChildProcess | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kl"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def cdi_root(self) -> Path:
        return self.root / "cdi"


class SandboxCluster:
    def __init__(self, spec: ClusterSpec, *, work_dir: Path | None = None, kubeconfig_out: Path | None = None,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.spec = check(spec)
        self._given_work_dir = work_dir
        self.kubeconfig_out = kubeconfig_out
        self.host, self.port = host, port
        self.work_dir: Path | None = None
        self.server: ApiServer | None = None
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
        self.server = ApiServer(host=self.host, port=self.port, version=self.spec.api_version,
                                resource_versions=self.spec.resource_versions).start()
        self.port = self.server.port
        self.server.write_kubeconfig(self.kubeconfig)
        if self.kubeconfig_out is not None:
            self.server.write_kubeconfig(self.kubeconfig_out)
        from bridge.kube import connect

        self._api = connect(str(self.kubeconfig))
        if self.spec.bridge:
            self._api.create(self._api.resource_api().device_classes,
                             device_class(self._api.resource_api().version))
        for i, n in enumerate(self.spec.nodes):
            root = self.work_dir / f"n{i}"
            kubelet = KubeletSimulator(root / "kl", kube=connect(str(self.kubeconfig)), node_name=n.name,
                                       config=KubeletConfig(
                                           version=self.spec.kubernetes_version, register_node=True, run_pods=True,
                                           node_status_frequency=self.spec.node_status_frequency,
                                           sync_retry=self.spec.sync_retry,
                                           resync_interval=self.spec.resync_interval,
                                           machine=MachineInfo(labels=n.all_labels())))
            self.nodes.append(SandboxNode(n, root, kubelet))
            kubelet.start()
        for node in self.nodes:
            assert node.kubelet.node_status is not None
            if not node.kubelet.node_status.wait_registered(max(1.0, deadline - time.monotonic())):
                raise ClusterError(f"the kubelet of {node.name} could not register its Node: "
                                   f"{node.kubelet.node_status.last_error}")
            split = node.spec.split
            if split is not None:
                self._api.patch(NODES, node.name, {"metadata": {"annotations": {SPLIT_ANNOTATION: split}}})
        self.controllers, self.control_plane = stand_ins(self._api, self.spec.kubernetes_version)
        if self.spec.bridge:
            for node in self.nodes:
                node.daemon = ChildProcess(f"bridge node {node.name}", self._node_argv(node),
                                           node.root / "node.log").start()
            for node in self.nodes:
                self._wait_daemon(node, deadline)
        if self.spec.webhook:
            self.webhook = SandboxWebhook(self.work_dir, self.kubeconfig, extra_args=self.spec.webhook_args)
            self.webhook.start(self._api, timeout=max(1.0, deadline - time.monotonic()))
        if self.spec.controller:
            self.controller = SandboxController(self.work_dir, self.kubeconfig, interval=self.spec.controller_interval,
                                                extra_args=self.spec.controller_args)
            try:
                self.controller.start(timeout=max(1.0, deadline - time.monotonic()))
            except ControllerStartError as err:
                raise ClusterError(str(err)) from err
        log.info("sandbox cluster running", extra={"nodes": len(self.nodes), "api": self.server.url})

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

    def _node_argv(self, node: SandboxNode) -> list[str]:
        argv = [sys.executable, "-m", "bridge", "node", "--node-name", node.name,
                "--devices", f"simulated:{node.spec.gpus}", "--kubelet-root", str(node.kubelet_root),
                "--state-dir", str(node.state_dir), "--cdi-root", str(node.cdi_root),
                "--kubeconfig", str(self.kubeconfig), "--dra", "on", "--http-address", "off",
                "--log-format", "json"]
        if self.spec.split is not None:
            argv += ["--dra-devices", self.spec.split]
        if self.spec.split_grace is not None:
            argv += ["--split-grace", str(self.spec.split_grace)]
        return argv + list(self.spec.node_args)

    def _wait_daemon(self, node: SandboxNode, deadline: float) -> None:
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
            if node.daemon is not None:
                code = node.daemon.stop(grace)
                if code not in (0, None):
                    log.warning("bridge node %s exited with status %s", node.name, code)
        for c in self.controllers:
            c.stop(5.0)
        self.controllers = []
        for node in self.nodes:
            node.kubelet.stop()
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.work_dir is not None and self._given_work_dir is None:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> SandboxCluster:
        return self.start()

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
        assert self.server is not None, "start() the cluster first"
        return self.server.url

    def node(self, name: str) -> SandboxNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in this sandbox (nodes: {', '.join(n.name for n in self.nodes)})")

    def describe(self) -> str:
        """What runs where, for people."""
        lines = [f"API emulator  {self.url}  (Kubernetes v{self.spec.api_version}, resource.k8s.io "
                 f"{','.join(self.spec.resource_versions)})",
                 f"kubeconfig    {self.kubeconfig_out or self.kubeconfig}",
                 f"control plane {self.control_plane}"]
        for n in self.nodes:
            lines.append(f"node {n.name}: {n.spec.gpus}, kubelet simulator under {n.kubelet_root}")
            if n.daemon is not None:
                lines.append(f"  bridge node pid {n.daemon.pid}, log {n.daemon.log_path}")
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
        each one is a pod left Pending until its kubelet's next resync, 60-90 s on a real node)."""
        return [f for node in self.nodes if node.kubelet.pods is not None for f in node.kubelet.pods.prepare_failures]

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
        legacy = node.kubelet.devices.resource(GPU_RESOURCE).allocatable
        slices = self.api.list(self.api.resource_api().slices, field_selector=f"spec.nodeName={node.name}")["items"]
        dra = sum(len(s["spec"].get("devices") or []) for s in slices)
        if (legacy, dra) == (total - want, want):
            return ""
        return (f"{node.name} asks {result.request.describe()}: {want} DRA / {total - want} legacy, serves {dra} "
                f"in its ResourceSlices / {legacy} healthy to the device plugin")
