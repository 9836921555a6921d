"""Reading the ResourceClaims of one NodePrepareResources call: concurrently, outside the node lock, in a budget.

Why this module exists: the kubelet waits 45 s for a NodePrepareResources answer (`defaultClientCallTimeout`,
kubernetes/kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin.go) and then fails the pod start, ignoring anything we
answer later. Reading 20 claims one after another, each with its own API retry deadline, under the node-wide
prepare/unprepare lock took 59 s during an API outage: every claim failed, and every other prepare on the node
waited behind the lock meanwhile.

What upstream does: the kubelet-plugin helper reads the claims BEFORE it serializes the call ("Do slow API calls
before serializing": `NodePrepareResources` calls `getResourceClaims` ahead of `serializeGRPCIfEnabled`,
kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/kubeletplugin/draplugin.go), one after another
under the kubelet's own context, and fails the whole call on the first error. NVIDIA's GPU driver
(NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/driver.go) runs on that helper with `Serialize(false)` and takes
its node-wide `pu.lock` (10 s acquire timeout) only inside `PrepareResourceClaims`, i.e. after the reads.

What we do (same order, tighter bounds):
* every claim is read on its own worker (up to `MAX_READERS` at once, daemon threads, so a hung request never
  holds up shutdown), outside the node lock;
* one budget per call (`CallBudget`): `CALL_BUDGET_S` = 30 s of the kubelet's 45 s, or two thirds of the
  caller's own deadline when it is shorter. The last third of the budget (at most the lock timeout, 10 s as in
  NVIDIA's driver) is kept for waiting on the node lock; reads get the rest. The 15 s left below 45 s cover the
  work under the lock (local checkpoint and CDI writes, milliseconds normally, an fsync on a stalled disk at
  worst) and the answer's way back;
* a claim that is not read when its share runs out gets ITS OWN error ("not read within ...; the kubelet
  retries"), as does a claim whose read failed (not found, API error, anything unexpected): neighbours read in
  time are prepared normally, never one error for the whole call. A read still running when the budget ends
  finishes in the background (bounded by the API client's own timeout and retry deadline) and is discarded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass

from bridge.dra.claims import ClaimError, ClaimGone, ClaimRef
from bridge.kube.api import KubeAPI, Obj
from bridge.kube.errors import KubeError, NotFound

log = logging.getLogger(__name__)

KUBELET_CALL_TIMEOUT_S = 45.0  # kubernetes/kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin.go defaultClientCallTimeout
CALL_BUDGET_S = 30.0  # two thirds of the kubelet's deadline: 15 s of margin for the work under the lock and the reply
BUDGET_SHARE_OF_DEADLINE = 2 / 3
MAX_READERS = 16  # claim reads in flight at once, node-wide (a pod rarely has more than a few claims per driver)
# A reader thread without work for this long ends (a new one starts with the next call), or at `close()`. Long,
# because starting one is in the kubelet's path: `Thread.start` waits until the new thread runs, which on a busy
# node took milliseconds of a prepare (py-spy over bench/real_pod_start_bench.py, with 2 s here: a new thread for
# nearly every pod). A node that prepares more often than this never starts one.
IDLE_EXIT_S = 300.0


@dataclass(frozen=True)
class CallBudget:
    """The time one NodePrepareResources call may spend, from its start (monotonic clock): reads until
    `read_deadline`, then at most `lock_wait` seconds for the node lock (never past `deadline`)."""

    total: float
    started: float
    lock_share: float

    @classmethod
    def begin(cls, time_left: float | None, lock_timeout: float, *, cap: float = CALL_BUDGET_S,
              clock: Callable[[], float] = time.monotonic) -> CallBudget:
        """`time_left`: the caller's remaining deadline in seconds (gRPC `context.time_remaining()`), None when
        it set none. `lock_timeout`: the longest wait for the node lock."""
        total = cap if time_left is None else max(0.0, min(cap, time_left * BUDGET_SHARE_OF_DEADLINE))
        return cls(total, clock(), min(lock_timeout, total / 3))

    @property
    def deadline(self) -> float:
        return self.started + self.total

    @property
    def read_deadline(self) -> float:
        return self.deadline - self.lock_share

    @property
    def read_share(self) -> float:
        return self.total - self.lock_share

    def lock_wait(self, now: float) -> float:
        """How long to wait for the node lock when asking at `now` (0: try once)."""
        return max(0.0, min(self.lock_share, self.deadline - now))


ReadResult = Obj | ClaimError


class ClaimReader:
    """Reads claims by (namespace, name) on a small pool of daemon threads, started on demand and ended when idle."""

    def __init__(self, kube: KubeAPI, *, max_workers: int = MAX_READERS, idle_exit_s: float = IDLE_EXIT_S,
                 clock: Callable[[], float] = time.monotonic,
                 observe: Callable[[float], None] | None = None) -> None:
        """`observe`: called with each GET's own seconds, timed on the reader thread (the read phase of a prepare
        less the hand-offs between threads)."""
        self.kube = kube
        self.observe = observe
        self.max_workers = max_workers
        self.idle_exit_s = idle_exit_s
        self.clock = clock
        self._closing = False
        self._lock = threading.Lock()
        self._tasks: deque[tuple[Future[ReadResult], ClaimRef]] = deque()
        self._wake = threading.Condition(self._lock)
        self._workers = 0
        self._idle = 0

    def read(self, refs: Sequence[ClaimRef], budget: CallBudget) -> dict[str, ReadResult]:
        """Claim UID -> the claim as the API has it, or the claim's error. Returns by `budget.read_deadline`."""
        if not refs:
            return {}
        futures = [(ref, self._submit(ref)) for ref in refs]
        wait_futures([f for _, f in futures], timeout=max(0.0, budget.read_deadline - self.clock()))
        out: dict[str, ReadResult] = {}
        for ref, fut in futures:
            if fut.done():
                out[ref.uid] = fut.result()
                continue
            fut.cancel()  # a queued read never starts; a running one finishes in the background, discarded
            out[ref.uid] = ClaimError(
                f"ResourceClaim {ref.namespace}/{ref.name} could not be read within {budget.read_share:.1f}s (this "
                f"call's time for API reads, out of the kubelet's {KUBELET_CALL_TIMEOUT_S:g}s deadline): the API "
                "server is slow or unreachable; not prepared, the kubelet retries")
        return out

    def _submit(self, ref: ClaimRef) -> Future[ReadResult]:
        fut: Future[ReadResult] = Future()
        with self._lock:
            self._closing = False
            self._tasks.append((fut, ref))
            if len(self._tasks) > self._idle and self._workers < self.max_workers:
                self._workers += 1
                threading.Thread(target=self._work, name="dra-claim-read", daemon=True).start()
            self._wake.notify()
        return fut

    def close(self) -> None:
        """End the idle reader threads (the daemon's stop); a later read starts them again."""
        with self._lock:
            self._closing = True
            self._wake.notify_all()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
                self._wake.wait_for(lambda: bool(self._tasks) or self._closing, timeout=self.idle_exit_s)
                self._idle -= 1
                if not self._tasks:
                    self._workers -= 1
                    return
                fut, ref = self._tasks.popleft()
            if fut.set_running_or_notify_cancel():  # False: cancelled while queued (its call ran out of time)
                started = time.perf_counter()
                got = read_claim(self.kube, ref)
                if self.observe is not None:
                    self.observe(time.perf_counter() - started)
                fut.set_result(got)


def read_claim(kube: KubeAPI, ref: ClaimRef) -> ReadResult:
    """GET one claim; every failure becomes that claim's error (never an exception that fails its neighbours)."""
    what = f"ResourceClaim {ref.namespace}/{ref.name}"
    try:
        return kube.get(kube.resource_api().claims, ref.name, ref.namespace)
    except NotFound:
        return ClaimGone(f"{what} not found")
    except KubeError as err:
        return ClaimError(f"cannot read {what}: {err}")
    except Exception as err:  # noqa: BLE001 - a client bug must stay this claim's error, loud in the log
        log.exception("reading a ResourceClaim failed unexpectedly", extra={"claim": f"{ref.namespace}/{ref.name}",
                                                                            "uid": ref.uid})
        return ClaimError(f"cannot read {what}: unexpected {type(err).__name__}: {err}")
