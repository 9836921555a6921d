"""Retrying transient API failures: exponential backoff with jitter, bounded by an overall deadline.

Only `Unavailable` is retried (connection refused/reset, timeouts, 429, 500/502/503/504); every other error is a
real answer and is raised at once. A server-supplied Retry-After (header or `details.retryAfterSeconds`) replaces
the computed backoff for that attempt; when waiting would cross the deadline the layer gives up immediately with
an `Unavailable` that says how many attempts were made, chained to the last failure.

Non-idempotent requests: the caller passes `retry_if_sent=False` for requests that must not be repeated once the
server may have seen them (a `generateName` create, a JSON patch that appends). Those are still retried when the
failure proves the server did nothing (`Unavailable.request_sent` is False: refused connect, 429).

The deadline is per call (one page of a list is one call), so a 5 s outage costs each request at most the
outage, never a multiple of it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from bridge.kube.errors import Unavailable

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for attempt n (0-based) is min(max_backoff, initial_backoff * factor**n), then scaled by a random
    factor in [1 - jitter, 1 + jitter] so that many clients restarted together do not retry in lockstep."""

    initial_backoff: float = 0.2
    factor: float = 2.0
    max_backoff: float = 5.0
    deadline: float = 30.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.deadline < 0:
            raise ValueError("RetryPolicy: backoffs and deadline must be >= 0")
        if self.factor < 1:
            raise ValueError("RetryPolicy: factor must be >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("RetryPolicy: jitter must be in [0, 1)")

    def backoff(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        base = min(self.max_backoff, self.initial_backoff * (self.factor ** min(attempt, 64)))
        return base * (1 - self.jitter + 2 * self.jitter * rand())

    @classmethod
    def never(cls) -> RetryPolicy:
        """No retries: the first Unavailable is raised."""
        return cls(initial_backoff=0, max_backoff=0, deadline=0, jitter=0)


@dataclass
class Retrier:
    """Runs calls under a policy; clock, sleep and randomness come in so tests can drive time."""

    policy: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random

    def call(
        self,
        fn: Callable[[], T],
        *,
        what: str,
        retry_if_sent: bool = True,
        on_retry: Callable[[Unavailable], None] | None = None,
    ) -> T:
        start = self.clock()
        attempt = 0
        while True:
            try:
                return fn()
            except Unavailable as err:
                if err.request_sent and not retry_if_sent:
                    raise Unavailable(
                        f"{what}: not retried because the server may already have acted on it: {err.message}",
                        retry_after=err.retry_after,
                        request_sent=True,
                        status=err.status,
                        reason=err.reason,
                    ) from err
                delay = err.retry_after if err.retry_after is not None else self.policy.backoff(attempt, self.rand)
                elapsed = self.clock() - start
                if elapsed + delay >= self.policy.deadline:
                    raise Unavailable(
                        f"{what}: gave up after {attempt + 1} attempt(s) in {elapsed:.1f}s "
                        f"(deadline {self.policy.deadline:g}s): {err.message}",
                        retry_after=err.retry_after,
                        request_sent=err.request_sent,
                        status=err.status,
                        reason=err.reason,
                    ) from err
                if on_retry is not None:
                    on_retry(err)
                self.sleep(delay)
                attempt += 1


__all__ = ["Retrier", "RetryPolicy"]
