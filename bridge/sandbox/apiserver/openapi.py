"""`/openapi/v2` and `/openapi/v3` (+ one v3 document per group-version), from the schemas the emulator validates with.

kubectl needs these before it writes anything: `kubectl apply` (validation on, the default) asks the v3 document of
the object's group-version whether the PATCH operation of that kind takes the `fieldValidation` query parameter
(kubernetes/kubernetes staging/src/k8s.io/cli-runtime/pkg/resource/query_param_verifier_v3.go: a PATCH operation
whose `x-kubernetes-group-version-kind` is the kind, with a parameter named `fieldValidation`); when it does, kubectl
leaves validation to the server (`?fieldValidation=Strict`, see `fieldvalidation.py`), else it downloads the v2
document and validates client-side. Strategic-merge patches and `kubectl explain` read the v3 schemas
(`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`, `x-kubernetes-list-type`, descriptions).

Source of truth: the schema set `validation.py` loads from kubernetes-validate (the newest bundled Kubernetes minor
not newer than the emulated one, never older than 1.34), so what kubectl is told and what the server enforces can
never disagree. Those schemas are JSON Schema 2020-12 translated from the published OpenAPI (`$defs`, nullable
types as `["string", "null"]`, IntOrString and Quantity as `oneOf`); here they are turned back into OpenAPI the way
kube-openapi publishes them (kubernetes/kube-openapi pkg/builder3 and pkg/builder): `$ref` to
`#/components/schemas/…` (v3, wrapped in `allOf` when the property carries its own description, as the real v3
documents do) or `#/definitions/…` (v2); `type` a single name; IntOrString `type: string, format: int-or-string`;
Quantity `oneOf string|number` in v3 and `type: string` in v2; the `apiVersion`/`kind` enums kubernetes-validate
adds are dropped (the published documents have none).

Paths follow the real server's routes (staging/src/k8s.io/apiserver/pkg/endpoints/installer.go): collection
(list, create, deletecollection), item (read, replace, patch, delete), the all-namespaces list for namespaced kinds
and each subresource (status: read/replace/patch; pods/binding: create), each operation carrying
`x-kubernetes-action` and `x-kubernetes-group-version-kind` and an operationId built like the real ones
(`patchCoreV1NamespacedPod`). Not published (documented limits): the deprecated `/watch/` paths, and the v2
document in protobuf (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, what client-go's
`OpenAPISchema()` asks for): that request is answered 406 Not Acceptable, so only clients that read v3 or ask for
v2 as JSON are served (kubectl 1.27+ reads v3).

v3 documents are addressed by content hash (`serverRelativeURL` in the root carries `?hash=`, like the real
server's `/openapi/v3` discovery); a request with the current hash gets `Cache-Control: public, immutable`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .registry import Registry, ResourceType
from .validation import _definitions, pick_schema_version

Obj = dict[str, Any]
_REF_PREFIX = "#/$defs/"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
# Schemas every group-version document refers to from its operations.
_OPERATION_SCHEMAS = (_META + "Status", _META + "DeleteOptions", _META + "Patch", _META + "WatchEvent",
                      _META + "APIResourceList")
V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
_MEDIA = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
_PATCH_MEDIA = ("application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json",
                "application/strategic-merge-patch+json")


def _param(name: str, where: str, description: str, typ: str = "string", required: bool = False) -> Obj:
    p: Obj = {"name": name, "in": where, "description": description, "schema": {"type": typ, "uniqueItems": True}}
    if required:
        p["required"] = True
    return p


_PRETTY = _param("pretty", "query", "If 'true', then the output is pretty printed.")
_DRY_RUN = _param("dryRun", "query", "When present, indicates that modifications should not be persisted. "
                  "Valid values are: - All: all dry run stages will be processed")
_FIELD_MANAGER = _param("fieldManager", "query", "fieldManager is a name associated with the actor or entity that "
                        "is making these changes.")
_FIELD_VALIDATION = _param(
    "fieldValidation", "query",
    "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate "
    "fields. Valid values are: Ignore, Warn (the default), Strict.")
_FORCE = _param("force", "query", "Force is going to \"force\" Apply requests. It must be unset for non-apply "
                "patch requests.", "boolean")
_LIST_PARAMS = [
    _param("allowWatchBookmarks", "query", "allowWatchBookmarks requests watch events with type \"BOOKMARK\".", "boolean"),
    _param("continue", "query", "The continue option should be set when retrieving more results from the server."),
    _param("fieldSelector", "query", "A selector to restrict the list of returned objects by their fields."),
    _param("labelSelector", "query", "A selector to restrict the list of returned objects by their labels."),
    _param("limit", "query", "limit is a maximum number of responses to return for a list call.", "integer"),
    _param("resourceVersion", "query", "resourceVersion sets a constraint on what resource versions a request may be "
           "served from."),
    _param("resourceVersionMatch", "query", "resourceVersionMatch determines how resourceVersion is applied to list calls."),
    _param("sendInitialEvents", "query", "`sendInitialEvents=true` may be set together with `watch=true`.", "boolean"),
    _param("timeoutSeconds", "query", "Timeout for the list/watch call.", "integer"),
    _param("watch", "query", "Watch for changes to the described resources and return them as a stream of add, "
           "update, and remove notifications.", "boolean"),
]
_DELETE_PARAMS = [
    _DRY_RUN,
    _param("gracePeriodSeconds", "query", "The duration in seconds before the object should be deleted.", "integer"),
    _param("orphanDependents", "query", "Deprecated: please use the PropagationPolicy.", "boolean"),
    _param("propagationPolicy", "query", "Whether and how garbage collection will be performed."),
]


def _group_word(group: str) -> str:
    """`resource.k8s.io` -> Resource, `` -> Core (the real operationIds' group part)."""
    if not group:
        return "Core"
    first = group.split(".")[0]
    return "".join(p[:1].upper() + p[1:] for p in first.split("-"))


def _tag(group: str, version: str) -> str:
    return f"{(group.split('.')[0] if group else 'core').replace('-', '_')}_{version}"


@dataclass(frozen=True)
class _Kind:
    rt: ResourceType
    definition: str  # e.g. io.k8s.api.core.v1.Pod
    list_definition: str


class OpenApiDocs:
    """Builds the documents once (lazily) for one emulator; thread-safe; answers are bytes ready to send."""

    def __init__(self, registry: Registry, server_version: str) -> None:
        self.registry = registry
        self.server_version = server_version
        self.schema_version = pick_schema_version(server_version)
        self._lock = threading.Lock()
        self._defs: dict[str, Obj] | None = None
        self._by_gvk: dict[tuple[str, str, str], str] = {}
        self._v2: bytes | None = None
        self._v3: dict[str, tuple[bytes, str]] = {}  # gv path ("api/v1", "apis/g/v") -> (document, hash)

    # -- sources -------------------------------------------------------------------------------------------------
    def _load(self) -> dict[str, Obj]:
        if self._defs is None:
            contents = _definitions(self.schema_version).contents
            defs: dict[str, Obj] = contents["$defs"]
            for name, schema in defs.items():
                for gvk in schema.get("x-kubernetes-group-version-kind") or []:
                    self._by_gvk[(gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))] = name
            self._defs = defs
        return self._defs

    def _kinds(self, group: str, version: str) -> list[_Kind]:
        self._load()
        out = []
        for rt in self.registry.in_group_version(group, version):
            name = self._by_gvk.get((group, version, rt.kind))
            list_name = self._by_gvk.get((group, version, rt.kind + "List"))
            if name and list_name:
                out.append(_Kind(rt, name, list_name))
        return out

    # -- public ----------------------------------------------------------------------------------------------------
    def definitions(self) -> dict[str, Obj]:
        """The schemas (kubernetes-validate's `$defs`) by definition name."""
        with self._lock:
            return self._load()

    def definition_for(self, rt: ResourceType) -> str | None:
        """`io.k8s.api.core.v1.Pod` for core/v1 pods; None for a kind the schemas do not have."""
        with self._lock:
            self._load()
            return self._by_gvk.get((rt.group, rt.version, rt.kind))

    def describe(self, definition: str, prop: str) -> str:
        """A property's description (the swagger doc kubectl's table columns quote)."""
        schema = self.definitions().get(definition) or {}
        return str(((schema.get("properties") or {}).get(prop) or {}).get("description") or "")

    def group_version_paths(self) -> list[str]:
        return [("api/" if not g else f"apis/{g}/") + v for g, vs in self.registry.group_versions().items() for v in vs]

    def v3_root(self) -> bytes:
        paths = {}
        for gv in self.group_version_paths():
            _, digest = self.v3(gv) or (b"", "")
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
        return json.dumps({"paths": paths}, separators=(",", ":")).encode()

    def v3(self, gv_path: str) -> tuple[bytes, str] | None:
        """The document for `api/v1` or `apis/<group>/<version>` and its hash; None when not served."""
        with self._lock:
            cached = self._v3.get(gv_path)
            if cached is not None:
                return cached
            parts = gv_path.split("/")
            if parts[0] == "api" and len(parts) == 2:
                group, version = "", parts[1]
            elif parts[0] == "apis" and len(parts) == 3:
                group, version = parts[1], parts[2]
            else:
                return None
            kinds = self._kinds(group, version)
            if not kinds:
                return None
            doc = self._v3_document(group, version, kinds)
            body = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
            digest = hashlib.sha512(body).hexdigest().upper()
            self._v3[gv_path] = (body, digest)
            return body, digest

    def v2(self) -> bytes:
        with self._lock:
            if self._v2 is None:
                self._v2 = json.dumps(self._v2_document(), separators=(",", ":"), sort_keys=True).encode()
            return self._v2

    # -- documents -------------------------------------------------------------------------------------------------
    def _closure(self, roots: Iterable[str]) -> list[str]:
        defs = self._load()
        seen: set[str] = set()
        todo = [r for r in roots if r in defs]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            todo.extend(ref for ref in _refs(defs[name]) if ref not in seen and ref in defs)
        return sorted(seen)

    def _v3_document(self, group: str, version: str, kinds: list[_Kind]) -> Obj:
        defs = self._load()
        names = self._closure([k.definition for k in kinds] + [k.list_definition for k in kinds] + list(_OPERATION_SCHEMAS))
        schemas = {n: convert_schema(defs[n], v3=True) for n in names}
        paths: Obj = {}
        for kind in kinds:
            for path, item in _paths(kind, v3=True):
                paths.setdefault(path, {}).update(item)
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": f"v{self.server_version}"},
            "paths": paths,
            "components": {
                "schemas": schemas,
                "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication",
                                                    "name": "authorization", "in": "header"}},
            },
        }

    def _v2_document(self) -> Obj:
        defs = self._load()
        paths: Obj = {}
        roots: list[str] = list(_OPERATION_SCHEMAS)
        for group, versions in self.registry.group_versions().items():
            for version in versions:
                for kind in self._kinds(group, version):
                    roots += [kind.definition, kind.list_definition]
                    for path, item in _paths(kind, v3=False):
                        paths.setdefault(path, {}).update(item)
        definitions = {n: convert_schema(defs[n], v3=False) for n in self._closure(roots)}
        return {
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": f"v{self.server_version}"},
            "paths": paths,
            "definitions": definitions,
            "securityDefinitions": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication",
                                                    "name": "authorization", "in": "header"}},
            "security": [{"BearerToken": []}],
        }


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            yield ref[len(_REF_PREFIX):]
        for v in node.values():
            yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def convert_schema(schema: Obj, *, v3: bool) -> Obj:
    """One kubernetes-validate definition (JSON Schema 2020-12) as the published OpenAPI v3 / v2 schema."""
    special = _special(schema, v3)
    if special is not None:
        return special
    out: Obj = _convert(copy.deepcopy(schema), v3)
    props = out.get("properties")
    if isinstance(props, dict) and out.get("x-kubernetes-group-version-kind"):
        for key in ("apiVersion", "kind"):
            if isinstance(props.get(key), dict):
                props[key].pop("enum", None)
    return out


def _special(schema: Obj, v3: bool) -> Obj | None:
    one_of = schema.get("oneOf")
    if not isinstance(one_of, list):
        return None
    types = {t for alt in one_of for t in ([alt.get("type")] if isinstance(alt.get("type"), str) else alt.get("type") or [])}
    if types == {"string", "integer", "null"}:  # IntOrString
        return {"type": "string", "format": "int-or-string"}
    if types == {"string", "number", "null"}:  # Quantity
        return {"oneOf": [{"type": "string"}, {"type": "number"}]} if v3 else {"type": "string"}
    return None


def _convert(node: Any, v3: bool) -> Any:
    if isinstance(node, list):
        return [_convert(v, v3) for v in node]
    if not isinstance(node, dict):
        return node
    out: Obj = {}
    for key, value in node.items():
        if key in ("$schema", "$id"):
            continue
        if key == "type" and isinstance(value, list):
            named = [t for t in value if t != "null"]
            out["type"] = named[0] if named else "object"
        elif key == "enum" and isinstance(value, list):
            out["enum"] = [v for v in value if v is not None]
        elif key in ("properties", "patternProperties", "$defs") and isinstance(value, dict):
            out[key] = {k: _convert(v, v3) for k, v in value.items()}
        else:
            out[key] = _convert(value, v3)
    ref = out.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
        target = ref[len(_REF_PREFIX):]
        new_ref = ("#/components/schemas/" if v3 else "#/definitions/") + target
        siblings = {k: v for k, v in out.items() if k != "$ref"}
        if v3 and siblings:
            return {"allOf": [{"$ref": new_ref}], **siblings}
        out["$ref"] = new_ref
    return out


def _returns_object(rt: ResourceType) -> bool:
    """DELETE answers the object for kinds whose registry sets ReturnDeletedObject (registry.py knows which)."""
    return bool(getattr(rt, "returns_deleted_object", False))


def _schema_ref(name: str, v3: bool) -> Obj:
    return {"$ref": ("#/components/schemas/" if v3 else "#/definitions/") + name}


def _operation(kind: _Kind, action: str, verb: str, suffix: str, params: list[Obj], *, body: str | None,
               response: str, v3: bool, patch: bool = False, created: bool = False) -> Obj:
    rt = kind.rt
    op_id = f"{verb}{_group_word(rt.group)}{rt.version[:1].upper()}{rt.version[1:]}{suffix}"
    op: Obj = {
        "operationId": op_id,
        "tags": [_tag(rt.group, rt.version)],
        "description": f"{action} {rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
    }
    codes = {"200": "OK"}
    if created:
        codes.update({"201": "Created", "202": "Accepted"})
    if v3:
        op["parameters"] = params
        media = _PATCH_MEDIA if patch else ("*/*",)
        if body is not None:
            op["requestBody"] = {"content": {m: {"schema": _schema_ref(body, True)} for m in media}, "required": True}
        op["responses"] = {
            code: {"description": text, "content": {m: {"schema": _schema_ref(response, True)} for m in _MEDIA}}
            for code, text in codes.items()
        }
        op["responses"]["401"] = {"description": "Unauthorized"}
    else:
        v2_params = [{k: v for k, v in p.items() if k != "schema"} | {"type": p["schema"]["type"], "uniqueItems": True}
                     for p in params]
        if body is not None:
            v2_params.append({"name": "body", "in": "body", "required": True, "schema": _schema_ref(body, False)})
        op["parameters"] = v2_params
        op["consumes"] = list(_PATCH_MEDIA if patch else ("*/*",))
        op["produces"] = list(_MEDIA)
        op["schemes"] = ["https"]
        op["responses"] = {code: {"description": text, "schema": _schema_ref(response, False)}
                           for code, text in codes.items()}
        op["responses"]["401"] = {"description": "Unauthorized"}
    return op


def _path_params(*names: str, v3: bool) -> list[Obj]:
    out = []
    for n in names:
        p = _param(n, "path", f"{n} of the {'object' if n == 'name' else 'namespace'}", required=True)
        if not v3:
            p = {k: v for k, v in p.items() if k != "schema"} | {"type": "string", "uniqueItems": True}
        out.append(p)
    pretty = _PRETTY if v3 else {k: v for k, v in _PRETTY.items() if k != "schema"} | {"type": "string", "uniqueItems": True}
    return out + [pretty]


def _paths(kind: _Kind, *, v3: bool) -> list[tuple[str, Obj]]:
    rt = kind.rt
    base = "/api/v1" if not rt.group else f"/apis/{rt.group}/{rt.version}"
    ns = "Namespaced" if rt.namespaced else ""
    prefix = f"{base}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{base}/{rt.plural}"
    scope = ("namespace",) if rt.namespaced else ()
    status = _META + "Status"
    collection: Obj = {
        "get": _operation(kind, "list", "list", f"{ns}{rt.kind}", _LIST_PARAMS, body=None,
                          response=kind.list_definition, v3=v3),
        "post": _operation(kind, "post", "create", f"{ns}{rt.kind}", [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION],
                           body=kind.definition, response=kind.definition, v3=v3, created=True),
        "parameters": _path_params(*scope, v3=v3),
    }
    if "deletecollection" in rt.verbs:
        collection["delete"] = _operation(kind, "deletecollection", "deletecollection", f"{ns}{rt.kind}",
                                          _DELETE_PARAMS + _LIST_PARAMS, body=_META + "DeleteOptions",
                                          response=status, v3=v3)
    item: Obj = {
        "get": _operation(kind, "get", "read", f"{ns}{rt.kind}", [], body=None, response=kind.definition, v3=v3),
        "put": _operation(kind, "put", "replace", f"{ns}{rt.kind}", [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION],
                          body=kind.definition, response=kind.definition, v3=v3, created=True),
        "patch": _operation(kind, "patch", "patch", f"{ns}{rt.kind}",
                            [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION, _FORCE], body=_META + "Patch",
                            response=kind.definition, v3=v3, patch=True, created=True),
        "delete": _operation(kind, "delete", "delete", f"{ns}{rt.kind}", _DELETE_PARAMS, body=_META + "DeleteOptions",
                             response=kind.definition if _returns_object(rt) else status, v3=v3, created=True),
        "parameters": _path_params("name", *scope, v3=v3),
    }
    out = [(prefix, collection), (f"{prefix}/{{name}}", item)]
    if rt.namespaced:
        out.append((f"{base}/{rt.plural}", {
            "get": _operation(kind, "list", "list", f"{rt.kind}ForAllNamespaces", _LIST_PARAMS, body=None,
                              response=kind.list_definition, v3=v3),
            "parameters": _path_params(v3=v3),
        }))
    for sub in sorted(rt.subresources):
        word = sub[:1].upper() + sub[1:]
        if sub == "binding":
            continue  # pods/binding takes a core/v1 Binding: published with the Binding kind, not the Pod
        out.append((f"{prefix}/{{name}}/{sub}", {
            "get": _operation(kind, "get", "read", f"{ns}{rt.kind}{word}", [], body=None, response=kind.definition, v3=v3),
            "put": _operation(kind, "put", "replace", f"{ns}{rt.kind}{word}",
                              [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION], body=kind.definition,
                              response=kind.definition, v3=v3, created=True),
            "patch": _operation(kind, "patch", "patch", f"{ns}{rt.kind}{word}",
                                [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION, _FORCE], body=_META + "Patch",
                                response=kind.definition, v3=v3, patch=True, created=True),
            "parameters": _path_params("name", *scope, v3=v3),
        }))
    return out
