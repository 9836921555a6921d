"""Where the report's input comes from: a snapshot on disk, gathered into one `ClusterData`.

`ClusterData` is plain dicts per kind plus the cluster facts (server version, served API versions). The model and
the checks read only `ClusterData`, so snapshot mode and live mode (`bridge.report.live`) give the same findings by
construction.

Snapshot format (what `bridge migrate-report snapshot --out DIR` writes, and what an admin can assemble by hand):

* any number of `*.yaml`, `*.yml`, `*.json` files, each optionally gzipped (`*.json.gz`), in a directory (searched
  recursively) or given as one file. Each file holds `kubectl get -o yaml|json` output: a `kind: List` or
  `kind: <Kind>List` with `items`, multi-document YAML, JSON documents one after the other, or single objects.
  Objects are sorted by their `kind`. The items of a `<Kind>List` may leave out `kind` and `apiVersion`, as the API
  server writes them (`kubectl get --raw /api/v1/pods`; `kubectl get -o json` adds them back client-side): such an
  item is a `<Kind>` of the List's apiVersion. An item of a `kind: List` must name its kind.
* `version.json` (optional): the output of `kubectl version -o json` (`{"serverVersion": {...}}`) or the raw
  `/version` document (`{"gitVersion": "v1.34.2", "major": "1", "minor": "34"}`).
* `unreadable.json` (optional, written by `snapshot`): resources that could not be listed, `{"pods": "reason"}`.
* `api-versions.txt` (optional): the output of `kubectl api-versions`, one `group/version` per line. Without it the
  served versions of `resource.k8s.io` are inferred from the apiVersion of DeviceClasses/ResourceSlices found.

Invariant: loading never mutates objects (but for the `kind` and `apiVersion` a `<Kind>List` gives its items that
lack them, as a live scan does) and never drops an object silently; an unreadable file is an error that names the
file (`SnapshotError`), an object without `kind` or whose metadata is not a mapping is an error too;
when a deeper field has the wrong type the report raises `MalformedInput` naming the object and field. Nothing
downstream changes the objects either: JSON Pod Lists are read with only the fields the report reads, and parts
that Pods repeat byte for byte are one shared object (`bridge.report.jsonlists`; `load_snapshot(plain_json=True)`
reads every file with the standard library, for the tests that compare both).

Only regular files are read (a symlink is followed to one): a FIFO, a device (`/dev/zero`), a socket or a directory
named like a snapshot file is an error, checked on the opened descriptor, and opening never blocks. Each file may
hold at most `max_file_bytes` (`DEFAULT_MAX_FILE_BYTES`, 2 GiB; `--max-file-size`), counted after gunzip, so a
compressed bomb is cut off too. A document nested deeper than the parser can follow (thousands of `[`) is an error
naming the file, not a crash.
"""

from __future__ import annotations

import codecs
import gc
import gzip
import io
import json
import os
import re
import sys
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import yaml

from bridge.atomicfile import ReadBuffer, UnreadableFile, read_regular_into
from bridge.atomicfile import read_regular as bounded_read
from bridge.report.jsonlists import NOT_READ, Reader

Obj = dict[str, Any]

try:  # libyaml is ~10x faster than the pure-Python loader
    _YamlLoader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the pyyaml build
    _YamlLoader = yaml.SafeLoader

# Kinds the report reads; objects of any other kind in a snapshot are counted (`ClusterData.other_kinds`: the
# report's "Not read" line, `notRead` in its JSON) but not kept.
KINDS = (
    "Node",
    "Pod",
    "Namespace",
    "ResourceQuota",
    "ConfigMap",
    "DaemonSet",
    "Deployment",
    "StatefulSet",
    "ReplicaSet",
    "Job",
    "CronJob",
    "PriorityClass",
    "DeviceClass",
    "ResourceSlice",
    # What translated pods ask for (their GPU counts), and the claims naming allocated devices.
    "ResourceClaimTemplate",
    "ResourceClaim",
    # `bridge controller`'s leader-election Lease (is a controller running? bridge.report.splitcontroller).
    "Lease",
    # Optional CRDs: the GPU Operator's ClusterPolicy (nvidia.com/v1) and Kueue's queues (kueue.x-k8s.io).
    "ClusterPolicy",
    "ClusterQueue",
    "LocalQueue",
)

# The REST plural of each kind (file names of `snapshot`, and what live mode lists).
PLURALS = {
    "Node": "nodes", "Pod": "pods", "Namespace": "namespaces", "ResourceQuota": "resourcequotas",
    "ConfigMap": "configmaps", "DaemonSet": "daemonsets", "Deployment": "deployments", "StatefulSet": "statefulsets",
    "ReplicaSet": "replicasets", "Job": "jobs", "CronJob": "cronjobs", "PriorityClass": "priorityclasses",
    "DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices", "ResourceClaimTemplate": "resourceclaimtemplates",
    "ResourceClaim": "resourceclaims", "Lease": "leases", "ClusterPolicy": "clusterpolicies",
    "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
}

VERSION_FILE = "version.json"
API_VERSIONS_FILE = "api-versions.txt"
UNREADABLE_FILE = "unreadable.json"  # written by `snapshot` when some resources could not be listed
_SUFFIXES = (".yaml", ".yml", ".json")
DEFAULT_MAX_FILE_BYTES = 2 * 2**30  # per file, after gunzip
_CHUNK = 1 << 20


@contextmanager
def bulk_allocation() -> Iterator[None]:
    """Pause the cyclic garbage collector while building large acyclic structures (parsed JSON, the model).

    Parsing 150,000 pods allocates millions of dicts; each allocation burst triggers generational collections that
    rescan everything alive, which costs more than the parsing itself (measured in bench/report_bench.py). Parsed
    Kubernetes objects hold no reference cycles, so nothing is lost by collecting later. The previous state is
    restored on exit, so nesting is safe."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class SnapshotError(Exception):
    """A snapshot path or file that cannot be read; the message names the file and the reason."""


class MalformedInput(SnapshotError):
    """An object in the input whose fields have the wrong shape; the message names the object and the field."""


@dataclass(frozen=True)
class ServerVersion:
    git_version: str  # "v1.34.2"; "" when unknown
    major: int
    minor: int

    @property
    def known(self) -> bool:
        return self.major > 0

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)


UNKNOWN_VERSION = ServerVersion("", 0, 0)


@dataclass
class ClusterData:
    """Everything the report reads. `objects[kind]` is a list of plain dicts as the API server sends them."""

    objects: dict[str, list[Obj]] = field(default_factory=lambda: {k: [] for k in KINDS})
    version: ServerVersion = UNKNOWN_VERSION
    # "group/version" strings the server serves ("v1" for core); None when unknown (snapshot without the file).
    api_versions: frozenset[str] | None = None
    # Resources that could not be read (live mode: forbidden/unavailable), "plural" -> reason.
    unreadable: dict[str, str] = field(default_factory=dict)
    other_kinds: dict[str, int] = field(default_factory=dict)
    source: str = ""  # a description for humans ("snapshot examples/cluster-snapshot", "context prod")
    # When the state was read (epoch seconds): set by a live scan; None for a snapshot, whose time is inferred from
    # the newest timestamp in it (bridge.report.splitcontroller.reference_time).
    taken_at: float | None = None

    def of(self, kind: str) -> list[Obj]:
        return self.objects.get(kind, [])

    def add(self, obj: Obj, origin: str) -> None:
        kind = read_kind(obj, origin)
        if kind in self.objects:
            self.objects[kind].append(obj)
        else:
            self.other_kinds[kind] = self.other_kinds.get(kind, 0) + 1

    def resource_versions(self) -> tuple[str, ...]:
        """Served resource.k8s.io versions, newest first (explicit discovery, else inferred from objects)."""
        order = ("v1", "v1beta2", "v1beta1", "v1alpha3")
        if self.api_versions is not None:
            return tuple(v for v in order if f"resource.k8s.io/{v}" in self.api_versions)
        seen = {
            str(o.get("apiVersion", "")).split("/", 1)[-1]
            for kind in ("DeviceClass", "ResourceSlice")
            for o in self.of(kind)
        }
        return tuple(v for v in order if v in seen)


def read_kind(obj: Any, origin: str) -> str:
    """The object's kind, once it is known to be an object the report can hold: `SnapshotError` for one without a
    kind, and for one of a kind the report reads (`KINDS`) whose metadata is not a mapping with a string name and
    namespace."""
    kind = obj.get("kind") if isinstance(obj, dict) else None
    if not isinstance(kind, str) or not kind:
        raise SnapshotError(f"{origin}: an object without 'kind' (is this `kubectl get -o yaml` output?)")
    if kind in _READ:
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name", ""), str) \
                or not isinstance(meta.get("namespace", ""), str):
            raise SnapshotError(f"{origin}: a {kind} whose metadata is not a mapping with a string name and "
                                f"namespace: {_preview(meta)}")
    return kind


_READ = frozenset(KINDS)


def _preview(value: Any) -> str:
    try:
        return json.dumps(value, default=str)[:120]
    except (RecursionError, ValueError):
        return f"a {type(value).__name__} nested too deeply to show"


def parse_version(doc: Obj) -> ServerVersion:
    """Accepts `kubectl version -o json` output or the raw /version document."""
    if not isinstance(doc, dict):
        raise SnapshotError(f"version document must be a JSON object, found {type(doc).__name__}")
    if "serverVersion" in doc and isinstance(doc["serverVersion"], dict):
        doc = doc["serverVersion"]
    git = str(doc.get("gitVersion", ""))
    major = _leading_int(str(doc.get("major", "")))
    minor = _leading_int(str(doc.get("minor", "")))
    if (major == 0 or minor == 0) and git:
        m = re.match(r"v?(\d+)\.(\d+)", git)
        if m:
            major, minor = int(m.group(1)), int(m.group(2))
    if major == 0:
        raise SnapshotError(f"version document has no usable gitVersion/major/minor: {_preview(doc)}")
    return ServerVersion(git or f"v{major}.{minor}", major, minor)


def _leading_int(s: str) -> int:
    m = re.match(r"\d+", s)  # minor is "34+" on some managed clusters
    return int(m.group(0)) if m else 0


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def _too_big(path: Path, limit: int, what: str) -> SnapshotError:
    return SnapshotError(f"{path}: {what} more than {_size(limit)}, the per-file limit (--max-file-size)")


@overload
def read_regular(path: Path, limit: int = DEFAULT_MAX_FILE_BYTES, into: None = None) -> bytes: ...


@overload
def read_regular(path: Path, limit: int, into: ReadBuffer) -> memoryview: ...


def read_regular(path: Path, limit: int = DEFAULT_MAX_FILE_BYTES, into: ReadBuffer | None = None) -> bytes | memoryview:
    """The bytes of a regular file of at most `limit` bytes; `SnapshotError` for anything else. The type is checked
    on the descriptor (no race with a swapped path) and the open never blocks on a FIFO (`bridge.atomicfile
    .read_regular`, the daemon's reader; a snapshot may be reached through symlinks). With `into`, read into that
    reused buffer (`bridge.atomicfile.read_regular_into`): a view, to release before the next read into it."""
    raw: bytes | memoryview | None
    try:
        if into is None:
            raw = bounded_read(path, limit, follow_links=True)
        else:
            raw = read_regular_into(path, limit, into, follow_links=True)
    except UnreadableFile as err:
        if err.kind == "too-large":
            raise _too_big(path, limit, "grew while read to" if err.size is None else f"{_size(err.size)},") from err
        raise SnapshotError(f"{path}: {err.reason}: a snapshot is made of files") from err
    except OSError as err:
        raise SnapshotError(f"{path}: cannot read: {err.strerror or err}") from err
    if raw is None:
        raise SnapshotError(f"{path}: cannot read: No such file or directory")
    return raw


def _gunzip(path: Path, raw: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(wbits=31)  # gzip header and trailer
    out = bytearray()
    data = raw
    while data:
        out += d.decompress(data, limit + 1 - len(out))
        if len(out) > limit:
            raise _too_big(path, limit, "decompresses to")
        data = d.unconsumed_tail
    out += d.flush()
    if len(out) > limit:
        raise _too_big(path, limit, "decompresses to")
    if not d.eof:
        raise SnapshotError(f"{path}: cannot read: truncated gzip data (the compressed file ended before its end "
                            "marker)")
    return bytes(out)


def _read_bytes(path: Path, limit: int = DEFAULT_MAX_FILE_BYTES) -> bytes:
    raw = read_regular(path, limit)
    try:
        return _gunzip(path, raw, limit) if path.name.endswith(".gz") else raw
    except (zlib.error, EOFError, gzip.BadGzipFile) as err:
        raise SnapshotError(f"{path}: cannot read: {err}") from err


# Byte-order marks of the encodings a snapshot file may come in besides UTF-8. PowerShell's `>` and `Out-File`
# (Windows PowerShell 5.1) write `kubectl get -o json` as UTF-16 LE with a BOM. UTF-32 LE's BOM begins with UTF-16 LE's,
# so it is checked first.
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32", "UTF-32"), (codecs.BOM_UTF32_BE, "utf-32", "UTF-32"),
         (codecs.BOM_UTF16_LE, "utf-16", "UTF-16"), (codecs.BOM_UTF16_BE, "utf-16", "UTF-16"))


def _text(path: Path, raw: bytes | memoryview) -> str:
    """The file's text: UTF-8 (a UTF-8 byte-order mark is skipped by the parsers), or UTF-16/UTF-32 when the file
    starts with that encoding's byte-order mark."""
    head = bytes(raw[:4])
    for bom, codec, name in _BOMS:
        if head.startswith(bom):
            try:
                return str(raw, codec)  # the codec reads the mark, and its byte order, and drops it
            except UnicodeDecodeError as err:
                raise SnapshotError(f"{path}: cannot read: it starts with a {name} byte-order mark but is not "
                                    f"{name} text ({err})") from err
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as err:
        raise SnapshotError(f"{path}: cannot read: not UTF-8 text ({err}). Save it as UTF-8 (what kubectl writes), or "
                            "as UTF-16 or UTF-32 with a byte-order mark (what PowerShell's '>' writes)") from err


def _value_problem(err: ValueError) -> str:
    """What a ValueError from `json.loads` or a YAML constructor says about the input, for a user: an integer of more
    digits than Python converts (`sys.get_int_max_str_digits`), or a value a YAML tag cannot hold (an unquoted date
    that does not exist)."""
    digits = re.search(r"value has (\d+) digits", str(err))
    if digits:
        return f"an integer of {digits.group(1)} digits (at most {sys.get_int_max_str_digits()} are read)"
    return f"a value that cannot be read: {str(err)[:200]}"


_JSON_SPACE = re.compile(r"[ \t\n\r]*")  # what json.loads skips around a document


def _after_space(text: str, at: int) -> int:
    space = _JSON_SPACE.match(text, at)
    return space.end() if space else at


def _json_documents(text: str) -> list[Any] | None:
    """The JSON documents in `text`, one after the other with only whitespace between; None when it is not that."""
    decoder, docs = json.JSONDecoder(), []
    at = _after_space(text, 0)
    while at < len(text):
        try:
            doc, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return None
        docs.append(doc)
        at = _after_space(text, at)
    return docs


def _documents(path: Path, text: str) -> Iterator[Any]:
    base = path.name[:-3] if path.name.endswith(".gz") else path.name
    try:
        if base.endswith(".json"):
            try:
                yield json.loads(text)
                return
            except json.JSONDecodeError as err:
                # JSON documents one after the other (`kubectl get pods -o json --watch`, or one `kubectl get -o
                # json` after another): each is read. Anything else falls through to YAML (a JSON superset).
                docs = _json_documents(text) if err.msg == "Extra data" else None
                if docs is not None:
                    yield from docs
                    return
        yield from yaml.load_all(io.StringIO(text), Loader=_YamlLoader)
    except yaml.YAMLError as err:
        raise SnapshotError(f"{path}: not valid YAML/JSON: {' '.join(str(err).split())}") from err
    except ValueError as err:  # json.loads' JSONDecodeError (a ValueError) falls through to YAML above
        raise SnapshotError(f"{path}: not valid YAML/JSON: {_value_problem(err)}") from err
    except RecursionError as err:
        raise SnapshotError(f"{path}: nested too deeply to parse (more than {sys.getrecursionlimit()} levels): not "
                            "a Kubernetes object") from err


def _flatten(doc: Any, origin: str) -> Iterator[Obj]:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise SnapshotError(f"{origin}: expected a Kubernetes object or List, found {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        own = kind[:-4]  # a <Kind>List holds <Kind>s; "" for a `kind: List`, whose items each name their kind
        api_version = doc.get("apiVersion")
        for n, item in enumerate(doc["items"]):
            if isinstance(item, dict) and "kind" not in item:
                if not own:
                    raise SnapshotError(f"{origin}: item {n + 1} of a `kind: List` has no 'kind' (only a <Kind>List, "
                                        "such as the PodList of `kubectl get --raw /api/v1/pods`, names its items' "
                                        "kind once for all)")
                # The API server writes a <Kind>List's items without kind and apiVersion (`kubectl get --raw`);
                # `kubectl get -o json` adds them back, as `bridge.report.live` does (module docstring).
                item["kind"] = own
                if isinstance(api_version, str) and "apiVersion" not in item:
                    item["apiVersion"] = api_version
            yield from _flatten(item, origin)
        return
    yield doc


def snapshot_files(root: Path) -> list[Path]:
    if root.is_dir():
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                base = name[:-3] if name.endswith(".gz") else name
                if base.endswith(_SUFFIXES) or base == API_VERSIONS_FILE:
                    files.append(Path(dirpath) / name)
        return files
    if root.exists():
        return [root]  # read_regular refuses what is not a regular file, with its type
    raise SnapshotError(f"{root}: no such file or directory")


def load_snapshot(path: str | os.PathLike[str], *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                  plain_json: bool = False) -> ClusterData:
    """`plain_json`: read JSON files with the standard library alone, never `bridge.report.jsonlists` (the reference
    the fast reading is tested against; the report is the same either way)."""
    with bulk_allocation():
        try:
            return _load_snapshot(Path(path), max_file_bytes, None if plain_json else Reader())
        except MemoryError as err:
            raise SnapshotError(f"{path}: out of memory while loading; lower --max-file-size or split the "
                                "snapshot") from err


def _load_snapshot(root: Path, limit: int, reader: Reader | None) -> ClusterData:
    data = ClusterData(source=f"snapshot {root.name or root}")
    files = snapshot_files(root)
    if not files:
        raise SnapshotError(f"{root}: no .yaml/.yml/.json files found")
    buffer = ReadBuffer()  # the files in turn, in one reused buffer (JSON read by `reader`)
    for f in files:
        base = f.name[:-3] if f.name.endswith(".gz") else f.name
        fast = reader is not None and base.endswith(".json") and base not in (VERSION_FILE, UNREADABLE_FILE)
        raw = read_regular(f, limit, buffer) if fast and not f.name.endswith(".gz") else _read_bytes(f, limit)
        try:
            if reader is not None and fast:
                # all of the buffer ASCII: the file is (else the UTF-8 check reads the file itself)
                ascii_only = True if isinstance(raw, memoryview) and buffer.data.isascii() else None
                got = reader.items(raw, ascii_only)
                if got is not None:  # checked as `ClusterData.add` checks the kind (bridge.report.jsonlists)
                    data.objects[got[0]] += got[1]
                    continue
                doc = reader.document(raw, ascii_only)
                if doc is not NOT_READ:
                    for obj in _flatten(doc, str(f)):
                        data.add(obj, str(f))
                    continue
            text = _text(f, raw)
        finally:
            if isinstance(raw, memoryview):
                raw.release()
        if base == VERSION_FILE:
            try:
                data.version = parse_version(json.loads(text))
            except (json.JSONDecodeError, RecursionError, AttributeError) as err:
                raise SnapshotError(f"{f}: not valid JSON for a version document: {str(err)[:200]}") from err
            except ValueError as err:
                raise SnapshotError(f"{f}: not valid JSON for a version document: {_value_problem(err)}") from err
            continue
        if base == UNREADABLE_FILE:
            try:
                data.unreadable.update({str(k): str(v) for k, v in json.loads(text).items()})
            except (json.JSONDecodeError, RecursionError, AttributeError) as err:
                raise SnapshotError(f"{f}: expected a JSON object of resource -> reason: {str(err)[:200]}") from err
            except ValueError as err:
                raise SnapshotError(f"{f}: expected a JSON object of resource -> reason: {_value_problem(err)}") \
                    from err
            continue
        if base == API_VERSIONS_FILE:
            data.api_versions = frozenset(line.strip() for line in text.splitlines() if line.strip())
            continue
        for doc in _documents(f, text):
            for obj in _flatten(doc, str(f)):
                data.add(obj, str(f))
    return data


def iter_objects(data: ClusterData) -> Iterable[tuple[str, list[Obj]]]:
    for kind in KINDS:
        yield kind, data.of(kind)
