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


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    func: Callable[["CheckContext"], Iterable[Finding]]


RULES: dict[str, Rule] = {}

# Rules withdrawn because what they said was wrong. Their IDs stay reserved: never registered again.
RETIRED: dict[str, str] = {
    "DRB024": "ephemeral containers 'get no DRA devices': they can never set resources at all (pod validation "
              "forbids it, kubernetes/kubernetes pkg/apis/core/validation validateEphemeralContainers), so there "
              "is nothing to report",
}


def rule(rule_id: str, title: str) -> Callable[[Callable[["CheckContext"], Iterable[Finding]]], Callable[["CheckContext"], Iterable[Finding]]]:
    def register(func: Callable[["CheckContext"], Iterable[Finding]]) -> Callable[["CheckContext"], Iterable[Finding]]:
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id} registered twice")
        if rule_id in RETIRED:
            raise ValueError(f"rule {rule_id} is retired ({RETIRED[rule_id]}); pick a new ID")
        RULES[rule_id] = Rule(rule_id, title, func)
        return func

    return register
