"""Live input: the same `ClusterData` as a snapshot, read through `KubeAPI` (paginated lists of plain dicts).

Read-only: only `discovery()` and `list()` are called. A resource the credentials may not list (Forbidden) or that
is not served is recorded in `ClusterData.unreadable` with the missing RBAC verb and resource, and the scan goes on:
partial results beat none (rule DRB000 reports what is missing). Only a failure to reach the API server at all
(discovery unavailable) aborts, as `LiveError`.

`write_snapshot` stores a `ClusterData` in the snapshot format `bridge.report.sources` reads (one JSON List per
kind, `version.json`, `api-versions.txt`), so an admin can hand a cluster's state to someone without access.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from bridge.kube.api import (
    CONFIG_MAPS,
    CRON_JOBS,
    DAEMON_SETS,
    DEPLOYMENTS,
    JOBS,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    REPLICA_SETS,
    RESOURCE_QUOTAS,
    STATEFUL_SETS,
    Discovery,
    KubeAPI,
    Resource,
    ResourceAPI,
)
from bridge.kube.errors import Forbidden, KubeError, NotFound, Unavailable
from bridge.report.jsonlists import Reader
from bridge.report.sources import (
    API_VERSIONS_FILE,
    KINDS,
    PLURALS,
    UNREADABLE_FILE,
    VERSION_FILE,
    ClusterData,
    ServerVersion,
    bulk_allocation,
)

CORE_RESOURCES: tuple[Resource, ...] = (
    NAMESPACES, NODES, PRIORITY_CLASSES, RESOURCE_QUOTAS, CONFIG_MAPS, DAEMON_SETS, DEPLOYMENTS, STATEFUL_SETS,
    REPLICA_SETS, JOBS, CRON_JOBS, PODS, LEASES,
)

# Field selectors per resource: every node's heartbeat Lease lives in kube-node-lease (one per node), and the report
# wants only the Leases components elect leaders with (`bridge controller`'s among them).
FIELD_SELECTORS = {LEASES.plural: "metadata.namespace!=kube-node-lease"}


# CRDs the report reads when the cluster has them; a cluster without them is normal (nothing to report missing).
OPTIONAL_RESOURCES: tuple[Resource, ...] = (
    Resource("nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", False),
    Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", False),
    Resource("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue", False),
    Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue", True),
    Resource("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue", True),
)


def optional_resources(disc: Discovery) -> list[Resource]:
    """The optional CRDs this server serves, newest served version of each kind only."""
    out: list[Resource] = []
    for res in OPTIONAL_RESOURCES:
        if any(r.kind == res.kind for r in out):
            continue
        if disc.serves(f"{res.group}/{res.version}", res.plural):
            out.append(res)
    return out


class LiveError(Exception):
    """The API server cannot be reached (or refuses discovery): nothing can be scanned."""


class Progress:
    """One updating line on a terminal (stderr): `pods: 12000`. Silent when not enabled."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._width = 0

    def update(self, label: str, count: int) -> None:
        if not self.enabled:
            return
        text = f"\rscanning {label}: {count} objects"
        self._width = max(self._width, len(text))
        self.stream.write(text.ljust(self._width))
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()


def _rbac_text(err: Forbidden, res: Resource) -> str:
    verb = err.verb or "list"
    resource = err.resource or (f"{res.plural}.{res.group}" if res.group else res.plural)
    return f"forbidden: the credentials may not {verb} {resource} (add a ClusterRole rule: verbs [{verb}] on {resource})"


def load_live(api: KubeAPI, *, source: str = "live cluster", progress: Progress | None = None,
              page_size: int = 500, whole: bool = False) -> ClusterData:
    """Every object the report reads, listed. Pods and ReplicaSets are read page by page as a snapshot's files are
    (bridge.report.jsonlists: only the fields the report reads, the parts replicas repeat shared), so a scan holds
    what a snapshot scan holds, not every pod whole; `whole`: every object as the server sent it (what `snapshot`
    writes)."""
    progress = progress or Progress(enabled=False)
    data = ClusterData(source=source, taken_at=time.time())
    try:
        disc = api.discovery()
    except Unavailable as err:
        raise LiveError(f"cannot reach the API server: {err.message}") from err
    except Forbidden as err:
        raise LiveError(f"the API server refused discovery ({err.message}); check the credentials") from err
    except KubeError as err:
        raise LiveError(f"discovery failed: {err.message}") from err
    data.version = ServerVersion(disc.git_version, disc.major, disc.minor)
    data.api_versions = frozenset(disc.resources)

    resources = list(CORE_RESOURCES)
    rversion = next((v for v in ("v1", "v1beta2", "v1beta1") if disc.serves(f"resource.k8s.io/{v}")), None)
    if rversion is not None:
        rapi = ResourceAPI(rversion)
        resources += [rapi.device_classes, rapi.slices, rapi.claim_templates, rapi.claims]
    resources += optional_resources(disc)

    with bulk_allocation():
        _list_all(api, data, resources, progress, page_size, None if whole else Reader())
    progress.done()
    return data


def _list_all(api: KubeAPI, data: ClusterData, resources: list[Resource], progress: Progress, page_size: int,
              reader: Reader | None) -> None:
    for res in resources:
        label = res.plural

        def on_page(count: int, label: str = label) -> None:
            progress.update(label, count)

        decoder = reader.page if reader is not None and res in (PODS, REPLICA_SETS) else None
        try:
            result = api.list(res, page_size=page_size, on_page=on_page,
                              field_selector=FIELD_SELECTORS.get(res.plural), page_decoder=decoder)
        except Forbidden as err:
            data.unreadable[label] = _rbac_text(err, res)
            continue
        except NotFound as err:
            data.unreadable[label] = f"not served: {err.message}"
            continue
        except Unavailable as err:
            data.unreadable[label] = f"unavailable: {err.message}"
            continue
        except KubeError as err:  # a list that does not end (bridge.kube.client bounds it), a bad name: no report
            raise LiveError(err.message) from err
        for item in result.get("items") or ():  # each with its kind and apiVersion (`KubeAPI.list`)
            data.add(item, f"list {label}")


def write_snapshot(data: ClusterData, out: Path, *, on_file: Callable[[Path], None] | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in KINDS:
        items = data.of(kind)
        path = out / f"{PLURALS[kind]}.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, separators=(",", ":")))
        written.append(path)
    if data.version.known:
        v = data.version
        (out / VERSION_FILE).write_text(json.dumps(
            {"serverVersion": {"gitVersion": v.git_version, "major": str(v.major), "minor": str(v.minor)}}, indent=2))
        written.append(out / VERSION_FILE)
    if data.api_versions is not None:
        (out / API_VERSIONS_FILE).write_text("\n".join(sorted(data.api_versions)) + "\n")
        written.append(out / API_VERSIONS_FILE)
    if data.unreadable:
        (out / UNREADABLE_FILE).write_text(json.dumps(dict(sorted(data.unreadable.items())), indent=2))
        written.append(out / UNREADABLE_FILE)
    for p in written:
        if on_file:
            on_file(p)
    return written
