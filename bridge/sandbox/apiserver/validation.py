"""Validation answered as 422 Invalid with field paths, like the real server.

Three layers, all collected before answering (the real server reports every error at once):
1. object metadata: `metadata.name` a DNS subdomain (a DNS label for namespaces, DNS-1035 for services), label
   keys and values;
2. the published OpenAPI schema of the kind and version (`kubernetes-validate`'s bundled schemas for the newest
   Kubernetes minor not newer than the emulated one, never older than 1.34 so `resource.k8s.io/v1` exists);
   validators are built once per kind and cached, because loading the 1.5 MB definitions file per request would
   dominate every write;
3. rules the schemas do not carry: resource.k8s.io (`dra_rules`, which depend on the emulated minor's
   `KubernetesProfile`), pods' DRA fields (`pod_rules`) and what pod updates may change.
"""

from __future__ import annotations

import json
import re
import threading
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema
from referencing import Registry, Resource

from . import dra_rules, names, pod_rules
from .profiles import KubernetesProfile, profile_for
from .registry import RESOURCE_GROUP, ResourceType
from .status import FieldError

Obj = dict[str, Any]
_MAX_SCHEMA_ERRORS = 20
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates")
_POD_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
# From 1.38 the message also names what a gated pod may change (pkg/apis/core/validation/validation.go
# `updatablePodSpecFields`, v1.38.0-beta.0; the rules themselves are older)
_POD_FORBIDDEN_138 = _POD_FORBIDDEN + (
    ",`spec.schedulingGates` (only deletions of existing scheduling gates),`spec.nodeSelector` (only additions, and "
    "only while the pod has scheduling gates),`spec.affinity.nodeAffinity` (only while the pod has scheduling gates)"
)


def _schema_root() -> Any:
    return resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")


def available_schema_versions() -> list[tuple[int, int]]:
    out = []
    for entry in _schema_root().iterdir():
        m = re.fullmatch(r"v(\d+)\.(\d+)\.\d+-local", entry.name)
        if m:
            out.append((int(m.group(1)), int(m.group(2))))
    return sorted(out)


def pick_schema_version(server_version: str) -> tuple[int, int]:
    """The newest bundled schema not newer than the server, clamped to >= 1.34 (resource.k8s.io/v1)."""
    major, minor = (int(x) for x in server_version.lstrip("v").split(".")[:2])
    versions = [v for v in available_schema_versions() if v >= (1, 34)]
    if not versions:
        raise RuntimeError("kubernetes-validate ships no schemas for Kubernetes >= 1.34")
    fitting = [v for v in versions if v <= (major, minor)]
    return fitting[-1] if fitting else versions[0]


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _IDENT_RE.match(p):
            out += f".{p}" if out else p
        else:
            out += f"[{p}]"
    return out


@lru_cache(maxsize=8)
def _definitions(version: tuple[int, int]) -> Resource[Any]:
    text = _schema_root().joinpath(f"v{version[0]}.{version[1]}.0-local").joinpath("_definitions.json").read_text()
    return Resource.from_contents(json.loads(text))


_validator_lock = threading.Lock()


@lru_cache(maxsize=512)
def _build_validator(version: tuple[int, int], api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """Immutable, derived only from the bundled schema files: shared by every emulator in the process."""
    group, _, gv_version = api_version.rpartition("/")
    short = f"{group.split('.')[0]}-{gv_version}" if group else gv_version
    candidates = [version] + [v for v in reversed(available_schema_versions()) if v != version]
    for v in candidates:
        file = _schema_root().joinpath(f"v{v[0]}.{v[1]}.0-local").joinpath(f"{kind.lower()}-{short}.json")
        if file.is_file():
            schema = json.loads(file.read_text())
            registry: Registry[Any] = Resource.from_contents(schema) @ (_definitions(v) @ Registry())
            return jsonschema.Draft202012Validator(schema, registry=registry)
    return None


# resource.k8s.io fields the OpenAPI schema marks required that the real server accepts absent (their Go zero value
# is valid; kube-apiserver v1.37.2, observed by tests/real/test_differential.py).
_ZERO_VALUE_OK = frozenset({"spec.pool.generation"})


class SchemaValidator:
    def __init__(self, server_version: str, profile: KubernetesProfile | None = None) -> None:
        self.schema_version = pick_schema_version(server_version)
        self.profile = profile or profile_for(server_version)

    def _validator(self, api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
        with _validator_lock:
            return _build_validator(self.schema_version, api_version, kind)

    def validate(self, rt: ResourceType, wire: Obj, stored: Obj, old_stored: Obj | None) -> list[FieldError]:
        errs = metadata_errors(rt, wire)
        schema_errs: list[FieldError] = []
        validator = self._validator(rt.group_version, rt.kind)
        if validator is not None:
            for i, e in enumerate(sorted(validator.iter_errors(wire), key=lambda e: list(map(str, e.absolute_path)))):
                if i >= _MAX_SCHEMA_ERRORS:
                    break
                schema_errs.append(_schema_error(e))
        if rt.group == RESOURCE_GROUP:
            dra = dra_rules.validate(rt.kind, stored, old_stored, self.profile)
            # The real server validates built-in kinds with their Go validation only, never the OpenAPI schema: a
            # field the schema requires is reported once, by the rule for it (`spec.pool.name`, not `spec.pool` and
            # then `spec.pool.name`; kube-apiserver v1.37.2, observed by tests/real/test_differential.py).
            # And a field the schema requires whose Go type has a valid zero value decodes as that value:
            # `spec.pool.generation` (an int64 ValidateResourcePool only needs to be >= 0) may be left out.
            covered = [d.path for d in dra]
            schema_errs = [e for e in schema_errs if not (e.type == "Required value" and (
                e.path in _ZERO_VALUE_OK or
                any(d == e.path or d.startswith(e.path + ".") or d.startswith(e.path + "[") for d in covered)))]
            errs += schema_errs + dra
        else:
            errs += schema_errs
        if rt.group == "" and rt.plural == "pods":
            errs += pod_rules.validate_pod(stored)
            if old_stored is not None:
                errs += pod_update_errors(stored, old_stored, gated_fields_listed=self.profile.minor >= 38)
        return errs


def _schema_error(e: jsonschema.ValidationError) -> FieldError:
    path = _path(e.absolute_path)
    # jsonschema types these `Any | Unset`; Unset only on errors built by hand, never on one a validator raised.
    value: Any = e.validator_value
    instance: Any = e.instance
    if e.validator == "required":
        missing = [p for p in value if isinstance(e.instance, dict) and p not in e.instance]
        return FieldError(_path([*e.absolute_path, *(missing[:1] or [""])]), "Required value")
    if e.validator == "type":
        expected = value if isinstance(value, str) else [t for t in value if t != "null"][0]
        return FieldError(path, "Invalid value", e.instance, f"{path} in body must be of type {expected}")
    if e.validator == "enum":
        supported = ", ".join(json.dumps(v) for v in value if v is not None)
        return FieldError(path, "Unsupported value", e.instance, f"supported values: {supported}")
    if e.validator == "maxItems":
        return FieldError(path, "Too many", len(instance), f"must have at most {value} items")
    if e.validator == "maxLength":
        return FieldError(path, "Too long", detail=f"may not be more than {value} bytes")
    return FieldError(path, "Invalid value", e.instance, e.message)


def metadata_errors(rt: ResourceType, obj: Obj) -> list[FieldError]:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    errs: list[FieldError] = []
    if rt.group == "" and rt.plural == "namespaces":
        errs += names.dns_label("metadata.name", name)
    elif rt.group == "" and rt.plural == "services":
        errs += names.dns1035_label("metadata.name", name)
    else:
        errs += names.dns_subdomain("metadata.name", name)
    if rt.namespaced and meta.get("namespace"):
        errs += names.dns_label("metadata.namespace", meta["namespace"])
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        errs.append(FieldError("metadata.labels", "Invalid value", labels, "must be a map of strings"))
        return errs
    for key, value in labels.items():
        errs += names.qualified_label_key("metadata.labels", key)
        if not isinstance(value, str):
            errs.append(FieldError(f"metadata.labels[{key}]", "Invalid value", value, "must be a string"))
        else:
            errs += names.label_value("metadata.labels", value)
    for key in (meta.get("annotations") or {}):
        errs += names.qualified_label_key("metadata.annotations", key)
    return errs


def pod_update_errors(new: Obj, old: Obj, *, gated_fields_listed: bool = False) -> list[FieldError]:
    def comparable(spec: Obj) -> Obj:
        spec = {k: v for k, v in spec.items() if k not in _POD_MUTABLE}
        for field in ("containers", "initContainers"):
            spec[field] = [{k: v for k, v in c.items() if k != "image"} for c in spec.get(field) or [] if isinstance(c, dict)]
        return spec

    if comparable(new.get("spec") or {}) != comparable(old.get("spec") or {}):
        return [FieldError("spec", "Forbidden", detail=_POD_FORBIDDEN_138 if gated_fields_listed else _POD_FORBIDDEN)]
    return []
