"""Reading objects to preload: YAML or JSON files holding one object, several documents, or a `kind: List`
(what `kubectl get -o yaml` writes). Pure parsing; the server decides where each object goes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
_SUFFIXES = (".yaml", ".yml", ".json")
# Files a `bridge migrate-report snapshot` directory carries beside the objects (cluster version, unreadable
# resources): not Kubernetes objects, so a snapshot directory can be loaded as it is.
_SNAPSHOT_METADATA = frozenset({"version.json", "unreadable.json"})


class LoadError(ValueError):
    pass


def flatten(docs: Iterable[Any], source: str = "<objects>") -> Iterator[Obj]:
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise LoadError(f"{source}: document {i} is not an object")
        if doc.get("kind", "").endswith("List") and isinstance(doc.get("items"), list):
            item_version = doc.get("apiVersion")
            for item in doc["items"]:
                if isinstance(item, dict) and "kind" not in item and doc["kind"] != "List":
                    item = dict(item, kind=doc["kind"][: -len("List")], apiVersion=item.get("apiVersion", item_version))
                yield from flatten([item], source)
            continue
        if not doc.get("apiVersion") or not doc.get("kind"):
            raise LoadError(f"{source}: document {i} needs apiVersion and kind")
        yield doc


def read_file(path: Path) -> list[Obj]:
    text = path.read_text()
    try:
        docs = [json.loads(text)] if path.suffix == ".json" else list(yaml.safe_load_all(text))
    except (ValueError, yaml.YAMLError) as err:
        raise LoadError(f"{path}: cannot parse: {err}") from err
    return list(flatten(docs, str(path)))


def read_dir(path: Path) -> list[Obj]:
    if path.is_file():
        return read_file(path)
    if not path.is_dir():
        raise LoadError(f"{path}: no such file or directory")
    out: list[Obj] = []
    for file in sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file() and p.name not in _SNAPSHOT_METADATA):
        out.extend(read_file(file))
    return out
