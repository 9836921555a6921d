"""Builders for minimal clusters: each check test states only the objects it needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.report.checks import CheckContext, ReportOptions, run_checks
from bridge.report.findings import Finding
from bridge.report.model import build_model
from bridge.report.sources import ClusterData, ServerVersion, load_snapshot
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.apiserver.registry import ResourceType

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "cluster-snapshot"
SCHEMA_VERSION = "1.34.0"


@pytest.fixture
def example_dir() -> Path:
    return EXAMPLE


def cluster(*objects: Obj, version: str = "v1.34.2", api_versions: tuple[str, ...] | None = ("resource.k8s.io/v1",),
            unreadable: dict[str, str] | None = None) -> ClusterData:
    data = ClusterData(source="test")
    for o in objects:
        data.add(o, "test")
    if version:
        major, minor = version.lstrip("v").split(".")[:2]
        data.version = ServerVersion(version, int(major), int(minor))
    data.api_versions = frozenset(("v1",) + api_versions) if api_versions is not None else None
    data.unreadable.update(unreadable or {})
    return data


def findings(data: ClusterData, rule: str, **options: Any) -> list[Finding]:
    ctx = CheckContext(build_model(data), ReportOptions(**options))
    return run_checks(ctx, only=frozenset({rule}))


def namespace(name: str, mode: str | None = None) -> Obj:
    labels = {"dra-bridge.io/mode": mode} if mode else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def container(gpu: dict[str, int] | None = None, name: str = "main", **extra: Any) -> Obj:
    c: Obj = {"name": name, "image": "registry.example/app:1"}
    if gpu:
        c["resources"] = {"limits": {k: str(v) for k, v in gpu.items()}}
    c.update(extra)
    return c


def spec(*containers: Obj, **extra: Any) -> Obj:
    return {"containers": list(containers) or [container()], **extra}


def pod(name: str, ns: str = "team", pod_spec: Obj | None = None, owner: tuple[str, str] | None = None,
        node: str = "gpu-1", phase: str = "Running") -> Obj:
    meta: Obj = {"name": name, "namespace": ns}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": owner[0], "name": owner[1], "uid": "u", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {**(pod_spec or spec()), "nodeName": node}, "status": {"phase": phase}}


def deployment(name: str, ns: str = "team", replicas: int = 1, pod_spec: Obj | None = None) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec or spec()}}}


def owned(kind: str, name: str, ns: str, owner: tuple[str, str] | None, body: Obj | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": ns}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "u",
                                    "controller": True}]
    api = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": body or {}}


def node(name: str = "gpu-1", gpus: int = 8, allocatable: int | None = None, labels: dict[str, str] | None = None,
         runtime: str = "containerd://2.0.4", extra: dict[str, str] | None = None) -> Obj:
    cap = {"nvidia.com/gpu": str(gpus), **(extra or {})} if gpus or extra else {}
    alloc = dict(cap)
    if allocatable is not None:
        alloc["nvidia.com/gpu"] = str(allocatable)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "status": {"capacity": cap, "allocatable": alloc, "nodeInfo": {"containerRuntimeVersion": runtime}}}


def device_class(name: str, expr: str, extended: str | None = None, created: str = "2026-01-01T00:00:00Z") -> Obj:
    s: Obj = {"selectors": [{"cel": {"expression": expr}}]}
    if extended:
        s["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "creationTimestamp": created}, "spec": s}


def gpu_device(i: int, product: str = "NVIDIA H100 80GB HBM3", arch: str = "Hopper", memory: str = "80Gi",
               cc: str = "9.0.0", extra: Obj | None = None) -> Obj:
    return {"name": f"gpu-{i}", "attributes": {
        "uuid": {"string": f"GPU-{i:08d}"}, "productName": {"string": product}, "architecture": {"string": arch},
        "cudaComputeCapability": {"version": cc}, "index": {"int": i}, **(extra or {})},
        "capacity": {"memory": {"value": memory}}}


def resource_slice(node_name: str, devices: list[Obj], driver: str = "gpu.dra-bridge.io") -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-{driver}"},
            "spec": {"driver": driver, "nodeName": node_name, "pool": {"name": node_name, "generation": 1,
                                                                       "resourceSliceCount": 1}, "devices": devices}}


def daemonset(name: str, ns: str, image: str, labels: dict[str, str] | None = None, pod_spec: Obj | None = None) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": pod_spec or {"containers": [{"name": "c", "image": image}]}}}}


def bridge_class() -> Obj:
    return device_class("gpu.dra-bridge.io", 'device.driver == "gpu.dra-bridge.io"')


# The example's custom resources, served the way the emulator serves a CRD without a schema.
CRD_KINDS = (
    ResourceType("nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", False, "clusterpolicy"),
    ResourceType("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue", False, "clusterqueue"),
    ResourceType("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue", True, "localqueue"),
)


def load_example(srv: ApiServer) -> None:
    """The snapshot directory as it is (validated against the schemas; the emulator skips crds.yaml.gz), then its
    custom resources under their registered CRD kinds."""
    srv.load_dir(EXAMPLE)
    for rt in CRD_KINDS:
        srv.registry.add(rt)
    data = load_snapshot(EXAMPLE)
    srv.load_objects([o for rt in CRD_KINDS for o in data.of(rt.kind)])
