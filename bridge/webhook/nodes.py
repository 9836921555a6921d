"""What the webhook knows about the GPU nodes, and what it concludes for one pod (pure: node dicts in, verdicts out).

Why nodes at all: the AdmissionReview carries the pod, not the cluster. Whether `nvidia.com/gpu` on the nodes a pod
can land on is a whole GPU (GPU Feature Discovery labels: MIG strategy single, `-SHARED` products, replicas,
sharing strategy; bridge.kvalues.gfd), which GFD family rule the cluster's GFD uses, and which kubelet versions run
on GPU nodes (for the `extended` target) are all on the Node objects.

* `project(node)` keeps only what the decisions need from a Node: name, labels, NoSchedule/NoExecute taints, the
  kubelet version and the not-whole-GPU reason; and only for **GPU nodes** (capacity `nvidia.com/gpu`, or a GFD
  `nvidia.com/gpu.product`/`.count`/`.present` label, or the chart's opt-in label `dra-bridge.io/node`). Everything
  else of a Node (images, conditions, addresses: most of its bytes) is dropped, and strings are interned (the
  nodes of a pool share their label keys and most values), so the webhook's memory grows with the GPU nodes'
  labels only, bounded by `MAX_NODES`.
* `NodeView` is an immutable snapshot of those projections. `placement(spec)` answers "can this pod only run on
  nodes whose nvidia.com/gpu is not a whole GPU?": the candidate GPU nodes are those its `nodeSelector`, required
  node affinity (terms OR-ed, expressions AND-ed, `matchFields` on `metadata.name`) and tolerations (of the nodes'
  NoSchedule/NoExecute taints) admit, with the scheduler's semantics (`bridge.kvalues.placement`, the project's one
  implementation: k8s.io/component-helpers scheduling/corev1/nodeaffinity `GetRequiredNodeAffinity`,
  `NodeSelectorRequirementsAsSelector`; k8s.io/api core/v1 toleration.go `ToleratesTaint`). If every candidate serves slices or shares, the pod meant
  one and is not translated. If the candidates are mixed, the pod already ran on whole GPUs sometimes and gets one
  under DRA: translated. No candidate at all (no GPU node known, or a selector no GPU node satisfies): translated,
  nothing to conclude from. A namespace's own restrictions arrive in the pod: the API server's PodNodeSelector and
  PodTolerationRestriction admission plugins run before mutating webhooks and merge the namespace's node selector
  and default tolerations into the pod the webhook sees.
* Verdicts are memoised per distinct (nodeSelector, required affinity, tolerations) inside a snapshot (the pods of
  a Deployment share one), and when no GPU node serves slices or shares the answer is immediate.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.kube.watch import kept_metadata
from bridge.kvalues import gfd
from bridge.kvalues.placement import term_matches, toleration_tolerates
from bridge.webhook import jsoncodec

MAX_NODES = 20_000  # GPU nodes kept; the Kubernetes scalability envelope is 5,000 nodes
LEGACY_RESOURCE = "nvidia.com/gpu"
OPT_IN_LABEL = "dra-bridge.io/node"
_GPU_LABELS = (gfd.PRODUCT, gfd.COUNT, "nvidia.com/gpu.present", OPT_IN_LABEL)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)")

Taint = tuple[str, str, str]  # key, value, effect
_UNKNOWN = object()  # not in a NodeView's verdict memo yet


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()
    kubelet: tuple[int, int] | None = None
    not_whole: str | None = None


def kubelet_version(text: str) -> tuple[int, int] | None:
    """"v1.36.2-eks-1" -> (1, 36); None when unreadable."""
    m = _VERSION.match(text or "")
    return (int(m[1]), int(m[2])) if m else None


def slim(node: Mapping[str, Any]) -> dict[str, Any]:
    """The Node as the webhook's informer stores it (bridge.kube.watch `transform`): identity always, and for a GPU
    node the labels, taints, `nvidia.com/gpu` capacity and kubelet version; nothing else."""
    meta = node.get("metadata") or {}
    out: dict[str, Any] = {"metadata": kept_metadata(node)}
    if project(node) is None:
        return out
    out["metadata"]["labels"] = dict(meta.get("labels") or {})
    taints = (node.get("spec") or {}).get("taints")
    if taints:
        out["spec"] = {"taints": taints}
    status = node.get("status") or {}
    capacity = status.get("capacity") or {}
    out["status"] = {"nodeInfo": {"kubeletVersion": (status.get("nodeInfo") or {}).get("kubeletVersion", "")}}
    if LEGACY_RESOURCE in capacity:
        out["status"]["capacity"] = {LEGACY_RESOURCE: capacity[LEGACY_RESOURCE]}
    return out


def project(node: Mapping[str, Any]) -> NodeInfo | None:
    """The part of a Node the webhook keeps, or None when it is not a GPU node (see the module docstring)."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = node.get("status") or {}
    if not isinstance(labels, Mapping) or not isinstance(status, Mapping):
        return None
    capacity = status.get("capacity") or {}
    if not (isinstance(capacity, Mapping) and LEGACY_RESOURCE in capacity) and not any(k in labels for k in _GPU_LABELS):
        return None
    kept = {sys.intern(str(k)): sys.intern(str(v)) for k, v in labels.items()}
    taints: list[Taint] = []
    for t in (node.get("spec") or {}).get("taints") or []:
        if isinstance(t, Mapping) and t.get("effect") in ("NoSchedule", "NoExecute"):
            taints.append((sys.intern(str(t.get("key", ""))), sys.intern(str(t.get("value", ""))),
                           sys.intern(str(t.get("effect")))))
    info = status.get("nodeInfo") or {}
    kubelet = kubelet_version(str(info.get("kubeletVersion", ""))) if isinstance(info, Mapping) else None
    return NodeInfo(sys.intern(str(meta.get("name", ""))), kept, tuple(taints), kubelet, gfd.not_whole_gpu(kept))


# --- the scheduler's node selection -----------------------------------------------------------------------------

def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    key, value, effect = taint
    return any(toleration_tolerates(str(t.get("key") or ""), str(t.get("operator") or ""), str(t.get("value") or ""),
                                    str(t.get("effect") or ""), key, value, effect) for t in tolerations)


def selects(spec: Mapping[str, Any], node: NodeInfo) -> bool:
    """Whether the scheduler could put a pod with this spec on `node` as far as labels and taints go."""
    selector = spec.get("nodeSelector") or {}
    if isinstance(selector, Mapping) and any(node.labels.get(k) != str(v) for k, v in selector.items()):
        return False
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = affinity.get("nodeSelectorTerms") if isinstance(affinity, Mapping) else None
    if terms and not any(isinstance(t, Mapping) and term_matches(t, node.name, node.labels) for t in terms):
        return False
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, Mapping)]
    return all(_tolerates(tolerations, taint) for taint in node.taints)


# --- what the pod's own selectors ask for ------------------------------------------------------------------------

_ASKS = (gfd.PRODUCT, gfd.REPLICAS, gfd.SHARING_STRATEGY)


def asks_for_shares(spec: Mapping[str, Any]) -> str | None:
    """Why the pod's own node selection asks for slices or shares (a `-MIG-`/`-SHARED` product, replicas > 1, a
    time-slicing or MPS sharing strategy), or None. Such a pod meant a slice whatever the nodes are now. MIG
    strategy single alone is no ask: with MIG off on the GPUs such a node serves whole ones."""
    selector = spec.get("nodeSelector")
    if selector and (type(selector) is dict or isinstance(selector, Mapping)):
        for key in _ASKS:
            if key in selector:
                value = selector[key]
                if value is not None and (why := _shares(key, str(value))) is not None:
                    return why
    if not spec.get("affinity"):
        return None
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in affinity.get("nodeSelectorTerms") or [] if isinstance(affinity, Mapping) else []:
        for e in (term.get("matchExpressions") or []) if isinstance(term, Mapping) else []:
            if isinstance(e, Mapping) and e.get("operator") == "In" and e.get("key") in _ASKS:
                for v in e.get("values") or []:
                    if (why := _shares(str(e["key"]), str(v))) is not None:
                        return why
    return None


@functools.lru_cache(maxsize=1024)
def _shares(key: str, value: str) -> str | None:
    why = gfd.not_whole_gpu({key: value})
    return None if why is None else f"its node selector: {why}"


# --- the snapshot ------------------------------------------------------------------------------------------------

class NodeView:
    """An immutable snapshot of the GPU nodes (the verdict memo inside is an implementation detail). Equal when the
    nodes are."""

    def __init__(self, nodes: tuple[NodeInfo, ...] = (), truncated: bool = False) -> None:
        self.nodes = nodes
        self.truncated = truncated  # more GPU nodes than MAX_NODES: the rest are unknown
        self._memo: dict[object, str | None] = {}
        self._lock = threading.Lock()
        self.any_not_whole = any(n.not_whole for n in self.nodes)
        known = [(n.kubelet, n.name) for n in self.nodes if n.kubelet is not None]
        self.unknown_kubelets = tuple(n.name for n in self.nodes if n.kubelet is None)
        self.oldest_kubelet: tuple[tuple[int, int], str] | None = min(known) if known else None
        observations: set[tuple[str, int, int]] = set()
        for n in self.nodes:
            fam, major, minor = (n.labels.get(k) for k in (gfd.FAMILY, gfd.COMPUTE_MAJOR, gfd.COMPUTE_MINOR))
            if fam and major and minor and major.isdigit() and minor.isdigit():
                observations.add((fam, int(major), int(minor)))
        rule, self.family_problem = gfd.infer_family_rule(observations)
        self.family_rule = rule or gfd.LATEST

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeView) and (self.nodes, self.truncated) == (other.nodes, other.truncated)

    def __hash__(self) -> int:
        return hash((tuple(n.name for n in self.nodes), self.truncated))

    def __repr__(self) -> str:
        return f"NodeView({len(self.nodes)} GPU nodes, {sum(1 for n in self.nodes if n.not_whole)} not whole)"

    @classmethod
    def of(cls, nodes: Iterable[NodeInfo], truncated: bool = False) -> NodeView:
        return cls(tuple(sorted(nodes, key=lambda n: n.name)), truncated)

    def kubelets_at_least(self, version: tuple[int, int]) -> tuple[bool, str]:
        """Whether every GPU node's kubelet is at `version` or newer, and if not, which one is not (or why it
        cannot be told: no GPU node known, a version that does not parse)."""
        if not self.nodes:
            return False, "no GPU node is known yet"
        if self.unknown_kubelets:
            return False, f"node {self.unknown_kubelets[0]} reports no kubelet version"
        assert self.oldest_kubelet is not None
        (oldest, name) = self.oldest_kubelet
        if oldest < version:
            return False, f"node {name} runs kubelet {oldest[0]}.{oldest[1]}"
        return True, ""

    def placement(self, spec: Mapping[str, Any]) -> str | None:
        """Why the pod can only run where `nvidia.com/gpu` is not a whole GPU, or None (see the module docstring).
        Short: it ends up in a 120-character warning; the first candidate node is named."""
        if not self.any_not_whole:
            return None
        return self._memoised(("placement", _selector_key(spec)), spec, self._placement)

    def share_reason(self, spec: Mapping[str, Any]) -> str | None:
        """`asks_for_shares(spec)`, else `placement(spec)`: why the pod means a slice or a share of a GPU, or None.
        Both read only the pod's node selector, affinity and tolerations, so one memo answers them together (every
        review asks)."""
        return self._memoised(("shares", _selector_key(spec)), spec, self._share_reason)

    def _placement(self, spec: Mapping[str, Any]) -> str | None:
        candidates = [n for n in self.nodes if selects(spec, n)]
        if candidates and all(n.not_whole for n in candidates):
            first = candidates[0]
            return f"on node {first.name[:30]}: {first.not_whole}"
        return None

    def _share_reason(self, spec: Mapping[str, Any]) -> str | None:
        why = asks_for_shares(spec)
        return why if why is not None or not self.any_not_whole else self._placement(spec)

    def _memoised(self, key: object, spec: Mapping[str, Any],
                  compute: Callable[[Mapping[str, Any]], str | None]) -> str | None:
        # read without the lock: entries are only ever added (under it), and one dict lookup is atomic
        verdict = self._memo.get(key, _UNKNOWN)
        if verdict is not _UNKNOWN:
            return verdict  # type: ignore[return-value]
        verdict = compute(spec)
        with self._lock:
            if len(self._memo) < 4096:
                self._memo[key] = verdict
        return verdict


def _selector_key(spec: Mapping[str, Any]) -> object:
    """What placement and the share check read of a pod, as a hashable key: the common pod's node selector of
    strings as a tuple, anything else as sorted JSON."""
    selector, affinity, tolerations = spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")
    if not affinity and not tolerations:  # the common pod: at most a node selector of strings
        if not selector:
            return ()
        if type(selector) is dict:
            for v in selector.values():
                if type(v) is not str:
                    break
            else:
                return tuple(selector.items()) if len(selector) == 1 else tuple(sorted(selector.items()))
    return jsoncodec.dumps_sorted([selector, (affinity or {}).get("nodeAffinity") if type(affinity) is dict
                                   or isinstance(affinity, Mapping) else affinity, tolerations])


EMPTY = NodeView()

__all__ = ["EMPTY", "MAX_NODES", "NodeInfo", "NodeView", "asks_for_shares", "kubelet_version", "project", "selects",
           "slim"]
