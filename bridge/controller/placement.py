"""Which nodes a pending pod may land on (pure): node selector, required node affinity, taints and tolerations.

The controller must not move GPUs on a node the scheduler would never put the pod on, so it evaluates the same
hard filters the scheduler does, written from the scheduler's sources:

* `spec.nodeSelector`: every pair must equal a node label (kubernetes/kubernetes
  pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go, via component-helpers
  scheduling/corev1/nodeaffinity/nodeaffinity.go `GetRequiredNodeAffinity`).
* `requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`: the terms are ORed, the expressions of a
  term ANDed; a term without expressions and fields matches nothing. `In`/`Gt`/`Lt`/`Exists` need the label;
  `NotIn`/`DoesNotExist` hold when it is absent; `Gt`/`Lt` compare integers and a value that is not one matches
  nothing. `matchFields` knows only `metadata.name` (In/NotIn).
* taints with effect `NoSchedule` or `NoExecute` must be tolerated (pkg/scheduler/framework/plugins/tainttoleration;
  `PreferNoSchedule` only scores); toleration matching follows k8s.io/api core/v1 toleration.go `ToleratesTaint`:
  empty effect matches every effect, empty key with `Exists` every key, operator empty means `Equal`, and `Lt`/`Gt`
  compare integers.
* a cordoned node (`spec.unschedulable`) takes only pods tolerating `node.kubernetes.io/unschedulable:NoSchedule`
  (pkg/scheduler/framework/plugins/nodeunschedulable).

Not evaluated (the scheduler may still refuse a node the controller picked; the pod then stays pending and the next
decision looks again): inter-pod (anti-)affinity, topology spread, CPU/memory fit, volume limits, CEL selectors of
DRA claims (legacy-side devices publish no attributes to evaluate them against).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        op = self.operator
        if op == "In":
            return present and value in self.values
        if op == "NotIn":
            return not present or value not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt"):
            if not present or len(self.values) != 1:
                return False
            try:
                have, want = int(value), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False  # an operator the API server would have rejected


@dataclass(frozen=True)
class Term:
    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()  # metadata.name only

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        return all(r.matches(labels) for r in self.expressions) and all(
            r.matches({"metadata.name": name}) for r in self.fields)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        if self.operator == "Exists":
            return True
        if self.operator in ("Lt", "Gt"):
            try:
                want, have = int(self.value), int(taint.value)
            except ValueError:
                return False
            return have < want if self.operator == "Lt" else have > want
        return False


@dataclass(frozen=True)
class Constraints:
    """A pod's hard node filters. Equal constraints compare equal, so pods of one workload share one evaluation."""

    node_selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] = ()  # () = no required affinity
    tolerations: tuple[Toleration, ...] = ()

    def allows(self, name: str, labels: Mapping[str, str], taints: Iterable[Taint] = (),
               unschedulable: bool = False) -> bool:
        for k, v in self.node_selector:
            if labels.get(k) != v:
                return False
        if self.terms and not any(t.matches(name, labels) for t in self.terms):
            return False
        blocking = [t for t in taints if t.effect in ("NoSchedule", "NoExecute")]
        if unschedulable:
            blocking.append(Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule"))
        return all(any(tol.tolerates(t) for tol in self.tolerations) for t in blocking)


def _requirements(items: Any) -> tuple[Requirement, ...]:
    out = []
    for e in items or ():
        if isinstance(e, dict):
            out.append(Requirement(str(e.get("key", "")), str(e.get("operator", "")),
                                   tuple(str(v) for v in e.get("values") or ())))
    return tuple(out)


def constraints_of(spec: Mapping[str, Any]) -> Constraints:
    """The hard node filters of a pod spec (plain dict)."""
    selector = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = tuple(Term(_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
                  for t in required.get("nodeSelectorTerms") or () if isinstance(t, dict))
    if required and not terms:
        terms = (Term(),)  # an empty nodeSelectorTerms list matches no node
    tolerations = tuple(Toleration(str(t.get("key") or ""), str(t.get("operator") or ""), str(t.get("value") or ""),
                                   str(t.get("effect") or ""))
                        for t in spec.get("tolerations") or () if isinstance(t, dict))
    return Constraints(selector, terms, tolerations)


def taints_of(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    return tuple(Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect") or ""))
                 for t in (node.get("spec") or {}).get("taints") or () if isinstance(t, dict))


__all__ = ["Constraints", "Requirement", "Taint", "Term", "Toleration", "constraints_of", "taints_of"]
