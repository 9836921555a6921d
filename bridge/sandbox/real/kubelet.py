"""A real kubelet per sandbox node, built from source, talking to the node's own containerd and registering its Node
with the real API server under its own client certificate (`system:node:<name>`).

Two kubelets share this machine, so everything a kubelet would otherwise take machine-wide is its own:

* its files: it runs in the node's mount namespace (`namespace.py`), where `/var/lib/kubelet` (root dir,
  device-plugin and DRA plugin sockets, pod volumes, checkpoints), `/var/log/pods` and `/var/log/containers` are the
  node's; the volume plugin directory is moved under the root dir (its default is the machine's `/usr/libexec`);
* the pod cgroups under their own `cgroupRoot` (`/<sandbox>-<node>`; the kubelet refuses a root that does not exist
  in every hierarchy, kubernetes `pkg/kubelet/cm/container_manager_linux.go`, so it is made before and removed
  after), `cgroupDriver: cgroupfs`;
* its serving port and health port;
* its container runtime (`containerRuntimeEndpoint`).

This machine runs cgroup v1 and has no swap: kubelets from 1.35 refuse cgroup v1 unless `failCgroupV1: false`
(kubernetes PR #134298, `pkg/kubelet/apis/config/types.go`), and `failSwapOn: false` is harmless without swap. The
node IP is this machine's address (a kubelet refuses a loopback node IP, `pkg/kubelet/nodestatus/setters.go`
`validateNodeIP`); both nodes share it, told apart by their kubelet ports. Image garbage collection is off
(`imageGCHighThresholdPercent: 100`): an image removed here could not be pulled back. Eviction thresholds are
minimal, so a busy shared machine does not evict test pods.

The configuration follows the KubeletConfiguration v1beta1 type (kubernetes
`staging/src/k8s.io/kubelet/config/v1beta1/types.go`); the flags left are the ones without a config field.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

from bridge.sandbox.real.binaries import Binaries
from bridge.sandbox.real.namespace import NodeNamespace
from bridge.sandbox.real.pki import TinyCA
from bridge.sandbox.real.process import Component, free_port, start_on_fresh_ports

log = logging.getLogger(__name__)

ROOT_DIR = "/var/lib/kubelet"  # inside the node's mount namespace: the default, and the node's own


def v1_hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (cpu, memory, devices, pids, name=systemd, ...)."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                pre, _, post = line.partition(" - ")
                fields = post.split()
                if fields and fields[0] == "cgroup":
                    out.append(Path(pre.split()[4]))
    except OSError:
        pass
    return out


def make_cgroup_root(name: str) -> None:
    for h in v1_hierarchies():
        (h / name).mkdir(exist_ok=True)


def remove_cgroup_root(name: str) -> list[str]:
    """Remove `/<name>` from every hierarchy, deepest first; returns what could not be removed (still in use)."""
    left = []
    for h in v1_hierarchies():
        top = h / name
        if not top.exists():
            continue
        dirs = sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: len(p.parts), reverse=True)
        for d in dirs:
            for attempt in range(20):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    _kill_cgroup_procs(d)
                    time.sleep(0.05 * (attempt + 1))
            else:
                left.append(str(d))
    return left


def _kill_cgroup_procs(d: Path) -> None:
    import signal

    try:
        pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Kubelet:
    def __init__(self, ns: NodeNamespace, binaries: Binaries, *, node_name: str, node_ip: str, ca: TinyCA,
                 kubeconfig: Path, runtime_endpoint: str, cgroup_root: str, labels: dict[str, str],
                 node_status_frequency: float = 10.0, feature_gates: dict[str, bool] | None = None,
                 extra_config: dict[str, object] | None = None) -> None:
        self.ns = ns
        self.dir = ns.dir  # config, certificates and log (host side)
        self.bin = binaries
        self.node_name = node_name
        self.node_ip = node_ip
        self.ca = ca
        self.kubeconfig = kubeconfig
        self.runtime_endpoint = runtime_endpoint
        self.cgroup_root = cgroup_root
        self.labels = labels
        self.node_status_frequency = node_status_frequency
        self.feature_gates = feature_gates or {}
        self.extra_config = extra_config or {}
        self.port = 0
        self.healthz_port = 0
        self.component: Component | None = None

    @property
    def root_dir(self) -> Path:
        """`/var/lib/kubelet` of the node, as the host sees it."""
        return self.ns.host_path(ROOT_DIR)

    @property
    def log_path(self) -> Path:
        return self.dir / "kubelet.log"

    def config(self) -> dict[str, object]:
        serving = self.ca.issue(f"kubelet-serving-{self.node_name}", common_name=f"system:node:{self.node_name}",
                                organizations=("system:nodes",), server=True,
                                dns_names=(self.node_name, "localhost"), ips=(self.node_ip, "127.0.0.1"))
        freq = f"{int(self.node_status_frequency * 1000)}ms"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.node_ip,
            "port": self.port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "tlsCertFile": str(serving.cert),
            "tlsPrivateKeyFile": str(serving.key),
            "authentication": {"x509": {"clientCAFile": str(self.ca.pair.cert)}, "webhook": {"enabled": True},
                               "anonymous": {"enabled": False}},
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup_root}",
            "cgroupsPerQOS": True,
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": self.runtime_endpoint,
            "volumePluginDir": f"{ROOT_DIR}/volume-plugins",  # not the machine's /usr/libexec/kubernetes
            "nodeStatusUpdateFrequency": freq,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "maxPods": 50,
            "resolvConf": "",
            "serializeImagePulls": False,
            "shutdownGracePeriod": "0s",
            "staticPodPath": "",
            "featureGates": self.feature_gates,
            **self.extra_config,
        }

    def start(self, timeout: float) -> Kubelet:
        self.root_dir.mkdir(parents=True, exist_ok=True)
        make_cgroup_root(self.cgroup_root)
        deadline = time.monotonic() + timeout

        def start(component: Component) -> None:
            self.component = component  # set first: `stop()` ends a kubelet whose start timed out
            component.start(max(1.0, deadline - time.monotonic()))

        start_on_fresh_ports(self._component, start)
        return self

    def _component(self) -> Component:
        """The kubelet on fresh ports: the serving port on the node IP it is served on (both nodes, and other
        workers' clusters, share that address)."""
        self.port, self.healthz_port = free_port(self.node_ip), free_port()
        return self._component_on_ports()

    def _component_on_ports(self) -> Component:
        config_path = self.dir / "kubelet-config.json"
        config_path.write_text(json.dumps(self.config(), indent=2))
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        argv = [str(self.bin.path("kubelet")), f"--config={config_path}", f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={ROOT_DIR}", f"--hostname-override={self.node_name}", f"--node-ip={self.node_ip}",
                f"--cert-dir={self.dir / 'kubelet-pki'}", "--v=2"]
        if labels:
            argv.append(f"--node-labels={labels}")
        return Component(f"kubelet {self.node_name}", self.ns.enter(argv), self.log_path, self._healthz)

    def _healthz(self) -> str:
        import http.client

        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.healthz_port, timeout=2)
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            body = resp.read(200).decode(errors="replace")
            conn.close()
            return "" if resp.status == 200 else f"/healthz answered {resp.status}: {body}"
        except OSError as err:
            return f"/healthz: {err}"

    def stop(self, grace: float = 10.0) -> None:
        if self.component is not None:
            self.component.stop(grace)

    def restart(self, timeout: float) -> None:
        """Stop and start the same kubelet (same root dir, same ports): what a node's kubelet restart is."""
        assert self.component is not None
        self.component.stop()
        self.component = Component(self.component.name, self.component.argv, self.log_path, self._healthz)
        self.component.start(timeout)

    def upgrade(self, binaries: Binaries, timeout: float) -> None:
        """Stop this kubelet and start `binaries`' kubelet in its place: same root dir (its checkpoints, the
        plugin sockets), same config and ports, the pods left running in containerd."""
        assert self.component is not None
        self.component.stop()
        self.bin = binaries
        self.component = self._component_on_ports()
        self.component.start(timeout)

    def remove_files(self) -> None:
        shutil.rmtree(self.dir / "kubelet-pki", ignore_errors=True)
