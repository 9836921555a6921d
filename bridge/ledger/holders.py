"""Who holds a device, as facts (pure values; `bridge.node.holders` gathers them from the node's sources).

A holder is someone a device must not be taken from. Each is tied to the side it got the device through:

legacy (the device plugin):
* `CONTAINER` — a container PodResources `List` reports (app containers and sidecars);
* `INIT_CONTAINER` — a non-restartable init container, which the real PodResources omits: its devices come from
  the kubelet's device-manager checkpoint, its liveness from the pod's status (see `bridge.node.holders`);
* `ALLOCATE` — an `Allocate` we answered that the kubelet has not reported yet (the ledger records these itself);
* `ADMITTING` — a pod that asks for the device plugin's resource, bound to this node (or nominated to it) and not
  admitted by the kubelet yet. It holds no device: the kubelet picks its devices from the healthy ones when it
  admits the pod, and fails the pod (`UnexpectedAdmissionError`) when too few are left. So it holds a *count*
  (`Facts.admitting`): that many free legacy devices stay on the legacy side until the kubelet has admitted it.

DRA:
* `PREPARED` — a claim record in our checkpoint (`PrepareStarted` or `PrepareCompleted`);
* `ALLOCATED` — a claim allocated to a device of this node's pool, read from the pods bound to this node, whether
  prepared or not: the scheduler allocates and binds long before the kubelet prepares;
* `PREPARING` — a `NodePrepareResources` past the guard whose record is not written yet (recorded by the ledger);
* `INCOMING` — a pod the scheduler nominated to this node whose claim it has not allocated yet (its binding cycle
  is under way: the device it chose is written only in PreBind): it may get any DRA device of this node, so every
  one of them is held by it, and none leaves DRA until the allocation is written (or the binding fails).

`Facts.unknown` says which side's holders could not be read now (PodResources socket missing, API unreachable, a
claim unreadable) and why; the ledger never moves a device off a side whose facts are unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from bridge.inventory.model import DeviceID
from bridge.ledger.sides import Side


class HolderKind(StrEnum):
    CONTAINER = "container"
    INIT_CONTAINER = "init-container"
    ALLOCATE = "allocate"
    PREPARED = "prepared"
    ALLOCATED = "allocated"
    PREPARING = "preparing"
    INCOMING = "incoming"
    ADMITTING = "admitting"

    @property
    def side(self) -> Side:
        return Side.LEGACY if self in (HolderKind.CONTAINER, HolderKind.INIT_CONTAINER, HolderKind.ALLOCATE,
                                       HolderKind.ADMITTING) else Side.DRA


_KIND_TEXT = {
    HolderKind.CONTAINER: "legacy container",
    HolderKind.INIT_CONTAINER: "legacy init container",
    HolderKind.ALLOCATE: "device-plugin Allocate not yet visible in PodResources",
    HolderKind.PREPARED: "DRA claim prepared",
    HolderKind.ALLOCATED: "DRA claim allocated, not prepared yet",
    HolderKind.PREPARING: "DRA NodePrepareResources in progress",
    HolderKind.INCOMING: "DRA pod nominated to this node, its claim not allocated yet",
    HolderKind.ADMITTING: "legacy pod placed on this node, not admitted by the kubelet yet",
}


@dataclass(frozen=True)
class Holder:
    kind: HolderKind
    who: str  # "pod ml/train-7 container main", "claim ml/gpu-0 (pod ml/train-7)"
    # For DRA claims, when known: the pod ("ns/name", its UID) using the claim (Events on a stuck claim go there).
    pod: str = field(default="", compare=False)
    pod_uid: str = field(default="", compare=False)

    @property
    def side(self) -> Side:
        return self.kind.side

    def describe(self) -> str:
        """For logs, Events and per-claim errors: `pod ml/train-7 container init (legacy init container)`."""
        return f"{self.who} ({_KIND_TEXT[self.kind]})"


_CLAIM_RANK = {HolderKind.PREPARED: 0, HolderKind.PREPARING: 1, HolderKind.ALLOCATED: 2}


def distinct(holders: Iterable[Holder]) -> tuple[Holder, ...]:
    """One entry per holder, for people: a DRA claim that several sources report (our checkpoint record, the
    kubelet's PodResources, the pods bound to this node, a prepare under way) is named once, by the strongest fact
    (prepared, then preparing, then allocated), with its pod when any source named it. Order is kept."""
    out: list[Holder] = []
    at: dict[str, int] = {}
    pod: dict[str, str] = {}
    for h in holders:
        key = h.who.split(" ", 2)[1] if h.kind in _CLAIM_RANK and h.who.startswith("claim ") else None
        if key is None:
            if h not in out:
                out.append(h)
            continue
        if " (pod " in h.who:
            pod.setdefault(key, h.who[h.who.index(" (pod "):])
        i = at.get(key)
        if i is None:
            at[key] = len(out)
            out.append(h)
        elif _CLAIM_RANK[h.kind] < _CLAIM_RANK[out[i].kind]:
            out[i] = h
    for key, i in at.items():
        h = out[i]
        if key in pod and " (pod " not in h.who:
            out[i] = Holder(h.kind, f"claim {key}{pod[key]}{h.who[len('claim ' + key):]}")
    return tuple(out)


def described_side(text: str) -> Side | None:
    """The side of a holder from its `describe()` text (as the split-status annotation carries it); None when the
    text is not one (a cut or summarised entry)."""
    for kind, words in _KIND_TEXT.items():
        if text.endswith(f" ({words})"):
            return kind.side
    return None


def describe_all(holders: Iterable[Holder], limit: int = 3) -> str:
    items = list(dict.fromkeys(h.describe() for h in distinct(holders)))
    text = "; ".join(items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")


@dataclass(frozen=True)
class Facts:
    """Holders by device, the sides whose holders could not be read (side -> why), and the legacy pods placed on
    this node that the kubelet has not admitted yet, each with the number of legacy GPUs it will take (`ADMITTING`
    holders: which devices is the kubelet's choice at admission)."""

    holders: Mapping[DeviceID, tuple[Holder, ...]] = field(default_factory=dict)
    unknown: Mapping[Side, str] = field(default_factory=dict)
    admitting: tuple[tuple[Holder, int], ...] = ()

    def admitting_gpus(self) -> int:
        return sum(n for _, n in self.admitting)

    def of(self, device: DeviceID, side: Side | None = None) -> tuple[Holder, ...]:
        found = self.holders.get(device, ())
        return found if side is None else tuple(h for h in found if h.side is side)

    def known(self, side: Side) -> bool:
        return side not in self.unknown

    @staticmethod
    def build(pairs: Iterable[tuple[DeviceID, Holder]], unknown: Mapping[Side, str] | None = None,
              admitting: Iterable[tuple[Holder, int]] = ()) -> Facts:
        out: dict[DeviceID, list[Holder]] = {}
        for device, holder in pairs:
            got = out.setdefault(device, [])
            if holder not in got:
                got.append(holder)
        return Facts({d: tuple(hs) for d, hs in out.items()}, dict(unknown or {}), tuple(admitting))

    def merged(self, other: Facts) -> Facts:
        pairs = [(d, h) for f in (self, other) for d, hs in f.holders.items() for h in hs]
        return Facts.build(pairs, {**self.unknown, **other.unknown}, (*self.admitting, *other.admitting))


__all__ = ["Facts", "Holder", "HolderKind", "describe_all", "described_side", "distinct"]
