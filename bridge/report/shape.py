"""Structural check of the fields the report reads, used to turn a crash on a malformed object into an error that
names the object and the field.

Snapshots are hand-assembled files, so any field can hold the wrong type (`metadata: 5`, `containers: "app"`,
`replicas: many`). The model reads plain dicts with `.get()` and would fail deep inside with an AttributeError.
Walking every pod spec up front would cost about as much as building the model, so the full walk runs only after
the model or a check failed (`find_malformed`), and its answer replaces the traceback. `ClusterData.add` does the
cheap part (metadata is a mapping, name/namespace are strings) at load time, where the file is still known.

Schema notation: a dict lists optional fields and their schemas; a one-item list is "a list of"; `dict`/`list`/`str`
are plain type checks; `STR_MAP` is a mapping with string keys; `INT` an integer or a string of digits. `None` is
accepted everywhere (the model treats null like absent).
"""

from __future__ import annotations

from typing import Any

INT = "int"
STR_MAP = "str-map"

_CONTAINER: dict[str, Any] = {
    "name": str,
    "image": str,
    "resources": {"requests": STR_MAP, "limits": STR_MAP, "claims": list},
    "env": [{"name": str}],
    "securityContext": dict,
    "command": list,
    "args": list,
    "restartPolicy": str,
}
_NODE_REQUIREMENTS = [{"key": str, "operator": str, "values": list}]
_NODE_AFFINITY = {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": _NODE_REQUIREMENTS, "matchFields": _NODE_REQUIREMENTS}]}}
POD_SPEC: dict[str, Any] = {
    "containers": [_CONTAINER],
    "initContainers": [_CONTAINER],
    "ephemeralContainers": [dict],
    "volumes": [{"hostPath": {"path": str}}],
    "nodeSelector": STR_MAP,
    "tolerations": [{"key": str, "operator": str, "value": str, "effect": str}],
    "nodeName": str,
    "affinity": {"nodeAffinity": _NODE_AFFINITY},
    "resourceClaims": list,
    "priorityClassName": str,
    "schedulerName": str,
}
_TEMPLATE = {"spec": POD_SPEC}
_META = {"name": str, "namespace": str, "labels": STR_MAP, "ownerReferences": [{"kind": str, "name": str}]}
_DEVICE_BODY = {"attributes": STR_MAP, "capacity": STR_MAP}

SCHEMAS: dict[str, dict[str, Any]] = {
    "Pod": {"spec": POD_SPEC, "status": {"phase": str}},
    "Deployment": {"spec": {"replicas": INT, "template": _TEMPLATE}},
    "StatefulSet": {"spec": {"replicas": INT, "template": _TEMPLATE}},
    "ReplicaSet": {"spec": {"replicas": INT, "template": _TEMPLATE}},
    "DaemonSet": {"spec": {"template": _TEMPLATE}, "status": {"desiredNumberScheduled": INT}},
    "Job": {"spec": {"parallelism": INT, "template": _TEMPLATE}, "status": {"conditions": [dict]}},
    "CronJob": {"spec": {"jobTemplate": {"spec": {"parallelism": INT, "template": _TEMPLATE}}}},
    "Node": {"spec": {"taints": [{"key": str, "value": str, "effect": str}]},
             "status": {"capacity": STR_MAP, "allocatable": STR_MAP, "nodeInfo": dict}},
    "Namespace": {},
    "ResourceQuota": {"spec": {"hard": STR_MAP}},
    "ConfigMap": {"data": STR_MAP},
    "PriorityClass": {"value": INT, "preemptionPolicy": str},
    "DeviceClass": {"spec": {"selectors": [{"cel": dict}], "extendedResourceName": str}},
    "ResourceSlice": {"spec": {"driver": str, "nodeName": str, "pool": dict,
                               "devices": [{"name": str, "basic": _DEVICE_BODY, **_DEVICE_BODY}]}},
    "ClusterPolicy": {"spec": {"mig": {"strategy": str},
                               "devicePlugin": {"config": {"name": str, "default": str}}}},
    "ClusterQueue": {"spec": {"resourceGroups": [{"coveredResources": [str], "flavors": [
        {"name": str, "resources": [{"name": str}]}]}]}},
    "LocalQueue": {"spec": {"clusterQueue": str}},
}


def _type_name(v: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a boolean"}.get(type(v), type(v).__name__)


def check(value: Any, schema: Any, path: str) -> str | None:
    """The first problem under `path`, or None."""
    if value is None:
        return None
    if isinstance(schema, dict) or schema is dict:
        if not isinstance(value, dict):
            return f"{path}: expected a mapping, found {_type_name(value)}"
        if isinstance(schema, dict):
            for key, sub in schema.items():
                if key in value:
                    problem = check(value[key], sub, f"{path}.{key}")
                    if problem:
                        return problem
        return None
    if isinstance(schema, list) or schema is list:
        if not isinstance(value, list):
            return f"{path}: expected a list, found {_type_name(value)}"
        if isinstance(schema, list):
            for i, item in enumerate(value):
                problem = check(item, schema[0], f"{path}[{i}]")
                if problem:
                    return problem
        return None
    if schema is str:
        return None if isinstance(value, str) else f"{path}: expected a string, found {_type_name(value)}"
    if schema == INT:
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and value.isdigit())
        return None if ok else f"{path}: expected a whole number, found {value!r}"
    if schema == STR_MAP:
        if not isinstance(value, dict):
            return f"{path}: expected a mapping, found {_type_name(value)}"
        bad = next((k for k in value if not isinstance(k, str)), None)
        return None if bad is None else f"{path}: key {bad!r} is not a string"
    raise ValueError(f"unknown schema {schema!r}")  # pragma: no cover - a bug in SCHEMAS


def object_problem(obj: Any) -> str | None:
    """What is wrong with one object, prefixed by its kind and name; None when its shape is fine."""
    if not isinstance(obj, dict):
        return f"expected a Kubernetes object, found {_type_name(obj)}"
    kind = obj.get("kind")
    problem = check(obj, {"metadata": _META, **SCHEMAS.get(str(kind), {})}, "")
    if problem is None:
        return None
    raw_meta = obj.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    ns, name = meta.get("namespace"), meta.get("name")
    who = f"{kind} {ns}/{name}" if isinstance(ns, str) and ns else f"{kind} {name if isinstance(name, str) else '?'}"
    return f"{who}: {problem.lstrip('.')}"


def find_malformed(objects: dict[str, list[Any]]) -> str | None:
    """The first malformed object (in kind order), described; None when every object has the expected shape."""
    for kind in sorted(objects):
        for i, obj in enumerate(objects[kind]):
            problem = object_problem(obj)
            if problem:
                return f"{problem} (the {_ordinal(i + 1)} {kind} in the input)"
    return None


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
