"""Which nodes a pod may land on (pure): node selector, required node affinity, taints and tolerations.

The one implementation of the scheduler's hard node filters in the project: `bridge controller` (it must not move
GPUs on a node the scheduler would never put the pod on), `bridge migrate-report` (capacity and split advice for
the nodes a pod can run on), the webhook (which GPU nodes a pod can reach) and the sandbox's scheduler stand-in all
evaluate them here. Written from the scheduler's sources (kubernetes/kubernetes):

* `spec.nodeSelector`: every pair must equal a node label (pkg/scheduler/framework/plugins/nodeaffinity/
  node_affinity.go, via staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go
  `GetRequiredNodeAffinity`).
* `requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`: the terms are ORed, the expressions of a
  term ANDed; a term without expressions and fields matches nothing (so does an empty list of terms).
  `In`/`Gt`/`Lt`/`Exists` need the label; `NotIn`/`DoesNotExist` hold when it is absent; `Gt`/`Lt` compare integers
  and a value that is not one matches nothing (`bridge.kvalues.nodeselector`). `matchFields` knows only
  `metadata.name` with `In`/`NotIn` (`nodeSelectorRequirementsAsFieldSelector`; validation allows nothing else).
* taints with effect `NoSchedule` or `NoExecute` must be tolerated (pkg/scheduler/framework/plugins/tainttoleration;
  `PreferNoSchedule` only scores); toleration matching follows staging/src/k8s.io/api/core/v1/toleration.go
  `ToleratesTaint`: an empty effect matches every effect, an empty key every key, operator empty means `Equal`
  (values compared), `Exists` matches every value, and `Lt`/`Gt` compare the values as integers (a value that is not
  one tolerates nothing).
* a cordoned node (`spec.unschedulable`) takes only pods tolerating `node.kubernetes.io/unschedulable:NoSchedule`
  (pkg/scheduler/framework/plugins/nodeunschedulable).

Not evaluated here (each caller says what it does about them): inter-pod (anti-)affinity, topology spread, CPU/memory
fit, volume limits, CEL selectors of DRA claims.

Two forms of one logic: plain-value functions (`toleration_tolerates`, `field_matches`, `term_matches`) for callers
holding API dicts on hot paths (the webhook, the scheduler stand-in), and frozen dataclasses (`Constraints`, built
by `constraints_of`) that compare equal for equal filters, so callers can evaluate each distinct shape once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.kvalues.nodeselector import requirement_matches

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
NAME_FIELD = "metadata.name"


def toleration_tolerates(key: str, operator: str, value: str, effect: str,
                         taint_key: str, taint_value: str, taint_effect: str) -> bool:
    """core/v1 `Toleration.ToleratesTaint` on plain strings ("" for an absent field)."""
    if effect and effect != taint_effect:
        return False
    if key and key != taint_key:
        return False
    if operator in ("", "Equal"):
        return value == taint_value
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt"):
        try:
            want, have = int(value), int(taint_value)
        except ValueError:
            return False
        return have < want if operator == "Lt" else have > want
    return False


def field_matches(key: str, operator: str, values: Iterable[str], name: str) -> bool:
    """One `matchFields` requirement against the node's name: only `metadata.name` with In/NotIn exists."""
    if key != NAME_FIELD:
        return False
    if operator == "In":
        return name in values
    if operator == "NotIn":
        return name not in values
    return False


def _strs(values: Any) -> list[str]:
    return [str(v) for v in values or ()]


def term_matches(term: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    """One v1.NodeSelectorTerm (an API dict) against a node: its expressions and fields ANDed; empty matches no node."""
    exprs = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    return (all(isinstance(e, Mapping) and requirement_matches(str(e.get("key", "")), str(e.get("operator", "")),
                                                               _strs(e.get("values")), labels) for e in exprs)
            and all(isinstance(f, Mapping) and field_matches(str(f.get("key", "")), str(f.get("operator", "")),
                                                             _strs(f.get("values")), name) for f in fields))


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return requirement_matches(self.key, self.operator, self.values, labels)


@dataclass(frozen=True)
class Term:
    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()  # metadata.name only

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        return all(r.matches(labels) for r in self.expressions) and all(
            field_matches(r.key, r.operator, r.values, name) for r in self.fields)


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
        return toleration_tolerates(self.key, self.operator, self.value, self.effect, taint.key, taint.value,
                                    taint.effect)


@dataclass(frozen=True)
class Constraints:
    """A pod's hard node filters. Equal constraints compare equal, so pods of one workload share one evaluation."""

    node_selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] = ()  # () = no required affinity
    tolerations: tuple[Toleration, ...] = ()
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Hashed once: the controller's decision looks pods' constraints up some 10^4 times per decision.
        object.__setattr__(self, "_hash", hash((self.node_selector, self.terms, self.tolerations)))

    @functools.cached_property
    def label_keys(self) -> tuple[str, ...]:
        """The node labels `allows` reads (the selector's keys and the affinity expressions'), sorted: two nodes alike
        in these labels, their taints and their cordon answer these constraints alike (the name only counts for a
        term's matchFields). Derived when first read (only the controller's index reads it, once per value)."""
        return tuple(sorted({k for k, _ in self.node_selector} | {r.key for t in self.terms for r in t.expressions}))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[Constraints], tuple[object, ...]]:
        return Constraints, (self.node_selector, self.terms, self.tolerations)  # hashed afresh where it is unpickled

    def allows(self, name: str, labels: Mapping[str, str], taints: Iterable[Taint] = (),
               unschedulable: bool = False) -> bool:
        return self.refusal(name, labels, taints, unschedulable) is None

    def refusal(self, name: str, labels: Mapping[str, str], taints: Iterable[Taint] = (),
                unschedulable: bool = False) -> str | None:
        """Why the scheduler filters this node out for the pod, in words; None when it does not."""
        for k, v in self.node_selector:
            if labels.get(k) != v:
                return f"nodeSelector {k}={v} does not match"
        if self.terms and not any(t.matches(name, labels) for t in self.terms):
            return "required node affinity does not match"
        blocking = [t for t in taints if t.effect in BLOCKING_EFFECTS]
        if unschedulable:
            blocking.append(Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule"))
        for t in blocking:
            if not any(tol.tolerates(t) for tol in self.tolerations):
                return f"taint {t.key}{'=' + t.value if t.value else ''}:{t.effect} not tolerated"
        return None

    def describe(self) -> str:
        """The node selector and required affinity in words (tolerations are not restrictions); "" when none."""
        parts = [f"nodeSelector {k}={v}" for k, v in self.node_selector]
        terms = [" and ".join(f"{r.key} {r.operator}" + (f" ({', '.join(r.values)})" if r.values else "")
                              for r in t.expressions + t.fields) or "nothing" for t in self.terms]
        if terms:
            parts.append("required node affinity " + " or ".join(terms))
        return "; ".join(parts)

    @property
    def unconstrained(self) -> bool:
        """No selector, no affinity: only taints can keep the pod off a node."""
        return not self.node_selector and not self.terms


NONE = Constraints()

# One shared instance per distinct value (`canonical`): a dict lookup of a key that IS the stored key skips the
# comparison, and the controller's decision looks pods' constraints up some 10^4 times (a dataclass comparison each
# time with one instance per pod). Bounded: past the bound the table starts again (instances stay equal, only less
# often the same object).
_CANONICAL: dict[Constraints, Constraints] = {NONE: NONE}
_CANONICAL_MAX = 4096


def canonical(c: Constraints) -> Constraints:
    """The one instance of `c`'s value (equal to `c`; the same object for equal values while the table holds it)."""
    got = _CANONICAL.get(c)
    if got is None:
        if len(_CANONICAL) >= _CANONICAL_MAX:
            _CANONICAL.clear()
        got = _CANONICAL[c] = c
    return got


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
    return canonical(Constraints(selector, terms, tolerations))


def on_node(c: Constraints, name: str) -> Constraints:
    """`c` narrowed to the one node `name` (a `metadata.name In (name)` field requirement added to each required
    term, or the only term; a term that matches nothing stays so): what a pod kube-scheduler nominated to that node
    may still land on."""
    here = Requirement(NAME_FIELD, "In", (name,))
    terms = tuple(Term(t.expressions, t.fields + (here,)) if t.expressions or t.fields else t for t in c.terms) \
        if c.terms else (Term((), (here,)),)
    return canonical(Constraints(c.node_selector, terms, c.tolerations))


def taints_of(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    return tuple(Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect") or ""))
                 for t in (node.get("spec") or {}).get("taints") or () if isinstance(t, dict))


__all__ = ["BLOCKING_EFFECTS", "NONE", "Constraints", "Requirement", "Taint", "Term", "Toleration", "canonical",
           "constraints_of", "field_matches", "on_node", "taints_of", "term_matches", "toleration_tolerates"]
