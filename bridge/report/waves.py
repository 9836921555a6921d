"""The order namespaces move in (pure): one rule for the wave plan (`bridge.report.report.plan_waves`) and the
capacity simulation that checks it (DRB032), so "fits in wave order" means the plan's order.

Lowest risk first. Namespaces that some blocker holds back are not planned. Wave 1 puts every other legacy
namespace in shadow (a dry run on real traffic: nothing changes for pods). Then one namespace per wave goes to dra:
those already in shadow first, then by increasing GPU demand, then by name. Namespaces already in dra are not moved;
their pods are on the DRA side before any wave runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bridge.report.features import GPU
from bridge.report.model import Namespace

_RANK = {"dra": 0, "shadow": 1, "legacy": 2}


def wave_order(namespaces: list[Namespace]) -> list[Namespace]:
    """dra first (already there), then shadow, then legacy; by GPU demand, then name."""
    return sorted(namespaces, key=lambda n: (_RANK[n.mode], n.demand.get(GPU, 0), n.name))


@dataclass(frozen=True)
class Flips:
    to_shadow: list[Namespace]  # wave 1, by name
    to_dra: list[Namespace]  # one per wave, in wave order
    first_dra_wave: int  # the wave of to_dra[0]
    _waves: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._waves.update({ns.name: self.first_dra_wave + i for i, ns in enumerate(self.to_dra)})

    def dra_wave(self, name: str) -> int | None:
        """The wave in which `name` goes to dra; None when the plan does not move it there."""
        return self._waves.get(name)


def flips(movable: list[Namespace]) -> Flips:
    """The plan for the namespaces nothing blocks (see the module docstring)."""
    to_shadow = sorted((n for n in movable if n.mode == "legacy"), key=lambda n: n.name)
    to_dra = wave_order([n for n in movable if n.mode != "dra"])
    return Flips(to_shadow, to_dra, 2 if to_shadow else 1)


__all__ = ["Flips", "flips", "wave_order"]
