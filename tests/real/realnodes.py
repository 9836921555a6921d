"""Helpers for tests on real nodes (real kubelets, containerd, runc): pods of the probe image, their logs through
the API server (`kubectl logs`: API server -> kubelet -> containerd's log file), and what each container saw."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as dp_pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc
from bridge.kube.api import NAMESPACES, PODS, Resource
from bridge.kube.errors import AlreadyExists, NotFound
from bridge.sandbox.cluster import ClusterSpec, SandboxCluster
from bridge.sandbox.real.images import PROBE_IMAGE

SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)


def ensure_namespace(cluster: SandboxCluster, name: str, labels: dict[str, str] | None = None,
                     timeout: float = 60.0) -> None:
    """Create the namespace and wait for its `default` ServiceAccount: on a real cluster a pod that names no
    ServiceAccount is refused until the ServiceAccount controller has made it (kubernetes
    `plugin/pkg/admission/serviceaccount/admission.go`)."""
    try:
        cluster.api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": name, "labels": labels or {}}})
    except AlreadyExists:
        pass
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster.api.get(SERVICE_ACCOUNTS, "default", name)
            return
        except NotFound:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def probe_pod(name: str, *, gpus: int = 0, claim_template: str | None = None, node: str | None = None,
              init_gpus: int = 0, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pod running the probe image (prints what it sees, then sleeps)."""
    container: dict[str, Any] = {"name": "probe", "image": PROBE_IMAGE, "imagePullPolicy": "Never"}
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 1}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if claim_template:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim_template}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    if init_gpus:
        spec["initContainers"] = [{"name": "init", "image": PROBE_IMAGE, "imagePullPolicy": "Never",
                                   "env": [{"name": "PROBE_SLEEP", "value": "0"}],
                                   "resources": {"limits": {"nvidia.com/gpu": str(init_gpus)}}}]
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    if extra:
        pod["spec"].update(extra)
    return pod


def claim_template(name: str, count: int = 1, device_class: str = "gpu.dra-bridge.io") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount",
                                            "count": count}}]}}}}


@dataclass
class Seen:
    """What the probe printed: device nodes (name -> "major, minor"), files, NVIDIA_* variables, nvidia-smi."""

    devices: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    smi: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> set[str]:
        return {d for d in self.devices if re.fullmatch(r"/dev/nvidia\d+", d)}


def parse_probe(log: str) -> Seen:
    seen = Seen()
    for line in log.splitlines():
        if not line.startswith("probe: "):
            continue
        kind, _, rest = line[len("probe: "):].partition(" ")
        if kind == "dev":
            parts = rest.split()
            seen.devices[parts[-1]] = " ".join(parts[1:3])
        elif kind == "file":
            seen.files.append(rest)
        elif kind == "env":
            key, _, value = rest.partition("=")
            seen.env[key] = value
        elif kind == "smi":
            seen.smi.append(rest)
    return seen


def kubectl(cluster: SandboxCluster, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    assert cluster.plane is not None
    return subprocess.run([str(cluster.plane.bin.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, timeout=timeout)


def probe_log(cluster: SandboxCluster, namespace: str, pod: str, container: str = "probe",
              timeout: float = 60.0) -> Seen:
    """The probe's report, read with `kubectl logs` once it printed its last line."""
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        r = kubectl(cluster, "logs", "-n", namespace, pod, "-c", container)
        out = r.stdout
        if "probe: end" in out:
            return parse_probe(out)
        time.sleep(0.3)
    raise TimeoutError(f"the probe in {namespace}/{pod} did not finish its report in {timeout:.0f}s; log: {out!r}")


def create_pod(cluster: SandboxCluster, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    return cluster.api.create(PODS, pod, namespace)


def register_device_plugin(device_plugin_dir: Path, endpoint: str, resource: str) -> str:
    """Register `endpoint` for `resource` with the node's kubelet (its device-plugins/kubelet.sock, as the host
    sees it), as a device plugin does: "" when the kubelet takes it, else its refusal's words."""
    with grpc.insecure_channel(f"unix://{device_plugin_dir / 'kubelet.sock'}") as channel:
        try:
            dp_grpc.RegistrationStub(channel).Register(dp_pb.RegisterRequest(
                version="v1beta1", endpoint=endpoint, resource_name=resource), timeout=15)
        except grpc.RpcError as err:
            return (err.details() if isinstance(err, grpc.Call) else str(err)) or str(err)
    return ""


BOTH_PODS = (("legacy", "held"), ("dra", "claimed"))
GPU_NODE = "gpu-node"  # the node of the lifecycle tests


def gpu_node_spec(line: str, **fields: Any) -> ClusterSpec:
    """The lifecycle tests' cluster at Kubernetes `line`: one real node, `gpu-node`, with 4 GPUs split 2/2, its
    status posted every second, and `bridge node`."""
    from bridge.sandbox.cluster import NodeSpec
    from tests.sandbox_cluster import spec_for_tests

    return spec_for_tests((NodeSpec(GPU_NODE, "4xH100-80GB", split="2"),), backend="real", version=line,
                          real_kubelets=True, bridge=True, node_status_frequency=1.0, **fields)


@contextmanager
def node_with_a_pod_of_each_api(spec: ClusterSpec, timeout: float = 300.0) -> Iterator[SandboxCluster]:
    """The started cluster of `spec` (one real node), running `legacy/held` (one GPU from the device plugin) and
    `dra/claimed` (one GPU through a claim from the template `dra/one-gpu`): the starting point of the node
    lifecycle tests (restarts, upgrades, reboots)."""
    with SandboxCluster(spec).start(timeout=timeout) as c:
        ensure_namespace(c, "legacy")
        ensure_namespace(c, "dra")
        c.api.create(c.api.resource_api().claim_templates, claim_template("one-gpu"), "dra")
        create_pod(c, "legacy", probe_pod("held", gpus=1))
        create_pod(c, "dra", probe_pod("claimed", claim_template="one-gpu"))
        for ns, pod in BOTH_PODS:
            c.wait_pod_phase(ns, pod, "Running", timeout=120)
        yield c


def pod_claim(cluster: SandboxCluster, namespace: str, pod: str) -> dict[str, Any]:
    """The ResourceClaim of the pod's first claim, as the API has it now."""
    name = cluster.api.get(PODS, pod, namespace)["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim: dict[str, Any] = cluster.api.get(cluster.api.resource_api().claims, name, namespace)
    return claim


def daemon_log(log: Path, msg: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of the node daemon's JSON log lines (`--log-format json`) with this message."""
    found = []
    for number, line in enumerate(log.read_text().splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("msg") == msg:
            found.append((number, record))
    return found
