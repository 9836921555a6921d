"""The kubelet's ResourceSlice wiping, simulated (kubernetes/kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go
`NewDRAPluginManager`, `wipeResourceSlices`, `sync`, `usable`; pkg/kubelet/cm/dra/manager.go `defaultWipingDelay`).

* At kubelet start, **in the background**, all ResourceSlices with `spec.nodeName=<node>` are deleted
  (`DeleteCollection`). Each attempt first reads the Node and retries while it does not exist yet, so the wipe can
  land *after* a driver already registered and published: a driver must be ready to publish again.
* Per driver, when no plugin instance is usable (no connected gRPC connection, or none registered), a wipe of the
  driver's slices on this node (`spec.nodeName`, `spec.driver`) is scheduled `wiping_delay` later (30 s);
  a usable instance cancels it; a wipe already scheduled keeps its original time.
* Every wipe retries with exponential backoff: 1 s, factor 2, jitter 0.2, capped at 5 min, 100 steps (apimachinery
  `wait.Backoff`: the steps end once the delay reaches the cap). Stopping cancels every pending and running wipe.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from bridge.kube.api import NODES, KubeAPI
from bridge.kube.errors import KubeError, NotFound

log = logging.getLogger(__name__)

WIPING_DELAY_S = 30.0
BACKOFF_INITIAL_S = 1.0
BACKOFF_FACTOR = 2.0
BACKOFF_JITTER = 0.2
BACKOFF_CAP_S = 300.0
BACKOFF_STEPS = 100


class SliceWiper:
    def __init__(self, kube: KubeAPI, node_name: str, *, wiping_delay: float = WIPING_DELAY_S,
                 backoff_initial: float = BACKOFF_INITIAL_S, startup_delay: float = 0.0,
                 rand: Callable[[], float] = random.random) -> None:
        self.kube = kube
        self.node_name = node_name
        self.wiping_delay = wiping_delay
        self.backoff_initial = backoff_initial
        self.startup_delay = startup_delay  # tests: let a driver register before the startup wipe's first try
        self._rand = rand
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pending: dict[str, threading.Timer] = {}  # driver -> scheduled wipe
        self._threads: set[threading.Thread] = set()
        self.wipes: list[tuple[str, float]] = []  # (driver or "" for all, time.time()) of every completed wipe

    def start(self) -> None:
        """Start the startup wipe of all the node's slices (in the background, like the kubelet)."""
        self._stop.clear()
        self._spawn("", self.startup_delay)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            timers, self._pending = list(self._pending.values()), {}
            threads = list(self._threads)
        for t in timers:
            t.cancel()
        for th in threads:
            th.join(timeout=10)

    def sync(self, driver: str, usable: bool) -> None:
        """`DRAPluginManager.sync`: cancel the driver's pending wipe when usable, else make sure one is scheduled."""
        with self._lock:
            if self._stop.is_set():
                return
            timer = self._pending.get(driver)
            if usable:
                if timer is not None:
                    timer.cancel()
                    del self._pending[driver]
                    log.info("DRA driver usable again: slice wipe cancelled", extra={"driver": driver})
                return
            if timer is not None:
                return  # already queued: the original time still applies
            timer = threading.Timer(self.wiping_delay, self._fire, args=(driver,))
            timer.daemon = True
            timer.name = f"slice-wipe-{driver}"
            self._pending[driver] = timer
            timer.start()
            log.info("no usable plugin for DRA driver: its slices on this node are wiped in %.0fs unless it comes "
                     "back", self.wiping_delay, extra={"driver": driver})

    def pending(self) -> list[str]:
        with self._lock:
            return sorted(self._pending)

    def _fire(self, driver: str) -> None:
        with self._lock:
            self._pending.pop(driver, None)
            self._threads.add(threading.current_thread())
        try:
            self._wipe(driver)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _spawn(self, driver: str, delay: float) -> None:
        def run() -> None:
            try:
                if delay <= 0 or not self._stop.wait(delay):
                    self._wipe(driver)
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        th = threading.Thread(target=run, name="slice-wipe-startup", daemon=True)
        with self._lock:
            self._threads.add(th)
        th.start()

    def _attempt(self, selector: str) -> bool:
        """One try: True when done (deleted, or nothing to delete), False to retry."""
        try:
            self.kube.get(NODES, self.node_name)
        except NotFound:
            return False  # the Node is not registered yet
        except KubeError as err:
            log.info("checking for the Node failed, retrying", extra={"node": self.node_name, "error": str(err)})
            return False
        try:
            self.kube.delete_collection(self.kube.resource_api().slices, field_selector=selector)
        except NotFound:
            log.info("no ResourceSlices to delete", extra={"fieldSelector": selector})
            return True
        except KubeError as err:
            log.info("deleting ResourceSlices failed, retrying", extra={"fieldSelector": selector, "error": str(err)})
            return False
        log.info("deleted ResourceSlices", extra={"node": self.node_name, "fieldSelector": selector})
        return True

    def _wipe(self, driver: str) -> None:
        selector = f"spec.nodeName={self.node_name}" + (f",spec.driver={driver}" if driver else "")
        delay, capped = self.backoff_initial, False
        for _ in range(BACKOFF_STEPS):
            if self._stop.is_set():
                return
            if self._attempt(selector):
                self.wipes.append((driver, time.time()))
                return
            wait = delay * (1 + BACKOFF_JITTER * self._rand())
            if self._stop.wait(wait):
                return
            if capped:
                break
            delay *= BACKOFF_FACTOR
            if delay > BACKOFF_CAP_S:  # wait.Backoff.Step: at the cap the steps end after this retry
                delay, capped = BACKOFF_CAP_S, True
        log.warning("giving up deleting ResourceSlices", extra={"fieldSelector": selector})
