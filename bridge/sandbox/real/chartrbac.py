"""The chart's RBAC and admission policies on the real control plane, and each bridge component running with the
token of the ServiceAccount the chart gives it, so that what the real API server allows and refuses is what a
cluster with the chart installed allows and refuses.

* `install` renders the chart with the real `helm` (`helm template`, the line's Kubernetes version and the API
  versions it serves), keeps its ServiceAccounts, (Cluster)Roles, (Cluster)RoleBindings and
  ValidatingAdmissionPolicies (+Bindings), and applies them with the real `kubectl`, as they are rendered;
* `token_kubeconfig` asks the API server for a token of a component's ServiceAccount (the TokenRequest API,
  `serviceaccounts/<name>/token`) and writes a kubeconfig with it. A node daemon's token is bound to a pod of its
  ServiceAccount on its node (`daemon_pod`), as a DaemonSet pod's projected token is: the API server then puts the
  node's name in the token (ServiceAccountTokenPodNodeInfo, kubernetes
  `pkg/registry/core/serviceaccount/storage/token.go`) and the authenticator in the user's extra
  `authentication.kubernetes.io/node-name`, which the chart's node policies compare against.

The bridge processes themselves still run as the sandbox's processes; only their identity is the chart's.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from bridge.kube.api import KubeAPI, Obj, Resource
from bridge.kube.errors import AlreadyExists
from bridge.sandbox.real.binaries import Binaries
from bridge.sandbox.real.images import PAUSE_IMAGE
from bridge.sandbox.real.plane import ControlPlane

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
              "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
PODS = Resource("", "v1", "pods", "Pod", True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)


class ChartError(RuntimeError):
    pass


class ChartCredentials:
    def __init__(self, plane: ControlPlane, api: KubeAPI, chart: Path, *, namespace: str = "dra-bridge",
                 release: str = "dra-bridge", values: dict[str, str] | None = None) -> None:
        self.plane = plane
        self.api = api
        self.chart = chart
        self.namespace = namespace
        self.release = release
        self.values = {"controller.enabled": "true", **(values or {})}
        self.dir = plane.dir / "chart"
        self.service_accounts: dict[str, str] = {}  # component -> ServiceAccount name
        self.applied: list[Obj] = []

    @property
    def bin(self) -> Binaries:
        return self.plane.bin

    def render(self) -> list[Obj]:
        helm = self.bin.path("helm")
        args = [str(helm), "template", self.release, str(self.chart), "--namespace", self.namespace,
                "--kube-version", self.bin.version,
                "--api-versions", "resource.k8s.io/v1/DeviceClass",
                "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"]
        for key, value in sorted(self.values.items()):
            args += ["--set", f"{key}={value}"]
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise ChartError(f"helm template {self.chart} failed: {r.stderr.strip()}")
        return [d for d in yaml.safe_load_all(r.stdout) if isinstance(d, dict)]

    def install(self) -> ChartCredentials:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": self.namespace}})
        except AlreadyExists:
            pass
        docs = [d for d in self.render() if d.get("kind") in RBAC_KINDS]
        for d in docs:
            if d["kind"] == "ServiceAccount":
                component = d["metadata"].get("labels", {}).get("app.kubernetes.io/component", "")
                self.service_accounts[component] = d["metadata"]["name"]
        missing = {"node", "webhook", "controller"} - set(self.service_accounts)
        if missing:
            raise ChartError(f"the rendered chart has no ServiceAccount for {', '.join(sorted(missing))}")
        manifest = self.dir / "rbac.yaml"
        manifest.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        r = subprocess.run([str(self.bin.path("kubectl")), "--kubeconfig", str(self.plane.admin_kubeconfig),
                            "apply", "-f", str(manifest)], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise ChartError(f"kubectl apply of the chart's RBAC and policies failed: {r.stderr.strip()}")
        self.applied = docs
        return self

    def daemon_pod(self, node: str) -> Obj:
        """A pod of the node daemon's ServiceAccount on `node`, for its token to be bound to (what the DaemonSet's
        pod is on a cluster). It only holds the identity: it runs the pause image and asks for nothing."""
        name = f"{self.release}-node-{node}"[:63].rstrip("-")
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": self.namespace,
                            "labels": {"app.kubernetes.io/component": "node-identity"}},
               "spec": {"nodeName": node, "serviceAccountName": self.service_accounts["node"],
                        "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 0,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "identity", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}]}}
        try:
            return self.api.create(PODS, pod, self.namespace)
        except AlreadyExists:
            return self.api.get(PODS, name, self.namespace)

    def token(self, component: str, *, bound_pod: Obj | None = None, seconds: int = 7200) -> str:
        spec: dict[str, Any] = {"expirationSeconds": seconds}
        if bound_pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": bound_pod["metadata"]["name"],
                                      "uid": bound_pod["metadata"]["uid"]}
        sa = self.service_accounts[component]
        answer = self.api.create(SERVICE_ACCOUNTS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                                    "metadata": {"name": sa}, "spec": spec},
                                 self.namespace, subresource="token")
        token = (answer.get("status") or {}).get("token")
        if not token:
            raise ChartError(f"the TokenRequest for {sa} returned no token: {json.dumps(answer)[:300]}")
        return str(token)

    def token_kubeconfig(self, component: str, *, node: str | None = None) -> Path:
        """A kubeconfig with the component's ServiceAccount token (bound to its daemon pod on `node`)."""
        bound = self.daemon_pod(node) if node is not None else None
        name = f"sa-{component}" + (f"-{node}" if node else "")
        return self.plane.kubeconfig_with_token(name, self.token(component, bound_pod=bound),
                                                namespace=self.namespace)
