"""Pure parsing of the API server's discovery documents into `Discovery`, and the resource.k8s.io version choice.

The documents are the legacy (non-aggregated) ones every server since 1.0 serves: `/version`, `/api` (core
versions), `/api/v1` and `/apis/<group>/<version>` (`APIResourceList`), `/apis` (`APIGroupList`). The I/O that
fetches them lives in `client.py`; keeping this part pure lets the report build a `Discovery` from a snapshot too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from bridge.kube.api import RESOURCE_GROUP, RESOURCE_VERSIONS, Discovery

_LEADING_INT = re.compile(r"\d+")


def _int_prefix(value: object) -> int:
    """`/version` reports minor as "34+" on some distributions (EKS, GKE); keep the leading digits."""
    m = _LEADING_INT.match(str(value or ""))
    return int(m.group()) if m else 0


def parse_version(doc: Mapping[str, Any]) -> tuple[str, int, int]:
    git = str(doc.get("gitVersion") or "")
    major, minor = _int_prefix(doc.get("major")), _int_prefix(doc.get("minor"))
    if (major, minor) == (0, 0) and git:
        # Some builds leave major/minor empty; gitVersion "v1.34.2-gke.1" still carries them.
        parts = git.lstrip("v").split(".")
        if len(parts) >= 2:
            major, minor = _int_prefix(parts[0]), _int_prefix(parts[1])
    return git, major, minor


def parse_resource_list(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`APIResourceList` -> {plural (or "plural/sub"): {"kind", "namespaced", "verbs"}}."""
    out: dict[str, dict[str, Any]] = {}
    for r in doc.get("resources") or []:
        if not isinstance(r, dict) or not r.get("name"):
            continue
        out[str(r["name"])] = {
            "kind": str(r.get("kind", "")),
            "namespaced": bool(r.get("namespaced", False)),
            "verbs": [str(v) for v in (r.get("verbs") or [])],
        }
    return out


def group_versions(doc: Mapping[str, Any]) -> list[str]:
    """`APIGroupList` -> ["apps/v1", "resource.k8s.io/v1", "resource.k8s.io/v1beta2", ...]."""
    out: list[str] = []
    for g in doc.get("groups") or []:
        for v in (g or {}).get("versions") or []:
            gv = (v or {}).get("groupVersion")
            if gv:
                out.append(str(gv))
    return out


def build_discovery(
    version_doc: Mapping[str, Any], resource_lists: Iterable[tuple[str, Mapping[str, Any]]]
) -> Discovery:
    git, major, minor = parse_version(version_doc)
    return Discovery(
        git_version=git,
        major=major,
        minor=minor,
        resources={gv: parse_resource_list(doc) for gv, doc in resource_lists},
    )


def pick_resource_version(served_group_versions: Iterable[str]) -> str | None:
    """The newest of v1, v1beta2, v1beta1 that the server serves for resource.k8s.io (alpha is never chosen:
    alpha APIs change shape between releases)."""
    served = {gv.split("/", 1)[1] for gv in served_group_versions if gv.startswith(RESOURCE_GROUP + "/")}
    return next((v for v in RESOURCE_VERSIONS if v in served), None)


__all__ = ["build_discovery", "group_versions", "parse_resource_list", "parse_version", "pick_resource_version"]
