"""Node objects carrying the node daemon's split-status annotation (schema version 1), for the controller tests."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from bridge.controller.nodestatus import SPLIT_KEY, STATUS_KEY


def status_doc(node: str, sides: Iterable[str], *, held: Iterable[int] = (), requested: str = "0",
               source: str = "default", state: str = "converged", pending: Iterable[Mapping[str, Any]] = (),
               numa: Mapping[int, int] | None = None, nvlink: Mapping[int, int] | None = None,
               version: int = 1) -> str:
    held_set = set(held)
    devices = []
    for i, side in enumerate(sides):
        d: dict[str, Any] = {"name": f"gpu-{i}", "uuid": f"GPU-{node}-{i}", "side": side,
                             "holders": [f"pod ns/p{i} container c ({side} container)"] if i in held_set else []}
        if numa is not None:
            d["numa"] = numa.get(i, 0)
        if nvlink is not None and i in nvlink:
            d["nvlink"] = nvlink[i]
        devices.append(d)
    doc = {"version": version, "node": node, "updated": "2025-06-01T12:00:00Z",
           "requested": {"value": requested, "source": source}, "state": state, "message": "",
           "wanted": None, "counts": {}, "devices": devices, "pending": list(pending), "refusals": []}
    return json.dumps(doc)


def gpu_node(name: str, sides: Iterable[str], *, held: Iterable[int] = (), target: str | None = None,
             labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
             state: str = "converged", pending: Iterable[Mapping[str, Any]] = (), requested: str | None = None,
             numa: Mapping[int, int] | None = None, nvlink: Mapping[int, int] | None = None,
             ready: bool | None = None) -> dict[str, Any]:
    """A Node whose daemon reports `sides` (one entry per GPU); `target` is the split annotation (None: absent), and
    the status reports it as acted on unless `requested` says otherwise. `numa` gives every GPU a NUMA node (0 when
    not listed), `nvlink` gives the listed GPUs an NVLink island."""
    sides = list(sides)
    ann: dict[str, str] = dict(annotations or {})
    if target is not None:
        ann[SPLIT_KEY] = target
    req = requested if requested is not None else (target if target is not None else "0")
    source = "annotation" if target is not None or requested is not None else "default"
    ann[STATUS_KEY] = status_doc(name, sides, held=held, requested=req, source=source, state=state,
                                 pending=pending, numa=numa, nvlink=nvlink)
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": dict(labels or {}), "annotations": ann},
                            "spec": {}, "status": {"capacity": {"nvidia.com/gpu": str(len(sides))}}}
    if ready is not None:
        node["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return node
