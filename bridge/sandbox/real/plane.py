"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and kube-scheduler,
built from source (`scripts/build_real.py`), with real TLS, authentication and authorization.

    plane = ControlPlane(work_dir, Binaries("1.37")).start()
    plane.admin_kubeconfig                  # system:masters, for tests, the sandbox's stand-in kubelets, kubectl
    plane.kubeconfig_for("u", "system:node:n1", "system:nodes")   # a client certificate of any identity
    plane.stop()

The flags follow kubernetes `hack/local-up-cluster.sh` and controller-runtime's envtest
(`pkg/internal/testing/controlplane/{etcd,apiserver}.go`), with what a production cluster runs on top:

* etcd (`--unsafe-no-fsync`: a throwaway data dir, speed over durability) on two free loopback ports;
* kube-apiserver serving TLS from the throwaway CA (`pki.py`), client-certificate and service-account-token
  authentication, `--authorization-mode=Node,RBAC`, the default admission plugins plus `NodeRestriction` (the
  defaults already include `MutatingAdmissionWebhook`, `ValidatingAdmissionPolicy`, `ValidatingAdmissionWebhook`,
  `ResourceQuota`, `PodSecurity`, `ServiceAccount`; kubernetes `pkg/kubeapiserver/options/plugins.go`
  `DefaultOffAdmissionPlugins`), privileged containers allowed (the node daemon is one), the API versions and feature
  gates of its release at their defaults unless `runtime_config` / `feature_gates` say otherwise;
* kube-controller-manager with every default controller (`--controllers=*`: the resourceclaim controller,
  service-account tokens, garbage collection, Deployments/ReplicaSets/DaemonSets/Jobs, ...), one credential per
  controller (`--use-service-account-credentials`), the CA to sign CSRs and the service-account key;
* kube-scheduler with its default profile (DynamicResources is on in every release the backend builds).

The controller manager and scheduler serve `/healthz` on a free port with their own self-signed certificates;
`--authorization-always-allow-paths` keeps it open to the probe, as upstream's defaults do.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bridge.sandbox.real.binaries import Binaries
from bridge.sandbox.real.kubeconfig import write_kubeconfig
from bridge.sandbox.real.pki import CertPair, TinyCA, service_account_keys
from bridge.sandbox.real.process import (Component, free_port, http_probe, https_probe, start_on_fresh_ports,
                                         start_together)

log = logging.getLogger(__name__)

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the first address of the range: the `kubernetes` Service
ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass
class PlaneOptions:
    feature_gates: dict[str, bool] = field(default_factory=dict)
    runtime_config: dict[str, str] = field(default_factory=dict)  # e.g. {"resource.k8s.io/v1beta2": "true"}
    apiserver_args: tuple[str, ...] = ()
    controller_manager_args: tuple[str, ...] = ()  # extra kube-controller-manager flags (the node monitor's times)
    host: str = "127.0.0.1"  # where every component listens (and clients connect)
    # where kube-apiserver listens instead of `host`: "0.0.0.0" when pods must reach it at the advertised address
    # (the `kubernetes` Service's endpoint)
    apiserver_bind: str | None = None
    advertise_address: str | None = None  # the `kubernetes` Service's endpoint (default: this machine's address)
    # kube-controller-manager and kube-scheduler; False: etcd and kube-apiserver only (a bench of the API server
    # alone, without the managers' own traffic)
    managers: bool = True


def primary_ipv4() -> str | None:
    """The address of the interface the default route leaves by (no packet is sent), or None without one."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))
            ip = str(s.getsockname()[0])
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


def _gates(gates: dict[str, bool]) -> list[str]:
    return [f"--feature-gates={','.join(f'{k}={str(v).lower()}' for k, v in sorted(gates.items()))}"] if gates else []


class ControlPlane:
    def __init__(self, work_dir: Path, binaries: Binaries, options: PlaneOptions | None = None) -> None:
        self.dir = work_dir
        self.bin = binaries
        self.options = options or PlaneOptions()
        self.components: list[Component] = []
        self.ca: TinyCA | None = None
        self.port = 0
        self.admin: CertPair | None = None
        self.start_seconds: dict[str, float] = {}

    # -- access -----------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{self.options.host}:{self.port}"

    @property
    def pki_dir(self) -> Path:
        return self.dir / "pki"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    def kubeconfig_for(self, name: str, user: str, *groups: str) -> Path:
        """A kubeconfig with a fresh client certificate for `user` in `groups`."""
        assert self.ca is not None, "start() the control plane first"
        pair = self.ca.client(name, user, *groups)
        return write_kubeconfig(self.dir / f"{name}.kubeconfig", self.url, self.ca.pair.cert, client=pair)

    def kubeconfig_with_token(self, name: str, token: str, namespace: str = "default") -> Path:
        assert self.ca is not None, "start() the control plane first"
        return write_kubeconfig(self.dir / f"{name}.kubeconfig", self.url, self.ca.pair.cert, token=token,
                                namespace=namespace)

    def write_admin_kubeconfig(self, path: Path) -> Path:
        assert self.ca is not None and self.admin is not None, "start() the control plane first"
        return write_kubeconfig(path, self.url, self.ca.pair.cert, client=self.admin)

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> ControlPlane:
        deadline = time.monotonic() + timeout
        self.bin.require(("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"))
        try:
            self._start(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _left(self, deadline: float) -> float:
        return max(1.0, deadline - time.monotonic())

    def _start(self, deadline: float) -> None:
        host = self.options.host
        self.ca = ca = TinyCA(self.pki_dir)
        sa = service_account_keys(self.pki_dir)
        advertise = self.options.advertise_address or primary_ipv4()
        serving = ca.issue("apiserver", common_name="kube-apiserver", server=True,
                           dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                      "kubernetes.default.svc.cluster.local"),
                           ips=tuple(dict.fromkeys((host, "127.0.0.1", SERVICE_IP, *([advertise] if advertise else [])))))
        self.admin = ca.client("admin", "kubernetes-admin", "system:masters")
        kubelet_client = ca.client("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")

        etcd_dir = self.dir / "etcd"
        etcd_dir.mkdir(parents=True, exist_ok=True)
        etcd_port = 0

        def etcd() -> Component:
            nonlocal etcd_port
            etcd_port, etcd_peer = free_port(host), free_port(host)
            shutil.rmtree(etcd_dir / "data", ignore_errors=True)  # a try that lost its port may have made a member
            return Component("etcd", [
                str(self.bin.path("etcd")), "--name", "sandbox", "--data-dir", str(etcd_dir / "data"),
                "--listen-client-urls", f"http://{host}:{etcd_port}",
                "--advertise-client-urls", f"http://{host}:{etcd_port}",
                "--listen-peer-urls", f"http://{host}:{etcd_peer}",
                "--initial-advertise-peer-urls", f"http://{host}:{etcd_peer}",
                "--initial-cluster", f"sandbox=http://{host}:{etcd_peer}", "--unsafe-no-fsync",
                "--log-level", "warn", "--quota-backend-bytes", str(2 * 2**30),
            ], etcd_dir / "etcd.log", http_probe(etcd_port, "/health", '"health":"true"', host))
        # (a try that lost its port stays in `components`: it has exited, stopping it again is harmless)
        start_on_fresh_ports(etcd, lambda c: self._run(c, deadline))
        start_on_fresh_ports(lambda: self._apiserver(host, etcd_port, advertise, serving, ca, sa, kubelet_client),
                             lambda c: self._run(c, deadline))
        self.write_admin_kubeconfig(self.admin_kubeconfig)
        if self.options.managers:
            self._start_managers(host, ca, sa, deadline)

    def _apiserver(self, host: str, etcd_port: int, advertise: str | None, serving: CertPair, ca: TinyCA,
                   sa: CertPair, kubelet_client: CertPair) -> Component:
        assert self.admin is not None
        self.port = free_port(host)
        args = [
            str(self.bin.path("kube-apiserver")),
            f"--etcd-servers=http://{host}:{etcd_port}",
            f"--bind-address={self.options.apiserver_bind or host}", f"--secure-port={self.port}",
            # kube-apiserver refuses a loopback advertise address for the `kubernetes` Service's endpoints
            # (kubernetes `pkg/controlplane/reconcilers`: "may not be in the loopback range"): advertise this
            # machine's address, or keep no endpoints at all on a machine without one
            *([f"--advertise-address={advertise}"] if advertise else ["--endpoint-reconciler-type=none"]),
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={ca.pair.cert}",
            f"--service-account-issuer={ISSUER}", f"--service-account-key-file={sa.cert}",
            f"--service-account-signing-key-file={sa.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--kubelet-client-certificate={kubelet_client.cert}", f"--kubelet-client-key={kubelet_client.key}",
            f"--kubelet-certificate-authority={ca.pair.cert}",
            # the nodes' names do not resolve here: reach kubelets (logs, exec) at their InternalIP
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            # no kube-proxy here: webhooks and aggregated APIs behind a Service are dialled at their endpoints' IPs
            "--enable-aggregator-routing=true",
            "--profiling=false", "--v=1",
            *_gates(self.options.feature_gates),
        ]
        if self.options.runtime_config:
            args.append("--runtime-config=" + ",".join(f"{k}={v}" for k, v in sorted(self.options.runtime_config.items())))
        args += list(self.options.apiserver_args)
        return Component("kube-apiserver", args, self.dir / "kube-apiserver.log",
                         https_probe(self.port, "/readyz", ca=ca.pair.cert, cert=(self.admin.cert, self.admin.key),
                                     host=host))

    def _start_managers(self, host: str, ca: TinyCA, sa: CertPair, deadline: float) -> None:
        kcm_kubeconfig = self.kubeconfig_for("kube-controller-manager", "system:kube-controller-manager")
        sched_kubeconfig = self.kubeconfig_for("kube-scheduler", "system:kube-scheduler")

        def manager(name: str, kubeconfig: Path, *flags: str) -> Callable[[], Component]:
            """A maker of `name` serving on a fresh port, as the API server knows it through `kubeconfig`."""
            def make() -> Component:
                port = free_port(host)
                return Component(name, [
                    str(self.bin.path(name)),
                    f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}", f"--bind-address={host}", f"--secure-port={port}",
                    "--leader-elect=false", "--v=1", *flags, *_gates(self.options.feature_gates),
                ], self.dir / f"{name}.log", https_probe(port, "/healthz", host=host))
            return make

        kcm = manager("kube-controller-manager", kcm_kubeconfig,
                      f"--service-account-private-key-file={sa.key}", f"--root-ca-file={ca.pair.cert}",
                      f"--cluster-signing-cert-file={ca.pair.cert}", f"--cluster-signing-key-file={ca.pair.key}",
                      "--use-service-account-credentials=true", "--controllers=*",
                      f"--service-cluster-ip-range={SERVICE_CIDR}", *self.options.controller_manager_args)
        scheduler = manager("kube-scheduler", sched_kubeconfig)

        # both at once (neither needs the other to become healthy), each again on fresh ports if it lost one
        t0 = time.monotonic()
        for c in start_together((kcm, scheduler), self.components.append, lambda: self._left(deadline)):
            self.start_seconds[c.name] = time.monotonic() - t0
        log.info("real control plane up", extra={"url": self.url, "seconds": self.start_seconds})

    def _run(self, component: Component, deadline: float) -> None:
        self.components.append(component)
        component.start(self._left(deadline))
        self.start_seconds[component.name] = component.started_s

    def stop(self, grace: float = 10.0) -> None:
        """Stop in reverse order (scheduler and controller manager first, etcd last)."""
        for c in reversed(self.components):
            c.stop(grace)
        self.components = []

    def remove_files(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
