"""DefaultPreemption for one pod that fits no node (pure): whether it may preempt, the victims per node, the node.

Written from kubernetes/kubernetes v1.37.2 pkg/scheduler (the rules below are the same in v1.32.0, v1.33.0,
v1.34.0, v1.35.4 and v1.36.0 except where `Profile` says otherwise; all six read):
* framework/plugins/defaultpreemption/default_preemption.go `PodEligibleToPreemptOthers`: `preemptionPolicy: Never`
  -> "not eligible due to preemptionPolicy=Never."; a pod nominated to a node that its filters did not mark
  unresolvable, on which a lower-priority pod is terminating by preemption (deletionTimestamp and the condition
  DisruptionTarget=True, reason PreemptionByScheduler; preemption/util.go `PodTerminatingByPreemption`) -> "not
  eligible due to a terminating pod on the nominated node." (it waits for its victims instead of taking more). An
  ineligible pod keeps its nominated node.
* framework/preemption/preemption.go `findCandidates` / `DryRunPreemption`: only nodes whose filters failed with a
  resolvable status (Unschedulable, not UnschedulableAndUnresolvable) are tried; at most max(10% of them, 100)
  candidates are collected (`calculateNumCandidates`, the default DefaultPreemptionArgs), starting at a random
  offset.
* `SelectVictimsOnNode`: the potential victims are the node's pods (bound or assumed, terminating ones included)
  with a priority strictly lower than the preemptor's; none -> "No preemption victims found for incoming pod". All
  are removed and the filters run again (with the nominated pods, below); if the pod still does not fit, the
  filters' reasons are that node's answer. Otherwise the victims are sorted most important first
  (preemption/util.go `MoreImportantVictim` for single pods: higher priority, then the earlier `status.startTime`)
  and each is put back in that order ("reprieved") if the pod still fits with it; the others are the victims.
  There are no PodDisruptionBudgets, pod groups or inter-pod affinity in the sandbox, so the PDB-violating pass and
  the group rules have nothing to do here.
* `pickOneNodeForPreemption` (only PDB-free candidates here): the lowest highest-victim priority, then the smallest
  sum of victim priorities (each + 2^31), then the fewest victims, then the latest earliest start time among the
  highest-priority victims (a pod without `status.startTime` counts as started now); a remaining tie is broken at
  random (the real one iterates a Go map).
* `Evaluator.Preempt` and DefaultPreemption's `PostFilter`: with no candidate the answer is "preemption: " and a
  FitError text over all nodes ("0/N nodes are available: ..."; every node not tried counts as "Preemption is not
  helpful for scheduling") and the pod's nominated node is cleared; with one, the pod is nominated to the node and
  from 1.37 the answer is "preemption: found a potential placement for pod on node N, preempting K victims" (no
  period); through 1.36 a successful preemption gives no message at all (`Profile.preemption_placement_message`).
* The filters a simulation reruns: the node-only ones and NodeResourcesFit against what stays on the node, plus
  every nominated pod of at least the preemptor's priority (framework/runtime/framework.go `addGENominatedPods`).
  DynamicResources has no PreFilterExtensions (dynamicresources.go: `PreFilterExtensions` returns nil), so removing a
  victim does not free its claims' devices in the simulation: its verdict on the node is the same with or without
  the victims (`FitCheck` callers compute it once). A filter error in a simulation (`FilterError`) is kept; with no
  candidate on any node the answer is "preemption: <error>" alone and the nomination is left as it is.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

Obj = dict[str, Any]
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."
MIN_CANDIDATE_NODES_PERCENTAGE = 10  # DefaultPreemptionArgs defaults (apis/config/v1/defaults.go)
MIN_CANDIDATE_NODES_ABSOLUTE = 100


def priority(pod: Mapping[str, Any]) -> int:
    """corev1helpers.PodPriority: `spec.priority`, 0 when unset."""
    return int((pod.get("spec") or {}).get("priority") or 0)


def start_time(pod: Mapping[str, Any]) -> float:
    """util.GetPodStartTime as a number: `status.startTime`, else now (later than any recorded start)."""
    value = (pod.get("status") or {}).get("startTime")
    if not value:
        return math.inf
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return math.inf


def terminating_by_preemption(pod: Mapping[str, Any]) -> bool:
    """preemption/util.go PodTerminatingByPreemption."""
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget":
            return bool(cond.get("status") == "True" and cond.get("reason") == "PreemptionByScheduler")
    return False


@dataclass(frozen=True)
class PlacedPod:
    """A pod that counts on a node: bound, assumed or nominated there, with its parsed requests."""

    pod: Obj
    requests: Mapping[str, int] = field(default_factory=dict)

    @property
    def priority(self) -> int:
        return priority(self.pod)

    @property
    def uid(self) -> str:
        return str((self.pod.get("metadata") or {}).get("uid"))


def _importance(p: PlacedPod) -> tuple[int, float, str]:
    """Sort key, most important first: MoreImportantVictim for single pods (higher priority, then older, then the
    smaller UID). The UID tie-break is 1.38's (framework/preemption/util.go `podIdentityLess`, v1.38.0-beta.0);
    through 1.37 equal start times left the order to Go's unstable sort, so any order was right."""
    return (-p.priority, start_time(p.pod), str((p.pod.get("metadata") or {}).get("uid") or ""))


# Why the preemptor does not fit the node when the given pods stay on it ([] when it fits); raises FilterError.
FitCheck = Callable[[Sequence[PlacedPod]], list[str]]


class FilterError(Exception):
    """A filter failed with an error (not a refusal) during a simulation, e.g. a CEL runtime error."""


@dataclass
class NodeAnswer:
    victims: list[PlacedPod]  # most important first; empty when the node is no candidate
    reasons: list[str]  # why it is no candidate


def select_victims(preemptor: Mapping[str, Any], pods: Sequence[PlacedPod], fits: FitCheck) -> NodeAnswer:
    """SelectVictimsOnNode without PDBs: remove every lower-priority pod, check the fit, reprieve the most important
    first."""
    own = priority(preemptor)
    potential = [p for p in pods if p.priority < own]
    if not potential:
        return NodeAnswer([], [NO_VICTIMS])
    staying = [p for p in pods if p.priority >= own]
    reasons = fits(staying)
    if reasons:
        return NodeAnswer([], reasons)
    victims: list[PlacedPod] = []
    for p in sorted(potential, key=_importance):
        if fits([*staying, p]):
            victims.append(p)
        else:
            staying.append(p)
    return NodeAnswer(victims, [])


def pick_node(candidates: Mapping[str, Sequence[PlacedPod]], rng: random.Random) -> str:
    """pickOneNodeForPreemption (victims most important first on each node)."""

    def highest(node: str) -> int:
        return -candidates[node][0].priority

    def total(node: str) -> int:
        return -sum(p.priority + 2**31 for p in candidates[node])

    def fewest(node: str) -> int:
        return -len(candidates[node])

    def latest_start(node: str) -> float:
        top = candidates[node][0].priority
        return min(start_time(p.pod) for p in candidates[node] if p.priority == top)

    left = list(candidates)
    for score in (highest, total, fewest, latest_start):
        best = max(score(n) for n in left)
        left = [n for n in left if score(n) == best]
        if len(left) == 1:
            return left[0]
    return rng.choice(left)


def ineligible(preemptor: Mapping[str, Any], nominated_unresolvable: bool,
               nominated_node_pods: Iterable[PlacedPod]) -> str | None:
    """PodEligibleToPreemptOthers: the reason the pod may not preempt, or None."""
    if (preemptor.get("spec") or {}).get("preemptionPolicy") == "Never":
        return NEVER
    if (preemptor.get("status") or {}).get("nominatedNodeName") and not nominated_unresolvable:
        own = priority(preemptor)
        if any(p.priority < own and terminating_by_preemption(p.pod) for p in nominated_node_pods):
            return TERMINATING
    return None


@dataclass
class Outcome:
    """DefaultPreemption's PostFilter: its message ("" for none), the nominating info (a node to nominate, "" to clear,
    None to leave the pod's nomination as it is), the victims to evict, and whether it failed with an error (then
    RunPostFilterPlugins keeps its message alone)."""

    message: str
    nominate: str | None
    victims: list[Obj] = field(default_factory=list)
    error: bool = False


def _histogram(total: int, answers: Mapping[str, list[str]]) -> str:
    counts: dict[str, int] = {}
    for reasons in answers.values():
        for r in reasons:
            counts[r] = counts.get(r, 0) + 1
    if total > len(answers):
        counts[NOT_HELPFUL] = counts.get(NOT_HELPFUL, 0) + total - len(answers)
    hist = ", ".join(sorted(f"{n} {r}" for r, n in counts.items()))
    return f"0/{total} nodes are available: {hist}." if hist else f"0/{total} nodes are available."


def preempt(preemptor: Mapping[str, Any], nodes: Sequence[str], unresolvable: Mapping[str, bool],
            pods: Mapping[str, Sequence[PlacedPod]], fits: Callable[[str], FitCheck], *, placement_message: bool,
            rng: random.Random) -> Outcome:
    """Evaluator.Preempt for a pod that fits none of `nodes`; `unresolvable` says per node whether its filters failed
    unresolvably (a node absent from it counts as unresolvable, as a PreFilter rejection marks every node), `pods`
    what is on each node, `fits(node)` the node's FitCheck."""
    nominated = str((preemptor.get("status") or {}).get("nominatedNodeName") or "")
    why = ineligible(preemptor, unresolvable.get(nominated, True), pods.get(nominated, ()) if nominated else ())
    if why is not None:
        return Outcome(f"preemption: {why}", None)
    potential = [n for n in nodes if not unresolvable.get(n, True)]
    answers: dict[str, list[str]] = {}
    candidates: dict[str, list[PlacedPod]] = {}
    errors: list[str] = []
    if potential:
        n = len(potential)
        wanted = min(n, max(n * MIN_CANDIDATE_NODES_PERCENTAGE // 100, MIN_CANDIDATE_NODES_ABSOLUTE))
        offset = rng.randrange(n)
        for i in range(n):
            node = potential[(offset + i) % n]
            try:
                answer = select_victims(preemptor, pods.get(node, ()), fits(node))
            except FilterError as err:
                errors.append(str(err))
                continue
            if answer.victims:
                candidates[node] = answer.victims
                if len(candidates) >= wanted:
                    break
            else:
                answers[node] = answer.reasons
    if not candidates and errors:  # utilerrors.NewAggregate: one message, or "[a, b]" (duplicates dropped)
        unique = list(dict.fromkeys(errors))
        return Outcome(f"preemption: {unique[0] if len(unique) == 1 else '[' + ', '.join(unique) + ']'}", None,
                       error=True)
    if not candidates:
        return Outcome(f"preemption: {_histogram(len(nodes), answers)}", "")
    node = pick_node(candidates, rng) if len(candidates) > 1 else next(iter(candidates))
    victims = candidates[node]
    message = (f"preemption: found a potential placement for pod on node {node}, preempting {len(victims)} victims"
               if placement_message else "")
    return Outcome(message, node, [v.pod for v in victims])


__all__ = [
    "NEVER", "NOT_HELPFUL", "NO_VICTIMS", "TERMINATING", "FilterError", "FitCheck", "NodeAnswer", "Outcome",
    "PlacedPod", "ineligible", "pick_node", "preempt", "priority", "select_victims", "start_time",
    "terminating_by_preemption",
]
