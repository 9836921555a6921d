"""Findings: what a check says about one object, and the rule registry.

A rule is a small pure function `(CheckContext) -> Iterable[Finding]`. Its ID (`DRB0nn`) is stable: tools and CI
gates match on it, so IDs are never reused for a different meaning. Severity:

* `blocker`: the object cannot move to DRA (or will break when it does) until the fix is applied;
* `warning`: it can move after configuration (a manifest to apply, a setting to change): "needs-config";
* `info`: a fact worth knowing; changes nothing in readiness.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridge.report.checks.context import CheckContext

SEVERITIES = ("blocker", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class ObjectRef:
    kind: str  # "Cluster" for cluster-wide facts
    namespace: str  # "" for cluster-scoped objects
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace + '/' if self.namespace else ''}{self.name}"


CLUSTER = ObjectRef("Cluster", "", "cluster")


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    object: ObjectRef
    message: str
    fix: str
    # Extra machine-readable facts (CEL expression, counts); values are str/int/bool/list of str.
    # (`builtins.object`: inside this class body `object` is the field above.)
    details: dict[str, builtins.object] = field(default_factory=dict, compare=False, hash=False)

    def sort_key(self) -> tuple[int, str, str, str, str]:
        o = self.object
        return (SEVERITY_RANK[self.severity], self.rule, o.namespace, o.kind, o.name)


# Cluster-wide blockers that block every namespace (no DRA API, an invalid or hijacked DeviceClass).
GLOBAL_RULES = frozenset({"DRB001", "DRB003", "DRB004"})


def namespace_of(f: Finding) -> str:
    """The namespace a finding is about (its object's, or the Namespace itself); "" for cluster-scoped objects."""
    o = f.object
    return o.namespace or (o.name if o.kind == "Namespace" else "")


def is_cluster_blocker(f: Finding) -> bool:
    return f.rule in GLOBAL_RULES and f.severity == "blocker"


def blocked_namespaces(findings: Iterable[Finding]) -> tuple[frozenset[str], bool]:
    """(namespaces with a blocker about them or their objects, whether a cluster-wide blocker blocks them all)."""
    out: set[str] = set()
    cluster = False
    for f in findings:
        if f.severity != "blocker":
            continue
        cluster = cluster or is_cluster_blocker(f)
        ns = namespace_of(f)
        if ns:
            out.add(ns)
    return frozenset(out), cluster


@dataclass(frozen=True)
class Rule:
    """A registered check and what the rule catalogue (docs/rules.md, bridge.report.catalogue) says about it: what
    it detects (the check's docstring, first paragraph), the severities its findings can have, and how it is fixed
    in general (each finding's own fix says it for its object)."""

    id: str
    title: str
    func: Callable[["CheckContext"], Iterable[Finding]]
    severities: tuple[str, ...]
    fix: str
    # Runs after every other rule, when which namespaces those block is known (`CheckContext.blocked`): the
    # capacity rule, whose wave order leaves blocked namespaces out as the wave plan does.
    late: bool = False

    @property
    def detects(self) -> str:
        doc = (self.func.__doc__ or "").strip()
        return " ".join(doc.split("\n\n")[0].split())


RULES: dict[str, Rule] = {}

# Rules withdrawn because what they said was wrong. Their IDs stay reserved: never registered again.
RETIRED: dict[str, str] = {
    "DRB024": "ephemeral containers 'get no DRA devices': they can never set resources at all (pod validation "
              "forbids it, kubernetes/kubernetes pkg/apis/core/validation validateEphemeralContainers), so there "
              "is nothing to report",
}


CheckFunc = Callable[["CheckContext"], Iterable[Finding]]


def rule(rule_id: str, title: str, *, severities: tuple[str, ...], fix: str,
         late: bool = False) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check under a stable ID, with the severities its findings can have and its fix in general."""
    def register(func: CheckFunc) -> CheckFunc:
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id} registered twice")
        if rule_id in RETIRED:
            raise ValueError(f"rule {rule_id} is retired ({RETIRED[rule_id]}); pick a new ID")
        if not severities or any(sev not in SEVERITIES for sev in severities):
            raise ValueError(f"rule {rule_id}: severities {severities!r} must be some of {SEVERITIES}")
        if not func.__doc__:
            raise ValueError(f"rule {rule_id}: the check needs a docstring saying what it detects (the catalogue)")
        RULES[rule_id] = Rule(rule_id, title, func, severities, fix, late)
        return func

    return register
