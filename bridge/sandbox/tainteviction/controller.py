"""The taint eviction controller stand-in's I/O shell (kube-controller-manager's "taint-eviction-controller").

A stand-in (never imported by production code), talking to the API server through `bridge.kube.KubeAPI` like the
real controller through client-go. Written from kubernetes/kubernetes v1.37.2 pkg/controller/tainteviction/
taint_eviction.go (`New`, `Run`, `worker`, `PodUpdated`, `NodeUpdated`, `handlePodUpdate`, `handleNodeUpdate`,
`deletePodHandler`, the Events) and timed_workers.go; the same in v1.35.4 and v1.38.0-beta.0. The rules are in
logic.py.

* **What it watches.** Every Node's NoExecute taints and every pod's node and tolerations. A Node event matters only
  when its NoExecute taints changed; a pod event only when the pod is new or gone, or its `nodeName` or tolerations
  changed (a status write changes nothing here). Node events are handled before pod events.
* **A Node's NoExecute taints changed**: each pod bound to it is (re)scheduled by `logic.schedule`: not tolerated,
  evicted now; tolerated for N seconds (the least of the matched tolerations'), evicted N seconds after it was first
  scheduled; tolerated for ever, left alone. A Node left with no NoExecute taint cancels its pods' evictions, each
  waiting one with a Normal Event `TaintManagerEviction` "Cancelling deletion of Pod <ns>/<name>".
* **An eviction**: a Normal Event `TaintManagerEviction` "Marking for deletion Pod <ns>/<name>", then the pod is read,
  gets the condition `DisruptionTarget` True (reason `DeletionByTaintManager`, message "Taint manager: deleting due
  to NoExecute taint") in a status write, and is deleted with its own grace period; up to 5 tries 10 ms apart. On a
  node whose kubelet stopped, the pod stays Terminating until the kubelet comes back or someone force-deletes it:
  that is the real behaviour, and why an operator of a dead GPU node sees Terminating pods after 5 minutes.

The 300 s every pod tolerates `unreachable`/`not-ready` comes from the DefaultTolerationSeconds admission (the API
emulator's bridge.sandbox.apiserver.tolerationseconds, kube-apiserver's on the real backend). Not modelled: the
8 sharded workers (one here, so pods are handled one after another), the metrics. The real controller starts each
eviction on a goroutine of its own; here one timer thread runs them in turn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from bridge.kube import NODES, PODS, Informer, KubeAPI, KubeError, WatchEvent, record_event
from bridge.kube.watch import kept_metadata
from bridge.sandbox.apiserver.clock import now_rfc3339
from bridge.sandbox.apiserver.profiles import KubernetesProfile

from ..threads import join_all, start_controller
from . import logic

log = logging.getLogger("bridge.sandbox.tainteviction")
Obj = dict[str, Any]
COMPONENT = "taint-eviction-controller"
DELETE_TRIES = 5  # taint_eviction.go `retries`
RETRY_SLEEP_S = 0.01


def _slim_pod(pod: Obj) -> Obj:
    """What the controller reads of a pod: its identity, node and tolerations (a sandbox cluster's every pod is held
    here, so the rest is dropped on arrival)."""
    spec = pod.get("spec") or {}
    return {"metadata": kept_metadata(pod),
            "spec": {k: spec[k] for k in ("nodeName", "tolerations") if k in spec}}


class TaintEvictionController:
    def __init__(self, api: KubeAPI, *, profile: KubernetesProfile, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.profile = profile
        self.clock = clock
        self.with_generation = profile.minor >= 34  # PodObservedGenerationTracking: on by default from 1.34
        self._pods = Informer(api, PODS, on_event=self._pod_event, watch_timeout=300, transform=_slim_pod)
        self._nodes = Informer(api, NODES, on_event=self._node_event, watch_timeout=300)
        # what the handlers compare an event with (the real informers hand them the old object)
        self._pod_seen: dict[str, tuple[str, tuple[Obj, ...]]] = {}
        self._node_seen: dict[str, tuple[tuple[str, str], ...]] = {}
        self._tainted: dict[str, tuple[tuple[str, str], ...]] = {}  # taintedNodes
        self._queue = logic.TimedQueue()
        self._cond = threading.Condition()  # guards the update deques and the timed queue
        self._node_updates: deque[str] = deque()
        self._pod_updates: deque[tuple[str, str]] = deque()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.evicted = 0
        self.errors = 0

    # -- lifecycle ----------------------------------------------------------------------------------------------------

    def start(self) -> TaintEvictionController:
        self._threads = start_controller((self._pods, self._nodes), self._stop,
                                         (("updates", self._update_worker), ("evictions", self._eviction_worker)),
                                         "taint-eviction")
        log.info("taint eviction controller stand-in started (Kubernetes %s)", self.profile.version)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._threads = join_all(self._threads, timeout, "taint eviction controller stand-in", log)

    def __enter__(self) -> TaintEvictionController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def scheduled(self) -> dict[str, float]:
        """The pods whose eviction is waiting, and when it fires (the controller's clock)."""
        with self._cond:
            return {k: w.fire_at for k, w in self._queue.work.items() if not w.fired}

    # -- events (`PodUpdated`, `NodeUpdated`) --------------------------------------------------------------------------

    def _pod_event(self, ev: WatchEvent) -> None:
        pod = ev.object
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        seen = (node, logic.tolerations_of(pod))
        old = self._pod_seen.pop(key, None) if ev.type == "DELETED" else self._pod_seen.get(key)
        if ev.type != "DELETED":
            self._pod_seen[key] = seen
            if old == seen:
                return
        with self._cond:
            self._pod_updates.append((key, node))
            self._cond.notify_all()

    def _node_event(self, ev: WatchEvent) -> None:
        name = str((ev.object.get("metadata") or {}).get("name"))
        taints = logic.no_execute_taints(ev.object)
        if ev.type == "DELETED":
            self._node_seen.pop(name, None)
        else:
            if name in self._node_seen and self._node_seen[name] == taints:
                return  # its NoExecute taints did not change
            self._node_seen[name] = taints
        with self._cond:
            self._node_updates.append(name)
            self._cond.notify_all()

    def _update_worker(self) -> None:
        """`worker`: Node updates first, then one pod update, as the real one empties its node channel first."""
        while True:
            with self._cond:
                while not (self._stop.is_set() or self._node_updates or self._pod_updates):
                    self._cond.wait()
                if self._stop.is_set():
                    return
                node = self._node_updates.popleft() if self._node_updates else None
                pod = self._pod_updates.popleft() if node is None else None
            try:
                if node is not None:
                    self._handle_node(node)
                elif pod is not None:
                    self._handle_pod(*pod)
            except Exception:  # noqa: BLE001 - a stand-in bug must not stop the worker; logged for the test to see
                self.errors += 1
                log.exception("taint eviction stand-in: handling %s failed", node or pod)

    # -- `handleNodeUpdate`, `handlePodUpdate`, `processPodOnNode` -----------------------------------------------------

    def _handle_node(self, name: str) -> None:
        node = self._nodes.store.get(name)  # one key: no copy of the store (a dict read is atomic)
        if node is None:
            self._tainted.pop(name, None)
            return
        taints = logic.no_execute_taints(node)
        if taints:
            self._tainted[name] = taints
        else:
            self._tainted.pop(name, None)
        pods = {k: p for k, p in self._pods.snapshot().items() if (p.get("spec") or {}).get("nodeName") == name}
        if not taints:
            for key in pods:
                self._cancel(key)
            return
        now = self.clock()
        for key, pod in pods.items():
            self._process(key, taints, pod, now)

    def _handle_pod(self, key: str, node_name: str) -> None:
        pod = self._pods.store.get(key)
        if pod is None:
            self._cancel(key)  # "Noticed pod deletion"
            return
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if node != node_name or not node:
            return
        taints = self._tainted.get(node)
        if taints:
            self._process(key, taints, pod, self.clock())

    def _process(self, key: str, taints: tuple[tuple[str, str], ...], pod: Obj, now: float) -> None:
        with self._cond:
            outcome, cancelled = logic.schedule(self._queue, key, taints, logic.tolerations_of(pod), now)
            self._cond.notify_all()
        if cancelled:
            self._event(key, "Cancelling deletion of Pod")
        log.debug("pod %s on a node tainted %s: eviction %s", key, [k for k, _ in taints], outcome)

    def _cancel(self, key: str) -> None:
        with self._cond:
            cancelled = self._queue.cancel(key)
        if cancelled:
            self._event(key, "Cancelling deletion of Pod")

    # -- evictions (`deletePodHandler`) ---------------------------------------------------------------------------------

    def _eviction_worker(self) -> None:
        while True:
            with self._cond:
                while not self._stop.is_set():
                    due = self._queue.due(self.clock())
                    if due:
                        break
                    at = self._queue.next_at()
                    self._cond.wait(None if at is None else max(0.0, min(at - self.clock(), 1.0)))
                if self._stop.is_set():
                    return
            for key in due:
                try:
                    self._evict(key)
                finally:
                    with self._cond:
                        self._queue.done(key)

    def _evict(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        log.info("Deleting pod %s (controller %s)", key, COMPONENT)
        self._event(key, "Marking for deletion Pod")
        err: KubeError | None = None
        for _ in range(DELETE_TRIES):
            try:
                pod = self.api.get(PODS, name, namespace)
                status = logic.disruption_status(pod, now_rfc3339(now=self.clock()), self.with_generation)
                if status is not None:
                    self.api.update(PODS, {**pod, "status": status}, namespace, subresource="status")
                self.api.delete(PODS, name, namespace)
                self.evicted += 1
                return
            except KubeError as e:  # NotFound too, as the real handler retries every error
                err = e
                if self._stop.wait(RETRY_SLEEP_S):
                    return
        self.errors += 1
        log.warning("taint eviction of pod %s failed: %s", key, err)

    def _event(self, key: str, what: str) -> None:
        namespace, name = key.split("/", 1)
        ref = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}}
        try:
            record_event(self.api, ref, "TaintManagerEviction", f"{what} {key}", "Normal", component=COMPONENT)
        except KubeError as e:
            log.debug("could not record event for %s: %s", key, e)


__all__ = ["COMPONENT", "TaintEvictionController"]
