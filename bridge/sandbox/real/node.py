"""A real sandbox node: simulated GPUs with real device nodes and driver files (`fakegpu`), a real containerd with
runc and CNI (`containerd`), and a real kubelet (`kubelet`), all under the node's own directory.

    node = RealNode(node_dir, binaries, plane, name="node-0", index=0, cluster_id="brc-1a2b3c",
                    devices=devices_from_spec("8xH100-80GB", "node-0"),
                    labels={...}, images=[pause, probe]).start(timeout)
    node.ns.enter(argv)  # a command run inside the node (its /var/lib, /run, /var/log: namespace.py)
    node.kubelet_root   # the node's /var/lib/kubelet as the host sees it (device-plugins/, plugins_registry/, ...)
    node.cdi_root       # the node's /var/run/cdi, the only CDI directory its containerd reads
    node.dev_root, node.driver_root   # the fake GPU files (the node's /run/nvidia/driver, as the host sees it)
    node.stop()         # pods, kubelet, containerd, shims, the bridge interface, cgroups, mounts: nothing left

Start order is the one a node boots in: its namespace and files (its /run a tmpfs), the runtime (with the images
imported: nothing can be pulled here), then the kubelet, which registers the Node. `stop` removes every pod sandbox
before containerd goes (a kubelet that stops leaves its containers running, as a real one does), then ends whatever
is left in the namespace.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from bridge.inventory.model import GpuDevice
from bridge.sandbox.real.binaries import Binaries
from bridge.sandbox.real.containerd import Containerd, cleanup_mounts
from bridge.sandbox.real.fakegpu import make_gpu_files
from bridge.sandbox.real.images import PAUSE_IMAGE
from bridge.sandbox.real.kubelet import Kubelet, remove_cgroup_root
from bridge.sandbox.real.namespace import NodeNamespace
from bridge.sandbox.real.plane import SERVICE_CIDR, ControlPlane

log = logging.getLogger(__name__)


def used_networks() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True).stdout
    nets = []
    for line in out.splitlines():
        first = line.split()[0] if line.split() else ""
        if first != "default":
            try:
                nets.append(ipaddress.IPv4Network(first, strict=False))
            except ValueError:
                pass
    return nets


def pod_subnet(cluster_id: str, index: int) -> str:
    """A /24 of 10.64.0.0/10 for this node, derived from the cluster's id, free on this machine and outside the
    Service range (`SERVICE_CIDR`, inside 10.64.0.0/10). kube-proxy's nftables mode drops new connections to an
    address of the Service range that no Service holds (kubernetes `pkg/proxy/nftables/proxier.go`, chain
    `cluster-ips-check`: "Drop traffic to unallocated ClusterIPs"), so the pods of a node given a /24 in 10.96.0.0/16
    could not be reached: its kubelet's probes timed out and its DaemonSet pod never became ready (seen in CI; before
    this check 1 node in 64 got such a /24)."""
    used = [*used_networks(), ipaddress.IPv4Network(SERVICE_CIDR)]
    seed = int(hashlib.sha256(f"{cluster_id}/{index}".encode()).hexdigest(), 16)
    for attempt in range(4096):
        n = (seed + attempt * 7919) % (64 * 256)
        net = ipaddress.IPv4Network(f"10.{64 + n // 256}.{n % 256}.0/24")
        if not any(net.overlaps(u) for u in used):
            return str(net)
    raise RuntimeError("no free /24 in 10.64.0.0/10 for a sandbox node's pods")


CLAIMS_DIR = "/var/run/dra-bridge"  # the chart's node.claimsDir: where the daemon keeps its claim records


class RealNode:
    def __init__(self, node_dir: Path, binaries: Binaries, plane: ControlPlane, *, name: str, index: int,
                 cluster_id: str, devices: Sequence[GpuDevice], labels: dict[str, str], images: list[Path],
                 node_ip: str, node_status_frequency: float = 10.0,
                 feature_gates: dict[str, bool] | None = None, kubelet_config: dict[str, object] | None = None) -> None:
        self.dir = node_dir
        self.name = name
        self.bin = binaries
        self.plane = plane
        self.images = images
        tag = hashlib.sha256(cluster_id.encode()).hexdigest()[:6]
        self.cgroup_root = f"{cluster_id}-{index}"
        self.devices = tuple(devices)  # the simulated GPUs (the daemon's `--devices simulated:...` gives the same)
        self.ns = NodeNamespace(node_dir, name)
        self.containerd = Containerd(self.ns, binaries, bridge_name=f"brc{tag}{index}",
                                     subnet=pod_subnet(cluster_id, index), sandbox_image=PAUSE_IMAGE)
        self.kubelet: Kubelet | None = None
        self._labels = labels
        self._node_ip = node_ip
        self._frequency = node_status_frequency
        self._gates = feature_gates or {}
        self._kubelet_config = kubelet_config or {}  # more KubeletConfiguration fields (nodeLeaseDurationSeconds)

    @property
    def kubelet_root(self) -> Path:
        return self.ns.host_path("/var/lib/kubelet")

    @property
    def cdi_root(self) -> Path:
        return self.ns.host_path("/var/run/cdi")

    @property
    def state_dir(self) -> Path:
        """The node daemon's default --state-dir, /var/lib/dra-bridge, as the host sees it."""
        return self.ns.host_path("/var/lib/dra-bridge")

    @property
    def claims_dir(self) -> Path:
        """The chart's --claims-dir, /var/run/dra-bridge (on the node's tmpfs /run), as the host sees it."""
        return self.ns.host_path(CLAIMS_DIR)

    GPU_ROOT = "/run/nvidia/driver"  # inside the node: the GPU Operator's driver root, which holds dev/ too

    @property
    def dev_root(self) -> Path:
        """The fake GPU files (device nodes and driver) as the host sees them; the node sees `GPU_ROOT`."""
        return self.ns.host_path(self.GPU_ROOT)

    @property
    def driver_root(self) -> Path:
        return self.dev_root

    @property
    def podresources_socket(self) -> Path:
        return self.kubelet_root / "pod-resources" / "kubelet.sock"

    def start(self, timeout: float) -> RealNode:
        self.ns.mount_run()  # the node's /run is a tmpfs, as on a real node
        make_gpu_files(self.dev_root, self.devices)  # under the node's /run, before its namespace mounts it
        self.ns.start(timeout)
        self.containerd.start(timeout)
        for image in self.images:
            self.containerd.import_image(image)
        kubeconfig = self.plane.kubeconfig_for(f"kubelet-{self.name}", f"system:node:{self.name}", "system:nodes")
        assert self.plane.ca is not None
        self.kubelet = Kubelet(self.ns, self.bin, node_name=self.name, node_ip=self._node_ip, ca=self.plane.ca,
                               kubeconfig=kubeconfig, runtime_endpoint=self.containerd.endpoint,
                               cgroup_root=self.cgroup_root, labels=self._labels,
                               node_status_frequency=self._frequency, feature_gates=self._gates,
                               extra_config=self._kubelet_config)
        self.kubelet.start(timeout)
        return self

    def reboot(self, timeout: float) -> None:
        """A power cut and a boot. Every process of the node dies at once (SIGKILL: the kubelet, containerd, the
        shims and a node daemon that runs in the namespace, then the containers, which have mount namespaces of
        their own, through their cgroups), its mounts go with the namespace and its cgroups are removed; `/run` comes back as an empty tmpfs (the CDI specs, containerd's task state, the
        claim records there are gone) and the node has a new boot ID. `/var/lib` and `/var/log` stay, as on a disk:
        the kubelet's checkpoints and pod directories, containerd's metadata and images, our state directory. Then
        the node boots: its GPU files, the namespace, containerd and the kubelet (a node daemon is the caller's to
        start, as a DaemonSet pod starts once the kubelet runs)."""
        assert self.kubelet is not None, "start() the node first"
        self.ns.stop()
        self.kubelet.stop(0)  # reaped: the namespace's end killed it
        self.containerd.stop(0)
        self.ns.unmount_run()
        left = remove_cgroup_root(self.cgroup_root)  # kills the containers still in them
        if left:
            raise RuntimeError(f"the reboot of {self.name} left cgroups in use: {', '.join(left[:3])}")
        cleanup_mounts(self.dir)
        self.ns.new_boot_id()
        self.ns.mount_run()
        make_gpu_files(self.dev_root, self.devices)
        self.ns.start(timeout)
        self.containerd.start(timeout)
        self.kubelet.start(timeout)

    def stop(self, grace: float = 10.0) -> list[str]:
        """Stop everything; returns what could not be cleaned up (for the caller's warning)."""
        problems: list[str] = []
        if self.kubelet is not None:
            self.kubelet.stop(grace)
        self.containerd.stop(grace)
        self.ns.stop()
        self.ns.unmount_run()
        left = remove_cgroup_root(self.cgroup_root)
        if left:
            problems.append(f"cgroups still in use: {', '.join(left[:3])}")
        if cleanup_mounts(self.dir):
            problems.append("mounts were left under the node's directory (unmounted now)")
        return problems

    def remove_files(self) -> None:
        cleanup_mounts(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
