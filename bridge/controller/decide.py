"""The decision core (pure: values in, target changes out; no I/O, no clock): GPUs follow the workloads.

    decide(nodes, pending, policy, memory, now) -> Decision

Four steps, each over whole-GPU counts (bridge.controller.model):

1. **Fit.** Pending pods are taken in the scheduler's queue order (priority, then age, then size) and placed where
   the GPUs of their API are already free: preferably on a node where they fit inside one topology group (below),
   then best fit (the node left with the fewest free GPUs of that API, then the one with the fewest free GPUs of
   the other API, whose free GPUs a move could use, then the name). These pods need no move: the scheduler will
   bind them by itself, so their GPUs are reserved before anything moves.
2. **Floor.** A pool below its minimum legacy share gets free DRA GPUs back to the legacy side (only free ones,
   and only on nodes whose cool-down allows that direction).
3. **Move.** Each pod still unplaced goes to the node where it needs the **fewest moves**: the node with the most
   free GPUs of its API among those where the free GPUs of the other API make up the rest. Among those, a node
   where the pod's whole request ends up inside one topology group (its free GPUs there and the moved ones in one
   group) comes first, then one where the moved GPUs come from one group, the tightest first (a group that moves
   whole, leaving no half of it behind, is the tightest); then the node with the fewest free GPUs of the other API
   (best fit: large blocks stay whole for larger pods), then the name. Every candidate node is ranked (nodes alike
   in counts and groups once), so the pick is the least of them all. Only free GPUs move, so every target stays
   inside `NodeView.safe_range` (never a held device); the preference never costs a move.
4. **Limits.** A node an operator pinned, one still settling its previous target and one whose state is unknown
   are never changed; a node with moves under way changes further only in their direction; a reversal on a node
   (to DRA, then back to legacy) waits for the cool-down; a pool never goes
   below its minimum legacy share; the moves of the last 60 s never exceed `max_moves_per_minute`, and one
   decision's never exceed `max_moves_per_decision` (a pod that needs more moves than the budget left gets what is
   left now, the rest in the next decisions).

Hysteresis (no flapping): GPUs move only for a pending pod that fits nowhere as things are (never to "balance"),
moves already under way count as supply (the node's `dra` includes them), a node changed in one direction does not
change back before the cool-down, and one decision never moves GPUs both ways on one node.

Topology groups are the daemon's (`NodeView.groups`: NVLink island, else NUMA node). The core keeps each node's
free counts per group up to date as it plans (a pod takes its GPUs from the tightest group that holds them all,
moves take them from the group counted on), and ranks a node's groups exactly as the daemon's device choice does
with the count it is given (bridge/ledger/choice.py rule 4: one group when one holds every device that moves, the
one holding the receiving side's free devices first, then the tightest, then `group_order`), so the group a
change names (`TargetChange.groups`, and "from NVLink island 1" in its reason) is the one whose GPUs move. When no
one group holds them, the daemon picks by affinity and the core only keeps counts (smallest groups first). The
groups' counts are fitted to the node's free counts first (a binding the daemon has not reported yet is taken off
as a pod's GPUs would be, one pod at a time where the view names the bindings, `NodeView.unreported`; devices the
groups miss form a group of their own). A node that publishes no topology is one group: nothing to prefer there. The
preference only orders nodes that need the same number of moves, so it changes neither what is safe nor how many
GPUs a pod needs moved, and hysteresis is unchanged.

Every pod left pending gets a `Blocked` with the first reason that applies, checked from the most specific:
`no-matching-node` (no node passes its selector/affinity/taints), `frozen` (only a pinned/settling node could take
it), `cooldown`, `min-legacy-share`, `rate-limit`, else `no-capacity` (no node has enough free GPUs of either API).

Cost: pods are grouped by their node constraints; each group keeps its eligible nodes in buckets by free counts, so
a pod is placed by looking at a few buckets, not at every node (bench/controller_bench.py: 5,000 nodes x 8 GPUs and
10,000 pending pods). What planning a node starts from (free counts, fitted groups, taints and cordon) is derived
once per `NodeView` object and reused while the next decision gets the same object (the controller's cluster state,
bridge/controller/cluster.py, hands unchanged nodes' views over as they are); an index is built from one eligibility
check per group of nodes alike in what its constraints read (the labels they name, taints, cordon: every Node has a
label of its own, its hostname, so not all labels); its buckets are built by appending, nodes in name order; step 1
answers a pod of a kind that already fit nowhere without a lookup (free counts only fall in step 1); the move
buckets are built when step 3 first needs them, and a pod placed by moves updates them once; a plan from scratch
over the same nodes takes over the last plan's start (`_Start`): its nodes that no step changed (`_Planner.dirty`)
with their views unchanged, its totals, and its indexes as they started (`_Begun`), patched for the views that
changed (where few did; else derived anew); a pod larger than
every eligible node's free room is blocked without a search; a search, and a pod blocked, is remembered while no
plan changes (the pods a rate limit blocks ask the same question again and again). Between decisions the usual
events are a new pending pod, which comes last in the queue, and the scheduler binding the first pod the last
decision placed on free GPUs, which changes its node's view as that pod's step predicted: when nothing else changed,
a decision goes on from the last decision's plan, adds only the new pod's step (also a pod that fits on free GPUs
while others wait for moves, when its node changes none of their steps) and drops the bound pod's (`_Run`: a few ms
at that scale instead of a whole plan); a new pod that fits on free GPUs of a node step 3 changed or chose plans
step 3 again from where step 1 ended (`_Run._step_3_again`: step 1 is not planned again); anything else plans from
scratch (tests/controller/test_decide_resume.py checks that each of these gives the decision planned from scratch,
over generated event sequences). That includes the events a decision's own writes bring: a Node carrying a new
target its daemon has not acted on is planned with that target's split and frozen, then changeable again once the
daemon has acted (each changes what step 1 finds free there), and the rate-limit budget has shrunk (a budget of its
own is reason enough), so the decisions after one that wrote plan from scratch, taking the last plan's start over
(bench/controller_bench.py --writes, on a 2-core EPYC: 40-113 ms at that scale under the default policy, where one
decision moves at most 32 GPUs; 76-199 ms with the rate limit lifted, where one decision moves at most 500, the
default `max_moves_per_decision`).
None of this changes a decision: the same inputs give the same decision, memo or not. Python's cyclic garbage
collector is paused during a decision: its collections, triggered by the decision's own short-lived objects, walked
the caller's whole heap and took about half the time. A decision that made a new plan ends with that plan out of the
young generations, so that the plan, which lives until the next one, is not walked by the collections of the next
decisions: one collection of them, or, in the controller, which settles its heap from time to time, frozen at no
cost (`_collector_paused`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import operator
import threading
from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from bridge.controller.model import (
    APIS,
    Api,
    Blocked,
    BlockReason,
    Decision,
    Direction,
    Memory,
    NodeView,
    PendingPod,
    Placement,
    Policy,
    TargetChange,
    describe_group,
    direction_to,
    other,
)
from bridge.kvalues.placement import Constraints, Taint
from bridge.ledger.choice import group_order

_SIDE: dict[Api, int] = {"legacy": 0, "dra": 1}  # index into a group's [free legacy, free dra]
_NO_GROUP = (2, 0, -1)  # a move rank when no one group holds the GPUs to move
_NONE: tuple[float] = (float("inf"),)  # ranks after every node's: a fit or search that found none
_FOR_GOOD = -1  # a plan version no plan has: `_Planner.held` for a pod kind no node has room for
# A plan from scratch takes the last plan's start over (`_Start`) where at most this share of the views changed, and
# an index's start (`_Begun`) where at most this share of its nodes' views did; past them, deriving it all anew costs
# less (bench/controller_bench.py --writes, `scarce`: with 2,444 of 5,000 views changed, patching them took the
# planner's start from 15-25 to 26-42 ms and the index from 7 to 13-18 ms; the shares are a rough cut, not tuned).
_PATCH_START = 1 / 8
_PATCH_INDEX = 1 / 4


class _Seen:
    """What step 3 saw of the nodes for one kind of pod (constraints, API, GPUs), over every such pod it took: the
    worst node its fits and its searches chose (`_Node.fit_key`, `_Planner._search`'s rank; `_NONE` when one found
    none), whether a pod of that kind asked `has_room`, and `most`, the most free GPUs of an eligible node when its
    diagnosis was written (None: never written). `_Run._fits_alongside` reads it to tell whether a node changed
    before step 3 would have changed any of those answers."""

    __slots__ = ("fit", "search", "roomed", "most")

    def __init__(self) -> None:
        self.fit: tuple[float, ...] = ()  # () ranks before every node
        self.search: tuple[float, ...] = ()
        self.roomed = False
        self.most: int | None = None

    def fitted(self, key: tuple[float, ...]) -> None:
        if key > self.fit:
            self.fit = key

    def searched(self, rank: tuple[float, ...]) -> None:
        if rank > self.search:
            self.search = rank


_Found = tuple["_Node", int, int, tuple[int, ...]]  # node, GPUs to move, group moved from, rank (`_search`)
_Kept = tuple[dict[Api, int], list[list[int]]]  # a node's free counts and groups (`_Node.measure` derives the rest)


def _api_name(api: Api) -> str:
    return "DRA" if api == "dra" else "legacy"


def _fit_groups(view: NodeView, free: dict[Api, int]) -> tuple[list[str], list[list[int]]]:
    """The node's topology groups (names, [free legacy, free dra] each), fitted to its free counts: a surplus (a
    binding the daemon has not reported yet) comes off the groups as one pod taking that many would take them
    (`_Node.take_groups`: the tightest group that holds them all, ties in the daemon's order, else the smallest groups
    first), a shortfall forms a group of its own. Where the view's unreported bindings of that API make up the
    surplus exactly, each comes off in turn, oldest first, as its pod took them. The common surplus IS one pod's
    binding, or a few: fitted as the plan's steps for them took, so the plan can go on from those steps
    (`_Run._went_as_planned`) instead of planning afresh."""
    if not view.groups:
        return [""], [[free["legacy"], free["dra"]]]
    names = [g.name for g in view.groups]
    counts = [[g.legacy, g.dra] for g in view.groups]
    order: Mapping[Api, tuple[int, ...]] | None = None
    for api in APIS:
        s = _SIDE[api]
        surplus = sum(c[s] for c in counts) - free[api]
        if not surplus:
            continue
        if surplus > 0:
            order = order or _orders(tuple(names))
            takes = [n for a, n in view.unreported if a == api]
            for k in takes if sum(takes) == surplus else (surplus,):
                fits = [i for i in order[api] if counts[i][s] >= k]
                if fits:
                    counts[min(fits, key=lambda i: counts[i][s])][s] -= k
                else:
                    _drain(counts, s, k)
        else:
            names.append("")
            counts.append([0, 0])
            counts[-1][s] = -surplus
    return names, counts


@functools.lru_cache(maxsize=4096)
def _orders(names: tuple[str, ...]) -> Mapping[Api, tuple[int, ...]]:
    """Group indexes in the daemon's order (`group_order`) per receiving API (pure; nodes alike share one)."""
    return {api: tuple(sorted(range(len(names)), key=lambda i: (group_order(names[i], joining_dra=api == "dra"), i)))
            for api in APIS}


def _drain(counts: list[list[int]], s: int, k: int, into: int | None = None) -> None:
    """Take `k` from side `s` of the groups, smallest groups first (they empty whole); `into`: add them to that side
    of the same groups (a move)."""
    for i in sorted((i for i, c in enumerate(counts) if c[s]), key=lambda i: (counts[i][s], i)):
        if k <= 0:
            break
        t = min(k, counts[i][s])
        counts[i][s] -= t
        if into is not None:
            counts[i][into] += t
        k -= t


class _Node:
    """One node as the plan goes (a plain slotted class: a decision makes one per node)."""

    __slots__ = ("view", "free", "dra", "direction", "served", "reasons", "group_names", "groups", "order",
                 "largest", "moved_from", "pos", "name", "pool", "changeable", "sig", "cordon")

    def __init__(self, view: NodeView, seed: _Seed, pos: int) -> None:
        self.view = view
        self.name = view.name
        self.pool = view.pool
        self.changeable = view.frozen == ""
        self.free: dict[Api, int] = {"legacy": seed.free[0], "dra": seed.free[1]}
        self.dra = view.dra
        self.direction: Direction | None = view.moving
        # Tuples, not lists, where most nodes keep them empty: a plan makes one node per node, and each list or dict
        # is one more object for the collector to walk after the plan (`_collector_paused`).
        self.served: tuple[PendingPod, ...] = ()  # pods this node serves through moves (at most one per GPU)
        self.reasons: tuple[str, ...] = ()  # floor restorations
        self.group_names = seed.group_names  # (read only)
        groups = seed.groups
        # free [legacy, dra] per group, kept equal to `free` (most nodes are one group: no comprehension for them)
        self.groups = [list(groups[0])] if len(groups) == 1 else [list(c) for c in groups]
        self.order = seed.order  # group indexes in the daemon's order
        self.largest = seed.largest  # free GPUs in the largest group, (legacy, dra) (index keys)
        self.moved_from: tuple[str, ...] = ()  # the groups the planned moves take GPUs from, in order
        self.pos = pos  # place in name order (an index lists its nodes in that order)
        self.sig = seed.sig
        self.cordon = seed.cordon

    def measure(self) -> None:
        """Refresh `largest` and `sig` after the groups changed (the index reads them as bucket keys). `sig`: what
        `move_rank` reads besides the free counts, so nodes with equal free counts and signatures rank alike for
        every pod (an index's move buckets are split by it); one group: nothing (it holds every free GPU)."""
        groups = self.groups
        if len(groups) == 1:
            g = groups[0]
            self.largest = (g[0], g[1])
            self.sig = ()
        else:
            legacy = dra = 0
            for c in groups:
                if c[0] > legacy:
                    legacy = c[0]
                if c[1] > dra:
                    dra = c[1]
            self.largest = (legacy, dra)
            self.sig = (self.group_names, tuple(map(tuple, groups)))

    def clone(self) -> _Node:
        """A copy whose counts and groups can change apart from this node's (the rest is shared, read only)."""
        c = _Node.__new__(_Node)
        for slot in _Node.__slots__:
            setattr(c, slot, getattr(self, slot))
        c.free = dict(self.free)
        c.groups = [list(g) for g in self.groups]
        return c

    def fit_key(self, api: Api, gpus: int) -> tuple[int, ...]:
        """How `_best_fit` ranks this node for `gpus` GPUs of `api` (lower first): inside one group first, then the
        fewest free GPUs of `api`, then of the other API, then the smallest largest group, then name order."""
        s = _SIDE[api]
        return (0 if self.largest[s] >= gpus else 1, self.free[api], self.free[other(api)], self.largest[s], self.pos)

    def largest_group(self, api: Api) -> int:
        return self.largest[_SIDE[api]]

    def move_rank(self, to: Api, need: int) -> tuple[int, int, int]:
        """How well `need` moves to `to` keep a pod (taking every free GPU of `to` here plus the moved ones) in one
        group: (tier, slack, group). Tier 0: one group holds all of them; 1: the moved GPUs come from one group;
        2: they do not (`_NO_GROUP`). Slack: free GPUs of that group left on the giving side (0: it moves whole)."""
        a = _SIDE[to]
        b = 1 - a
        if len(self.groups) == 1:  # the common case (one island, or no topology): it holds every free GPU
            slack = self.groups[0][b] - need
            return (0, slack, 0) if slack >= 0 else _NO_GROUP
        have = self.free[to]
        best = _NO_GROUP
        for i in self.order[to]:  # ties go to the group the daemon's choice takes (bridge.ledger.choice)
            c = self.groups[i]
            if c[b] >= need:
                rank = (0 if c[a] == have else 1, c[b] - need, i)
                if rank[:2] < best[:2]:
                    best = rank
        return best

    def take_groups(self, api: Api, gpus: int) -> None:
        """A pod takes `gpus` free GPUs of `api`: from the tightest group that holds them all, else the smallest."""
        s = _SIDE[api]
        groups = self.groups
        if len(groups) == 1:
            groups[0][s] -= gpus
            return
        tightest: list[int] | None = None  # the first of the tightest, in the daemon's order
        for i in self.order[api]:
            c = groups[i]
            if gpus <= c[s] and (tightest is None or c[s] < tightest[s]):
                tightest = c
        if tightest is not None:
            tightest[s] -= gpus
        else:
            _drain(groups, s, gpus)

    def move_groups(self, to: Api, count: int, group: int) -> None:
        """`count` free GPUs move to `to`: from `group` when it has them, else from the smallest groups first."""
        a = _SIDE[to]
        b = 1 - a
        if 0 <= group < len(self.groups) and self.groups[group][b] >= count:
            self.groups[group][b] -= count
            self.groups[group][a] += count
            if self.group_names[group]:
                name = self.group_names[group]
                if name not in self.moved_from:
                    self.moved_from += (name,)
        else:  # not from one group: the daemon picks by affinity (not modelled); counts only
            _drain(self.groups, b, count, into=a)


@dataclass(frozen=True)
class _Seed:
    """What planning a node starts from, a function of its view alone: its free counts, its topology groups fitted
    to them (`_fit_groups`) in the daemon's order, and its taints and cordon as a number (`_cordon_of`: nodes alike
    in those and in the labels a pod's constraints read answer those constraints alike)."""

    free: tuple[int, int]  # legacy, dra
    group_names: tuple[str, ...]
    groups: tuple[tuple[int, int], ...]
    order: Mapping[Api, tuple[int, ...]]
    largest: tuple[int, int]
    cordon: int
    sig: tuple[object, ...]  # `_Node.sig` as the node starts

    @staticmethod
    def of(view: NodeView) -> _Seed:
        free: dict[Api, int] = {a: view.free(a) for a in APIS}
        names, counts = _fit_groups(view, free)
        groups = tuple((c[0], c[1]) for c in counts)
        sig: tuple[object, ...] = ()
        if len(counts) == 1:
            largest = groups[0]
        else:
            largest = (max(c[0] for c in counts), max(c[1] for c in counts))
            sig = (tuple(names), groups)
        return _Seed((free["legacy"], free["dra"]), tuple(names), groups, _orders(tuple(names)), largest,
                     _cordon_of(view.taints, view.unschedulable), sig)


_CORDONS: dict[tuple[tuple[Taint, ...], bool], int] = {}  # (taints, unschedulable) -> its number (`_cordon_of`)
_CORDONS_MAX = 4096
_cordon_numbers = itertools.count()


def _cordon_of(taints: tuple[Taint, ...], unschedulable: bool) -> int:
    """A number per distinct (taints, unschedulable): equal for equal ones while the table holds them, never equal
    for different ones (past the bound the table starts again with new numbers). A plan groups nodes by it, and a
    number hashes at no cost where a tuple of taints hashes field by field."""
    key = (taints, unschedulable)
    got = _CORDONS.get(key)
    if got is None:
        if len(_CORDONS) >= _CORDONS_MAX:
            _CORDONS.clear()
        got = _CORDONS[key] = next(_cordon_numbers)
    return got


class _Seeds:
    """Seeds memoised per view object, for the views of the last decision (the controller's cluster state hands a
    node's same `NodeView` to every decision until the node changes, so a decision derives only changed nodes)."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[NodeView, _Seed]] = {}

    def of(self, views: Iterable[NodeView]) -> list[tuple[NodeView, _Seed]]:
        last, now = self._last, {}
        out = []
        for v in views:
            hit = last.get(id(v))
            pair = hit if hit is not None and hit[0] is v else (v, _Seed.of(v))
            now[id(v)] = pair
            out.append(pair)
        self._last = now  # one assignment: a concurrent decision reads the old memo or the new one, both right
        return out


_SEEDS = _Seeds()


# `_Index.fit[api]`: free GPUs of `api` -> free in the largest group -> free of the other API -> places
Fit = dict[int, dict[int, dict[int, list[int]]]]
# `_Index.move[d][pool]`: free GPUs of the receiving API -> of the giving one -> signature -> places
Grid = dict[int, dict[int, dict[object, list[int]]]]


def _file(fit: Mapping[Api, Fit], pos: int, legacy: int, dra: int, largest: Sequence[int],
          put: Callable[[list[int], int], None] = insort) -> None:
    """List the node at `pos` in the fit buckets of its counts (`legacy`, `dra` free; `put`: `_append` where the nodes
    come in name order, as an index starts)."""
    put(fit["legacy"][legacy][largest[0]].setdefault(dra, []), pos)
    put(fit["dra"][dra][largest[1]].setdefault(legacy, []), pos)


_append: Callable[[list[int], int], None] = list.append  # `insort` where the places come in order


def _unfile(fit: Mapping[Api, Fit], pos: int, legacy: int, dra: int, largest: Sequence[int]) -> None:
    """Take the node at `pos` out of the fit buckets of its counts (emptied buckets are dropped)."""
    _unlist(fit["legacy"], legacy, largest[0], dra, pos)
    _unlist(fit["dra"], dra, largest[1], legacy, pos)


def _unlist(by_free: Fit, mine: int, size: int, theirs: int, pos: int) -> None:
    """`_unfile` on one API's buckets: `mine` free GPUs of it, `size` in the largest group, `theirs` of the other."""
    by_largest = by_free.get(mine)
    if not by_largest:
        return
    by_other = by_largest.get(size)
    if not by_other:
        return
    bucket = by_other.get(theirs)
    if bucket is None:
        return
    i = bisect_left(bucket, pos)
    if i < len(bucket) and bucket[i] == pos:
        del bucket[i]
    if not bucket:
        del by_other[theirs]
        if not by_other:
            del by_largest[size]


def _new_fit() -> dict[Api, Fit]:
    return {a: defaultdict(lambda: defaultdict(dict)) for a in APIS}


def _copy_fit(fit: Mapping[Api, Fit]) -> dict[Api, Fit]:
    """A copy of fit buckets that later changes to either leave the other as it was."""
    out = _new_fit()
    for api, by_free in fit.items():
        for c, by_largest in by_free.items():
            if by_largest:
                out[api][c] = defaultdict(dict, {size: {o: list(places) for o, places in by_other.items()}
                                                 for size, by_other in by_largest.items()})
    return out


def _best_fit(fit: Mapping[Api, Fit], api: Api, gpus: int, top: int) -> int | None:
    """A node where `gpus` free GPUs of `api` fit inside one topology group, else any node where they fit; among
    those, the node left with the fewest free GPUs of `api`, then with the fewest of the other API (so the free GPUs
    a later move could use stay together), then the first by name: the least `_Node.fit_key`. Its place."""
    by_free = fit[api]
    fallback: int | None = None
    for c in range(gpus, top + 1):
        by_largest = by_free.get(c)
        if not by_largest:
            continue
        if len(by_largest) == 1:  # the common case: every node alike
            size, by_other = next(iter(by_largest.items()))
            if size >= gpus:
                return by_other[min(by_other)][0]
            if fallback is None:
                fallback = by_other[min(by_other)][0]
            continue
        whole = sorted(size for size in by_largest if size >= gpus)
        if whole:
            return _fewest_other(by_largest, whole)
        if fallback is None:
            fallback = _fewest_other(by_largest, sorted(by_largest))
    return fallback


# The last plan's views, the places where a plan's views differ from them, and those of these places whose view
# differs in what a node's eligibility reads (labels, taints, cordon: `_Planner._start_from`).
_Since = tuple[Sequence[NodeView], list[int], list[int]]


def _differ(views: Sequence[NodeView], last: Sequence[NodeView]) -> list[int]:
    """The places where `views` holds another object than `last` (as long: the same nodes in the same places)."""
    return list(itertools.compress(range(len(views)), map(operator.is_not, views, last)))


class _Begun:
    """An index as a plan starts it: the places of its eligible nodes (name order) and the room and fit buckets of
    their seeds' counts (`_Index.fit`, `_Index.room`), for the views `views` (a `_Start`'s). A plan keeps those of the
    indexes it built (`_Start.begun`), and the next plan from scratch starts its index from a copy, once brought up
    to its own views: its nodes whose view changed are filed again, and only the nodes whose labels, taints or
    cordon changed are checked again (`catch_up`). Building one anew
    checks the constraints once per group of nodes alike (`_Planner.alike`) and files every eligible node: in the
    controller bench's `constrained*` (40 indexes), 12 ms of a plan against 2 for the copies."""

    __slots__ = ("views", "seeds", "places", "placed", "room", "fit")

    def __init__(self, start: _Start, places: list[int]) -> None:
        self.views, self.seeds = start.views, start.seeds
        self.places = places  # (sorted)
        self.placed = set(places)
        self.room: dict[int, int] = defaultdict(int)
        self.fit: dict[Api, Fit] = _new_fit()
        for pos in places:  # (in name order: appending keeps every bucket sorted)
            seed = start.seeds[pos]
            self.room[seed.free[0] + seed.free[1]] += 1
            _file(self.fit, pos, seed.free[0], seed.free[1], seed.largest, _append)

    def catch_up(self, start: _Start, constraints: Constraints, since: _Since) -> bool:
        """Bring it to `start`'s views (the same nodes in the same places): each of its nodes whose view changed
        leaves the buckets of its old seed for those of its new one, and each node whose view changed in what
        `constraints` read is checked again (it leaves, joins or stays). `since`: the last plan's views, the places
        where `start`'s differ from them, and those of them that changed in labels, taints or cordon (found once per
        plan). False, and nothing done, where so many changed that filing every node anew costs less."""
        if self.views is start.views:
            return True
        if self.views is since[0]:
            changed, reshaped = since[1], since[2]
        else:
            changed = reshaped = _differ(start.views, self.views)
        moved = self.placed.intersection(changed)
        if len(moved) + len(reshaped) > _PATCH_INDEX * len(self.places):
            return False
        for pos in moved.difference(reshaped):  # (still eligible: what `constraints` read is the same)
            was, seed = self.seeds[pos], start.seeds[pos]
            self.room[was.free[0] + was.free[1]] -= 1
            _unfile(self.fit, pos, was.free[0], was.free[1], was.largest)
            self.room[seed.free[0] + seed.free[1]] += 1
            _file(self.fit, pos, seed.free[0], seed.free[1], seed.largest)
        for pos in reshaped:
            v, was, seed = start.views[pos], self.seeds[pos], start.seeds[pos]
            if pos in self.placed:
                self.room[was.free[0] + was.free[1]] -= 1
                _unfile(self.fit, pos, was.free[0], was.free[1], was.largest)
                self.placed.discard(pos)
                del self.places[bisect_left(self.places, pos)]
            if constraints.allows(v.name, v.labels, v.taints, v.unschedulable):
                self.room[seed.free[0] + seed.free[1]] += 1
                _file(self.fit, pos, seed.free[0], seed.free[1], seed.largest)
                self.placed.add(pos)
                insort(self.places, pos)
        self.views, self.seeds = start.views, start.seeds
        return True


class _Start:
    """What a plan starts from, a function of its nodes' views alone (known nodes in name order, their seeds, the
    free GPUs, the pools' totals and legacy counts, the largest node, the nodes that may change in each direction
    before cool-downs) and the indexes it built as they started (`_Begun`). The next plan from scratch over the same
    nodes takes it over (`_Planner.__init__`): it makes again only the nodes the last plan changed or whose view
    changed, and patches the rest for the views that changed, instead of deriving it all from every view."""

    __slots__ = ("names", "views", "seeds", "free", "pool_total", "pool_legacy", "top", "ok", "begun")

    def __init__(self, names: list[str], views: list[NodeView], seeds: list[_Seed], free: tuple[int, int]) -> None:
        self.names, self.views, self.seeds = names, views, seeds
        self.free = free  # legacy, dra
        self.pool_total: dict[str, int] = defaultdict(int)
        self.pool_legacy: dict[str, int] = defaultdict(int)  # total - dra (frozen nodes count toward the share)
        self.top = 0
        # Changeable and not moving the other way (cool-downs aside): the nodes that may change in each direction.
        self.ok: dict[Direction, set[str]] = {"to-dra": set(), "to-legacy": set()}
        self.begun: dict[Constraints, _Begun] = {}

    def count(self, v: NodeView, sign: int = 1) -> None:
        """Add (or, `sign` -1, take away) `v`'s share of the totals; `ok` is set apart (`allow`)."""
        self.pool_total[v.pool] += sign * v.total
        self.pool_legacy[v.pool] += sign * (v.total - v.dra)

    def allow(self, v: NodeView) -> None:
        if v.frozen == "":
            for d in ("to-dra", "to-legacy"):
                if v.moving in (None, d):
                    self.ok[d].add(v.name)


class _Index:
    """The eligible nodes of one constraint group, bucketed by free counts.

    `fit[api][c][l][o]`: nodes (any but unknown) with exactly `c` free GPUs of `api`, `l` of them in their largest
    topology group, and `o` free GPUs of the other API (step 1); emptied buckets are dropped, so a lookup visits only
    counts some node has.
    `move[direction][pool][c_to][c_from][sig]`: changeable nodes that may change in `direction`, with `c_to` free
    GPUs of the receiving API, `c_from` of the giving one, and the signature `sig` (`_Node.sig`: their groups;
    nodes of one signature rank alike for a move, so step 3 ranks each signature once, not each node). Built when
    step 3 first searches the index (step 1 never reads them), from the nodes' counts then; emptied buckets are
    dropped.
    `room[t]`: how many nodes have `t` free GPUs on both sides together (a pod larger than every node's room cannot
    be placed by moves, checked without a search).

    A bucket lists its nodes' places in name order (`_Node.pos`, a sorted list), whatever order they joined it in,
    so ties between nodes alike go to the first by name, and an index is a function of its nodes' present counts
    alone: built now, or built earlier and kept up to date as the plan went, it is the same index (`_Run.resume`
    relies on that when it goes on from a plan whose history differs from the one planning from scratch has)."""

    def __init__(self, constraints: Constraints, begun: _Begun, by_pos: Sequence[_Node],
                 move_ok: Mapping[Direction, set[str]]) -> None:
        """Every eligible node as its seed starts it (`begun`, copied: the index then changes apart from it), nodes
        in name order (`_Node.pos`, places in `by_pos`)."""
        self.constraints = constraints
        self.room: dict[int, int] = defaultdict(int, begun.room)
        self.fit: dict[Api, Fit] = _copy_fit(begun.fit)
        self.nodes: list[_Node] = [by_pos[pos] for pos in begun.places]
        self.move: dict[Direction, dict[str, Grid]] = {"to-dra": {}, "to-legacy": {}}  # (a pool's grid: `_pool_grid`)
        self.move_ok = move_ok
        self._grids: dict[Direction, list[tuple[str, Grid]]] = {}
        self.moving = False  # move buckets built (step 3 searched this index): kept up to date from then on
        self.size = len(self.nodes)

    def grids(self, d: Direction) -> list[tuple[str, Grid]]:
        """The move buckets of direction `d`, pool by pool in name order (listed again once a node joins a pool that
        had no grid: `_add_moving`)."""
        out = self._grids.get(d)
        if out is None:
            if not self.moving:  # built from the nodes' present counts, as keeping them up to date would have
                self.moving = True
                for n in self.nodes:  # (in name order: appending keeps every bucket sorted)
                    self._add_moving(n, _append)
            out = self._grids[d] = sorted(self.move[d].items())
        return out

    def has_room(self, gpus: int) -> bool:
        """Whether some node has `gpus` free GPUs on both sides together."""
        return any(t >= gpus for t, count in self.room.items() if count)

    def most(self) -> int:
        """The most free GPUs on both sides together that a node has (0 where none has any, or no node)."""
        return max((t for t, count in self.room.items() if count), default=0)

    def roomy(self, gpus: int) -> int:
        """How many nodes have `gpus` free GPUs on both sides together."""
        return sum(count for t, count in self.room.items() if t >= gpus)

    def _add(self, n: _Node) -> None:
        self.room[n.free["legacy"] + n.free["dra"]] += 1
        _file(self.fit, n.pos, n.free["legacy"], n.free["dra"], n.largest)
        if self.moving:
            self._add_moving(n)

    def _add_moving(self, n: _Node, put: Callable[[list[int], int], None] = insort) -> None:
        name, pos, legacy, dra = n.name, n.pos, n.free["legacy"], n.free["dra"]
        if n.changeable:
            if name in self.move_ok["to-legacy"]:
                grid = self._pool_grid("to-legacy", n.pool)
                put(grid.setdefault(legacy, {}).setdefault(dra, {}).setdefault(n.sig, []), pos)
            if name in self.move_ok["to-dra"]:
                grid = self._pool_grid("to-dra", n.pool)
                put(grid.setdefault(dra, {}).setdefault(legacy, {}).setdefault(n.sig, []), pos)

    def _pool_grid(self, d: Direction, pool: str) -> Grid:
        grid = self.move[d].get(pool)
        if grid is None:  # a pool none of whose nodes could move this way when `grids` listed them (step 3 planned
            grid = self.move[d][pool] = {}  # again gives nodes their directions back): list them again
            self._grids.pop(d, None)
        return grid

    def _remove(self, n: _Node) -> None:
        name, pos, legacy, dra = n.name, n.pos, n.free["legacy"], n.free["dra"]
        self.room[legacy + dra] -= 1
        _unfile(self.fit, pos, legacy, dra, n.largest)
        if self.moving and n.changeable:
            sides_moving: tuple[tuple[Direction, int, int], ...] = (
                ("to-legacy", legacy, dra), ("to-dra", dra, legacy))
            for d, have, give in sides_moving:
                if name in self.move_ok[d]:
                    grid = self.move[d].get(n.pool)
                    row = grid.get(have) if grid else None
                    by_sig = row.get(give) if row else None
                    bucket = by_sig.get(n.sig) if by_sig else None
                    if grid is None or row is None or by_sig is None or bucket is None:
                        continue
                    i = bisect_left(bucket, pos)
                    if i < len(bucket) and bucket[i] == pos:
                        del bucket[i]
                    if not bucket:
                        del by_sig[n.sig]
                        if not by_sig:
                            del row[give]
                            if not row:
                                del grid[have]

    def best_fit(self, api: Api, gpus: int, top: int) -> int | None:
        """`_best_fit` on this index's present counts."""
        return _best_fit(self.fit, api, gpus, top)


def _taken(x: _Node, pod: PendingPod) -> _Node:
    """A copy of `x` with `pod`'s GPUs taken, as `_Planner.take` would leave it."""
    after = x.clone()
    after.free[pod.api] -= pod.gpus
    after.take_groups(pod.api, pod.gpus)
    after.measure()
    return after


def _name(v: NodeView) -> str:
    return v.name


def _cooling(nodes: Mapping[str, _Node], memory: Memory, policy: Policy, now: float) -> dict[Direction, set[str]]:
    """The changeable nodes that may not change in each direction now: a reversal inside the cool-down (only nodes
    the memory names can be cooling, so this costs O(memory), not O(nodes))."""
    out: dict[Direction, set[str]] = {"to-dra": set(), "to-legacy": set()}
    for name in memory.last_change:
        n = nodes.get(name)
        if n is None or not n.changeable:
            continue
        for d in out:
            if memory.in_cooldown(name, d, policy, now) > 0:
                out[d].add(name)
    return out


def _limit(policy: Policy, memory: Memory, now: float) -> tuple[int, str]:
    """The GPUs a decision may move (`Memory.budget`), and the words a pod blocked by that limit gets: the limit per
    decision where it is the lower one, else the rate limit. Under a dry run no decision goes further than the first
    (nothing is written or remembered, every decision plans the same moves), and the words say so."""
    budget = memory.budget(policy, now)
    if budget < memory.window_left(policy, now):
        if memory.dry_run:
            return budget, (f"the limit of {budget} moves per decision is reached (a dry run writes nothing: "
                            f"every decision plans the same first {budget})")
        return budget, f"the limit of {budget} moves per decision is reached (the next decision goes on)"
    return budget, f"the limit of {policy.max_moves_per_minute} moves per minute is reached"


def _fewest_other(by_largest: Mapping[int, Mapping[int, Sequence[int]]], sizes: Sequence[int]) -> int:
    """The first node with the fewest free GPUs of the other API among the buckets of `sizes` (in that order)."""
    o, size = min((min(by_largest[size]), size) for size in sizes)
    return by_largest[size][o][0]


class _Planner:
    def __init__(self, nodes: Sequence[NodeView], policy: Policy, memory: Memory, now: float,
                 before: _Planner | None = None) -> None:
        self.policy = policy
        self.memory = memory
        self.now = now
        self.budget, self.limit = _limit(policy, memory, now)
        # Per set of label keys a pod's constraints read (`Constraints.label_keys`), the nodes grouped by what such
        # constraints see of them (those labels, taints, cordon), each group in name order: an index is built from
        # one check per group (`alike`). Every node has labels of its own (its hostname), so grouping by all of them
        # would check every node.
        self.groupings: dict[tuple[str, ...], dict[object, list[_Node]]] = {}
        known = sorted((v for v in nodes if v.frozen != "unknown"), key=_name)
        names = [v.name for v in known]
        # The places of the nodes a step of this plan changed (the next plan makes them again; the others it takes
        # over as they are, `_start_from`).
        self.dirty: set[int] = set()
        self.inherited: dict[Constraints, _Begun] = {}  # the indexes the last plan built, as they started
        self.since: _Since = ((), [], [])  # the last plan's views, where these differ
        last = before.start if before is not None else None
        changed = _differ(known, last.views) if last is not None and names == last.names else None
        if before is not None and last is not None and changed is not None \
                and len(changed) <= _PATCH_START * len(known):
            self._start_from(known, before, last, changed)
        else:  # (patching many nodes costs more than deriving them all)
            self._start_anew(names, known, before)
        start = self.start
        # Pools: totals and planned legacy counts over every known node (frozen ones count toward the share).
        self.pool_total: dict[str, int] = defaultdict(int, start.pool_total)
        self.pool_legacy: dict[str, int] = defaultdict(int, start.pool_legacy)
        self.top = start.top  # the most GPUs of a node
        self.floors: dict[str, int] = {}
        # Nodes that may change in each direction now (changeable, not moving the other way, and no reversal inside
        # the cool-down).
        self.cooling = _cooling(self.nodes, memory, policy, now)
        self.move_ok: dict[Direction, set[str]] = {d: start.ok[d] - self.cooling[d] for d in start.ok}
        self.indexes: dict[Constraints, _Index] = {}
        self.members: dict[str, list[_Index]] = defaultdict(list)
        self.diagnosis: dict[tuple[Constraints, Api, int], tuple[BlockReason, str]] = {}
        # The nodes whose planned DRA count moved, with their changes as last written out (`changes`), and those
        # whose plan changed since: a decision that goes on from this plan (`_Run.resume`) writes only those again.
        self.written: dict[str, TargetChange | None] = {}
        self.stale: set[str] = set()
        self.written_order: list[str] = []
        # Per node written, what its change was made from (`_Planner.made_from`) and the change: a node whose plan
        # ends as it was keeps its change, and a plan from scratch takes the last plan's (`before`, until its first
        # `changes`) where a node's plan is the same, since formatting every reason took a sixth of such a plan.
        self.made: dict[str, tuple[tuple[object, ...], TargetChange]] = {}
        self.before: Mapping[str, tuple[tuple[object, ...], TargetChange]] = before.made if before else {}
        # Whether a diagnosis read the clock (a cool-down's seconds left): the plan then holds only at that `now`.
        self.read_clock = False
        # Bumped on every change of a node's plan: a search on an unchanged plan has the same answer.
        self.version = 0
        self.candidates: dict[tuple[int, Api, int], tuple[int, _Found | None]] = {}
        # Per kind of pod (constraints, API, GPUs), the plan's version when step 3 last blocked one and why: a pod of
        # that kind is blocked alike while no plan changed (its fit, search, budget and diagnosis read nothing else),
        # and for good (`_FOR_GOOD`) when no eligible node had room for it: a node's free GPUs on both sides together
        # only fall as a plan goes on (a move keeps them, a pod takes some), so none will.
        self.held: dict[tuple[Constraints, Api, int], tuple[int, BlockReason, str]] = {}
        # What step 3 saw, per kind of pod (`_Seen`), and the nodes it changed or chose (None: step 1 has not ended).
        self.seen: dict[tuple[Constraints, Api, int], _Seen] = {}
        self.touched: set[str] | None = None
        # Per node a step of step 3 changed, what step 1 left it with (`_keep`): step 3 can be planned again from
        # where step 1 ended (`_Run._step_3_again`) by putting those nodes back.
        self.kept: dict[str, _Kept] = {}
        # Step 1's memo of pods that fit nowhere (`fit`), per kind (constraints, API): the fewest GPUs that did not.
        self.unfit: dict[tuple[Constraints, Api], int] = {}

    def _start_anew(self, names: list[str], known: list[NodeView], before: _Planner | None) -> None:
        """Derive the start from every view. The last plan's nodes that no step changed, at the same places with the
        same views, are what `_Node(view, seed, pos)` makes anew: taken over."""
        seeds = [seed for _, seed in _SEEDS.of(known)]
        self.start = start = _Start(names, known, seeds, (sum(seed.free[0] for seed in seeds),
                                                          sum(seed.free[1] for seed in seeds)))
        last, dirty = (before.nodes, before.dirty) if before is not None else ({}, set())
        self.by_pos: list[_Node] = []
        self.nodes: dict[str, _Node] = {}
        for pos, (v, seed) in enumerate(zip(known, start.seeds)):
            n = last.get(v.name)
            if n is None or n.view is not v or n.pos != pos or pos in dirty:
                n = _Node(v, seed, pos)
            self.by_pos.append(n)
            self.nodes[v.name] = n
            start.count(v)
            start.allow(v)
            if v.total > start.top:
                start.top = v.total

    def _start_from(self, known: list[NodeView], before: _Planner, last: _Start, changed: list[int]) -> None:
        """Start as the last plan started (`last`, over the same nodes in the same places), brought up to these views:
        the nodes the last plan changed or whose view changed are made again, the others taken over as they are
        (what `_Node(view, seed, pos)` makes of the same view at the same place), and the totals and `ok` patched
        for the changed views. The indexes the last plan built start from theirs (`index`)."""
        seeds, (legacy, dra) = last.seeds, last.free
        reshaped: list[int] = []  # (what eligibility reads: the name is the same, the same nodes in the same places)
        if changed:
            seeds = list(seeds)
            for pos in changed:
                old = seeds[pos]
                seed = seeds[pos] = _Seed.of(known[pos])
                legacy += seed.free[0] - old.free[0]
                dra += seed.free[1] - old.free[1]
                labels, had = known[pos].labels, last.views[pos].labels
                if seed.cordon != old.cordon or (labels is not had and labels != had):
                    reshaped.append(pos)
        self.since = (last.views, changed, reshaped)
        self.start = start = _Start(last.names, known, seeds, (legacy, dra))
        start.pool_total, start.pool_legacy = defaultdict(int, last.pool_total), defaultdict(int, last.pool_legacy)
        start.ok = {d: set(names) for d, names in last.ok.items()}
        start.top = last.top
        self.inherited = last.begun  # (caught up to these views as each index is built; the rest is dropped)
        for pos in changed:
            was, v = last.views[pos], known[pos]
            start.count(was, -1)
            start.count(v)
            for d in start.ok:
                start.ok[d].discard(v.name)
            start.allow(v)
        if changed:
            start.top = max(v.total for v in known)
        self.by_pos = list(before.by_pos)
        self.nodes = dict(before.nodes)
        for pos in before.dirty.union(changed):
            n = self.by_pos[pos] = _Node(known[pos], seeds[pos], pos)
            self.nodes[n.name] = n

    # ---- bookkeeping -------------------------------------------------------------------------------------------

    def allow_moves(self, n: _Node) -> None:
        """Let `n` change in each direction it may as the plan starts (`_Start.allow`: changeable, never against
        moves under way), but not a reversal inside the cool-down (only a step of the plan takes a direction away:
        `_set`)."""
        for d, ok in self.start.ok.items():
            if n.name in ok and n.name not in self.cooling[d]:
                self.move_ok[d].add(n.name)

    def floor(self, pool: str) -> int:
        f = self.floors.get(pool)
        if f is None:
            f = self.floors[pool] = self.policy.min_legacy(pool, self.pool_total[pool])
        return f

    def index(self, c: Constraints) -> _Index:
        idx = self.indexes.get(c)
        if idx is None:
            start = self.start
            begun = self.inherited.pop(c, None)
            if begun is None or not begun.catch_up(start, c, self.since):
                begun = _Begun(start, self._eligible(c))
            start.begun[c] = begun
            idx = _Index(c, begun, self.by_pos, self.move_ok)
            # The nodes a step of this plan changed already (step 1's fits before this index was needed) leave the
            # buckets of their seeds for those of their present counts.
            for pos in self.dirty.intersection(begun.placed):
                n, seed = self.by_pos[pos], start.seeds[pos]
                idx.room[seed.free[0] + seed.free[1]] -= 1
                _unfile(idx.fit, pos, seed.free[0], seed.free[1], seed.largest)
                idx.room[n.free["legacy"] + n.free["dra"]] += 1
                _file(idx.fit, pos, n.free["legacy"], n.free["dra"], n.largest)
            self.indexes[c] = idx
            for n in idx.nodes:
                self.members[n.name].append(idx)
        return idx

    def _eligible(self, c: Constraints) -> list[int]:
        """The places of the nodes that pass `c`, in name order."""
        if any(t.fields for t in c.terms):  # a term names nodes: each node answers for itself
            return [n.pos for n in self.by_pos
                    if c.allows(n.view.name, n.view.labels, n.view.taints, n.view.unschedulable)]
        eligible: list[int] = []
        for alike in self.alike(c.label_keys).values():
            v = alike[0].view
            if c.allows(v.name, v.labels, v.taints, v.unschedulable):
                eligible += [n.pos for n in alike]
        eligible.sort()
        return eligible

    def alike(self, keys: tuple[str, ...]) -> dict[object, list[_Node]]:
        """The nodes grouped by their labels of `keys`, their taints and their cordon, each group in name order (built
        once per plan and set of keys; what the groups are read for never changes as a plan goes)."""
        grouping = self.groupings.get(keys)
        if grouping is None:
            grouping = self.groupings[keys] = {}
            if keys:
                for n in self.by_pos:
                    labels = n.view.labels
                    grouping.setdefault((n.cordon, *[labels.get(k) for k in keys]), []).append(n)
            else:
                for n in self.by_pos:
                    grouping.setdefault(n.cordon, []).append(n)
        return grouping

    def _keep(self, n: _Node) -> None:
        """Keep what `n` has before step 3 first changes it (only after step 1 ended: `touched` is set)."""
        if n.name not in self.kept:
            self.kept[n.name] = (dict(n.free), [list(c) for c in n.groups])

    def _set(self, n: _Node, free: dict[Api, int], dra: int | None = None,
             direction: Direction | None = None, groups: Callable[[], None] | None = None) -> None:
        self.version += 1
        self.dirty.add(n.pos)
        if self.touched is not None:
            self.touched.add(n.name)
            self._keep(n)
        idxs = self.members.get(n.view.name, ())
        for idx in idxs:
            idx._remove(n)
        n.free = free
        if groups is not None:
            groups()
            n.measure()
        if dra is not None:
            self.pool_legacy[n.view.pool] += n.dra - dra
            n.dra = dra
            self.stale.add(n.view.name)
        if direction is not None and n.direction is None:
            n.direction = direction
            # One decision never moves GPUs both ways on a node.
            self.move_ok["to-legacy" if direction == "to-dra" else "to-dra"].discard(n.view.name)
        for idx in idxs:
            idx._add(n)

    def move(self, n: _Node, to: Api, count: int, group: int = -1, take: int = 0) -> None:
        """`count` free GPUs of `n` move to `to`; `take`: then a pod takes that many free GPUs of `to` there (one
        update of the indexes for both)."""
        frm = other(to)
        free = dict(n.free)
        free[frm] -= count
        free[to] += count - take

        def groups() -> None:
            n.move_groups(to, count, group)
            if take:
                n.take_groups(to, take)

        self._set(n, free, n.dra + (count if to == "dra" else -count), direction_to(to), groups)
        self.budget -= count

    def take(self, n: _Node, api: Api, gpus: int, in_step_1: bool = False) -> None:
        self.version += 1
        self.dirty.add(n.pos)
        if self.touched is not None and not in_step_1:
            self.touched.add(n.name)
            self._keep(n)
        idxs = self.members.get(n.name, ())
        for idx in idxs:
            idx._remove(n)
        n.free[api] -= gpus
        n.take_groups(api, gpus)
        n.measure()
        for idx in idxs:
            idx._add(n)

    # ---- step 1: fit -------------------------------------------------------------------------------------------

    def fit(self, pod: PendingPod) -> Placement | None:
        """Step 1 for `pod`: its best fit on free GPUs of its API (`_best_fit`), taken; None where none fits.

        A pod no node fits is remembered per kind (`unfit`: constraints and API, the fewest GPUs that did not fit):
        in step 1 free counts only fall (pods take GPUs, nothing moves), so a later pod of that kind asking as many
        GPUs or more fits nowhere either and is answered without a lookup. In the bench's `moves`, 8,000 of 10,000
        pods fit nowhere in step 1. Step 1's end drops the memo (`_Run._end_step_1`): from there moves add free
        GPUs."""
        kind = (pod.constraints, pod.api)
        least = self.unfit.get(kind)
        if least is not None and pod.gpus >= least:
            return None
        idx = self.indexes.get(pod.constraints) or self.index(pod.constraints)
        pos = _best_fit(idx.fit, pod.api, pod.gpus, self.top)
        if pos is None:
            self.unfit[kind] = pod.gpus  # (fewer than `least`, or the first of its kind)
            return None
        n = self.by_pos[pos]
        self.take(n, pod.api, pod.gpus)
        return Placement(pod.key, n.name, 0)

    # ---- step 2: floor -----------------------------------------------------------------------------------------

    def restore_floors(self) -> None:
        for pool in sorted(self.pool_total):
            short = self.floor(pool) - self.pool_legacy[pool]
            if short <= 0:
                continue
            candidates = sorted((n for n in self.nodes.values()
                                 if n.view.pool == pool and n.view.name in self.move_ok["to-legacy"]
                                 and n.free["dra"] > 0), key=lambda n: (-n.free["dra"], n.view.name))
            for n in candidates:
                if short <= 0 or self.budget <= 0:
                    break
                k = min(short, n.free["dra"], self.budget)
                legacy_before = self.pool_legacy[pool]
                self.move(n, "legacy", k)
                short -= k
                n.reasons += (
                    f"pool {pool or '(default)'} has {legacy_before} of {self.pool_total[pool]} GPUs on legacy, "
                    f"below its minimum legacy share {self.policy.share(pool):g} ({self.floor(pool)} GPUs); "
                    f"{n.view.name} had {n.free['dra'] + k} free DRA GPUs",)

    # ---- step 3: move ------------------------------------------------------------------------------------------

    def _pool_allows(self, pool: str, d: Direction, count: int) -> bool:
        if d == "to-legacy":
            return True
        return self.pool_legacy[pool] - count >= self.floor(pool)

    def _candidate(self, idx: _Index, pod: PendingPod) -> _Found | None:
        """The node needing the fewest moves for `pod`, that number (ignoring the rate limit), the topology group the
        moves are counted from (-1: none holds them all) and its rank (`_search`). Remembered while no plan changes
        (the pods a rate limit blocks ask again and again)."""
        key = (id(idx), pod.api, pod.gpus)
        cached = self.candidates.get(key)
        if cached is not None and cached[0] == self.version:
            return cached[1]
        found = self._search(idx, pod)
        self.candidates[key] = (self.version, found)
        return found

    def _search(self, idx: _Index, pod: PendingPod) -> _Found | None:
        """The least rank (-have, tier, slack, give, place) over the nodes that may move GPUs to the pod's API, have
        `have` free GPUs of it (fewer than the pod asks) and `give` free GPUs of the other API that make up the rest:
        the most free GPUs of its API, then `_Node.move_rank` (one group first, the tightest), then the fewest GPUs of
        the other API (best fit), then the first by name. Every candidate counts (a bucket's signatures each rank
        once): the answer is the least of a set, so a node that changed elsewhere changes it only by ranking lower
        (`_Run._fits_alongside` relies on that)."""
        d = direction_to(pod.api)
        g = pod.gpus
        top = self.top
        grids = idx.grids(d)
        for have in range(min(g - 1, top), -1, -1):
            need = g - have
            best: tuple[int, int, int, int, int] | None = None  # tier, slack, give, place, group
            for pool, grid in grids:
                row = grid.get(have)
                if not row or not self._pool_allows(pool, d, need):
                    continue
                for give in range(need, top + 1):
                    by_sig = row.get(give)
                    if not by_sig:
                        continue
                    pick: tuple[int, int, int, int, int] | None = None
                    for places in by_sig.values():
                        tier, slack, group = self.by_pos[places[0]].move_rank(pod.api, need)
                        key = (tier, slack, give, places[0], group)
                        if pick is None or key < pick:
                            pick = key
                    assert pick is not None
                    if best is None or pick < best:
                        best = pick
                    if pick[:2] == (0, 0):
                        break  # a larger `give` in this pool is a worse fit, and no group fits better
            if best is not None:
                return self.by_pos[best[3]], need, best[4], (-have, *best[:4])
        return None

    def place_by_moves(self, pod: PendingPod) -> tuple[Placement | None, Blocked | None]:
        kind = (pod.constraints, pod.api, pod.gpus)
        held = self.held.get(kind)
        if held is not None and held[0] in (self.version, _FOR_GOOD):  # blocked as the last pod of its kind was
            return None, Blocked(pod.key, pod.api, pod.gpus, held[1], held[2])
        idx = self.index(pod.constraints)
        seen = self.seen.get(kind)
        if seen is None:
            seen = self.seen[kind] = _Seen()
        pos = idx.best_fit(pod.api, pod.gpus, self.top)  # the floor step may have freed GPUs where it now fits
        if pos is not None:
            n = self.by_pos[pos]
            seen.fitted(n.fit_key(pod.api, pod.gpus))
            self.take(n, pod.api, pod.gpus)
            return Placement(pod.key, n.name, 0), None
        seen.fitted(_NONE)
        seen.roomed = True
        found = None
        room = idx.has_room(pod.gpus)
        if room:
            found = self._candidate(idx, pod)
            seen.searched(_NONE if found is None else found[3])
        if found is None:
            reason, message = self._diagnose(idx, pod, seen)
            self.held[kind] = (self.version if room else _FOR_GOOD, reason, message)
            return None, Blocked(pod.key, pod.api, pod.gpus, reason, message)
        n, need, group, _ = found
        if self.touched is not None:  # chosen, even where the budget lets nothing move
            self.touched.add(n.name)
        if need > self.budget:
            message = f"needs {need} GPUs moved on {n.view.name}; {self.limit}"
            if self.budget > 0:  # spend what is left on the best node; the rest follows
                self.move(n, pod.api, self.budget, group)
                n.served += (pod,)
            else:
                self.held[kind] = (self.version, "rate-limit", message)
            return None, Blocked(pod.key, pod.api, pod.gpus, "rate-limit", message)
        self.move(n, pod.api, need, group, take=pod.gpus)
        n.served += (pod,)
        return Placement(pod.key, n.view.name, need), None

    def _diagnose(self, idx: _Index, pod: PendingPod, seen: _Seen) -> tuple[BlockReason, str]:
        key = (pod.constraints, pod.api, pod.gpus)
        cached = self.diagnosis.get(key)
        if cached is not None:
            return cached
        seen.most = idx.most()
        out = self._diagnose_uncached(idx, pod)
        self.diagnosis[key] = out
        return out

    def _diagnose_uncached(self, idx: _Index, pod: PendingPod) -> tuple[BlockReason, str]:
        want = f"{pod.gpus} {_api_name(pod.api)} GPU{'s' if pod.gpus != 1 else ''}"
        if idx.size == 0:
            return "no-matching-node", (f"needs {want}; no GPU node with a known split passes its node selector, "
                                        f"affinity and taints")
        d = direction_to(pod.api)
        if not idx.has_room(pod.gpus):
            return "no-capacity", (f"needs {want}; no eligible node has that many free GPUs on either side "
                                   f"(the most is {idx.most()})")
        roomy = [n for n in idx.nodes if n.free["legacy"] + n.free["dra"] >= pod.gpus]
        if all(not n.changeable for n in roomy):
            kinds = sorted({n.view.frozen for n in roomy})
            first = roomy[0]
            return "frozen", (f"needs {want}; only {'/'.join(kinds)} nodes have room (e.g. {first.view.name}: "
                              f"{first.view.frozen_reason or first.view.frozen})")
        changeable = [n for n in roomy if n.changeable]
        if all(n.view.name in self.cooling[d] or (n.direction is not None and n.direction != d)
               for n in changeable):
            n = changeable[0]
            left = self.memory.in_cooldown(n.view.name, d, self.policy, self.now)
            if left > 0:
                self.read_clock = True
                return "cooldown", (f"needs {want}; the nodes with room changed the other way recently "
                                    f"(e.g. {n.view.name}, {left:.0f}s of cool-down left)")
            return "cooldown", (f"needs {want}; the nodes with room are moving GPUs the other way "
                                f"(e.g. {n.view.name}); they change direction once those moves land")
        pools = sorted({n.view.pool for n in changeable})
        return "min-legacy-share", (f"needs {want}; the pools with room are at their minimum legacy share "
                                    f"({', '.join(p or '(default)' for p in pools)})")

    # ---- result ------------------------------------------------------------------------------------------------

    def changes(self) -> tuple[TargetChange, ...]:
        """The target changes, in name order. A node's change is written again only when its plan changed since the
        last call (its reason names every pod it serves: rewriting them all took a tenth of a decision)."""
        written, made, before = self.written, self.made, self.before
        grew = False
        for name in self.stale:
            n = self.nodes[name]
            grew = grew or name not in written
            if n.dra == n.view.dra:
                written[name] = None
                made.pop(name, None)
                continue
            key = self.made_from(n)
            last = made.get(name) or before.get(name)
            if last is not None and last[0] == key:
                change = last[1]
            else:
                assert n.view.is_safe(n.dra), f"unsafe target {n.dra} for {n.view}"
                change = TargetChange(n.view.name, n.view.dra, n.dra, n.view.target, self._reason(n),
                                      tuple(p.key for p in n.served), n.moved_from)
            written[name] = change
            made[name] = (key, change)
        self.stale.clear()
        self.before = {}  # (the last plan's changes are not read again: let them go with it)
        if grew:
            self.written_order = sorted(written, key=lambda name: self.nodes[name].pos)
        return tuple(c for c in map(written.__getitem__, self.written_order) if c is not None)

    @staticmethod
    def made_from(n: _Node) -> tuple[object, ...]:
        """Everything a node's `TargetChange` is made of: equal for two nodes, their changes are equal."""
        return (n.view, n.dra, n.served, n.moved_from, n.reasons)

    def _reason(self, n: _Node) -> str:
        parts = list(n.reasons)
        v = n.view
        for api in APIS:
            pods = [p for p in n.served if p.api == api]
            if not pods:
                continue
            by_ns: dict[str, int] = defaultdict(int)
            for p in pods:
                by_ns[p.namespace or p.key.partition("/")[0]] += 1
            where = (f"in {next(iter(by_ns))}" if len(by_ns) == 1
                     else "(" + ", ".join(f"{ns}: {c}" for ns, c in sorted(by_ns.items())) + ")")
            gpus = sum(p.gpus for p in pods)
            moved = abs(n.dra - v.dra)
            parts.append(
                f"{len(pods)} pending {_api_name(api)} pod{'s' if len(pods) != 1 else ''} {where} "
                f"need{'s' if len(pods) == 1 else ''} {gpus} GPU{'s' if gpus != 1 else ''}; {v.name} had "
                f"{v.free(other(api))} free {_api_name(other(api))} GPU{'s' if v.free(other(api)) != 1 else ''}"
                + (f" and {v.free(api)} free {_api_name(api)}" if v.free(api) else "")
                + f": moving {moved} to {_api_name(api)}"
                + (f" from {' and '.join(describe_group(g) for g in n.moved_from)}" if n.moved_from else ""))
        return "; ".join(parts) if parts else f"{v.name}: target {v.dra} -> {n.dra}"


def queue_order(pods: Iterable[PendingPod]) -> list[PendingPod]:
    """The scheduler's queue order: higher priority first, then older, then larger, then by name."""
    return sorted(pods, key=lambda p: (-p.priority, p.since, -p.gpus, p.key))


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False
_gc_new_plan: str | None = None  # how the outermost pause ends when a pause made a new plan: "collect", "freeze"


class _Pause:
    """What a pause of the collector was used for (`_collector_paused`)."""

    __slots__ = ("planned", "freeze")

    def __init__(self, freeze: bool) -> None:
        self.planned = False  # a new plan was made: its objects leave the young generations as the pause ends
        self.freeze = freeze  # ... frozen (`gc.freeze`), not collected


@contextlib.contextmanager
def _collector_paused(freeze: bool = False) -> Iterator[_Pause]:
    """Python's cyclic garbage collector off for the duration (nested and concurrent pauses count, the last one out
    restores it). A decision allocates some 10^5 short-lived objects without cycles (refcounting frees them); with
    the collector on they trigger collections that walk the caller's whole heap (the controller's informers hold
    every Node and Pod) again and again: about half a decision's time at 5,000 nodes (bench/controller_bench.py).

    A pause that made a new plan (`_Pause.planned`: planned from scratch or step 3 again) ends with its objects out
    of the young generations (0 and 1). Left there, they would be walked by the first young collections after the
    pause, which land in the next decisions (at 5,000 nodes, 60-140 ms in a decision after one pod changed that takes
    25 ms without them, bench/controller_bench.py `moves*`), and then by the full collections of the oldest
    generation, which they join. By default the pause ends with one collection of the young generations, which the
    decision that made the plan pays (about 10 ms at that scale). `freeze` (the controller's `freeze_heap`, on by
    default): it ends with `gc.freeze()` instead, at no cost. A plan has no reference cycles
    (tests/controller/test_decide.py), so reference counting frees it when the next plan replaces it, frozen or
    not, and no collection ever walks it. What else is young then is frozen with it: the controller freezes its whole
    heap at every state check anyway (`Controller.settle_heap`), and a cycle frozen so waits for the next one, which
    unfreezes everything and collects it first. Where pauses overlap, one that asked for the collection gets it."""
    global _gc_pauses, _gc_was_enabled, _gc_new_plan
    pause = _Pause(freeze)
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield pause
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if pause.planned:
                _gc_new_plan = "freeze" if pause.freeze and _gc_new_plan != "collect" else "collect"
            if _gc_pauses == 0:
                if _gc_new_plan is not None and _gc_was_enabled:
                    if _gc_new_plan == "freeze":
                        gc.freeze()
                    else:
                        gc.collect(1)
                _gc_new_plan = None
                if _gc_was_enabled:
                    gc.enable()


def decide(nodes: Sequence[NodeView], pending: Sequence[PendingPod], policy: Policy,
           memory: Memory | None = None, now: float = 0.0, *, reuse: bool = True) -> Decision:
    """One decision (see the module docstring). Deterministic for equal inputs. Python's cyclic garbage collector is
    paused while it runs (`_collector_paused`).

    `reuse`: go on from the last decision's plan when this one only adds pods at the end of its queue, or drops the
    first pods it placed on free GPUs once bound there as planned (`_Run`); the decision is the same either way.
    False: plan from scratch (the reference the property tests compare with)."""
    return decide_how(nodes, pending, policy, memory, now, reuse=reuse)[0]


def decide_how(nodes: Sequence[NodeView], pending: Sequence[PendingPod], policy: Policy,
               memory: Memory | None = None, now: float = 0.0, *, reuse: bool = True,
               freeze: bool = False) -> tuple[Decision, str]:
    """`decide`, and how its plan was reached, one of `model.PLANS` (the decision is the same whichever: the controller
    counts and times them apart, `dra_bridge_controller_plan_seconds`). `freeze`: a new plan's objects end up frozen
    (`gc.freeze`) instead of collected once (`_collector_paused`): only for a caller that settles its heap from time
    to time, as the controller does (`Controller.settle_heap`)."""
    with _collector_paused(freeze) as pause:
        decision, how, pause.planned = _decide(nodes, pending, policy, memory or Memory(), now, reuse)
        return decision, how


class _Run:
    """One decision's plan, kept so that the next decision can go on from it when that is exactly what planning
    from scratch would do (`resume`).

    A decision is a sequence of steps over the pods in queue order: every pod's fit (step 1), the floors (step 2),
    then every pod that did not fit, by moves (step 3). Between decisions the usual event is a new pending pod, and
    a new pod comes last in the queue (it is the youngest). When nothing else changed (the same `NodeView` objects,
    policy, rate-limit budget and cool-downs), planning from scratch repeats every step of the last decision and
    then takes the new pod's. When step 3 had no pod yet, its fit is the last of step 1. Otherwise its fit is tried
    where step 1 ended (`fit1`: the fit buckets as step 1 left them): where it fails, it only adds its step 3 at the
    end; where it fits on a node, it goes on when that node, with the pod's GPUs taken, changes no step of step 3
    (`_fits_alongside`); where that cannot be told, step 3 is planned again from where step 1 ended, the pod's fit
    added to step 1 (`_step_3_again`). The plan kept is the last decision's plan after its last step, so the new
    decision costs the new pod's step (or step 3), not every pod's.

    The other usual event is the scheduler binding pods step 1 placed on free GPUs, in queue order: the first ones
    leave the queue and their nodes' views lose the free GPUs their steps took. Planning from scratch then starts
    from the plan as it was right after those steps (`_went_as_planned` says when, and why), so the plan kept is
    the new decision's too, less those pods' placements; the new decision costs a check of the views that changed.
    A view replaced by one that starts planning alike (`_Seed`; an equal one, or the daemon reporting the groups of
    a binding as the core had fitted them) changes no step either.

    Anything else (another pod gone, or one inserted before the end, a node's view replaced otherwise, the clock
    moving a budget or cool-down, a new pod of constraints no pod had) plans from scratch. The plan kept costs
    memory between decisions: some 11 MB at 5,000 nodes and 10,000 pods (0.8 MB of it the fit buckets as step 1
    left them; `_Planner.kept`, what step 1 left each node step 3 changed, adds up to 2.7 MB in the bench's `moves`,
    where step 3 changes 3,753 nodes; the indexes as they started, `_Start.begun`, 0.8-1.3 MB)."""

    def __init__(self, nodes: Sequence[NodeView], order: list[PendingPod], policy: Policy, memory: Memory,
                 now: float, last: _Run | None = None) -> None:
        """Plan from scratch; `last`: the last decision's plan, whose target changes this one takes where a node's
        plan ends the same (`_Planner.made`)."""
        self.views = tuple(nodes)
        self.policy, self.memory, self.now = policy, memory, now
        before: _Planner | None = last.planner if last else None
        self.planner: _Planner = _Planner(nodes, policy, memory, now, before)
        planner = self.planner
        self.budget, self.limit = planner.budget, planner.limit
        self.cooling = {d: set(names) for d, names in planner.cooling.items()}
        self.free_before: dict[Api, int] = {"legacy": planner.start.free[0], "dra": planner.start.free[1]}
        self.pods: dict[Api, int] = {"legacy": 0, "dra": 0}
        self.gpus: dict[Api, int] = {"legacy": 0, "dra": 0}
        self.order: list[PendingPod] = []
        self.fitted: list[Placement] = []  # step 1's placements, in queue order
        self.by_moves: list[Placement] = []  # step 3's
        self.how = "from-scratch"  # how this plan reached its last decision, one of `PLANS`
        self.blocked: list[Blocked] = []
        unplaced: list[PendingPod] = []
        pods, gpus, fit = self.pods, self.gpus, planner.fit
        for pod in order:
            pods[pod.api] += 1  # (`_count`, inline: a call per pod costs a few ms at 10^4 pods)
            gpus[pod.api] += pod.gpus
            placed = fit(pod)
            if placed is None:
                unplaced.append(pod)
            else:
                self.fitted.append(placed)
        self.order = order
        # A pool below its floor makes step 2 act on what step 1 left: a plan never goes on from there.
        self.floor_short = any(planner.floor(pool) > planner.pool_legacy[pool] for pool in planner.pool_total)
        self.fit1: dict[Constraints, dict[Api, Fit]] | None = None
        if unplaced:
            self._end_step_1()
        planner.restore_floors()
        self.step3 = unplaced  # step 3's pods, in queue order
        for pod in unplaced:
            self._by_moves(pod)

    def _count(self, pod: PendingPod) -> None:
        self.pods[pod.api] += 1
        self.gpus[pod.api] += pod.gpus

    def _end_step_1(self) -> None:
        """Step 1 ends: keep each index's fit buckets as they are now (`fit1`, where a pod added at the end of the
        queue fits in step 1), and note from here on the nodes a step changes or chooses (`_Planner.touched`)."""
        self.fit1 = {c: _copy_fit(idx.fit) for c, idx in self.planner.indexes.items()}
        self.pool_legacy1 = dict(self.planner.pool_legacy)
        self.planner.touched, self.planner.kept = set(), {}
        self.planner.unfit = {}  # (only step 1 reads it; from here on moves add free GPUs)

    def _by_moves(self, pod: PendingPod) -> None:
        placed, block = self.planner.place_by_moves(pod)
        if placed is not None:
            self.by_moves.append(placed)
        if block is not None:
            self.blocked.append(block)

    def resume(self, nodes: Sequence[NodeView], order: list[PendingPod], policy: Policy, memory: Memory,
               now: float) -> bool:
        """Go on to the decision on these inputs when it is this one's steps, less those of the first pods step 1
        placed when they left the queue with their nodes' views changed as their steps predicted, other views
        replaced only by ones that plan alike (`_went_as_planned`), plus those of pods added at the end of the
        queue; False when planning from scratch could differ (this plan may then be left half-updated: drop it).
        """
        planner = self.planner
        if (self.floor_short or policy != self.policy or len(nodes) != len(self.views)
                or _limit(policy, memory, now) != (self.budget, self.limit)
                or _cooling(planner.nodes, memory, policy, now) != self.cooling
                or (planner.read_clock and (now != self.now or memory != self.memory))):
            return False
        gone = self._gone(order)
        if gone is None:
            return False
        if gone or not all(map(operator.is_, nodes, self.views)):
            if not self._went_as_planned(nodes, gone):
                return False
        k = len(self.order) - len(gone)
        planner.memory, planner.now = memory, now  # a diagnosis from here on reads this clock
        self.memory, self.now = memory, now
        self.how = "went-on"
        for pod in order[k:]:
            if self.fit1 is None:  # no pod needed moves yet: the plan is still where step 1 ended
                placed = planner.fit(pod)
                if placed is not None:
                    self.fitted.append(placed)
                else:
                    self._end_step_1()  # step 1 ends here; step 2 does nothing (no pool short)
                    self.step3.append(pod)
                    self._by_moves(pod)
            else:
                fit1 = self.fit1.get(pod.constraints)
                if fit1 is None:
                    return False  # a new eligibility index
                pos = _best_fit(fit1, pod.api, pod.gpus, planner.top)
                if pos is None:  # it does not fit where step 1 ended: its step comes after step 3's pods
                    self.step3.append(pod)
                    self._by_moves(pod)
                elif not self._fits_alongside(pod, planner.by_pos[pos]):
                    self._step_3_again(pod, planner.by_pos[pos])
            self._count(pod)
        self.order = order
        return True

    def _fits_alongside(self, pod: PendingPod, x: _Node) -> bool:
        """Place `pod`, added at the end of the queue, on `x`, where it fits at the end of step 1, when that is
        what planning from scratch does: every step of step 3 then as it was. False (nothing changed) when that
        cannot be told.

        From scratch, `pod` takes its GPUs on `x` after the other fits and before step 3, so step 3 sees `x` with fewer
        free GPUs. A step that did not choose `x` (a node step 3 changed or chose is refused: `x` must be as step 1 left
        it, and no step's answer) chose the least of a set of candidates (`_best_fit`, `_Planner._search`): without `x`
        as it was and with `x` as the pod leaves it, the least changes only when `x` now ranks below it. So every kind
        of pod step 3 took (`_Seen`) is checked against `x` as the pod leaves it: its fits, its searches (worst choice
        among them), whether some other node still has room when `x` no longer does, and whether its diagnosis could
        name `x` or its free GPUs. The plan then takes the pod on `x` as of step 1 (`fit1` too); every other step
        stands."""
        planner = self.planner
        assert planner.touched is not None and self.fit1 is not None  # (both kept from the end of step 1 on)
        if x.name in planner.touched:
            return False
        after = _taken(x, pod)
        before_room, after_room = sum(x.free.values()), sum(after.free.values())
        mine = {idx.constraints: idx for idx in planner.members.get(x.name, ())}
        for (constraints, api, gpus), seen in planner.seen.items():
            idx = mine.get(constraints)
            if idx is None:
                continue  # `x` is not eligible for those pods
            if after.free[api] >= gpus and after.fit_key(api, gpus) < seen.fit:
                return False  # a fit would take `x`
            if seen.roomed and after_room < gpus <= before_room and idx.roomy(gpus) <= 1:
                return False  # `x` may have been the only node with room (totals only fall in step 3)
            d = direction_to(api)
            have, give = after.free[api], after.free[other(api)]
            if x.changeable and x.name in planner.move_ok[d] and have < gpus and have <= planner.top \
                    and give >= gpus - have:
                tier, slack, _ = after.move_rank(api, gpus - have)
                if (-have, tier, slack, give, x.pos) < seen.search:
                    return False  # a search would take `x`
            if seen.most is not None and before_room >= min(gpus, seen.most):
                return False  # its diagnosis counted `x`'s free GPUs
        self._fit_in_step_1(pod, x, after)
        return True

    def _fit_in_step_1(self, pod: PendingPod, x: _Node, after: _Node) -> None:
        """`pod` takes its GPUs on `x` as the last fit of step 1 (`after`: `x` as it leaves it, `_taken`): in the
        plan, and in `fit1`."""
        planner = self.planner
        assert self.fit1 is not None  # (kept from the end of step 1 on)
        for idx in planner.members.get(x.name, ()):
            fit1 = self.fit1[idx.constraints]  # (every index exists by the end of step 1)
            _unfile(fit1, x.pos, x.free["legacy"], x.free["dra"], x.largest)
            _file(fit1, x.pos, after.free["legacy"], after.free["dra"], after.largest)
        planner.take(x, pod.api, pod.gpus, in_step_1=True)
        self.fitted.append(Placement(pod.key, x.name, 0))

    def _step_3_again(self, pod: PendingPod, x: _Node) -> None:
        """`pod`, added at the end of the queue, fits at the end of step 1 on `x`, and step 3 may have gone
        otherwise had `x` been as the pod leaves it (`_fits_alongside` could not tell it had not): plan step 3 again
        from where step 1 ended, as planning from scratch would, without planning step 1 again.

        Step 1 ends as it did, plus the pod's fit: the nodes step 3 changed are put back as step 1 left them
        (`_Planner.kept`), with their indexes' buckets, and so are the pools' legacy counts, the rate-limit budget
        and the directions each node may change in. What step 3 remembered (searches, pods blocked, diagnoses,
        `_Seen`) is dropped. Then every pod of step 3 takes its step again, in queue order. It costs step 3, not the
        nodes' views, step 1's fits and their indexes (in the bench's `moves*`, a fifth of a plan)."""
        planner = self.planner
        kept, planner.kept = planner.kept, {}
        for name, (free, groups) in kept.items():
            n = planner.nodes[name]
            idxs = planner.members.get(name, ())
            for idx in idxs:
                idx._remove(n)  # (from the buckets of what it has now, before the directions it may take are back)
            n.free, n.groups = free, groups
            n.measure()
            n.dra, n.direction, n.served, n.moved_from = n.view.dra, n.view.moving, (), ()
            planner.allow_moves(n)
            for idx in idxs:
                idx._add(n)
        planner.stale.update(kept)  # their changes are written again (most as they were)
        planner.pool_legacy = defaultdict(int, self.pool_legacy1)
        planner.budget = self.budget
        planner.version += 1
        planner.candidates.clear()
        planner.held.clear()
        planner.diagnosis.clear()
        planner.seen.clear()
        planner.read_clock = False
        planner.touched = set()
        self._fit_in_step_1(pod, x, _taken(x, pod))
        self.by_moves, self.blocked = [], []
        for p in self.step3:
            self._by_moves(p)
        self.how = "step-3-again"

    def _gone(self, order: list[PendingPod]) -> list[int] | None:
        """The places in the last queue of the pods that left it, when they are the first pods step 1 placed (the
        scheduler binds pods in queue order) and the rest of the last queue is this one's start, in the same order;
        None otherwise."""
        old, k = self.order, len(self.order)
        if order[:k] == old:  # the usual case: nobody left
            return []
        gone: list[int] = []
        at = 0
        for placed in self.fitted:
            key = placed.pod
            while at < k and old[at].key != key:
                at += 1
            if at == k:
                return None
            j = at - len(gone)  # its place now, were it still queued
            if j < len(order) and order[j].key == key:
                break
            gone.append(at)
            at += 1
        last = 0
        for t, at in enumerate(gone):
            if order[last - t:at - t] != old[last:at]:
                return None
            last = at + 1
        m = len(gone)
        if len(order) < k - m or order[last - m:k - m] != old[last:]:
            return None
        return gone

    def _went_as_planned(self, nodes: Sequence[NodeView], gone: list[int]) -> bool:
        """Whether the nodes of the pods at `gone` (the first `len(gone)` pods step 1 placed, gone from the queue)
        changed as those pods' steps predicted, and every other view that changed plans as the last one did; if so, the
        plan takes the new views on.

        Planning from scratch on the new inputs then passes through the plan as it was right after those steps and goes
        on by the same steps: the pods queued before them failed to fit and still do (a node with fewer free GPUs fits
        no more), an eligibility index built later equals one kept up to date (`_Index`), and each of those nodes starts
        (`_Seed`: its free counts, its topology groups fitted to them) as their steps left it (`_Planner.take` on its
        last view: no step changes a node before step 1's first placement). So the plan this one reached is that one's;
        only the output that reads a view is written again (a change's reason names the node's free GPUs, and the free
        GPUs counted before planning). What a view says besides its held counts, groups and unreported bindings must not
        have changed. The same argument, with no step, holds for a node no step named whose view starts planning as the
        last one did (the daemon reporting where a binding's GPUs came from, as the core had fitted it: one group, or
        groups the core fitted alike). Planned from scratch: a count other than the pods', groups that differ from what
        the steps took (groups the daemon has not updated yet are fitted as `_fit_groups` does, which matches when one
        pod's step took them, or several pods' steps where the view names their unreported bindings in the order the
        steps took them: several bindings on a node not named so may not), a pod gone with its node's view unchanged, a
        view that plans otherwise with no pod gone from its node (a pod still pending, a binding on another node than
        planned)."""
        changed: dict[str, tuple[NodeView, NodeView]] = {}
        same = list(map(operator.is_, nodes, self.views))
        i = -1
        for _ in range(same.count(False)):
            i = same.index(False, i + 1)
            new, last = nodes[i], self.views[i]
            if new.name != last.name or new.name in changed:
                return False
            changed[new.name] = (last, new)
        left = [(self.fitted[t], self.order[at]) for t, at in enumerate(gone)]
        if not {placed.node for placed, _ in left} <= set(changed):
            return False
        for name, (last, new) in changed.items():
            if (name not in self.planner.nodes
                    or replace(new, dra_held=last.dra_held, legacy_held=last.legacy_held, groups=last.groups,
                               unreported=last.unreported) != last):
                return False
            n = _Node(last, _Seed.of(last), 0)
            for placed, pod in left:
                if placed.node == name:
                    n.free[pod.api] -= pod.gpus
                    n.take_groups(pod.api, pod.gpus)
            seed = _Seed.of(new)  # (groups fitted to the free counts: equal groups mean equal counts too)
            if (seed.free != (n.free["legacy"], n.free["dra"]) or seed.group_names != tuple(n.group_names)
                    or seed.groups != tuple((c[0], c[1]) for c in n.groups)):
                return False
        for name, (last, new) in changed.items():
            node = self.planner.nodes[name]
            node.view = new
            self.planner.dirty.add(node.pos)
            if name in self.planner.written:
                self.planner.stale.add(name)  # its reason names the node's free GPUs
            for a in APIS:
                self.free_before[a] += new.free(a) - last.free(a)
        for _, pod in left:
            self.pods[pod.api] -= 1
            self.gpus[pod.api] -= pod.gpus
        del self.fitted[:len(gone)]
        self.views = tuple(nodes)
        return True

    def decision(self) -> Decision:
        return Decision(
            changes=self.planner.changes(),
            blocked=tuple(self.blocked),
            placements=(*self.fitted, *self.by_moves),
            pending_pods=dict(self.pods),
            pending_gpus=dict(self.gpus),
            free_gpus=dict(self.free_before),
        )


_last_lock = threading.Lock()
_last: _Run | None = None  # the last decision's plan (`_Run`), guarded by `_last_lock`


def _decide(nodes: Sequence[NodeView], pending: Sequence[PendingPod], policy: Policy, memory: Memory,
            now: float, reuse: bool) -> tuple[Decision, str, bool]:
    """The decision, how its plan was reached (`PLANS`), and whether a plan was kept that was made anew (from
    scratch, or step 3 again)."""
    global _last
    order = queue_order(pending)
    if not reuse or not _last_lock.acquire(blocking=False):  # a concurrent decision plans on its own
        return _Run(nodes, order, policy, memory, now).decision(), "from-scratch", False
    try:
        run, _last = _last, None  # held by nobody while it changes: an error leaves no half-updated plan behind
        if run is None or not run.resume(nodes, order, policy, memory, now):
            run = _Run(nodes, order, policy, memory, now, run)
        decision = run.decision()
        _last = run
        return decision, run.how, run.how != "went-on"
    finally:
        _last_lock.release()


__all__ = ["decide", "decide_how", "queue_order"]
