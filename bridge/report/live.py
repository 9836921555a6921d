"""Live input: the same `ClusterData` as a snapshot, read through `KubeAPI` (paginated lists of plain dicts).

Read-only: only `discovery()` and `list()` are called. A resource the credentials may not list (Forbidden) or that
is not served is recorded in `ClusterData.unreadable` with the missing RBAC verb and resource, and the scan goes on:
partial results beat none (rule DRB000 reports what is missing). Only a failure to reach the API server at all
(discovery unavailable) aborts, as `LiveError`.

`snapshot_live` writes a live cluster in the snapshot format `bridge.report.sources` reads (one JSON List per kind,
`version.json`, `api-versions.txt`), one page at a time, so an admin can hand a cluster's state to someone without
access; `write_snapshot` writes a `ClusterData` the same way.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

import orjson

from bridge.atomicfile import atomic_write_bytes, fsync_dir
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
    ListSink,
    Obj,
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
    read_kind,
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
    """Every object the report reads, listed. Pods, ReplicaSets and Nodes are read page by page as a snapshot's files
    are (bridge.report.jsonlists: only the fields the report reads, the parts replicas repeat shared), so a scan holds
    what a snapshot scan holds, not every pod whole; `whole`: every object as the server sent it."""
    progress = progress or Progress(enabled=False)
    data = ClusterData(source=source, taken_at=time.time())
    resources = _discover(api, data)
    reader = None if whole else Reader()

    def decoder(res: Resource) -> Callable[[bytes], Obj | None] | None:
        return reader.page if reader is not None and res in (PODS, REPLICA_SETS, NODES) else None

    with bulk_allocation():
        _list_all(api, data, resources, progress, page_size, decoder=decoder)
    progress.done()
    return data


def _discover(api: KubeAPI, data: ClusterData) -> list[Resource]:
    """The server's version and API versions into `data`, and the resources to list: `LiveError` where discovery
    fails."""
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
    return resources + optional_resources(disc)


def _list_all(api: KubeAPI, data: ClusterData, resources: list[Resource], progress: Progress, page_size: int, *,
              decoder: Callable[[Resource], Callable[[bytes], Obj | None] | None] = lambda res: None,
              sink: Callable[[Resource], ListSink | None] = lambda res: None) -> None:
    """Each resource listed into `data`, or into its `sink` where it has one; a resource that cannot be read is
    named in `data.unreadable`."""
    for res in resources:
        label = res.plural

        def on_page(count: int, label: str = label) -> None:
            progress.update(label, count)

        try:
            result = api.list(res, page_size=page_size, on_page=on_page, field_selector=FIELD_SELECTORS.get(res.plural),
                              page_decoder=decoder(res), sink=sink(res))
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


class _ListFile:
    """One kind's file of a snapshot (a JSON List), written item by item as the list's pages arrive (`ListSink`), under
    a hidden name until `commit` gives it its own: an interrupted snapshot leaves no file that looks whole. `commit`
    fsyncs the file before the rename and the directory after it, so a power cut leaves the old file or the whole new
    one under the final name, never an empty one (a rename may reach the disk before the data it names)."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path, self.kind = path, kind
        self.partial = path.with_name(f".{path.name}.partial")
        self.count = 0
        self._file: BinaryIO = open(self.partial, "wb")  # noqa: SIM115 - closed by `close`
        self._file.write(_LIST_HEAD)

    def add(self, item: Obj) -> None:
        kind = read_kind(item, f"list {PLURALS[self.kind]}")
        if kind != self.kind:  # a list serves its own kind; anything else is not the report's to keep
            return
        if self.count:
            self._file.write(b",")
        try:
            self._file.write(orjson.dumps(item))
        except (orjson.JSONEncodeError, TypeError):  # an integer wider than 64 bits: the standard encoder takes it
            self._file.write(json.dumps(item, separators=(",", ":")).encode())
        self.count += 1

    def restart(self) -> None:
        self._file.seek(0)
        self._file.truncate()
        self._file.write(_LIST_HEAD)
        self.count = 0

    def close(self, sync: bool = False) -> None:
        if not self._file.closed:
            self._file.write(b"]}")
            if sync:
                self._file.flush()
                os.fsync(self._file.fileno())
            self._file.close()

    def commit(self) -> Path:
        self.close(sync=True)
        os.replace(self.partial, self.path)
        fsync_dir(self.path.parent)
        return self.path

    def discard(self) -> None:
        self._file.close()
        self.partial.unlink(missing_ok=True)


_LIST_HEAD = b'{"apiVersion":"v1","kind":"List","items":['


@dataclass(frozen=True)
class Snapshot:
    """What `snapshot_live` wrote: its files, the objects in them per kind, and the resources it could not read."""

    files: list[Path]
    counts: dict[str, int]
    unreadable: dict[str, str]


def snapshot_live(api: KubeAPI, out: Path, *, progress: Progress | None = None, page_size: int = 500) -> Snapshot:
    """A live cluster's objects (those the report reads) written to `out` as `write_snapshot` writes them, each item
    written as its page arrives: the snapshot holds one page of objects at a time, not the cluster (5.5 GB at the
    scalability envelope, bench/report_live_bench.py). Nothing is written where the scan fails (`LiveError`,
    `SnapshotError`): each file is renamed into place once every list is read."""
    progress = progress or Progress(enabled=False)
    data = ClusterData(source="live cluster", taken_at=time.time())
    resources = _discover(api, data)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, _ListFile] = {}
    try:
        for kind in KINDS:
            files[kind] = _ListFile(out / f"{PLURALS[kind]}.json", kind)
        _list_all(api, data, resources, progress, page_size, sink=lambda res: files.get(res.kind))
        written = [f.commit() for f in files.values()]
        if not data.unreadable:  # an older snapshot's list of what it could not read is not this one's
            (out / UNREADABLE_FILE).unlink(missing_ok=True)
    except BaseException:
        for f in files.values():
            f.discard()
        raise
    finally:
        progress.done()
    written += _write_extras(data, out)
    return Snapshot(written, {kind: f.count for kind, f in files.items()}, dict(data.unreadable))


def write_snapshot(data: ClusterData, out: Path, *, on_file: Callable[[Path], None] | None = None) -> list[Path]:
    """`data` stored in the snapshot format (one JSON List per kind, and the version, API versions and unreadable
    resources where known); a live cluster is written by `snapshot_live`, one page at a time."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in KINDS:
        items = data.of(kind)
        path = out / f"{PLURALS[kind]}.json"
        _write(path, json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, separators=(",", ":")))
        written.append(path)
    written += _write_extras(data, out)
    for p in written:
        if on_file:
            on_file(p)
    return written


def _write(path: Path, text: str) -> None:
    """A snapshot file written whole or not at all, also across a power cut (`atomic_write_bytes`: a temp file,
    fsynced, renamed over the file, the directory fsynced)."""
    atomic_write_bytes(path, text.encode())


def _write_extras(data: ClusterData, out: Path) -> list[Path]:
    """The snapshot's files besides the lists: the server's version, its API versions, what could not be read."""
    written = []
    if data.version.known:
        v = data.version
        _write(out / VERSION_FILE, json.dumps(
            {"serverVersion": {"gitVersion": v.git_version, "major": str(v.major), "minor": str(v.minor)}}, indent=2))
        written.append(out / VERSION_FILE)
    if data.api_versions is not None:
        _write(out / API_VERSIONS_FILE, "\n".join(sorted(data.api_versions)) + "\n")
        written.append(out / API_VERSIONS_FILE)
    if data.unreadable:
        _write(out / UNREADABLE_FILE, json.dumps(dict(sorted(data.unreadable.items())), indent=2))
        written.append(out / UNREADABLE_FILE)
    return written
