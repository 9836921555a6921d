"""Server-side transformations a client asks for in `Accept`: `Table` (what `kubectl get` shows) and
`PartialObjectMetadata[List]` (metadata-only clients).

Written from kubernetes/apiserver pkg/endpoints/handlers/response.go: `asTable` converts the object or list with the
kind's printer (`printers.py`), then each row's `object` is the full object (`?includeObject=Object`), a
`PartialObjectMetadata` (`Metadata`, the default) or absent (`None`; anything else is 400 "unrecognized
includeObject value"); the table keeps the list's `resourceVersion`, `continue` and `remainingItemCount`. In a watch
only the first event's table carries `columnDefinitions` (`watchEmbeddedEncoder`: NoHeaders after the first object).
`asPartialObjectMetadata` refuses a list (406) and `asPartialObjectMetadataList` a single object (406).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .printers import printer_for
from .registry import ResourceType
from .status import ApiError, bad_request

Obj = dict[str, Any]
_INCLUDE = ("Object", "Metadata", "None", "")


def _is_list(obj: Obj) -> bool:
    return isinstance(obj.get("items"), list) and str(obj.get("kind", "")).endswith("List")


def partial_metadata(obj: Obj, version: str = "v1") -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{version}", "metadata": obj.get("metadata") or {}}


def check_include_object(query: dict[str, str]) -> str:
    value = query.get("includeObject", "")
    if value not in _INCLUDE:
        raise bad_request(f'unrecognized includeObject value: "{value}"')
    return value or "Metadata"


def to_table(rt: ResourceType, obj: Obj, *, include_object: str = "Metadata", headers: bool = True,
             version: str = "v1", describe: Callable[[str, str], str] = lambda d, p: "",
             now: datetime | None = None) -> Obj:
    """`obj` is one object or a List as the emulator answers it (wire form)."""
    printer = printer_for(rt.group, rt.plural)
    now = now or datetime.now(UTC)
    items = obj["items"] if _is_list(obj) else [obj]
    rows = []
    for item in items:
        cells, conditions = printer.row(item, now)
        row: Obj = {"cells": cells}
        if conditions:
            row["conditions"] = conditions
        if include_object == "Object":
            row["object"] = dict(item, apiVersion=rt.group_version, kind=rt.kind)
        elif include_object == "Metadata":
            row["object"] = partial_metadata(item, version)
        else:
            row["object"] = None
        rows.append(row)
    meta: Obj = {}
    source_meta = obj.get("metadata") or {}
    if _is_list(obj):
        for key in ("resourceVersion", "continue", "remainingItemCount"):
            if key in source_meta:
                meta[key] = source_meta[key]
    elif source_meta.get("resourceVersion"):
        meta["resourceVersion"] = source_meta["resourceVersion"]
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": meta,
        "columnDefinitions": [c.definition(describe) for c in printer.columns] if headers else None,
        "rows": rows,
    }


def transform(convert: str, rt: ResourceType, obj: Obj, query: dict[str, str], *, version: str = "v1",
              headers: bool = True, describe: Callable[[str, str], str] = lambda d, p: "") -> Obj:
    """Apply the transformation negotiated for this response (see negotiation.Choice.convert)."""
    if obj.get("kind") == "Status":
        return obj  # errors and delete answers are never transformed
    if convert == "Table":
        return to_table(rt, obj, include_object=check_include_object(query), headers=headers, version=version,
                        describe=describe)
    if convert == "PartialObjectMetadata":
        if _is_list(obj):
            raise ApiError(406, "NotAcceptable", "you requested PartialObjectMetadata, but the requested object is a "
                                                 f"list ({rt.kind}List)")
        return partial_metadata(obj, version)
    if convert == "PartialObjectMetadataList":
        if not _is_list(obj):
            raise ApiError(406, "NotAcceptable", "you requested PartialObjectMetadataList, but the requested object "
                                                 f"is not a list ({rt.kind})")
        return {"kind": "PartialObjectMetadataList", "apiVersion": f"meta.k8s.io/{version}",
                "metadata": obj.get("metadata") or {}, "items": [partial_metadata(i, version) for i in obj["items"]]}
    return obj
