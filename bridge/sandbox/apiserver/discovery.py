"""Discovery documents (`/api`, `/apis`, group and group-version resource lists) and `/version`.

Built from the registry, so what discovery lists is exactly what the router serves. The preferred version of a
group is its newest served version (GA before beta before alpha), whatever order the versions were configured in.
Aggregated discovery (`Accept: ...;g=apidiscovery.k8s.io`) is not offered; clients such as kubectl fall back to
these documents.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from .registry import Registry, ResourceType

Obj = dict[str, Any]


def parse_version(version: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:-[0-9A-Za-z.]+)?", version.strip())
    if not m:
        raise ValueError(f"version must look like MAJOR.MINOR.PATCH (e.g. 1.34.2), got {version!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def version_doc(version: str) -> Obj:
    major, minor, patch = parse_version(version)
    return {
        "major": str(major),
        "minor": str(minor),
        "emulationMajor": str(major),
        "emulationMinor": str(minor),
        "minCompatibilityMajor": str(major),
        "minCompatibilityMinor": str(max(0, minor - 1)),
        "gitVersion": "v" + version.strip().removeprefix("v"),  # with its pre-release (v1.38.0-beta.0), as released
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def core_versions(address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _group(reg: Registry, group: str, versions: list[str]) -> Obj:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def group_list(reg: Registry) -> Obj:
    groups = [_group(reg, g, vs) for g, vs in reg.group_versions().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group_doc(reg: Registry, group: str) -> Obj | None:
    versions = reg.group_versions().get(group)
    if not group or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(reg, group, versions)}


def storage_version_hash(rt: ResourceType) -> str:
    """The real server's hash: base64 of the first 8 bytes of sha256("<group>/<storage version>/<kind>")."""
    group, _, version = rt.stored_api_version.rpartition("/")
    gvk = f"{group}/{version}/{rt.kind}"
    return base64.b64encode(hashlib.sha256(gvk.encode()).digest()[:8]).decode()


def _resource_entry(rt: ResourceType) -> Obj:
    entry: Obj = {
        "name": rt.plural,
        "singularName": rt.singular or rt.kind.lower(),
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
        "storageVersionHash": storage_version_hash(rt),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    return entry


def resource_list(reg: Registry, group: str, version: str) -> Obj | None:
    types = reg.in_group_version(group, version)
    if not types:
        return None
    resources: list[Obj] = []
    for rt in types:
        resources.append(_resource_entry(rt))
        for sub in sorted(rt.subresources):
            verbs = ["create"] if sub == "binding" else ["get", "patch", "update"]
            kind = "Binding" if sub == "binding" else rt.kind
            resources.append({"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced, "kind": kind, "verbs": verbs})
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
