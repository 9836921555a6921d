"""Realistic pod and AdmissionReview builders for the webhook tests (what a Deployment/Job controller creates)."""

from __future__ import annotations

import copy
import uuid
from typing import Any

Obj = dict[str, Any]


def container(name: str = "main", gpus: int | str | None = None, *, requests: bool = True, image: str = "nvcr.io/nvidia/pytorch:24.05-py3",
              extra: Obj | None = None) -> Obj:
    res: Obj = {"limits": {"cpu": "4", "memory": "16Gi"}, "requests": {"cpu": "2", "memory": "8Gi"}}
    if gpus is not None:
        res["limits"]["nvidia.com/gpu"] = gpus
        if requests:
            res["requests"]["nvidia.com/gpu"] = gpus
    for k, v in (extra or {}).items():
        res["limits"][k] = v
        res["requests"][k] = v
    return {"name": name, "image": image, "command": ["python", "train.py"], "resources": res}


def deployment_pod(*containers: Obj, init: tuple[Obj, ...] = (), name: str = "", app: str = "trainer",
                   node_selector: Obj | None = None, affinity: Obj | None = None, annotations: Obj | None = None) -> Obj:
    """A pod as the ReplicaSet controller submits it: generateName, owner reference, labels."""
    meta: Obj = {
        "generateName": f"{app}-7d9f8b6c4-",
        "namespace": "team-a",
        "labels": {"app": app, "pod-template-hash": "7d9f8b6c4"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-7d9f8b6c4",
                             "uid": "5f0c6a52-6a4e-4c3c-9a8e-0c1a9e2b7d11", "controller": True,
                             "blockOwnerDeletion": True}],
    }
    if name:
        meta["name"] = name
    if annotations:
        meta["annotations"] = dict(annotations)
    spec: Obj = {"containers": [copy.deepcopy(c) for c in containers] or [container()],
                 "restartPolicy": "Always", "terminationGracePeriodSeconds": 30}
    if init:
        spec["initContainers"] = [copy.deepcopy(c) for c in init]
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = copy.deepcopy(affinity)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def required_affinity(*terms: list[Obj]) -> Obj:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]}}}


def expr(key: str, op: str, *values: str) -> Obj:
    e: Obj = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def admission_review(pod: Obj, namespace: str = "team-a", *, operation: str = "CREATE", dry_run: bool = False,
                     uid: str | None = None) -> Obj:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
