"""The node-only filters of the default kube-scheduler profile, in its order, and their reasons (pure).

Each filter returns None (the node passes) or the reason the real plugin reports; the scheduler stops at the first
failing filter per node, as the framework's RunFilterPlugins does. Written from kubernetes/kubernetes:
* pkg/scheduler/framework/plugins/nodeunschedulable: `spec.unschedulable` unless the pod tolerates
  `node.kubernetes.io/unschedulable:NoSchedule` -> "node(s) were unschedulable".
* pkg/scheduler/framework/plugins/tainttoleration: the first NoSchedule/NoExecute taint the pod does not tolerate
  -> "node(s) had untolerated taint {key: value}" (1.33 and older) / "node(s) had untolerated taint(s)" (newer,
  see apiserver/profiles.py); toleration matching from k8s.io/api core/v1 toleration.go `ToleratesTaint`, and the
  node selector terms below, are `bridge.kvalues.placement` (the project's one implementation of both).
* pkg/scheduler/framework/plugins/nodeaffinity with k8s.io/component-helpers/scheduling/corev1/nodeaffinity:
  `nodeSelector` (every label equal) and `requiredDuringSchedulingIgnoredDuringExecution` (terms ORed,
  requirements ANDed; In, NotIn, Exists, DoesNotExist, Gt, Lt; `matchFields` on metadata.name; an empty term
  matches nothing) -> "node(s) didn't match Pod's node affinity/selector".
* pkg/scheduler/framework/plugins/noderesources/fit.go (`fitsRequest`): one pod more than allocatable `pods`
  -> "Too many pods"; cpu, memory, ephemeral-storage and each extended resource against allocatable minus what the
  node's pods request -> "Insufficient <name>". With DRAExtendedResource, an extended resource that a DeviceClass
  maps and the node has 0 of is left to the DynamicResources plugin instead (KEP-5004).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from bridge.kvalues.placement import term_matches, toleration_tolerates

Obj = dict[str, Any]

UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
_DO_NOT_SCHEDULE = ("NoSchedule", "NoExecute")


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """core/v1 Toleration.ToleratesTaint (the project's one implementation, bridge.kvalues.placement)."""
    return toleration_tolerates(str(toleration.get("key") or ""), str(toleration.get("operator") or ""),
                                str(toleration.get("value") or ""), str(toleration.get("effect") or ""),
                                str(taint.get("key") or ""), str(taint.get("value") or ""),
                                str(taint.get("effect") or ""))


def untolerated_taint(taints: Iterable[Mapping[str, Any]], tolerations: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for taint in taints:
        if taint.get("effect") not in _DO_NOT_SCHEDULE:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _tolerations(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in (pod.get("spec") or {}).get("tolerations") or [] if isinstance(t, dict)]


def node_unschedulable(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    if not (node.get("spec") or {}).get("unschedulable"):
        return None
    taint = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    return None if any(tolerates(t, taint) for t in _tolerations(pod)) else UNSCHEDULABLE


def taint_toleration(pod: Mapping[str, Any], node: Mapping[str, Any], *, detailed: bool) -> str | None:
    taint = untolerated_taint((node.get("spec") or {}).get("taints") or [], _tolerations(pod))
    if taint is None:
        return None
    if detailed:
        return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
    return "node(s) had untolerated taint(s)"


def node_selector_matches(selector: Mapping[str, Any] | None, node: Mapping[str, Any]) -> bool:
    """A v1.NodeSelector (terms ORed, each term by bridge.kvalues.placement). No terms, or only empty terms, matches
    nothing."""
    if not selector:
        return False
    meta = node.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    name = str(meta.get("name") or "")
    return any(term_matches(term or {}, name, labels) for term in selector.get("nodeSelectorTerms") or [])


def node_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return AFFINITY
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is not None and not node_selector_matches(required, node):
        return AFFINITY
    return None


def insufficient(requests: Mapping[str, int], allocatable: Mapping[str, int], used: Mapping[str, int],
                 pods_on_node: int, *, left_to_dra: Collection[str] = ()) -> list[tuple[str, bool]]:
    """noderesources fitsRequest: every insufficient resource, in the plugin's order (pods, cpu, memory,
    ephemeral-storage, then the others), each with its `Unresolvable` (1.34+: the request exceeds the node's whole
    allocatable, so no preemption could make room; never for "Too many pods"). `left_to_dra`: extended resources the
    DynamicResources plugin serves on this node (DRA-backed, node allocatable 0): not checked here."""
    out: list[tuple[str, bool]] = []
    if pods_on_node + 1 > allocatable.get("pods", 0):
        out.append((TOO_MANY_PODS, False))
    standard = ("cpu", "memory", "ephemeral-storage")
    others = sorted(n for n in requests if n not in standard and n != "pods" and n not in left_to_dra)
    for name in (*standard, *others):
        want = requests.get(name, 0)
        if want > 0 and want > allocatable.get(name, 0) - used.get(name, 0):
            out.append((f"Insufficient {name}", want > allocatable.get(name, 0)))
    return out


# -- scoring ---------------------------------------------------------------------------------------------------------
# pkg/scheduler/util/pod_resources.go: requests of 0 count as 100m CPU / 200Mi memory for scoring only.
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024
MAX_NODE_SCORE = 100


def least_allocated_score(requests: Mapping[str, int], allocatable: Mapping[str, int],
                          used_nonzero: Mapping[str, int]) -> int:
    """noderesources LeastAllocated over cpu and memory (weight 1 each), with the non-zero defaults:
    ((allocatable - requested) * 100 / allocatable) averaged."""
    total = 0
    for name, default in (("cpu", DEFAULT_MILLI_CPU), ("memory", DEFAULT_MEMORY)):
        cap = allocatable.get(name, 0)
        want = (requests.get(name, 0) or default) + used_nonzero.get(name, 0)
        total += 0 if cap == 0 or want > cap else (cap - want) * MAX_NODE_SCORE // cap
    return total // 2


def preferred_affinity_score(pod: Mapping[str, Any], node: Mapping[str, Any]) -> int:
    preferred = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                 .get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    score = 0
    for term in preferred:
        pref = (term or {}).get("preference") or {}
        if node_selector_matches({"nodeSelectorTerms": [pref]}, node):
            score += int((term or {}).get("weight") or 0)
    return score


__all__ = [
    "AFFINITY", "TOO_MANY_PODS", "UNSCHEDULABLE", "fits", "least_allocated_score", "node_affinity",
    "node_selector_matches", "node_unschedulable", "preferred_affinity_score", "taint_toleration", "tolerates",
    "untolerated_taint",
]
