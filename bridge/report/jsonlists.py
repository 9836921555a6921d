"""Snapshot JSON files read with msgspec: Pods (and ReplicaSets, and Nodes) down to the fields the report reads, the
identical parts of Pods shared. A live scan reads the pages of its pod, ReplicaSet and Node lists the same way
(`Reader.page`, bridge.report.live).

The plain path (`bridge.report.sources`, `json.loads`) turns a 150,000-pod snapshot into 1.3 GB of dicts, most of
them fields no check reads (env values, volume mounts, probes, ports, container statuses, pod IPs, managedFields on a
real cluster's pods), and the same pod template once per replica. Here, with msgspec (a dependency of the package, as
for the webhook's reviews):

* a `kind: List` (or `<Kind>List`) JSON document whose items are all Pods is decoded with a schema of the Pod fields
  the report reads (`_Pod` below); every other field is scanned but never becomes a Python object. The objects equal
  the plain path's with those fields left out, key order included. The schema checks what `ClusterData.add` checks
  (a `metadata` mapping, a string name and namespace), so such items go straight into the Pod list. The items of a
  `kind: PodList` may leave out their kind, as the API server writes them (`kubectl get --raw /api/v1/pods`): they
  are Pods, given `kind: Pod` as the plain path gives them (`bridge.report.sources`).
* the parts of a Pod that its replicas repeat byte for byte (`SHARED_TYPES`: containers, tolerations, affinity,
  labels, owner references) are decoded once per distinct JSON text and the one object is shared by every Pod that
  has that text (`Reader`): a Deployment's 100 replicas hold one container list.
  The report reads objects and never changes them (`bridge.report.sources`), so sharing is not observable.
* a List whose items are all ReplicaSets likewise (`_ReplicaSet`): the model reads a ReplicaSet's name, owner and,
  for one no Deployment owns, its replicas and pod template (the same Pod fields as a Pod's, and the template's
  opt-out annotation).
* a List whose items are all Nodes likewise (`_Node`), less the fields of a Node no reader reads and a real node
  makes large: `metadata.managedFields`, and `status.images` (the kubelet lists up to 50 images, each with its
  names), `status.volumesInUse` and `status.volumesAttached`. Every other field a Node has (ObjectMeta and
  NodeStatus as k8s.io/api v0.37 defines them, `spec` whole) is kept, so a reader that starts reading another field
  of a Node needs no change here unless that field is new to Kubernetes.
* any other JSON document is decoded whole: the same objects as `json.loads`.
* anything msgspec refuses or would read differently from the plain path (NaN and Infinity, numbers beyond a double,
  lone surrogates, a byte order mark, several documents one after the other, bytes that are not UTF-8 or an integer
  of more digits than Python converts (`sys.get_int_max_str_digits`, which `json.loads` stops at), even in a field
  the schema skips; nesting within `_DEPTH_MARGIN` levels of where `json.loads` gives up: msgspec is run with
  a recursion limit that much lower), a Pod field of a JSON type the schema does not take (`metadata: null`, a
  container or an env entry that is not an object, a name that is not a string), and a List mixing Pods with other
  kinds: `None` / `NOT_READ`, and the caller reads the file on the plain path, so such a file gives exactly the
  findings and errors it gave before.

Which Pod fields are kept, and who reads them (keep in step with the readers; tests/report/test_jsonlists.py checks
that the report is the same from either path, and that every Pod and ReplicaSet field `bridge.report.shape` checks
is kept, so a malformed-input error names the same object and field; a Pod's apiVersion is read by no one):

* metadata: name, namespace, ownerReferences (kind, name, controller: the top owner, `bridge.report.model`),
  annotations (only `dra-bridge.io/translate`: `bridge.report.podspec.opted_out`), labels (`shape`),
  creationTimestamp, deletionTimestamp (`bridge.controller.demand` pending pods, a snapshot's newest time in
  `bridge.report.splitcontroller`);
* spec: nodeName; containers and initContainers (name, resources, env names, securityContext, restartPolicy, and
  image, command, args for `shape`); ephemeralContainers (`shape`); volumes (hostPath); nodeSelector, affinity,
  tolerations (`bridge.kvalues.placement`, GFD selectors); resourceClaims; priorityClassName, schedulerName,
  priority, schedulingGates (`bridge.report.podspec.analyse`, `bridge.controller.demand`);
* status: phase, resourceClaimStatuses, startTime, conditions (lastTransitionTime).
"""

from __future__ import annotations

import re
import sys
from typing import Any, Required, TypedDict

try:
    import msgspec
    from msgspec import Raw
except ImportError:  # pragma: no cover - msgspec is a dependency; without it every file takes the plain path
    msgspec = None  # type: ignore[assignment]
    Raw = Any  # type: ignore[misc,assignment]

Obj = dict[str, Any]

_Annotations = TypedDict("_Annotations", {"dra-bridge.io/translate": Any}, total=False)


class _OwnerRef(TypedDict, total=False):
    kind: Any
    name: Any
    controller: Any


class _EnvVar(TypedDict, total=False):
    name: Any


class _Container(TypedDict, total=False):
    name: Any
    image: Any
    command: Any
    args: Any
    env: list[_EnvVar] | None
    resources: Any
    securityContext: Any
    restartPolicy: Any


class _Volume(TypedDict, total=False):
    hostPath: Any


class _Condition(TypedDict, total=False):
    lastTransitionTime: Any


# What the shared fields hold, as types (the tests walk them with the rest of the schema). Each is read as its raw
# JSON text first (`Raw` in the schema below), then decoded with this type once per distinct text. Parts that are
# small once slimmed, or that differ from pod to pod on a real cluster (volumes name the pod's API token, conditions
# carry its timestamps), are decoded in place instead.
SHARED_TYPES: dict[str, dict[str, Any]] = {
    "metadata": {"labels": Any, "ownerReferences": list[_OwnerRef] | None},
    "spec": {"containers": list[_Container] | None, "initContainers": list[_Container] | None,
             "affinity": Any, "tolerations": Any},
}


class _Meta(TypedDict, total=False):
    name: str
    namespace: str
    labels: Raw
    annotations: _Annotations | None
    ownerReferences: Raw
    creationTimestamp: Any
    deletionTimestamp: Any


class _Spec(TypedDict, total=False):
    nodeName: Any
    containers: Raw
    initContainers: Raw
    ephemeralContainers: Any
    volumes: list[_Volume] | None
    nodeSelector: Any
    affinity: Raw
    tolerations: Raw
    resourceClaims: Any
    priorityClassName: Any
    schedulerName: Any
    priority: Any
    schedulingGates: Any


class _Status(TypedDict, total=False):
    phase: Any
    resourceClaimStatuses: Any
    startTime: Any
    conditions: list[_Condition] | None


class _Pod(TypedDict, total=False):
    kind: str  # absent from the items of a PodList as the API server writes it (`kubectl get --raw`)
    metadata: Required[_Meta]
    spec: _Spec | None
    status: _Status | None


class _PodList(TypedDict, total=False):
    kind: Required[str]
    metadata: Any  # a page's `continue` and resourceVersion (`Reader.page`)
    items: Required[list[_Pod]]


class _TemplateSpec(TypedDict, total=False):
    """A pod template's spec: the Pod fields of `_Spec`, decoded in place."""

    nodeName: Any
    containers: list[_Container] | None
    initContainers: list[_Container] | None
    ephemeralContainers: Any
    volumes: list[_Volume] | None
    nodeSelector: Any
    affinity: Any
    tolerations: Any
    resourceClaims: Any
    priorityClassName: Any
    schedulerName: Any
    priority: Any
    schedulingGates: Any


class _TemplateMeta(TypedDict, total=False):
    annotations: _Annotations | None


class _PodTemplate(TypedDict, total=False):
    metadata: _TemplateMeta | None
    spec: _TemplateSpec | None


class _ReplicaSetMeta(TypedDict, total=False):
    name: str
    namespace: str
    labels: Any
    ownerReferences: list[_OwnerRef] | None


class _ReplicaSetSpec(TypedDict, total=False):
    replicas: Any
    template: _PodTemplate | None


class _ReplicaSet(TypedDict, total=False):
    kind: str
    metadata: Required[_ReplicaSetMeta]
    spec: _ReplicaSetSpec | None


class _ReplicaSetList(TypedDict, total=False):
    kind: Required[str]
    metadata: Any
    items: Required[list[_ReplicaSet]]


class _NodeMeta(TypedDict, total=False):
    """Every ObjectMeta field (k8s.io/apimachinery pkg/apis/meta/v1 types.go) but managedFields."""

    name: str
    generateName: Any
    namespace: str
    selfLink: Any
    uid: Any
    resourceVersion: Any
    generation: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    deletionGracePeriodSeconds: Any
    labels: Any
    annotations: Any
    ownerReferences: Any
    finalizers: Any


class _NodeStatus(TypedDict, total=False):
    """Every NodeStatus field (k8s.io/api core/v1 types.go, v0.37) but images, volumesInUse and volumesAttached."""

    capacity: Any
    allocatable: Any
    phase: Any
    conditions: Any
    addresses: Any
    daemonEndpoints: Any
    nodeInfo: Any
    config: Any
    runtimeHandlers: Any
    features: Any
    declaredFeatures: Any


class _Node(TypedDict, total=False):
    apiVersion: Any
    kind: str
    metadata: Required[_NodeMeta]
    spec: Any
    status: _NodeStatus | None


class _NodeList(TypedDict, total=False):
    kind: Required[str]
    apiVersion: Any  # given to items without one, as the plain path does (a Node's apiVersion is kept)
    metadata: Any
    items: Required[list[_Node]]


POD_SCHEMA: type = _Pod  # the fields kept, as types (the tests walk it; `Raw` fields: see SHARED_TYPES)
REPLICASET_SCHEMA: type = _ReplicaSet
NODE_SCHEMA: type = _Node

_PODS = msgspec.json.Decoder(_PodList) if msgspec is not None else None
_REPLICASETS = msgspec.json.Decoder(_ReplicaSetList) if msgspec is not None else None
_NODES = msgspec.json.Decoder(_NodeList) if msgspec is not None else None
_WHOLE = msgspec.json.Decoder() if msgspec is not None else None
_ANY, _OWNERS, _CONTAINERS = (msgspec.json.Decoder(t) if msgspec is not None else None
                              for t in (Any, list[_OwnerRef] | None, list[_Container] | None))
_REFUSED: tuple[type[BaseException], ...] = (
    (msgspec.DecodeError, msgspec.ValidationError, RecursionError) if msgspec is not None else ())
# Where a Pod List shows itself: the first item's kind, near the start (kubectl writes `kind` before the object's
# body), or the List's own `kind: PodList` (the API server writes it first, and its items without kind). Only a hint
# for which reading to try first; the items are checked after decoding.
_POD_HINT = re.compile(rb'"kind"\s*:\s*"Pod(?:List)?"')
_REPLICASET_HINT = re.compile(rb'"kind"\s*:\s*"ReplicaSet(?:List)?"')
_NODE_HINT = re.compile(rb'"kind"\s*:\s*"Node(?:List)?"')
_HINT_BYTES = 1 << 16
# msgspec and json.loads both stop at the interpreter's recursion limit, counted from where each is called; msgspec
# runs with a limit this much lower, so that it gives up first and the plain path decides (its error, or its objects).
_DEPTH_MARGIN = 100
# Distinct shared parts of one field remembered at once (then forgotten, and decoded again when seen again): bounds
# the memory of a snapshot whose pods share little.
MAX_SHARED = 1 << 16


class _NotRead:
    """`document`'s answer for what it leaves to the plain path (a JSON document can be null)."""


NOT_READ = _NotRead()


def _utf8(raw: bytes | memoryview, ascii_only: bool | None = None) -> bool:
    """Whether `raw` is UTF-8 (the plain path decodes the whole file; msgspec checks only what it decodes);
    `ascii_only`: True when it is known to be ASCII (None: not known)."""
    if ascii_only or (isinstance(raw, bytes) and raw.isascii()):
        return True
    try:
        str(raw, "utf-8")
    except UnicodeDecodeError:
        return False
    return True


_DIGIT_MAP = bytes(0x31 if 0x30 <= b <= 0x39 else 0x2E for b in range(256))  # a digit -> "1", any other byte -> "."


def _long_digits(raw: bytes | memoryview) -> bool:
    """Whether `raw` may hold a run of more digits than Python converts to an int (`json.loads` stops there with a
    ValueError; msgspec only where it decodes the number: a field the schema skips would be read). Sampled: a run of
    `limit + 1` digits holds two samples `step` apart and every byte between them, so none is missed; a run found
    in a string too sends the file to the plain path, which reads it as before."""
    limit = sys.get_int_max_str_digits()
    if limit <= 0 or len(raw) <= limit:
        return False
    step = max(limit // 2, 1)
    samples = bytes(raw[::step]).translate(_DIGIT_MAP)
    at = samples.find(b"11")
    while at >= 0:
        if bytes(raw[at * step:(at + 1) * step + 1]).isdigit():
            return True
        at = samples.find(b"11", at + 1)
    return False


class _Lowered:
    """The recursion limit lowered by `_DEPTH_MARGIN` while msgspec decodes (`_DEPTH_MARGIN`). The limit is the
    interpreter's: another thread recursing that deep meanwhile would stop earlier (the report loads snapshots from
    its one thread)."""

    def __enter__(self) -> None:
        self.limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(self.limit - _DEPTH_MARGIN, 50))

    def __exit__(self, *exc: object) -> None:
        sys.setrecursionlimit(self.limit)


class Reader:
    """One snapshot's JSON files (module docstring). Keeps the shared Pod parts seen so far, so that Pods in
    different files share them too."""

    def __init__(self) -> None:
        self._memos: dict[str, dict[bytes, Any]] = {}  # field -> JSON text -> its one decoded value

    def items(self, raw: bytes | memoryview, ascii_only: bool | None = None) -> tuple[str, list[Obj]] | None:
        """(kind, items) of a JSON List of Pods only, of ReplicaSets only or of Nodes only, each item with only the
        fields the report reads (Pods: identical parts shared); None when `raw` is none of them, or not JSON msgspec
        reads as the plain path does (module docstring)."""
        got = self._list(raw, ascii_only)
        return None if got is None else (got[0], got[1]["items"])

    def page(self, raw: bytes) -> Obj | None:
        """One page of a Pod, ReplicaSet or Node list as the API server sends it, read as `items` reads a file: {"kind",
        "metadata" (its `continue` and resourceVersion), "items"}; None for any other page, or one msgspec could
        read otherwise than the plain path, which the client then parses whole (`KubeAPI.list`'s `page_decoder`:
        the live scan, bridge.report.live)."""
        got = self._list(raw)
        if got is None:
            return None
        doc = got[1]
        meta = doc.get("metadata")
        return {"kind": doc["kind"], "metadata": meta if isinstance(meta, dict) else {}, "items": doc["items"]}

    def _list(self, raw: bytes | memoryview, ascii_only: bool | None = None) -> tuple[str, Obj] | None:
        if _PODS is None or _REPLICASETS is None or _NODES is None:
            return None
        decoder: Any
        if _POD_HINT.search(raw, 0, _HINT_BYTES) is not None:
            kind, decoder = "Pod", _PODS
        elif _REPLICASET_HINT.search(raw, 0, _HINT_BYTES) is not None:
            kind, decoder = "ReplicaSet", _REPLICASETS
        elif _NODE_HINT.search(raw, 0, _HINT_BYTES) is not None:
            kind, decoder = "Node", _NODES
        else:
            return None
        if not _utf8(raw, ascii_only) or _long_digits(raw):
            return None
        try:
            with _Lowered():
                doc = decoder.decode(raw)
                items: list[Obj] = doc["items"]
                listed: str = doc["kind"]
                if not listed.endswith("List"):
                    return None
                own = listed[:-4]  # a <Kind>List's items without kind are <Kind>s (bridge.report.sources._flatten)
                api_version = doc.get("apiVersion")  # (only a NodeList's is read: Pods and ReplicaSets drop theirs)
                for item in items:
                    got = item.get("kind")
                    if got is None:
                        if own != kind:
                            return None
                        item["kind"] = kind
                        if isinstance(api_version, str) and "apiVersion" not in item:
                            item["apiVersion"] = api_version
                    elif got != kind:
                        return None
                if kind == "Pod":
                    self._share(items)
        except _REFUSED:
            return None
        return kind, doc

    def pod_items(self, raw: bytes | memoryview) -> list[Obj] | None:
        """The items of a JSON Pod List (`items`), None for anything else."""
        got = self.items(raw)
        return got[1] if got is not None and got[0] == "Pod" else None

    def _share(self, items: list[Obj]) -> None:
        """Every `Raw` field (SHARED_TYPES) replaced by its decoded value, one object per distinct text and type.
        Written out field by field: it runs for every pod."""
        memos = self._memos
        labels, owners = memos.setdefault("labels", {}), memos.setdefault("ownerReferences", {})
        containers, tolerations = memos.setdefault("containers", {}), memos.setdefault("tolerations", {})
        inits, affinities = memos.setdefault("initContainers", {}), memos.setdefault("affinity", {})

        def decoded(memo: dict[bytes, Any], key: bytes, decoder: Any) -> Any:
            if len(memo) >= MAX_SHARED:
                memo.clear()
            value = memo[key] = decoder.decode(key)
            return value

        for item in items:
            meta = item["metadata"]
            raw = meta.get("labels")
            if raw is not None:  # absent (a JSON null is Raw(b"null"))
                key = bytes(raw)
                meta["labels"] = labels[key] if key in labels else decoded(labels, key, _ANY)
            raw = meta.get("ownerReferences")
            if raw is not None:
                key = bytes(raw)
                meta["ownerReferences"] = owners[key] if key in owners else decoded(owners, key, _OWNERS)
            spec = item.get("spec")
            if spec:
                raw = spec.get("containers")
                if raw is not None:
                    key = bytes(raw)
                    spec["containers"] = containers[key] if key in containers else \
                        decoded(containers, key, _CONTAINERS)
                raw = spec.get("initContainers")
                if raw is not None:
                    key = bytes(raw)
                    spec["initContainers"] = inits[key] if key in inits else decoded(inits, key, _CONTAINERS)
                raw = spec.get("tolerations")
                if raw is not None:
                    key = bytes(raw)
                    spec["tolerations"] = tolerations[key] if key in tolerations else \
                        decoded(tolerations, key, _ANY)
                raw = spec.get("affinity")
                if raw is not None:
                    key = bytes(raw)
                    spec["affinity"] = affinities[key] if key in affinities else decoded(affinities, key, _ANY)

    @staticmethod
    def document(raw: bytes | memoryview, ascii_only: bool | None = None) -> Any:
        """The whole JSON document, as `json.loads` reads it; `NOT_READ` when msgspec refuses it or could read it
        differently (module docstring)."""
        if _WHOLE is None or not _utf8(raw, ascii_only):
            return NOT_READ
        try:
            with _Lowered():
                return _WHOLE.decode(raw)
        except _REFUSED:
            return NOT_READ


__all__ = ["MAX_SHARED", "NODE_SCHEMA", "NOT_READ", "POD_SCHEMA", "REPLICASET_SCHEMA", "Reader", "SHARED_TYPES"]
