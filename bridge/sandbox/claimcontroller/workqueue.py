"""A rate-limited work queue with client-go's guarantees (k8s.io/client-go util/workqueue):
* a key is queued at most once however often it is added (dirty set), and never processed by two workers at once
  (added while processing -> processed again after `done`);
* `add_rate_limited` retries a failing key after an exponential per-item backoff (DefaultControllerRateLimiter's
  ItemExponentialFailureRateLimiter: 5 ms doubling up to 1000 s), `forget` resets it;
* `shutdown` wakes every waiting worker.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable


class WorkQueue:
    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._cond = threading.Condition()
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._delayed: list[tuple[float, str]] = []
        self._failures: dict[str, int] = {}
        self._shutdown = False
        self.base_delay, self.max_delay, self.clock = base_delay, max_delay, clock

    def add(self, key: str) -> None:
        with self._cond:
            if self._shutdown or key in self._dirty:
                return
            self._dirty.add(key)
            if key not in self._processing:
                self._queue.append(key)
                self._cond.notify()

    def add_rate_limited(self, key: str) -> None:
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
            delay = min(self.max_delay, self.base_delay * (2 ** n))
            heapq.heappush(self._delayed, (self.clock() + delay, key))
            self._cond.notify()

    def forget(self, key: str) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def get(self) -> str | None:
        """The next key (mark it `done` after processing), or None after shutdown."""
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                now = self.clock()
                while self._delayed and self._delayed[0][0] <= now:
                    _, key = heapq.heappop(self._delayed)
                    if key not in self._dirty:
                        self._dirty.add(key)
                        if key not in self._processing:
                            self._queue.append(key)
                if self._queue:
                    key = self._queue.popleft()
                    self._processing.add(key)
                    self._dirty.discard(key)
                    return key
                timeout = self._delayed[0][0] - now if self._delayed else None
                self._cond.wait(timeout)

    def done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._delayed)


__all__ = ["WorkQueue"]
