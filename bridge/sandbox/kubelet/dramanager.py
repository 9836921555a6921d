"""The kubelet's DRA manager, simulated: plugin handler, NodePrepare/Unprepare caller, health-stream consumer.

Written from kubernetes/kubernetes pkg/kubelet/cm/dra/manager.go @001332b0 (`prepareResources`,
`unprepareResources`, `reconcileLoop`) and pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go (`add`, `get`,
`validateSupportedServices`, `HandleConn`; the 45 s call timeout from dra_plugin.go). What it reproduces:

* registration: `validate_plugin` picks the first entry of the *plugin's* list that this kubelet supports
  (`v1.DRAPlugin`, `v1beta1.DRAPlugin`); an empty list or no supported entry is rejected; an endpoint already
  registered for the driver is refused. Several instances per driver may be registered; calls go to the newest
  *connected* one, else the newest. The health service is `v1.DRAResourceHealth` over `v1alpha1`.
* the gRPC connection of each instance is watched (ConnBegin/ConnEnd); when no instance of a driver is usable,
  its slices on this node are wiped 30 s later unless one comes back; at start all of the node's slices are wiped
  in the background (`SliceWiper`).
* `prepare_pod`: GET every ResourceClaim of the pod (plus the scheduler-made extended-resource claim on 1.36+),
  check template claims are owned by the pod, require the pod in `status.reservedFor` and an allocation, fail the
  pod before recording anything when a driver has no registered plugin, skip claims already prepared (a claim
  shared by pods is prepared once), send ONE `NodePrepareResources` per driver with all of the pod's unprepared
  claims for it under a **45 s** deadline, and check the answer like the kubelet: gRPC error, an entry for a UID
  it did not ask for, an entry with `error`, or missing entries ("skipped N ResourceClaims") all fail the pod start
  (`PodPrepareError`), to be retried. Claims are marked prepared only after every batch succeeded.
* `unprepare_pod`: drops the pod's reference; a claim whose last pod went away is unprepared (one call per
  driver, every requested claim must be in the answer); a failure keeps the record so a retry calls again.
  `unprepare_inactive` is the reconcile loop's pass over pods that are no longer active.
* `restart()` (`stop()`, `forget_prepared()`, `start()`): what a kubelet restart looks like to a plugin:
  registrations dropped and rediscovered, the in-memory "prepared" flags lost (so Prepare is called again), the
  claim->pod references kept (they are in the kubelet's checkpoint), and all ResourceSlices of the node wiped again
  in the background.
* the health stream: one `NodeWatchResources` per registered plugin, reconnected every 5 s when it fails; the
  latest status per (driver, pool, device) is kept (for tests to read, and for the pods' `allocatedResourcesStatus`,
  `claim_status_entries`) until the stream ends, which clears the driver's entries (`clearDriver`; a kubelet
  restart keeps them: the new process reads them back from its checkpoint). With ResourceHealthStatus on (1.36+), a
  device whose health changed (or is reported for the first time) makes the pods of every cached claim allocated
  to it sync at once (`on_pod_updates`): the claim's cache entry, with the devices of its allocation, is written in
  the prepare's validation pass BEFORE NodePrepareResources is called, so this reaches a pod whose prepare the
  plugin refused too (`HandleWatchResourcesStream`, `newClaimInfoFromClaim`).
* PodResources: `dynamic_assignments()` (a `DynamicResourcesSource`) reports every device prepared for a claim
  on each container of each pod using it, like the kubelet's claim-info cache, which survives a kubelet restart
  (it is checkpointed), so the report does too.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

import grpc

from bridge._proto.dra.v1 import dra_pb2 as dra_v1
from bridge._proto.dra.v1 import dra_pb2_grpc as dra_v1_grpc
from bridge._proto.dra.v1beta1 import dra_pb2 as dra_v1beta1
from bridge._proto.dra.v1beta1 import dra_pb2_grpc as dra_v1beta1_grpc
from bridge._proto.drahealth.v1 import drahealth_pb2 as health_v1
from bridge._proto.drahealth.v1 import drahealth_pb2_grpc as health_v1_grpc
from bridge._proto.drahealth.v1alpha1 import drahealth_pb2 as health_v1alpha1
from bridge._proto.drahealth.v1alpha1 import drahealth_pb2_grpc as health_v1alpha1_grpc
from bridge.kube.api import KubeAPI, Obj
from bridge.kube.errors import KubeError
from bridge.kvalues.names import DNS_SUBDOMAIN_MSG, DNS_SUBDOMAIN_RE
from bridge.sandbox.kubelet.pluginwatcher import PluginRejected, PluginWatcher
from bridge.sandbox.kubelet.podclaims import (
    ClaimNotReady,
    PodClaim,
    check_for_pod,
    containers_using,
    pod_claim_names,
    pod_claims,
    reserved_for_pod,
)
from bridge.sandbox.kubelet.podresources import DynamicAssignment
from bridge.sandbox.kubelet.resourcestatus import (
    ClaimDevice,
    actual_claim_name,
    claim_resource_name,
    claim_resources,
    device_health,
)
from bridge.sandbox.kubelet.slicewipe import BACKOFF_INITIAL_S, WIPING_DELAY_S, SliceWiper
from bridge.sandbox.kubelet.version import DEFAULT_VERSION, KubeletVersion
from bridge.unixsock import url_dial_problem

log = logging.getLogger(__name__)
_T = TypeVar("_T")

SERVICES_SUPPORTED_BY_KUBELET = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
HEALTH_SERVICES_BY_PREFERENCE = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
CALL_TIMEOUT_S = 45.0
HEALTH_RETRY_S = 5.0

_DRA_MODULES: dict[str, tuple[ModuleType, Any]] = {
    "v1.DRAPlugin": (dra_v1, dra_v1_grpc.DRAPluginStub),
    "v1beta1.DRAPlugin": (dra_v1beta1, dra_v1beta1_grpc.DRAPluginStub),
}
_HEALTH_MODULES: dict[str, tuple[ModuleType, Any]] = {
    "v1.DRAResourceHealth": (health_v1, health_v1_grpc.DRAResourceHealthStub),
    "v1alpha1.DRAResourceHealth": (health_v1alpha1, health_v1alpha1_grpc.DRAResourceHealthStub),
}


class PodPrepareError(Exception):
    """Pod start fails for now (the kubelet retries later): the message is what the kubelet would report."""


class PodUnprepareError(Exception):
    pass


def choose_service(plugin_versions: list[str]) -> str:
    """The kubelet's `validateSupportedServices`: the first entry of the plugin's list the kubelet supports."""
    for version in plugin_versions:
        if version in SERVICES_SUPPORTED_BY_KUBELET:
            return version
    raise PluginRejected(
        f"none of the versions supported by the plugin ({plugin_versions}) is supported by this kubelet "
        f"({list(SERVICES_SUPPORTED_BY_KUBELET)})"
    )


UNIX_PATH_MAX = 108


def driver_name_problem(name: str) -> str | None:
    """1.38+ `validateDriverName` (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go): the name as a CSI driver name
    (pkg/apis/core/validation `ValidateCSIDriverName`: required, at most 63 bytes, a DNS subdomain once lower-cased)."""
    if not name:
        errors = ["driverName: Required value"]
    else:
        errors = ["driverName: Too long: may not be more than 63 bytes"] if len(name.encode()) > 63 else []
        if not DNS_SUBDOMAIN_RE.match(name.lower()) or len(name) > 253:
            errors.append(f"driverName: Invalid value: {json.dumps(name)}: {DNS_SUBDOMAIN_MSG}")
    if not errors:
        return None
    return "invalid DRA driver name: " + (errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")


def endpoint_problem(endpoint: str) -> str | None:
    """1.38+ `validateEndpoint` (dra_plugin_manager.go): absolute, shorter than a unix socket path's 108 bytes, and
    what gRPC dials when it parses `"unix:" + endpoint` as a URL (bridge.unixsock.url_dial_problem)."""
    quoted = json.dumps(endpoint, ensure_ascii=False)
    if not endpoint:
        return "empty DRA plugin endpoint"
    if not endpoint.startswith("/"):
        return f"DRA plugin endpoint {quoted} must be an absolute path"
    if len(endpoint.encode()) >= UNIX_PATH_MAX:
        return f"DRA plugin endpoint {quoted} must not be longer than {UNIX_PATH_MAX} bytes"
    if url_dial_problem(endpoint) is not None:
        return f"DRA plugin endpoint {quoted} must be a plain path"
    return None


def choose_health_service(plugin_versions: list[str]) -> str | None:
    return next((h for h in HEALTH_SERVICES_BY_PREFERENCE if h in plugin_versions), None)


@dataclass
class PluginConn:
    driver: str
    endpoint: str
    service: str  # "v1.DRAPlugin" | "v1beta1.DRAPlugin"
    health_service: str | None
    channel: grpc.Channel
    stop: threading.Event = field(default_factory=threading.Event)
    stream: Any = None  # the open health stream, cancelled on deregistration
    connected: bool = False  # the gRPC connection is up (grpc stats ConnBegin .. ConnEnd)

    @property
    def pb(self) -> ModuleType:
        return _DRA_MODULES[self.service][0]

    def stub(self) -> Any:
        return _DRA_MODULES[self.service][1](self.channel)


@dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass
class ClaimRecord:
    """The kubelet's checkpointed view of one claim (`dra_manager_state`) plus the in-memory prepared flags."""

    uid: str
    namespace: str
    name: str
    drivers: frozenset[str]
    pods: set[str] = field(default_factory=set)
    prepared: dict[str, tuple[PreparedDevice, ...]] = field(default_factory=dict)  # driver -> devices, once prepared
    pending: dict[str, tuple[PreparedDevice, ...]] = field(default_factory=dict)  # answers of the current attempt
    is_prepared: bool = False  # set only after every batch of the preparing pod succeeded
    # pod UID -> (namespace, pod name, containers using this claim); checkpointed like `pods`
    pod_refs: dict[str, tuple[str, str, tuple[str, ...]]] = field(default_factory=dict)
    # driver -> devices of the last successful prepare; survives a restart (claim-info checkpoint)
    known_devices: dict[str, tuple[PreparedDevice, ...]] = field(default_factory=dict)
    # (driver, pool, device) of the claim's allocation, recorded before NodePrepareResources is called
    allocated: frozenset[tuple[str, str, str]] = frozenset()

    @property
    def fully_prepared(self) -> bool:
        return self.is_prepared


@dataclass(frozen=True)
class DeviceHealthSeen:
    health: str  # "Healthy" | "Unhealthy" | "Unknown"
    message: str
    last_updated: int
    timeout_seconds: int
    received_at: float


class DraManager:
    """The kubelet's DRA side for one node. Also the `DRAPlugin` handler of a `PluginWatcher`."""

    def __init__(
        self,
        kube: KubeAPI,
        node_name: str,
        registry_dir: str,
        *,
        call_timeout: float = CALL_TIMEOUT_S,
        health_retry: float = HEALTH_RETRY_S,
        poll_interval: float = 0.1,
        version: KubeletVersion | None = None,
        wiping_delay: float = WIPING_DELAY_S,
        wipe_backoff: float = BACKOFF_INITIAL_S,
        startup_wipe_delay: float = 0.0,
    ) -> None:
        self.kube = kube
        self.node_name = node_name
        self.call_timeout = call_timeout
        self.health_retry = health_retry
        self.poll_interval = poll_interval
        self.version = version or KubeletVersion.parse(DEFAULT_VERSION)
        self.watcher = PluginWatcher(registry_dir, {"DRAPlugin": self}, poll_interval=poll_interval)
        self.wiper = SliceWiper(kube, node_name, wiping_delay=wiping_delay, backoff_initial=wipe_backoff,
                                startup_delay=startup_wipe_delay)
        self._lock = threading.RLock()
        self._plugins: dict[str, list[PluginConn]] = {}
        self._claims: dict[str, ClaimRecord] = {}
        self._health: dict[tuple[str, str, str], DeviceHealthSeen] = {}
        self._threads: set[threading.Thread] = set()
        self.prepare_calls: list[tuple[str, tuple[str, ...]]] = []  # (driver, claim UIDs) per NodePrepare call
        self.unprepare_calls: list[tuple[str, tuple[str, ...]]] = []
        # The sync loop's `containerManager.Updates()` consumer: pod UIDs to sync now (set by the pod runner).
        self.on_pod_updates: Callable[[list[str]], None] | None = None

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.wiper.start()  # the startup wipe runs in the background and may land after a driver registered
        self.watcher.start()

    def stop(self) -> None:
        """The kubelet process ending: every plugin connection closes. The device health seen stays (the next
        process reads the health cache's checkpoint, healthinfo.go `loadFromCheckpoint`; a process that ends
        clears nothing, so no stream's end does here either)."""
        with self._lock:
            health = dict(self._health)
        self.watcher.stop()  # deregisters every plugin (closes channels, ends health streams)
        self.wiper.stop()
        with self._lock:
            threads = list(self._threads)
        for th in threads:
            th.join(timeout=10)
        with self._lock:
            self._health = health

    def forget_prepared(self) -> None:
        """What a new kubelet process does not know: which claims are prepared (claiminfo.go
        `newClaimInfoFromState` does not checkpoint it); the claim->pod references are in its checkpoint."""
        with self._lock:
            for record in self._claims.values():
                record.prepared.clear()
                record.is_prepared = False

    def restart(self) -> None:
        """A kubelet restart as a plugin sees it (for a DRA manager used on its own; the simulator's `stop` and
        `start` do the same): registrations dropped and rediscovered, prepared flags lost, claim references and
        health kept."""
        self.stop()
        self.forget_prepared()
        self.start()

    def wipe_node_slices(self) -> None:
        """Delete all of this node's ResourceSlices now (synchronously; `start` does it in the background)."""
        self.wiper._wipe("")

    # -- PluginHandler ----------------------------------------------------------------------------------------------

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> None:
        if self.version.validates_dra_registration:
            problem = driver_name_problem(name) or endpoint_problem(endpoint)
            if problem:
                raise PluginRejected(problem)
        elif not name:
            raise PluginRejected("DRA driver name is empty")
        choose_service(versions)

    def register_plugin(self, name: str, endpoint: str, versions: list[str]) -> None:
        conn = PluginConn(
            driver=name,
            endpoint=endpoint,
            service=choose_service(versions),
            health_service=choose_health_service(versions),
            channel=grpc.insecure_channel("unix:" + endpoint),
        )
        with self._lock:
            if any(c.endpoint == endpoint for c in self._plugins.get(name, [])):
                conn.channel.close()
                # dra_plugin_manager.go add(): one instance cannot hijack the endpoint of another.
                raise PluginRejected(f"endpoint {endpoint} already registered for DRA driver plugin {name}")
            self._plugins.setdefault(name, []).append(conn)
            self._sync(name)
        log.info("DRA plugin registered", extra={"driver": name, "service": conn.service, "endpoint": endpoint})
        self._spawn(self._monitor, conn, f"dra-conn-{name}")
        if conn.health_service is not None:
            self._spawn(self._watch_health, conn, f"health-{name}")

    def deregister_plugin(self, name: str, endpoint: str) -> None:
        with self._lock:
            conns = self._plugins.get(name, [])
            gone = [c for c in conns if c.endpoint == endpoint]
            self._plugins[name] = [c for c in conns if c.endpoint != endpoint]
            if not self._plugins[name]:
                del self._plugins[name]
            self._sync(name)
        for conn in gone:
            conn.stop.set()
            if conn.stream is not None:
                conn.stream.cancel()
            conn.channel.close()

    def _spawn(self, target: Callable[[PluginConn], None], conn: PluginConn, name: str) -> None:
        def run() -> None:
            try:
                target(conn)
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        th = threading.Thread(target=run, name=name, daemon=True)
        with self._lock:
            self._threads.add(th)
        th.start()

    def _sync(self, driver: str) -> None:
        """`DRAPluginManager.sync` (lock held): wipe the driver's slices later unless an instance is usable."""
        self.wiper.sync(driver, any(c.connected for c in self._plugins.get(driver, [])))

    def _monitor(self, conn: PluginConn) -> None:
        """Track whether the plugin's endpoint is reachable: the kubelet's grpc stats handler flips `connected` on
        ConnBegin/ConnEnd and asks gRPC to reconnect while it is down. The simulator probes the unix socket
        instead (a connect and close, every `poll_interval`): up while a server accepts there, down once the plugin
        process is gone, without touching gRPC's channel internals."""
        while not conn.stop.is_set():
            up = _accepts(conn.endpoint)
            with self._lock:
                if up != conn.connected and not conn.stop.is_set():
                    conn.connected = up
                    log.info("DRA plugin connection changed", extra={"driver": conn.driver, "connected": up,
                                                                     "endpoint": conn.endpoint})
                    self._sync(conn.driver)
            conn.stop.wait(self.poll_interval)

    # -- queries for tests ------------------------------------------------------------------------------------------

    def plugin(self, driver: str) -> PluginConn | None:
        """`GetPlugin`: the newest connected instance, else the newest one."""
        with self._lock:
            conns = self._plugins.get(driver)
            if not conns:
                return None
            return next((c for c in reversed(conns) if c.connected), conns[-1])

    def plugins(self, driver: str) -> list[PluginConn]:
        with self._lock:
            return list(self._plugins.get(driver, []))

    def wait_for_plugin(self, driver: str, timeout: float = 30.0) -> PluginConn:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            conn = self.plugin(driver)
            if conn is not None:
                return conn
            time.sleep(0.05)
        raise TimeoutError(f"DRA driver {driver!r} did not register within {timeout:.0f}s")

    def claim(self, uid: str) -> ClaimRecord | None:
        with self._lock:
            return self._claims.get(uid)

    def claims(self) -> list[ClaimRecord]:
        with self._lock:
            return list(self._claims.values())

    def health(self, driver: str, pool: str, device: str) -> DeviceHealthSeen | None:
        with self._lock:
            return self._health.get((driver, pool, device))

    def has_pod_reference(self, pod_uid: str) -> bool:
        """`PodMightNeedToUnprepareResources`."""
        with self._lock:
            return any(pod_uid in r.pods for r in self._claims.values())

    # -- prepare ----------------------------------------------------------------------------------------------------

    def prepare_pod(self, pod: Obj) -> dict[str, ClaimRecord]:
        """Prepare every claim of `pod` (claim UID -> record). Raises PodPrepareError like a failed pod start.

        A claim counts as prepared only after EVERY batch of the pod succeeded (manager.go marks the pod's claims
        prepared at the very end): a failure in one driver's batch means every claim of the pod is asked for
        again on the retry, including those another batch already answered."""
        pod_uid, namespace = pod["metadata"]["uid"], pod["metadata"]["namespace"]
        pod_name = pod["metadata"].get("name", "")
        claims_res = self.kube.resource_api().claims
        try:
            wanted = pod_claims(pod, extended_resources=self.version.dra_extended_resource)
        except ClaimNotReady as err:
            raise PodPrepareError(str(err)) from err
        checked: list[tuple[PodClaim, str, frozenset[str], frozenset[tuple[str, str, str]]]] = []
        # Validation pass without touching the claim cache: a missing driver fails the pod before anything is
        # checkpointed, so the pod can be deleted without getting stuck.
        for pc in wanted:
            try:
                claim = self.kube.get(claims_res, pc.name, namespace)
            except KubeError as err:
                raise PodPrepareError(f"fetch ResourceClaim {pc.name}: {err}") from err
            if pc.must_check_owner:
                try:
                    check_for_pod(pod, claim)
                except ClaimNotReady as err:
                    raise PodPrepareError(str(err)) from err
            uid = claim["metadata"]["uid"]
            if not reserved_for_pod(pod, claim):
                raise PodPrepareError(f"pod {pod_name} ({pod_uid}) is not allowed to use ResourceClaim "
                                      f"{pc.name} ({uid})")
            status = claim.get("status") or {}
            if not status.get("allocation"):
                raise PodPrepareError(f"ResourceClaim {pc.name}: not allocated")  # claiminfo.go
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            drivers = frozenset(r["driver"] for r in results)
            missing = sorted(d for d in drivers if self.plugin(d) is None)
            if missing:
                raise PodPrepareError(f"DRA driver {missing[0]} is not registered")
            allocated = frozenset((str(r["driver"]), str(r.get("pool", "")), str(r.get("device", ""))) for r in results)
            checked.append((pc, uid, drivers, allocated))
        batches: dict[str, list[ClaimRecord]] = {}
        records: dict[str, ClaimRecord] = {}
        to_prepare: list[ClaimRecord] = []
        with self._lock:
            for pc, uid, drivers, allocated in checked:
                record = self._cached(namespace, pc.name)
                if record is not None and record.uid != uid:
                    raise PodPrepareError(f"old ResourceClaim with same name {pc.name} and different UID "
                                          f"{record.uid} still exists (previous pod force-deleted?!)")
                if record is None:
                    record = self._claims[uid] = ClaimRecord(uid, namespace, pc.name, drivers, allocated=allocated)
                record.pods.add(pod_uid)  # checkpointed before calling the plugin, as the kubelet does
                record.pod_refs[pod_uid] = (namespace, pod_name, containers_using(pod, pc))
                records[uid] = record
                if record.is_prepared:
                    continue
                record.pending = {}
                to_prepare.append(record)
                for driver in sorted(record.drivers):
                    batches.setdefault(driver, []).append(record)
        for driver, batch in batches.items():
            self._prepare_batch(driver, batch)
        with self._lock:
            for record in to_prepare:
                record.prepared = dict(record.pending)
                record.is_prepared = True
        return records

    def _prepare_batch(self, driver: str, batch: list[ClaimRecord]) -> None:
        conn = self.plugin(driver)
        if conn is None:
            raise PodPrepareError(f"DRA driver {driver} is not registered")
        pb = conn.pb
        request = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in batch]
        )
        self.prepare_calls.append((driver, tuple(r.uid for r in batch)))
        try:
            response = conn.stub().NodePrepareResources(request, timeout=self.call_timeout)
        except grpc.RpcError as err:
            raise PodPrepareError(
                f"NodePrepareResources: {err.code().name}: {err.details()}"
            ) from err
        except ValueError as err:  # the channel was closed by a deregistration
            raise PodPrepareError(f"NodePrepareResources: DRA driver {driver}: connection closed") from err
        wanted = {r.uid: r for r in batch}
        for uid, result in response.claims.items():
            record = wanted.get(uid)
            if record is None:
                raise PodPrepareError(f"NodePrepareResources returned result for unknown claim UID {uid}")
            if result.error:
                raise PodPrepareError(f"NodePrepareResources failed for ResourceClaim {record.name}: {result.error}")
            devices = tuple(
                PreparedDevice(tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids))
                for d in result.devices
            )
            with self._lock:
                record.pending[driver] = devices
                record.known_devices[driver] = devices
        skipped = len(wanted) - len(response.claims)
        if skipped > 0:
            raise PodPrepareError(f"NodePrepareResources skipped {skipped} ResourceClaims")

    def prepare_pod_with_retry(self, pod: Obj, timeout: float = 30.0, interval: float = 0.2) -> dict[str, ClaimRecord]:
        """Pod sync retrying a failed prepare until it succeeds or `timeout` passes (then the last error)."""
        return _retry(lambda: self.prepare_pod(pod), PodPrepareError, timeout, interval)

    # -- unprepare --------------------------------------------------------------------------------------------------

    def unprepare_pod(self, pod: Obj) -> list[str]:
        """Drop the pod's claim references and unprepare claims no other pod uses; returns the unprepared UIDs.

        Claim names come from the claim cache; when it knows none for the pod (a lost checkpoint), from the pod's
        spec and status (manager.go `unprepareResourcesForPod`)."""
        pod_uid, namespace = pod["metadata"]["uid"], pod["metadata"]["namespace"]
        with self._lock:
            mine = [r for r in self._claims.values() if pod_uid in r.pods]
        if not mine:
            try:
                names = set(pod_claim_names(pod, extended_resources=self.version.dra_extended_resource))
            except ClaimNotReady:
                names = set()
            with self._lock:
                mine = [r for r in self._claims.values() if r.namespace == namespace and r.name in names]
        return self.unprepare_claims(pod_uid, mine)

    def unprepare_claims(self, pod_uid: str, mine: list[ClaimRecord]) -> list[str]:
        with self._lock:
            to_unprepare = []
            for record in mine:
                if len(record.pods - {pod_uid}) > 0:
                    record.pods.discard(pod_uid)
                    record.pod_refs.pop(pod_uid, None)
                    continue
                to_unprepare.append(record)
        batches: dict[str, list[ClaimRecord]] = {}
        for record in to_unprepare:
            for driver in sorted(record.drivers):
                batches.setdefault(driver, []).append(record)
        for driver, batch in batches.items():
            self._unprepare_batch(driver, batch)
        with self._lock:
            for record in to_unprepare:
                self._claims.pop(record.uid, None)
        return [r.uid for r in to_unprepare]

    def unprepare_inactive(self, active_pod_uids: set[str]) -> list[str]:
        """`reconcileLoop`: unprepare the claims still referenced by pods that are no longer active."""
        done: list[str] = []
        with self._lock:
            inactive = {uid for r in self._claims.values() for uid in r.pods if uid not in active_pod_uids}
        for pod_uid in sorted(inactive):
            with self._lock:
                mine = [r for r in self._claims.values() if pod_uid in r.pods]
            try:
                done += self.unprepare_claims(pod_uid, mine)
            except PodUnprepareError as err:
                log.info("unpreparing pod resources in reconcile loop failed, will retry",
                         extra={"podUID": pod_uid, "error": str(err)})
        return done

    def _unprepare_batch(self, driver: str, batch: list[ClaimRecord]) -> None:
        conn = self.plugin(driver)
        if conn is None:
            raise PodUnprepareError(f"DRA driver {driver} is not registered")
        pb = conn.pb
        request = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in batch]
        )
        self.unprepare_calls.append((driver, tuple(r.uid for r in batch)))
        try:
            response = conn.stub().NodeUnprepareResources(request, timeout=self.call_timeout)
        except grpc.RpcError as err:
            raise PodUnprepareError(
                f"NodeUnprepareResources: {err.code().name}: {err.details()}"
            ) from err
        except ValueError as err:
            raise PodUnprepareError(f"NodeUnprepareResources: DRA driver {driver}: connection closed") from err
        wanted = {r.uid: r for r in batch}
        unknown = set(response.claims) - set(wanted)
        if unknown:
            raise PodUnprepareError(f"NodeUnprepareResources returned result for unknown claim UID {sorted(unknown)[0]}")
        for uid, result in response.claims.items():
            if result.error:
                raise PodUnprepareError(f"NodeUnprepareResources failed for ResourceClaim {wanted[uid].name}: "
                                        f"{result.error}")
        skipped = len(wanted) - len(response.claims)
        if skipped > 0:
            raise PodUnprepareError(f"NodeUnprepareResources skipped {skipped} ResourceClaims")

    def unprepare_pod_with_retry(self, pod: Obj, timeout: float = 30.0, interval: float = 0.2) -> list[str]:
        return _retry(lambda: self.unprepare_pod(pod), PodUnprepareError, timeout, interval)

    # -- PodResources ---------------------------------------------------------------------------------------------

    def dynamic_assignments(self) -> list[DynamicAssignment]:
        """Every prepared device on every container that uses its claim (PodResources `dynamic_resources`)."""
        out: list[DynamicAssignment] = []
        with self._lock:
            for record in self._claims.values():
                for driver, devices in sorted(record.known_devices.items()):
                    for namespace, pod_name, containers in record.pod_refs.values():
                        for container in containers:
                            out.extend(DynamicAssignment(namespace, pod_name, container, record.name,
                                                         record.namespace, driver, d.pool, d.device, d.cdi_ids)
                                       for d in devices)
        return out

    # -- allocatedResourcesStatus ------------------------------------------------------------------------------------

    def claim_status_entries(self, pod: Obj, container: Obj) -> dict[str, list[Obj]]:
        """The `claim:` entries of an app container's `allocatedResourcesStatus` (`resourcestatus`): one per claim
        the container uses that the claim cache holds, with each device's health as the health stream said."""
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        now = time.time()  # `DeviceHealthSeen.received_at`'s clock
        with_message = self.version.resource_health_status  # ResourceHealthStatusMessage: beta with it, in 1.36
        out: dict[str, list[Obj]] = {}
        with self._lock:
            for ref in (container.get("resources") or {}).get("claims") or []:
                name = actual_claim_name(pod, str(ref.get("name", "")))
                record = self._cached(namespace, name) if name else None
                if record is None:
                    continue
                if record.known_devices:  # the plugin's answer: CDI IDs and request names
                    devices = [ClaimDevice(driver, d.pool, d.device, d.cdi_ids, d.request_names)
                               for driver, ds in sorted(record.known_devices.items()) for d in ds]
                else:  # cached from the allocation in the validation pass, not prepared (yet)
                    devices = [ClaimDevice(*key) for key in sorted(record.allocated)]
                out[claim_resource_name(ref)] = claim_resources(
                    devices, ref.get("request"),
                    lambda d: device_health(self._health.get((d.driver, d.pool, d.device)), now,
                                            with_message=with_message),
                    by_id=self.version.sorts_claim_resource_status)
        return out

    # -- health -----------------------------------------------------------------------------------------------------

    def _watch_health(self, conn: PluginConn) -> None:
        assert conn.health_service is not None
        pb, stub_cls = _HEALTH_MODULES[conn.health_service]
        status_names = {pb.HEALTHY: "Healthy", pb.UNHEALTHY: "Unhealthy", pb.UNKNOWN: "Unknown"}
        while not conn.stop.is_set():
            try:
                stream = conn.stream = stub_cls(conn.channel).NodeWatchResources(pb.NodeWatchResourcesRequest())
                if conn.stop.is_set():
                    stream.cancel()
                for message in stream:
                    now = time.time()
                    changed: set[tuple[str, str, str]] = set()
                    with self._lock:
                        for d in message.devices:
                            key = (conn.driver, d.device.pool_name, d.device.device_name)
                            health = status_names.get(d.health, "Unknown")
                            old = self._health.get(key)
                            if old is None or old.health != health:
                                changed.add(key)
                            self._health[key] = DeviceHealthSeen(
                                health,
                                d.message,
                                d.last_updated_time,
                                d.health_check_timeout_seconds,
                                now,
                            )
                        pods = sorted({uid for r in self._claims.values() if r.allocated & changed for uid in r.pods})
                    if pods and self.on_pod_updates is not None and self.version.resource_health_status:
                        self.on_pod_updates(pods)
            except grpc.RpcError as err:
                if conn.stop.is_set():
                    return
                if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                    log.info("plugin does not implement the health service", extra={"driver": conn.driver})
                    return
                log.info("health stream ended; reconnecting", extra={"driver": conn.driver})
            except ValueError:  # channel closed under us on deregistration
                return
            finally:  # however the stream ended
                self._forget_health(conn.driver)
            conn.stop.wait(self.health_retry)

    def _cached(self, namespace: str, name: str) -> ClaimRecord | None:
        """The claim cache's entry for a claim by name (lock held), as the kubelet's `cache.get(name, namespace)`."""
        return next((r for r in self._claims.values() if r.namespace == namespace and r.name == name), None)

    def _forget_health(self, driver: str) -> None:
        """The stream ended: the kubelet clears the driver's health cache (`clearDriver`), so its devices read
        Unknown until the next stream reports them."""
        with self._lock:
            for key in [k for k in self._health if k[0] == driver]:
                del self._health[key]


def _accepts(path: str) -> bool:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(1.0)
        sock.connect(path)
        return True
    except OSError:
        return False
    finally:
        sock.close()


def _retry(call: Callable[[], _T], error: type[Exception], timeout: float, interval: float) -> _T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except error:
            if time.monotonic() + interval > deadline:
                raise
            time.sleep(interval)
