"""The kubelet's DRA manager, simulated: plugin handler, NodePrepare/Unprepare caller, health-stream consumer.

What it reproduces (kubernetes/kubernetes pkg/kubelet/cm/dra: manager.go, plugin/):
* registration: `validate_plugin` picks the first entry of the *plugin's* list that this kubelet supports
  (`v1.DRAPlugin`, `v1beta1.DRAPlugin`); an empty list or no supported entry is rejected. The health service is
  chosen like a master kubelet: `v1.DRAResourceHealth` over `v1alpha1.DRAResourceHealth`, none if neither is
  advertised.
* `prepare_pod`: GET every ResourceClaim of the pod, require the pod in `status.reservedFor` and an allocation,
  group claims by the drivers in `status.allocation.devices.results`, fail the pod before calling anything when a
  driver has no registered plugin, skip claims already prepared (a claim shared by pods is prepared once), send
  ONE `NodePrepareResources` per driver with all of the pod's claims for it under a **45 s** deadline, and check
  the answer exactly like the kubelet: gRPC error, an entry for a UID it did not ask for, an entry with `error`,
  or missing entries ("skipped N ResourceClaims") all fail the pod start (`PodPrepareError`), to be retried.
* `unprepare_pod`: drops the pod's reference; a claim whose last pod went away is unprepared (one call per
  driver, every requested claim must be in the answer); a failure keeps the record so a retry calls again.
* `restart()`: what a kubelet restart looks like to a plugin: registrations dropped and rediscovered, the
  in-memory "prepared" flags lost (so Prepare is called again), the claim->pod references kept (they are in the
  kubelet's checkpoint), and all ResourceSlices of the node wiped (`DeleteCollection` with
  `fieldSelector=spec.nodeName=<node>`), as at every kubelet start.
* the health stream: one `NodeWatchResources` per registered plugin, reconnected every 5 s when it fails; the
  latest status per (driver, pool, device) is kept for tests to read.
* PodResources: `dynamic_assignments()` (a `DynamicResourcesSource`) reports every device prepared for a claim
  on each container of each pod using it, like the kubelet's claim-info cache, which survives a kubelet restart
  (it is checkpointed), so the report does too.
"""

from __future__ import annotations

import logging
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
from bridge.sandbox.kubelet.pluginwatcher import PluginRejected, PluginWatcher
from bridge.sandbox.kubelet.podresources import DynamicAssignment

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
    prepared: dict[str, tuple[PreparedDevice, ...]] = field(default_factory=dict)  # driver -> devices
    # pod UID -> (namespace, pod name, containers using this claim); checkpointed like `pods`
    pod_refs: dict[str, tuple[str, str, tuple[str, ...]]] = field(default_factory=dict)
    # driver -> devices of the last successful prepare; survives a restart (claim-info checkpoint)
    known_devices: dict[str, tuple[PreparedDevice, ...]] = field(default_factory=dict)

    @property
    def fully_prepared(self) -> bool:
        return set(self.prepared) >= set(self.drivers)


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
    ) -> None:
        self.kube = kube
        self.node_name = node_name
        self.call_timeout = call_timeout
        self.health_retry = health_retry
        self.watcher = PluginWatcher(registry_dir, {"DRAPlugin": self}, poll_interval=poll_interval)
        self._lock = threading.RLock()
        self._plugins: dict[str, list[PluginConn]] = {}
        self._claims: dict[str, ClaimRecord] = {}
        self._health: dict[tuple[str, str, str], DeviceHealthSeen] = {}
        self.prepare_calls: list[tuple[str, tuple[str, ...]]] = []  # (driver, claim UIDs) per NodePrepare call
        self.unprepare_calls: list[tuple[str, tuple[str, ...]]] = []

    # -- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.wipe_node_slices()
        self.watcher.start()

    def stop(self) -> None:
        self.watcher.stop()  # deregisters every plugin (closes channels, ends health streams)

    def restart(self) -> None:
        """A kubelet restart: registrations and prepared flags are lost, claim references survive."""
        self.stop()
        with self._lock:
            for record in self._claims.values():
                record.prepared.clear()
        self.start()

    def wipe_node_slices(self) -> None:
        try:
            slices = self.kube.resource_api().slices
            self.kube.delete_collection(slices, field_selector=f"spec.nodeName={self.node_name}")
            log.info("wiped this node's ResourceSlices", extra={"node": self.node_name})
        except KubeError as err:
            log.warning("could not wipe this node's ResourceSlices", extra={"node": self.node_name, "error": str(err)})

    # -- PluginHandler ----------------------------------------------------------------------------------------------

    def validate_plugin(self, name: str, endpoint: str, versions: list[str]) -> None:
        if not name:
            raise PluginRejected("DRA plugin registration without a driver name")
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
            self._plugins.setdefault(name, []).append(conn)
        log.info("DRA plugin registered", extra={"driver": name, "service": conn.service, "endpoint": endpoint})
        if conn.health_service is not None:
            threading.Thread(target=self._watch_health, args=(conn,), name=f"health-{name}", daemon=True).start()

    def deregister_plugin(self, name: str, endpoint: str) -> None:
        with self._lock:
            conns = self._plugins.get(name, [])
            gone = [c for c in conns if c.endpoint == endpoint]
            self._plugins[name] = [c for c in conns if c.endpoint != endpoint]
            if not self._plugins[name]:
                del self._plugins[name]
        for conn in gone:
            conn.stop.set()
            if conn.stream is not None:
                conn.stream.cancel()
            conn.channel.close()

    # -- queries for tests ------------------------------------------------------------------------------------------

    def plugin(self, driver: str) -> PluginConn | None:
        with self._lock:
            conns = self._plugins.get(driver)
            return conns[-1] if conns else None

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

    def health(self, driver: str, pool: str, device: str) -> DeviceHealthSeen | None:
        with self._lock:
            return self._health.get((driver, pool, device))

    # -- prepare ----------------------------------------------------------------------------------------------------

    def prepare_pod(self, pod: Obj) -> dict[str, ClaimRecord]:
        """Prepare every claim of `pod` (claim UID -> record). Raises PodPrepareError like a failed pod start."""
        pod_uid, namespace = pod["metadata"]["uid"], pod["metadata"]["namespace"]
        claims_res = self.kube.resource_api().claims
        batches: dict[str, list[ClaimRecord]] = {}
        records: dict[str, ClaimRecord] = {}
        checked: list[tuple[str, str, frozenset[str]]] = []  # (claim name, UID, drivers)
        # Every claim is checked (reserved for the pod, allocated, its drivers registered) before anything is
        # recorded: a missing driver fails the pod before the claim->pod references are checkpointed.
        for claim_name in pod_claim_names(pod):
            try:
                claim = self.kube.get(claims_res, claim_name, namespace)
            except KubeError as err:
                raise PodPrepareError(f"fetch ResourceClaim {namespace}/{claim_name}: {err}") from err
            uid = claim["metadata"]["uid"]
            status = claim.get("status") or {}
            if not any(ref.get("uid") == pod_uid for ref in status.get("reservedFor") or []):
                raise PodPrepareError(f"pod {pod_uid} is not allowed to use ResourceClaim {namespace}/{claim_name}")
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            if not status.get("allocation"):
                raise PodPrepareError(f"ResourceClaim {namespace}/{claim_name} is not allocated")
            drivers = frozenset(r["driver"] for r in results)
            missing = sorted(d for d in drivers if self.plugin(d) is None)
            if missing:
                raise PodPrepareError(f"DRA driver {missing[0]} is not registered")
            checked.append((claim_name, uid, drivers))
        for claim_name, uid, drivers in checked:
            with self._lock:
                record = self._claims.get(uid)
                if record is None:
                    record = self._claims[uid] = ClaimRecord(uid, namespace, claim_name, drivers)
                record.pods.add(pod_uid)  # checkpointed before calling the plugin, as the kubelet does
                record.pod_refs[pod_uid] = (namespace, pod["metadata"]["name"], containers_using(pod, claim_name))
            records[uid] = record
            for driver in sorted(drivers - set(record.prepared)):
                batches.setdefault(driver, []).append(record)
        for driver, batch in batches.items():
            self._prepare_batch(driver, batch)
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
                f"NodePrepareResources failed: {err.code().name}: {err.details()}"
            ) from err
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
                record.prepared[driver] = devices
                record.known_devices[driver] = devices
        skipped = len(wanted) - len(response.claims)
        if skipped > 0:
            raise PodPrepareError(f"NodePrepareResources skipped {skipped} ResourceClaims")

    def prepare_pod_with_retry(self, pod: Obj, timeout: float = 30.0, interval: float = 0.2) -> dict[str, ClaimRecord]:
        """Pod sync retrying a failed prepare until it succeeds or `timeout` passes (then the last error)."""
        return _retry(lambda: self.prepare_pod(pod), PodPrepareError, timeout, interval)

    # -- unprepare --------------------------------------------------------------------------------------------------

    def unprepare_pod(self, pod: Obj) -> list[str]:
        """Drop the pod's claim references and unprepare claims no other pod uses; returns the unprepared UIDs."""
        pod_uid, namespace = pod["metadata"]["uid"], pod["metadata"]["namespace"]
        names = set(pod_claim_names(pod))
        with self._lock:
            mine = [r for r in self._claims.values() if r.namespace == namespace and r.name in names]
            to_unprepare = []
            for record in mine:
                record.pods.discard(pod_uid)
                record.pod_refs.pop(pod_uid, None)
                if not record.pods:
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
                f"NodeUnprepareResources failed: {err.code().name}: {err.details()}"
            ) from err
        wanted = {r.uid for r in batch}
        unknown = set(response.claims) - wanted
        if unknown:
            raise PodUnprepareError(f"NodeUnprepareResources returned result for unknown claim UID {sorted(unknown)[0]}")
        for uid, result in response.claims.items():
            if result.error:
                raise PodUnprepareError(f"NodeUnprepareResources failed for claim {uid}: {result.error}")
        skipped = len(wanted) - len(response.claims)
        if skipped > 0:
            raise PodUnprepareError(f"NodeUnprepareResources skipped {skipped} ResourceClaims")
        with self._lock:
            for record in batch:
                record.prepared.pop(driver, None)
                record.known_devices.pop(driver, None)

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
                    with self._lock:
                        for d in message.devices:
                            key = (conn.driver, d.device.pool_name, d.device.device_name)
                            self._health[key] = DeviceHealthSeen(
                                status_names.get(d.health, "Unknown"),
                                d.message,
                                d.last_updated_time,
                                d.health_check_timeout_seconds,
                                now,
                            )
            except grpc.RpcError as err:
                if conn.stop.is_set():
                    return
                if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                    log.info("plugin does not implement the health service", extra={"driver": conn.driver})
                    return
                log.info("health stream ended; reconnecting", extra={"driver": conn.driver})
            except ValueError:  # channel closed under us on deregistration
                return
            conn.stop.wait(self.health_retry)


def _retry(call: Callable[[], _T], error: type[Exception], timeout: float, interval: float) -> _T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except error:
            if time.monotonic() + interval > deadline:
                raise
            time.sleep(interval)


def containers_using(pod: Obj, claim_name: str) -> tuple[str, ...]:
    """The containers (init containers included) whose `resources.claims` reference the pod claim that resolves
    to ResourceClaim `claim_name`."""
    generated = {s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    pod_names = {ref["name"] for ref in (pod.get("spec") or {}).get("resourceClaims") or []
                 if (ref.get("resourceClaimName") or generated.get(ref["name"])) == claim_name}
    spec = pod.get("spec") or {}
    return tuple(c["name"] for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
                 if any(r.get("name") in pod_names for r in (c.get("resources") or {}).get("claims") or []))


def pod_claim_names(pod: Obj) -> list[str]:
    """The ResourceClaim names a pod uses: direct `resourceClaimName`s, and for templates the generated name from
    `status.resourceClaimStatuses` (a pod whose generated claim is not yet recorded cannot start)."""
    generated = {s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    names: list[str] = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        if ref.get("resourceClaimName"):
            names.append(ref["resourceClaimName"])
        elif generated.get(ref["name"]):
            names.append(generated[ref["name"]])
        else:
            raise PodPrepareError(f"pod claim {ref['name']!r} has no ResourceClaim yet")
    return names
