"""Services for the real nodes' pods: one real kube-proxy (nftables mode) for the machine, so that a pod reaches the
API server through the `kubernetes` Service's ClusterIP (what in-cluster configuration dials:
`KUBERNETES_SERVICE_HOST`) and the API server reaches a webhook Service, as on a cluster.

The sandbox's nodes share this machine's network namespace, so one kube-proxy serves them all (it is named after
the first node: `hostnameOverride`); two would rewrite the same nftables table. For the same reason two sandboxes
with kube-proxy cannot run at once on one machine: `MachineLock` serialises them (a second one waits), and `stop`
removes the tables kube-proxy made (`kube-proxy --cleanup`; it leaves them behind when it merely exits).

The configuration is KubeProxyConfiguration v1alpha1 (kubernetes `staging/src/k8s.io/kube-proxy/config/v1alpha1/
types.go`); nftables mode needs the `nft` program (Debian's `nftables`). Conntrack tuning is left alone
(`maxPerCore: 0`): the machine is shared.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO

from bridge.sandbox.real.binaries import Binaries
from bridge.sandbox.real.process import Component, free_port, http_probe

LOCK_PATH = Path("/run/lock/dra-bridge-sandbox-kube-proxy.lock")


class ProxyError(RuntimeError):
    pass


class MachineLock:
    """An exclusive lock on this machine's Service plumbing, held for a sandbox's life."""

    def __init__(self, path: Path = LOCK_PATH) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def acquire(self, timeout: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a")
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self._file.close()
                    self._file = None
                    raise ProxyError(f"another sandbox with Services runs on this machine (lock {self.path}); "
                                     f"stop it first") from None
                time.sleep(0.5)

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class KubeProxy:
    def __init__(self, work_dir: Path, binaries: Binaries, *, kubeconfig: Path, node_name: str,
                 cluster_cidr: str) -> None:
        self.dir = work_dir
        self.bin = binaries
        self.kubeconfig = kubeconfig
        self.node_name = node_name
        self.cluster_cidr = cluster_cidr
        self.lock = MachineLock()
        self.component: Component | None = None

    def _env(self) -> dict[str, str]:
        return {"PATH": f"/usr/sbin:/sbin:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def start(self, timeout: float) -> KubeProxy:
        if shutil.which("nft", path=self._env()["PATH"]) is None:
            raise ProxyError("kube-proxy's nftables mode needs the nft program (Debian: apt-get install nftables)")
        self.lock.acquire(timeout)
        self.dir.mkdir(parents=True, exist_ok=True)
        healthz, metrics = free_port(), free_port()
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "nftables",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "hostnameOverride": self.node_name,
            "clusterCIDR": self.cluster_cidr,
            "healthzBindAddress": f"127.0.0.1:{healthz}",
            "metricsBindAddress": f"127.0.0.1:{metrics}",
            "conntrack": {"maxPerCore": 0},
        }
        path = self.dir / "kube-proxy.json"
        path.write_text(json.dumps(config, indent=2))
        self.component = Component("kube-proxy", [str(self.bin.path("kube-proxy")), f"--config={path}", "--v=1"],
                                   self.dir / "kube-proxy.log", http_probe(healthz, "/healthz"), env=self._env())
        try:
            self.component.start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace: float = 10.0) -> None:
        try:
            if self.component is not None:
                self.component.stop(grace)
                subprocess.run([str(self.bin.path("kube-proxy")), "--cleanup", "--v=0"], capture_output=True,
                               timeout=60, env={**os.environ, **self._env()})
        finally:
            self.lock.release()
