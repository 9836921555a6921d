"""The gRPC servers of the node daemon (device plugin, DRA service, DRA registration): bounded in every direction.

Below both halves (`bridge.deviceplugin`, `bridge.dra`) and the daemon; it imports only `bridge.unixsock`.

Invariants, each one a failure seen on a real daemon without it:
* **Stuck handlers never outlive SIGTERM.** Handlers run on a `WorkerPool` of daemon threads. `ThreadPoolExecutor`
  workers are joined at interpreter exit (and by `shutdown(wait=True)`), so one handler that never returns kept
  the whole process alive after SIGTERM until the kubelet's SIGKILL, with its sockets left behind. `stop()` is
  bounded: stop accepting, let in-flight calls finish for `grace`, cancel the rest, wait at most `abandon_after`
  for the workers, then abandon the ones still busy (counted and logged; they end with the process).
* **Streams cannot starve unary calls.** A server-streaming handler (ListAndWatch, NodeWatchResources) holds a
  worker thread for the life of the stream. Streams take a slot from `StreamSlots` for their life, the pool is
  sized `workers + max_streams`, so however many streams are open, `workers` threads stay for the unary calls
  (Allocate, NodePrepareResources, GetInfo, and the liveness probe's own GetDevicePluginOptions). A stream beyond
  the limit is refused at once with RESOURCE_EXHAUSTED and a message saying why; a kubelet opens one stream per
  registration, so the default limit is far above what a kubelet needs.
* **Queues are bounded.** gRPC answers calls beyond `max_concurrent_rpcs` (running + queued) with
  RESOURCE_EXHAUSTED instead of queueing without limit.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import grpc

from bridge.unixsock import SocketIdentity, SocketPathError, serve_unix

log = logging.getLogger("bridge.grpc")

P = ParamSpec("P")
T = TypeVar("T")

# A kubelet opens one ListAndWatch per registration and one health stream per DRA plugin; a re-registration may
# overlap the old stream for a moment. Four leaves room for that and for an operator's debugging client.
DEFAULT_MAX_STREAMS = 4
DEFAULT_WORKERS = 16
# Running + queued calls per server before gRPC answers RESOURCE_EXHAUSTED (the kubelet sends one call at a time).
DEFAULT_MAX_CONCURRENT_RPCS = 256
DEFAULT_GRACE_S = 1.0
DEFAULT_ABANDON_AFTER_S = 2.0

_WorkItem = tuple["futures.Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class WorkerPool(futures.ThreadPoolExecutor):
    """A thread pool whose workers are daemon threads, never joined at interpreter exit, with a bounded `join`.

    It subclasses `ThreadPoolExecutor` only because `grpc.server` is typed (and checks, for per-method pools) for
    one; every method it uses is overridden here and the base class never starts a thread."""

    def __init__(self, max_workers: int, name: str) -> None:
        if max_workers < 1:
            raise ValueError("a worker pool needs at least one worker")
        super().__init__(max_workers=max_workers, thread_name_prefix=name)
        self._limit = max_workers
        self._name = name
        self._items: queue.SimpleQueue[_WorkItem | None] = queue.SimpleQueue()
        self._mutex = threading.Lock()
        self._workers: list[threading.Thread] = []
        # Workers that finished a call and wait for the next one, not yet promised to a call: `submit` takes one
        # (or starts a worker) for each call it queues. Counting a worker idle until it has marked itself busy
        # instead left a call queued with no worker when it arrived just as the last idle worker took a stream.
        self._idle = 0
        self._busy = 0
        self._closed = False

    @property
    def busy(self) -> int:
        """Workers running a call right now."""
        with self._mutex:
            return self._busy

    @property
    def size(self) -> int:
        return self._limit

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> futures.Future[T]:
        future: futures.Future[T] = futures.Future()
        with self._mutex:
            if self._closed:
                raise RuntimeError(f"{self._name}: cannot schedule new calls after shutdown")
            self._items.put((future, fn, args, kwargs))
            if self._idle:
                self._idle -= 1  # that worker is this call's: no later call counts it as free
            elif len(self._workers) < self._limit:
                worker = threading.Thread(target=self._work, name=f"{self._name}-{len(self._workers)}", daemon=True)
                self._workers.append(worker)
                worker.start()
        return future

    def _work(self) -> None:
        while True:
            item = self._items.get()
            if item is None:
                return
            with self._mutex:
                self._busy += 1
            future, fn, args, kwargs = item
            del item
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        result = fn(*args, **kwargs)
                    except BaseException as err:  # noqa: BLE001 - handed to the future, as ThreadPoolExecutor does
                        future.set_exception(err)
                    else:
                        future.set_result(result)
            finally:
                del future, fn, args, kwargs
                with self._mutex:
                    self._busy -= 1
                    self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new calls; with `cancel_futures` drop the queued ones; with `wait` block until every worker ended
        (unbounded, as the Executor contract says: use `join` for a bounded wait)."""
        with self._mutex:
            self._closed = True
            workers = list(self._workers)
        if cancel_futures:
            while True:
                try:
                    item = self._items.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in workers:
            self._items.put(None)
        if wait:
            for w in workers:
                w.join()

    def join(self, timeout: float) -> int:
        """Wait up to `timeout` seconds in all for the workers to end (after `shutdown`); return how many are still
        running a call."""
        deadline = time.monotonic() + timeout
        with self._mutex:
            workers = list(self._workers)
        for w in workers:
            w.join(max(0.0, deadline - time.monotonic()))
        return sum(w.is_alive() for w in workers)


class StreamSlots:
    """At most `limit` concurrent streams of one kind; `open()` gives a slot for the stream's life or refuses."""

    def __init__(self, limit: int, what: str, *, on_refused: Callable[[], None] | None = None) -> None:
        if limit < 1:
            raise ValueError("a stream limit must be at least 1")
        self.limit = limit
        self.what = what
        self._on_refused = on_refused
        self._lock = threading.Lock()
        self._open = 0
        self._open_seqs: set[int] = set()  # the sequence numbers of the streams open now
        self.opened = 0  # streams ever given a slot (the last sequence number)
        self.refused = 0  # streams ever refused

    @property
    def open_streams(self) -> int:
        with self._lock:
            return self._open

    def counts(self) -> tuple[int, int]:
        """(opened, refused) so far, read together: a mark to compare `since` with later."""
        with self._lock:
            return self.opened, self.refused

    def since(self, opened: int, refused: int) -> tuple[int, int, int]:
        """Since the mark `counts()` returned: (streams opened, of those still open, streams refused). The device
        plugin tells from them that the kubelet's stream for a registration ended, was refused or never came."""
        with self._lock:
            return (self.opened - opened, sum(seq > opened for seq in self._open_seqs), self.refused - refused)

    @contextmanager
    def hold(self, context: grpc.ServicerContext) -> Iterator[None]:
        """Hold a slot while the body runs; when none is free, abort the call with RESOURCE_EXHAUSTED."""
        with self._lock:
            full = self._open >= self.limit
            if full:
                self.refused += 1
            else:
                self._open += 1
                self.opened += 1
                seq = self.opened
                self._open_seqs.add(seq)
        if full:
            if self._on_refused is not None:
                self._on_refused()
            log.warning("refusing a %s stream: %d already open (the limit)", self.what, self.limit)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"too many {self.what} streams: {self.limit} are open, the limit of this server (a kubelet "
                          f"opens one per registration); close one and retry")
            raise AssertionError("ServicerContext.abort returned")  # pragma: no cover - abort always raises
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1
                self._open_seqs.discard(seq)


class GrpcServer:
    """One `grpc.Server` on its own `WorkerPool`, with a bounded `stop`."""

    def __init__(self, name: str, *, workers: int = DEFAULT_WORKERS, max_streams: int = 0,
                 max_concurrent_rpcs: int = DEFAULT_MAX_CONCURRENT_RPCS) -> None:
        """`max_streams`: worker threads reserved for streams on top of `workers` (give the same number to the
        `StreamSlots` that guard the streaming handlers)."""
        self.name = name
        self.pool = WorkerPool(workers + max_streams, name)
        self.server = grpc.server(self.pool, maximum_concurrent_rpcs=max(max_concurrent_rpcs, workers + max_streams))
        self.abandoned = 0
        self._stopped = False

    def serve_unix(self, path: str, mode: int) -> SocketIdentity:
        """Serve on the unix socket `path` with file `mode` (`bridge.unixsock.serve_unix`: never reachable with the
        umask's mode); SocketPathError when that is impossible, the server then stopped."""
        try:
            return serve_unix(self.server, path, mode)
        except SocketPathError:
            self.stop(0, 0)
            raise

    def stop(self, grace: float = DEFAULT_GRACE_S, abandon_after: float = DEFAULT_ABANDON_AFTER_S) -> int:
        """Stop accepting calls, give in-flight ones `grace` seconds, cancel the rest, and wait at most
        `abandon_after` more for the workers. Returns how many workers were abandoned still running a call.
        Idempotent; never blocks longer than about `grace + 2 * abandon_after`."""
        if self._stopped:
            return self.abandoned
        self._stopped = True
        start = time.monotonic()
        if not self.server.stop(grace).wait(grace + abandon_after):
            log.warning("%s: the gRPC server did not finish stopping within %.1fs", self.name, grace + abandon_after)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.abandoned = self.pool.join(abandon_after)
        if self.abandoned:
            log.warning("%s: %d worker(s) still busy %.1fs after stop; abandoning them (daemon threads, they end with "
                        "the process)", self.name, self.abandoned, time.monotonic() - start)
        return self.abandoned


__all__ = ["DEFAULT_MAX_STREAMS", "GrpcServer", "StreamSlots", "WorkerPool"]
