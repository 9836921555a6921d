"""Leader election over a coordination.k8s.io Lease, against the API emulator, with client-go's semantics."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.kube import LEASES, RestKube
from bridge.kube.errors import Unavailable
from bridge.kube.leaderelection import LeaderElectionConfig, LeaderElector
from tests.polling import wait_until

NS = "default"
FAST = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.25}


class Partition:
    """Delegates to a real client; while `cut` is set, Lease requests fail as on a lost network path."""

    def __init__(self, api: RestKube) -> None:
        self.api = api
        self.cut = threading.Event()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.api, name)
        if name not in ("get", "create", "update"):
            return target

        def call(res: Any, *args: Any, **kw: Any) -> Any:
            if res == LEASES and self.cut.is_set():
                raise Unavailable("connection refused (test partition)", request_sent=False)
            return target(res, *args, **kw)

        return call


class Candidate:
    def __init__(self, api: Any, identity: str, **kw: Any) -> None:
        cfg = {**FAST, **kw}
        self.elector = LeaderElector(api, LeaderElectionConfig(NS, "ctl", identity, **cfg))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.led_at: float | None = None

    def _run(self) -> None:
        while not self.stop.is_set():
            self.elector.run(self.stop)
            self.stop.wait(0.1)

    def start(self) -> Candidate:
        self.thread.start()
        return self

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def candidates() -> Iterator[list[Candidate]]:
    made: list[Candidate] = []
    yield made
    for c in made:
        c.halt()


def leader_and_standby(candidates: list[Candidate], leader_api: Any, standby_api: Any,
                       **leader_kw: Any) -> tuple[Candidate, Candidate]:
    """Start `a` until it leads, then `b`, and let `b` see the lease held."""
    a = Candidate(leader_api, "a", **leader_kw).start()
    candidates.append(a)
    wait_until(a.elector.is_leader, what="a leads")
    b = Candidate(standby_api, "b").start()
    candidates.append(b)
    wait_until(lambda: b.elector.leader() == "a", what="b sees a leading")
    assert not b.elector.is_leader()
    return a, b


def lease(api: RestKube) -> dict[str, Any]:
    return api.get(LEASES, "ctl", NS)["spec"]


def leaders(cs: list[Candidate]) -> list[str]:
    return [c.elector.identity for c in cs if c.elector.is_leader()]


def test_one_candidate_leads_and_the_lease_records_it(api: RestKube, candidates: list[Candidate]) -> None:
    candidates += [Candidate(api, "a").start(), Candidate(api, "b").start()]
    wait_until(lambda: len(leaders(candidates)) == 1, what="one leader")
    (leader,) = leaders(candidates)
    spec = lease(api)
    assert spec["holderIdentity"] == leader and spec["leaseDurationSeconds"] == 2
    assert spec["leaseTransitions"] == 0 and spec["acquireTime"].endswith("Z") and "." in spec["renewTime"]
    first = spec["renewTime"]
    wait_until(lambda: lease(api)["renewTime"] != first, what="a renewal")
    assert lease(api)["acquireTime"] == spec["acquireTime"], "renewing keeps acquireTime"
    other = next(c for c in candidates if c.elector.identity != leader)
    wait_until(lambda: other.elector.leader() == leader, what="the standby sees the leader")
    assert not other.elector.is_leader()


def test_a_stopped_leader_releases_and_the_other_takes_over_at_once(api: RestKube,
                                                                     candidates: list[Candidate]) -> None:
    a, b = leader_and_standby(candidates, api, api)
    stopped = time.monotonic()
    a.halt()
    wait_until(b.elector.is_leader, what="b takes over")
    assert time.monotonic() - stopped < FAST["lease_duration"], "a released lease is taken without waiting it out"
    spec = lease(api)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)


def test_a_crashed_leader_is_replaced_after_its_lease_runs_out_and_not_before(api: RestKube,
                                                                              candidates: list[Candidate]) -> None:
    a, b = leader_and_standby(candidates, api, api, release_on_stop=False)
    a.halt()  # no release: the lease stays with a until it expires
    last_renewal = time.monotonic()
    wait_until(b.elector.is_leader, timeout=30, what="b takes over")
    waited = time.monotonic() - last_renewal
    assert waited >= FAST["lease_duration"] - FAST["retry_period"], f"took over after {waited:.2f}s"
    assert lease(api)["holderIdentity"] == "b"


def test_a_leader_that_cannot_renew_stops_acting_before_anyone_else_can_lead(api: RestKube,
                                                                              candidates: list[Candidate]) -> None:
    cut_off = Partition(api)
    a, b = leader_and_standby(candidates, cut_off, api)
    cut_off.cut.set()
    cut_at = time.monotonic()
    wait_until(lambda: not a.elector.is_leader(), what="a stops acting")
    stopped_acting = time.monotonic()
    assert stopped_acting - cut_at <= FAST["renew_deadline"] + 1.0
    wait_until(b.elector.is_leader, timeout=30, what="b takes over")
    assert stopped_acting < time.monotonic(), "the old leader stopped before the new one started"
    assert not a.elector.is_leader()
    cut_off.cut.clear()
    time.sleep(1.0)
    assert leaders(candidates) == ["b"], "the old leader comes back as a candidate, not as a second leader"


def test_many_candidates_never_lead_at_the_same_time(api: RestKube, candidates: list[Candidate]) -> None:
    candidates += [Candidate(api, f"c{i}").start() for i in range(4)]
    wait_until(lambda: leaders(candidates), what="a leader")
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert len(leaders(candidates)) <= 1
        time.sleep(0.02)
    first = leaders(candidates)
    for c in candidates:
        if c.elector.identity in first:
            c.halt()
    rest = [c for c in candidates if c.elector.identity not in first]
    wait_until(lambda: len(leaders(rest)) == 1, what="a new leader among the rest")
    assert lease(api)["leaseTransitions"] == 1


@pytest.mark.parametrize(("kw", "message"), [
    ({"lease_duration": 10, "renew_deadline": 10}, "must be greater than the renew deadline"),
    ({"renew_deadline": 2, "retry_period": 2}, "must be greater than 1.2 x the retry period"),
    ({"retry_period": 0}, "must be > 0"),
    ({"identity": ""}, "identity must not be empty"),
])
def test_timings_are_validated_as_client_go_does(kw: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"namespace": NS, "name": "ctl", "identity": "a", "lease_duration": 15,
                            "renew_deadline": 10, "retry_period": 2, **kw}
    with pytest.raises(ValueError, match=message):
        LeaderElectionConfig(**args)
