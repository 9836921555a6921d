"""Keeps this node's ResourceSlices on the API server equal to `slices.desired_slices(...)`. The I/O half.

Invariants:
* Scope: only slices with `spec.nodeName=<node>` and `spec.driver=<driver>` are read, written or deleted (field
  selectors, checked again client-side). Other drivers' and other nodes' slices are never touched.
* No write when nothing changed: every reconcile lists, compares what the server holds with the desired pool
  (`slices.pool_unchanged`, which ignores server-side additions) and returns without a request when they agree.
* On any change every slice of the pool is written with one new generation (`max(server, last written) + 1`,
  so it only grows within a process and across restarts), creates and updates first, deletions of surplus slices
  last: a consumer always sees a complete pool at the highest generation.
* Never gives up: a failed reconcile (API down, conflict, RBAC) is retried by the worker thread with exponential
  backoff, the inputs that arrived meanwhile included. The client layer retries single requests inside its own
  deadline; this loop retries whole reconciles beyond it.
* Restores what others delete: the kubelet wipes a node's slices at its start (DeleteCollection by
  `spec.nodeName`) and a driver's slices 30 s after the driver's last registration went away. A watch on our own
  slices triggers a reconcile (debounced) on every change that is not our own write, and `republish()` is called
  by the daemon after each (re)registration.
* Health: an unhealthy DRA-side device is tainted `NoSchedule` where the server keeps device taints, else removed
  from the slice. `taints="auto"` (default) asks the server once, with a dry-run create of a tainted probe slice,
  whether the taint survives (servers with the `DRADeviceTaints` gate off drop the field silently), and checks every
  real write too: a server that drops the taint flips the publisher to removal at once. `"on"`/`"off"` force it.

Threads: `start()` runs one worker (reconciles) and one watcher (an Informer on our slices); inputs
(`set_dra_devices`, `set_health`, `republish`) only mark the state dirty and return at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from bridge.dra.slices import (
    DEFAULT_DRIVER,
    NodeRef,
    SliceInputs,
    desired_slices,
    device_has_taints,
    pool_generation,
    pool_unchanged,
    slice_name,
    validate_driver_name,
    validate_node_name,
)
from bridge.inventory.model import DeviceID, GpuDevice, HealthEvent
from bridge.kube.api import NODES, KubeAPI, Obj, ResourceAPI, WatchEvent
from bridge.kube.errors import AlreadyExists, BadRequest, Conflict, Invalid, KubeError, NotFound
from bridge.kube.retry import RetryPolicy
from bridge.kube.watch import Informer

log = logging.getLogger(__name__)

TaintMode = Literal["auto", "on", "off"]
TAINT_MODES: tuple[TaintMode, ...] = ("auto", "on", "off")


@dataclass(frozen=True)
class ReconcileResult:
    changed: bool
    generation: int
    created: int = 0
    updated: int = 0
    deleted: int = 0
    slices: int = 0


@dataclass
class PublisherStats:
    """Counters for metrics and tests (read without a lock: plain ints, updated by the worker only)."""

    reconciles: int = 0
    noops: int = 0
    creates: int = 0
    updates: int = 0
    deletes: int = 0
    failures: int = 0
    restores: int = 0  # reconciles triggered by someone else deleting/changing our slices

    @property
    def writes(self) -> int:
        return self.creates + self.updates + self.deletes


class SlicePublisher:
    def __init__(
        self,
        api: KubeAPI,
        inventory: Sequence[GpuDevice],
        *,
        node_name: str,
        driver: str = DEFAULT_DRIVER,
        dra_devices: Iterable[str] = (),
        taints: TaintMode = "auto",
        debounce_s: float = 0.05,
        resync_interval_s: float = 300.0,
        backoff: RetryPolicy | None = None,
        watch: bool = True,
        on_published: Callable[[frozenset[DeviceID]], None] | None = None,
    ) -> None:
        """`inventory`: every GPU of the node; `dra_devices`: UUIDs on the DRA side now (changed later through
        `set_dra_devices`). `debounce_s` coalesces bursts (health storms, a kubelet wipe deleting several slices)
        into one reconcile. `resync_interval_s`: a full reconcile at least this often, as a safety net.
        `on_published(dra)` is called after a reconcile that confirmed a new DRA set on the server (the split waits
        for that before a device withdrawn from DRA goes to the device plugin)."""
        if taints not in TAINT_MODES:
            raise ValueError(f"taints must be one of {', '.join(TAINT_MODES)}, not {taints!r}")
        if debounce_s < 0 or resync_interval_s <= 0:
            raise ValueError("debounce_s must be >= 0 and resync_interval_s > 0")
        self.api = api
        self.node_name = validate_node_name(node_name)
        self.driver = validate_driver_name(driver)
        self.taint_mode: TaintMode = taints
        self.debounce_s = debounce_s
        self.resync_interval_s = resync_interval_s
        self.backoff = backoff or RetryPolicy(initial_backoff=0.2, factor=2.0, max_backoff=10.0)
        self.watch_enabled = watch
        self.on_published = on_published
        self.stats = PublisherStats()
        self.last_error: Exception | None = None

        self._inventory = {d.uuid: d for d in inventory}
        self._cond = threading.Condition()
        self._dra: frozenset[DeviceID] = self._known(dra_devices)
        self._published: frozenset[DeviceID] | None = None  # the DRA set the server's pool was last confirmed to hold
        # Held from before a write is sent until its resourceVersion is remembered, so the watch cannot take our own
        # write's event for someone else's change (it waits for the writer instead).
        self._writing = threading.Lock()
        self._unhealthy: dict[DeviceID, str] = {}
        self._requested = 0  # bumped by every trigger
        self._done = 0  # the request number the last successful reconcile covered
        self._last_generation = 0
        self._our_versions: set[str] = set()  # resourceVersions of our own writes (the watch ignores them)
        self._our_deletes: set[str] = set()  # names we deleted and whose DELETED event has not been seen yet
        self._rapi: ResourceAPI | None = None
        self._node: NodeRef | None = None
        self._taints_ok: bool | None = {"on": True, "off": False}.get(taints)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._informer: Informer | None = None

    # ---- inputs ------------------------------------------------------------------------------------------------

    def set_dra_devices(self, uuids: Iterable[str]) -> None:
        """The UUIDs on the DRA side now (the ledger's view); publishes when it differs from the last call."""
        new = self._known(uuids)
        with self._cond:
            if new == self._dra:
                return
            self._dra = new
        self.trigger("dra-side devices changed")

    def set_health(self, event: HealthEvent) -> None:
        """Feed every health event of the device source here (unknown devices are logged and ignored)."""
        if event.uuid not in self._inventory:
            log.warning("health event for unknown device %s ignored", event.uuid, extra={"device": event.uuid})
            return
        reason = f"xid-{event.xid}" if event.xid is not None else (event.reason or "unhealthy")
        with self._cond:
            old = self._unhealthy.get(event.uuid)
            if event.healthy:
                if old is None:
                    return
                del self._unhealthy[event.uuid]
            else:
                if old == reason:
                    return
                self._unhealthy[event.uuid] = reason
        self.trigger(f"health of {event.uuid} changed")

    def republish(self, reason: str = "plugin (re)registered") -> None:
        """Re-check the server and restore anything missing. Call after every DRA (re)registration: the kubelet
        deletes a node's slices when it starts."""
        self.trigger(reason)

    def trigger(self, reason: str = "") -> None:
        with self._cond:
            self._requested += 1
            self._cond.notify_all()
        log.debug("slice reconcile requested: %s", reason)

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._threads:
            return
        self._stop.clear()
        self.trigger("start")
        worker = threading.Thread(target=self._worker, name="slice-publisher", daemon=True)
        self._threads.append(worker)
        if self.watch_enabled:
            self._threads.append(threading.Thread(target=self._watcher, name="slice-watch", daemon=True))
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)
        self._threads = []

    def wait_synced(self, timeout: float) -> bool:
        """Block until a reconcile that started after this call's latest trigger has succeeded."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._requested
            while self._done < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    def published_dra(self) -> frozenset[DeviceID] | None:
        """The DRA-side devices the API server's pool was last confirmed to reflect (None before the first
        successful reconcile). A device absent from it is offered to no DRA consumer that reads the server."""
        with self._cond:
            return self._published

    @property
    def generation(self) -> int:
        """The pool generation this publisher last wrote or found on the server (0 before the first reconcile)."""
        return self._last_generation

    # NodeComponent (bridge.node.daemon): an API outage must not make the pod restart, so no liveness check;
    # readiness says whether the pool on the server is current.
    def liveness(self) -> Mapping[str, Callable[[], str | None]]:
        return {}

    def readiness(self) -> Mapping[str, Callable[[], str | None]]:
        def published() -> str | None:
            err = self.last_error
            if err is not None:
                return f"ResourceSlices not published: {err}"
            return None if self._done > 0 else "ResourceSlices not published yet"

        return {"dra-slices": published}

    def __enter__(self) -> SlicePublisher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- reconcile ---------------------------------------------------------------------------------------------

    @property
    def selector(self) -> str:
        return f"spec.nodeName={self.node_name},spec.driver={self.driver}"

    def existing(self) -> list[Obj]:
        rapi = self._resource_api()
        items = self.api.list(rapi.slices, field_selector=self.selector).get("items") or []
        return [s for s in items if (s.get("spec") or {}).get("nodeName") == self.node_name
                and (s.get("spec") or {}).get("driver") == self.driver]

    def desired(self, generation: int = 0, dra: frozenset[DeviceID] | None = None) -> list[Obj]:
        with self._cond:
            dra = self._dra if dra is None else dra
            unhealthy = {u: r for u, r in self._unhealthy.items() if u in dra}
        taints = self._taints_supported() if unhealthy else self.taint_mode != "off"
        return desired_slices(SliceInputs(
            node=self._node_ref(), dra_devices=tuple(self._inventory[u] for u in dra), unhealthy=unhealthy,
            driver=self.driver, version=self._resource_api().version, taints=taints, generation=generation))

    def reconcile_once(self) -> ReconcileResult:
        """One synchronous pass: list, compare, write the difference. Raises `KubeError` on failure."""
        self.stats.reconciles += 1
        rapi = self._resource_api()
        with self._cond:
            dra = self._dra
        existing = self.existing()
        desired = self.desired(dra=dra)
        if pool_unchanged(desired, existing):
            self.stats.noops += 1
            gen = pool_generation(existing)
            self._last_generation = max(self._last_generation, gen)
            self._confirm(dra)
            return ReconcileResult(changed=False, generation=gen, slices=len(existing))
        generation = max(pool_generation(existing), self._last_generation) + 1
        desired = self.desired(generation, dra=dra)
        by_name = {s["metadata"]["name"]: s for s in existing}
        created = updated = deleted = 0
        lost_taints = False
        for want in desired:
            name = want["metadata"]["name"]
            have = by_name.pop(name, None)
            if have is not None and ((have.get("spec") or {}).get("pool") or {}).get("name") != self.node_name:
                # pool name is immutable: replace the slice
                self._delete(rapi, name)
                deleted += 1
                have = None
            with self._writing:
                if have is None:
                    stored = self.api.create(rapi.slices, want)
                    created += 1
                else:
                    want["metadata"]["resourceVersion"] = have["metadata"].get("resourceVersion")  # freshly built
                    stored = self.api.update(rapi.slices, want)
                    updated += 1
                self._remember(stored)
            if any(device_has_taints(d) for d in want["spec"]["devices"]) and not any(
                    device_has_taints(d) for d in (stored.get("spec") or {}).get("devices") or []):
                lost_taints = True
        for name in sorted(by_name):
            self._delete(rapi, name)
            deleted += 1
        self._last_generation = generation
        self._confirm(dra)
        self.stats.creates += created
        self.stats.updates += updated
        self.stats.deletes += deleted
        log.info("published %d ResourceSlice(s) for pool %s at generation %d (%d created, %d updated, %d deleted)",
                 len(desired), self.node_name, generation, created, updated, deleted,
                 extra={"node": self.node_name, "driver": self.driver, "generation": generation})
        if lost_taints and self.taint_mode == "auto":
            log.warning("the API server dropped device taints (DRADeviceTaints off?): unhealthy devices are removed "
                        "from the ResourceSlice instead", extra={"node": self.node_name})
            self._taints_ok = False
            self.trigger("server dropped device taints")
        return ReconcileResult(changed=True, generation=generation, created=created, updated=updated,
                               deleted=deleted, slices=len(desired))

    def cleanup(self) -> int:
        """Delete every slice of this node and driver (uninstall, `bridge node --cleanup`); stops the worker and
        watcher first so nothing restores them. Returns how many were deleted. Needs list + delete only."""
        self.stop()
        rapi = self._resource_api()
        count = 0
        for s in self.existing():
            if self._delete(rapi, s["metadata"]["name"]):
                count += 1
        log.info("deleted %d ResourceSlice(s) of driver %s on node %s", count, self.driver, self.node_name,
                 extra={"node": self.node_name, "driver": self.driver})
        return count

    # ---- internals ---------------------------------------------------------------------------------------------

    def _confirm(self, dra: frozenset[DeviceID]) -> None:
        with self._cond:
            changed = self._published != dra
            self._published = dra
        if changed and self.on_published is not None:
            try:
                self.on_published(dra)
            except Exception:  # noqa: BLE001 - a listener must not fail the reconcile
                log.exception("on_published listener failed")

    def _known(self, uuids: Iterable[str]) -> frozenset[DeviceID]:
        out = set()
        for u in uuids:
            if DeviceID(u) not in self._inventory:
                raise ValueError(f"device {u!r} is not in this node's inventory")
            out.add(DeviceID(u))
        return frozenset(out)

    def _resource_api(self) -> ResourceAPI:
        if self._rapi is None:
            self._rapi = self.api.resource_api()
            log.info("publishing ResourceSlices through resource.k8s.io/%s", self._rapi.version)
        return self._rapi

    def _node_ref(self) -> NodeRef:
        if self._node is None:
            try:
                node = self.api.get(NODES, self.node_name)
            except NotFound as err:
                raise NotFound(f"Node {self.node_name!r} does not exist: ResourceSlices are owned by their Node; "
                               f"check --node-name (usually from the downward API spec.nodeName)",
                               status=404) from err
            self._node = NodeRef(self.node_name, str(node["metadata"]["uid"]))
        return self._node

    def _taints_supported(self) -> bool:
        if self._taints_ok is None:
            self._taints_ok = self._probe_taints()
        return self._taints_ok

    def _probe_taints(self) -> bool:
        """Dry-run create of a slice with one tainted device: does the server keep `taints`?"""
        rapi = self._resource_api()
        inventory = sorted(self._inventory.values(), key=lambda d: d.index)
        probe = desired_slices(SliceInputs(
            node=self._node_ref(), dra_devices=(inventory[0],), unhealthy={inventory[0].uuid: "probe"},
            driver=self.driver, version=rapi.version, taints=True))[0]
        probe["metadata"]["name"] = slice_name(self.node_name, self.driver, 0)[:200] + "-taint-probe"
        try:
            echoed = self.api.create(rapi.slices, probe, dry_run=True)
        except (Invalid, BadRequest) as err:
            log.warning("the API server refused a device taint (%s): unhealthy devices will be removed from the "
                        "ResourceSlice instead of tainted", err.message)
            return False
        except AlreadyExists:
            return True  # cannot tell; keep the documented default and rely on the check after each write
        kept = any(device_has_taints(d) for d in (echoed.get("spec") or {}).get("devices") or [])
        log.info("device taints %s by the API server: unhealthy devices will be %s",
                 "kept" if kept else "dropped", "tainted NoSchedule" if kept else "removed from the ResourceSlice")
        return kept

    def _delete(self, rapi: ResourceAPI, name: str) -> bool:
        with self._cond:
            self._our_deletes.add(name)
        try:
            self.api.delete(rapi.slices, name)
            return True
        except NotFound:
            return False

    def _remember(self, stored: Obj) -> None:
        rv = (stored.get("metadata") or {}).get("resourceVersion")
        if rv:
            with self._cond:
                self._our_versions.add(str(rv))
                if len(self._our_versions) > 4096:
                    self._our_versions = set(sorted(self._our_versions, key=_rv_key)[-1024:])

    def _worker(self) -> None:
        failures = 0
        while not self._stop.is_set():
            with self._cond:
                if self._done >= self._requested:
                    self._cond.wait(self.resync_interval_s)
                    if self._stop.is_set():
                        return
                    if self._done >= self._requested:
                        self._requested += 1  # periodic resync
            if self.debounce_s and self._stop.wait(self.debounce_s):
                return
            with self._cond:
                covering = self._requested
            try:
                self.reconcile_once()
            except (KubeError, ValueError) as err:
                failures += 1
                self.stats.failures += 1
                self.last_error = err
                delay = 0.0 if isinstance(err, Conflict) and failures < 3 else self.backoff.backoff(failures - 1)
                hint = err.rbac_hint if hasattr(err, "rbac_hint") else str(err)
                log.warning("publishing ResourceSlices failed (attempt %d): %s; retrying in %.1fs", failures, hint,
                            delay, extra={"node": self.node_name, "driver": self.driver})
                if self._stop.wait(delay):
                    return
                continue
            failures = 0
            self.last_error = None
            with self._cond:
                self._done = max(self._done, covering)
                self._cond.notify_all()

    def _watcher(self) -> None:
        while self._rapi is None and not self._stop.is_set():
            try:
                self._resource_api()
            except KubeError as err:
                log.debug("slice watch waits for the API: %s", err.message)
                self._stop.wait(1.0)
        if self._stop.is_set():
            return
        self._informer = Informer(self.api, self._resource_api().slices, field_selector=self.selector,
                                  on_event=self._on_watch_event, backoff=self.backoff)
        self._informer.run(self._stop)

    def _on_watch_event(self, ev: WatchEvent) -> None:
        rv = str((ev.object.get("metadata") or {}).get("resourceVersion", ""))
        name = str((ev.object.get("metadata") or {}).get("name"))
        with self._writing, self._cond:
            if ev.type == "DELETED":
                ours = name in self._our_deletes
                self._our_deletes.discard(name)
            else:
                ours = rv in self._our_versions
        if ours:
            return
        if ev.type != "ADDED":
            self.stats.restores += 1
            log.info("our ResourceSlice %s was %s by someone else; reconciling", name, ev.type.lower(),
                     extra={"node": self.node_name, "slice": name})
        self.trigger(f"watch: {ev.type} {name}")


def _rv_key(rv: str) -> tuple[int, str]:
    return (int(rv), rv) if rv.isdigit() else (0, rv)


__all__ = ["PublisherStats", "ReconcileResult", "SlicePublisher", "TAINT_MODES", "TaintMode"]
