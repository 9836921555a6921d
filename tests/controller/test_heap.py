"""The controller settles its heap after each state check, once that decision is written: one full collection, then
everything alive is frozen, so the collector's later passes skip the cluster's objects (`Controller.settle_heap`;
bench/controller_memory_bench.py measures the pauses this saves)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.controller.loop import Controller, ControllerOptions
from bridge.controller.metrics import ControllerMetrics
from tests.controller.status_docs import gpu_node


class Cycle:
    """An object that refers to itself: only the cyclic collector can free it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the test session's heap is not this test's to freeze


def controller(now: list[float], **options: Any) -> Controller:
    ctl = Controller(object(), ControllerOptions(state_check_s=600, **options), identity="t",  # type: ignore[arg-type]
                     metrics=ControllerMetrics(), is_leader=lambda: True, resource_api=None, clock=lambda: now[0])
    ctl.cluster.apply("node", "ADDED", gpu_node("n0", ["legacy"] * 4))
    return ctl


def tracked(obj: object) -> bool:
    """Whether the collector's passes walk `obj` (a frozen object is in no generation)."""
    return any(o is obj for o in gc.get_objects())


def test_the_first_decisions_state_check_freezes_the_cluster_objects_so_collections_skip_them() -> None:
    now = [0.0]
    ctl = controller(now)
    node = ctl.cluster.state().nodes["n0"]
    assert tracked(node)
    ctl.build()
    assert tracked(node), "not while the decision is made"
    ctl.settle_when_due()
    assert gc.get_freeze_count() > 0 and not tracked(node)
    assert ctl.build().views[0].name == "n0", "a frozen object reads as before"


def test_the_heap_is_settled_once_per_state_check_after_that_decision() -> None:
    now = [0.0]
    ctl = controller(now)
    settled: list[float] = []
    ctl.settle_heap = lambda: settled.append(now[0])  # type: ignore[method-assign]
    ctl.settle_when_due()
    assert settled == [], "nothing is due before a state check"
    ctl.build()
    assert settled == []
    ctl.settle_when_due()
    ctl.settle_when_due()
    now[0] = 300.0
    ctl.build()
    ctl.settle_when_due()
    assert settled == [0.0]
    now[0] = 600.0
    ctl.build()
    ctl.settle_when_due()
    assert settled == [0.0, 600.0]


def test_a_cycle_frozen_while_alive_is_collected_at_the_next_settle_and_not_before() -> None:
    now = [0.0]
    ctl = controller(now)
    cycle = Cycle()
    gone = weakref.ref(cycle)
    ctl.build()  # the first check settles: the cycle is alive, so it is frozen
    ctl.settle_when_due()
    del cycle
    gc.collect()
    assert gone() is not None, "a frozen cycle waits for the next settle"
    now[0] = 599.0
    ctl.build()
    ctl.settle_when_due()
    assert gone() is not None, "no settle before the state check period"
    now[0] = 600.0
    ctl.build()
    ctl.settle_when_due()
    assert gone() is None


def test_without_freeze_heap_nothing_is_frozen() -> None:
    gc.unfreeze()
    ctl = controller([0.0], freeze_heap=False)
    ctl.build()
    ctl.settle_when_due()
    assert gc.get_freeze_count() == 0
