"""A real node's container runtime: containerd 2.x with runc and the CNI plugins, one per sandbox node, apart from
every other containerd on the machine in each path, socket and port.

Configuration (containerd `docs/cri/config.md`, config version 3 of containerd 2.x):

* inside the node's mount namespace (`namespace.py`), so its `root`, `state` and socket are the defaults
  (`/var/lib/containerd`, `/run/containerd/containerd.sock`) yet the node's own; no debug or metrics listener, and
  the CRI streaming server (exec, attach, port-forward) on a free loopback port instead of the shared 10010;
* CDI on (`enable_cdi`, containerd's default) with `cdi_spec_dirs` = `/var/run/cdi` only (the node's; the default
  also lists `/etc/cdi`, which is the machine's and would leak one machine-wide spec into every node);
* the pod sandbox image pinned to our `pause` image (`pinned_images.sandbox`): nothing can be pulled here, so it is
  imported (`ctr -n k8s.io images import`) before the kubelet starts, as is the `probe` test image;
* OOM score adjustments no lower than containerd's own where the machine denies CAP_SYS_RESOURCE
  (`has_sys_resource`: these VMs do);
* runc (`io.containerd.runc.v2`, our build's binary, cgroupfs) as the only runtime; the shim is found through
  `PATH`, which holds the node runtime's bin directory;
* CNI: the node's own `conf_dir` and the plugins' bin directory; the network is a Linux bridge per node with
  host-local IPAM on a /24 of its own, so ordinary pods get addresses, and pods of two sandbox nodes do not collide
  (no `portmap` in the chain: it programs iptables, which these machines do not have, and hostPort is unused).

`stop` ends every pod sandbox first (`crictl rmp --force --all`: a stopped kubelet leaves its containers running),
then containerd, and removes the node's bridge interface; shims that outlive it are ended with the namespace
(`NodeNamespace.stop`); `cleanup_mounts` unmounts what a crash left under the node's directory.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path

from bridge.sandbox.real.binaries import Binaries
from bridge.sandbox.real.namespace import NodeNamespace
from bridge.sandbox.real.process import Component, free_port

SOCKET = "/run/containerd/containerd.sock"
CNI_CONF_DIR = "/var/lib/cni/net.d"

log = logging.getLogger(__name__)


CAP_SYS_RESOURCE = 24


def has_sys_resource() -> bool:
    """Whether this process may lower an OOM score adjustment (CAP_SYS_RESOURCE, linux/capability.h). The machines
    this project runs on lack it (CapEff 0x1fffeffffff): runc then fails every pod sandbox with "failed to update
    /proc/self/oom_score_adj: Permission denied", since the CRI asks -998 for a sandbox. containerd's
    `restrict_oom_score_adj` (internal/cri/config/config.go `RuntimeConfig.RestrictOOMScoreAdj`, meant for such
    environments) raises every requested score to at least its own; set only where the capability is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError, IndexError):
        pass
    return True


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for the characters we write


class Containerd:
    """containerd inside the node's mount namespace, at its default paths there (`/var/lib/containerd`,
    `/run/containerd/containerd.sock`), which the host sees under the node's directory."""

    def __init__(self, ns: NodeNamespace, binaries: Binaries, *, bridge_name: str, subnet: str,
                 sandbox_image: str) -> None:
        self.ns = ns
        self.dir = ns.dir / "containerd"  # config and log (host side)
        self.bin = binaries
        self.bridge_name = bridge_name
        self.subnet = subnet
        self.sandbox_image = sandbox_image
        self.socket = ns.host_path(SOCKET)  # the same socket, as the host sees it
        self.component: Component | None = None

    @property
    def endpoint(self) -> str:
        """The CRI endpoint inside the node (what its kubelet is given)."""
        return f"unix://{SOCKET}"

    def _config(self) -> str:
        bin_dir = self.bin.path("containerd").parent
        stream_port = free_port()
        return f"""version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp",
                    "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri"]

[grpc]
  address = "{SOCKET}"

[debug]
  address = ""

[metrics]
  address = ""

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "{stream_port}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = {_toml_str(self.sandbox_image)}

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = {"true" if not has_sys_resource() else "false"}
  enable_cdi = true
  cdi_spec_dirs = ["/var/run/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = {_toml_str(str(bin_dir / "runc"))}
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [{_toml_str(str(bin_dir))}]
    conf_dir = "{CNI_CONF_DIR}"
    max_conf_num = 1
"""

    def _cni_config(self) -> dict[str, object]:
        return {
            "cniVersion": "1.0.0",
            "name": f"sandbox-{self.bridge_name}",
            "plugins": [
                {"type": "bridge", "bridge": self.bridge_name, "isGateway": True, "ipMasq": False,
                 "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": self.subnet}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                # no portmap: it needs iptables, which these machines do not have, and no sandbox pod uses hostPort
            ],
        }

    def start(self, timeout: float) -> Containerd:
        self.dir.mkdir(parents=True, exist_ok=True)
        conf_dir = self.ns.host_path(CNI_CONF_DIR)
        conf_dir.mkdir(parents=True, exist_ok=True)
        (conf_dir / "10-sandbox.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        self.ns.host_path("/var/run/cdi").mkdir(parents=True, exist_ok=True)
        config = self.dir / "config.toml"
        config.write_text(self._config())
        bin_dir = self.bin.path("containerd").parent
        env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}
        self.component = Component(f"containerd ({self.ns.name})",
                                   self.ns.enter([str(bin_dir / "containerd"), "--config", str(config),
                                                  "--log-level", "warn"]),
                                   self.dir / "containerd.log", self._probe, env=env)
        self.component.start(timeout)
        return self

    def _ctr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.ns.enter([str(self.bin.path("ctr")), "--address", SOCKET, "--namespace",
                                             "k8s.io", *args]), capture_output=True, text=True, timeout=timeout)

    def _crictl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin.path("crictl")), "--runtime-endpoint", f"unix://{self.socket}",
                               "--image-endpoint", f"unix://{self.socket}", "--timeout", "30s", *args],
                              capture_output=True, text=True, timeout=timeout)

    def _probe(self) -> str:
        if not self.socket.exists():
            return f"no socket at {self.socket} yet"
        r = self._crictl("info", timeout=10)
        return "" if r.returncode == 0 else (r.stderr.strip() or r.stdout.strip())[:300]

    def import_image(self, archive: Path) -> None:
        r = self._ctr("images", "import", "--platform", "linux/amd64", str(archive))
        if r.returncode != 0:
            raise RuntimeError(f"ctr images import {archive} failed: {r.stderr.strip()}")

    def crictl(self, *args: str) -> str:
        r = self._crictl(*args)
        if r.returncode != 0:
            raise RuntimeError(f"crictl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def stop(self, grace: float = 10.0) -> None:
        if self.component is not None and self.component.alive():
            r = self._crictl("rmp", "--force", "--all", timeout=120)
            if r.returncode != 0:
                log.warning("removing the pod sandboxes of %s failed: %s", self.ns.name, r.stderr.strip())
        if self.component is not None:
            self.component.stop(grace)
        subprocess.run(["ip", "link", "del", self.bridge_name], capture_output=True)


def cleanup_mounts(under: Path) -> int:
    """Lazily unmount everything mounted below `under` (deepest first); returns how many."""
    prefix = str(under.resolve()).rstrip("/") + "/"
    targets: list[str] = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                mount_point = line.split()[4].replace("\\040", " ")
                if mount_point.startswith(prefix):
                    targets.append(mount_point)
    except OSError:
        return 0
    count = 0
    for target in sorted(set(targets), key=len, reverse=True):
        if subprocess.run(["umount", "-l", target], capture_output=True).returncode == 0:
            count += 1
    return count
