"""The retry policy: exponential backoff with jitter inside an overall deadline, Retry-After honoured, and
non-idempotent requests never repeated once the server may have acted on them."""

from __future__ import annotations

import pytest

from bridge.kube.errors import NotFound, Unavailable
from bridge.kube.retry import Retrier, RetryPolicy


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    def clock(self) -> float:
        return self.now


def failing(times: int, err: Unavailable, result: str = "ok"):  # type: ignore[no-untyped-def]
    calls = {"n": 0}

    def fn() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise err
        return result

    return fn, calls


def retrier(policy: RetryPolicy, t: FakeTime) -> Retrier:
    return Retrier(policy, sleep=t.sleep, clock=t.clock, rand=lambda: 0.5)


def test_backoff_grows_geometrically_and_is_capped() -> None:
    p = RetryPolicy(initial_backoff=0.5, factor=2, max_backoff=3, jitter=0)
    assert [p.backoff(n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_jitter_stays_within_its_band() -> None:
    p = RetryPolicy(initial_backoff=1, factor=2, max_backoff=10, jitter=0.25)
    assert p.backoff(0, lambda: 0.0) == pytest.approx(0.75)
    assert p.backoff(0, lambda: 0.999999) == pytest.approx(1.25, abs=1e-5)


def test_transient_failures_are_retried_until_success() -> None:
    t = FakeTime()
    fn, calls = failing(3, Unavailable("refused", request_sent=False))
    assert retrier(RetryPolicy(initial_backoff=1, jitter=0), t).call(fn, what="list pods") == "ok"
    assert calls["n"] == 4 and t.sleeps == [1, 2, 4]


def test_retry_after_replaces_the_backoff() -> None:
    t = FakeTime()
    fn, _ = failing(1, Unavailable("429", retry_after=3.0, request_sent=False, status=429))
    retrier(RetryPolicy(initial_backoff=0.1), t).call(fn, what="list pods")
    assert t.sleeps == [3.0]


def test_gives_up_at_the_deadline_naming_attempts_and_cause() -> None:
    t = FakeTime()
    cause = Unavailable("connection refused", request_sent=False)
    fn, calls = failing(100, cause)
    with pytest.raises(Unavailable, match=r"list pods: gave up after \d+ attempt\(s\)") as ei:
        retrier(RetryPolicy(initial_backoff=1, factor=2, max_backoff=4, deadline=10, jitter=0), t).call(fn, what="list pods")
    assert ei.value.__cause__ is cause
    assert t.now <= 10 and calls["n"] == len(t.sleeps) + 1


def test_retry_after_beyond_the_deadline_fails_at_once() -> None:
    t = FakeTime()
    fn, calls = failing(1, Unavailable("429", retry_after=60, request_sent=False))
    with pytest.raises(Unavailable, match="gave up"):
        retrier(RetryPolicy(deadline=5), t).call(fn, what="x")
    assert calls["n"] == 1 and t.sleeps == []


def test_non_idempotent_request_is_not_repeated_after_it_may_have_landed() -> None:
    t = FakeTime()
    fn, calls = failing(1, Unavailable("connection reset", request_sent=True))
    with pytest.raises(Unavailable, match="may already have acted"):
        retrier(RetryPolicy(), t).call(fn, what="create events", retry_if_sent=False)
    assert calls["n"] == 1


def test_non_idempotent_request_is_repeated_when_the_server_certainly_did_nothing() -> None:
    t = FakeTime()
    fn, calls = failing(2, Unavailable("refused", request_sent=False))
    assert retrier(RetryPolicy(), t).call(fn, what="create events", retry_if_sent=False) == "ok"
    assert calls["n"] == 3


def test_other_errors_are_raised_at_once() -> None:
    t = FakeTime()

    def fn() -> str:
        raise NotFound("nope")

    with pytest.raises(NotFound):
        retrier(RetryPolicy(), t).call(fn, what="get")
    assert t.sleeps == []


def test_never_policy_raises_the_first_failure() -> None:
    t = FakeTime()
    fn, calls = failing(1, Unavailable("refused", request_sent=False))
    with pytest.raises(Unavailable):
        retrier(RetryPolicy.never(), t).call(fn, what="get")
    assert calls["n"] == 1


@pytest.mark.parametrize("kw", [{"factor": 0.5}, {"jitter": 1.0}, {"deadline": -1}])
def test_nonsense_policies_are_rejected(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kw)
