"""The kubelet's device manager, simulated: the Registration server on `kubelet.sock`, one client per plugin, the
healthy/unhealthy device sets, `GetCapacity` for the node status and the per-container allocation.

Written from kubernetes/kubernetes pkg/kubelet/cm/devicemanager/ (manager.go @7510f32, types.go,
plugin/v1beta1/{server,handler,client,api}.go). What it reproduces:

* `Register` (server.go) checks the version (∈ ["v1beta1"]) and that the resource is an extended resource name,
  then *synchronously* connects: the client is recorded, the plugin dialled (10 s, blocking), `PluginConnected`
  calls `GetDevicePluginOptions` and **overwrites** the resource's endpoint; only then does `Register` answer. The
  dial and GetDevicePluginOptions run under Register's own context, so they get what is left of its deadline. The
  ListAndWatch stream runs in the background. Errors are plain Go errors, so the plugin sees gRPC code UNKNOWN
  with upstream's messages (`requested API version "x" is not supported by kubelet. Supported version is
  ["v1beta1"]`, `the ResourceName "x" is invalid`, `failed to dial device plugin: ...`).
* A re-registration does **not** stop the old client: its stream keeps feeding the resource's device sets
  (`PluginListAndWatchReceiver` is keyed by resource name only), until it ends.
* Each ListAndWatch message replaces the resource's healthy/unhealthy sets (`genericDeviceUpdateCallback`):
  capacity = all devices, allocatable = healthy ones.
* When a stream ends, who gets disconnected depends on the release (`KubeletVersion`):
  - through 1.36 (handler.go @f449697): `runClient` looks the client up **by resource name** and disconnects
    whatever is registered *now*. After a surge rollout (A registered, B registered, A stops) that is B: B's
    connection is closed, the resource's healthy devices all become unhealthy (allocatable 0 at once, capacity
    unchanged) and the endpoint gets a stop time. B's own stream then ends, finds no client, and the kubelet stays
    cut off until the plugin registers again.
  - from 1.37 (handler.go @00ca7a18, PR #135437): clients are kept per socket path and only the instance whose
    stream ended is disconnected; while another instance of the resource is connected it stays the resource's
    endpoint and nothing is marked unhealthy. A second registration on a socket path that is already connected is
    refused after the kubelet dialled it and asked its options ("device plugin already connected: <path>",
    manager.go PluginConnected, read at v1.37.2 and v1.38.0-beta.0), and the refusal drops the connected client
    of that path too (handler.go connectClient -> deregisterClient by path): when that connection's stream ends
    later, nothing is disconnected and the endpoint stays, so a plugin that keeps retrying on the same path is
    refused for good (v1.38's handler.go says to retry on another socket).
* `capacity()` is `GetCapacity`: a resource whose endpoint stopped more than `endpointStopGracePeriod` (5 min)
  ago is dropped and reported as removed (the node status then writes capacity 0 for it: nodestatus/setters.go).
  Re-registering within the grace period restores it.
* Allocation (`Allocate` + `devicesToAllocate`): a container first reuses devices its pod's non-restartable init
  containers held (`devicesToReuse`), then takes healthy unallocated devices, asks GetPreferredAllocation when
  the plugin offers it (the hint is used only as far as it names available devices), and calls `Allocate` with
  exactly one container request. Restartable init containers (sidecars) keep their devices. A container that
  holds devices already (kept from the checkpoint: a pod admitted again after a restart or a node reboot) gets
  no Allocate call: the kubelet's checks pass and it runs with the response kept (`needed == 0`, "nothing to
  do"). Those checks come first for every allocation, so a pod admitted after a restart before its plugin has
  registered again is refused ("no healthy devices present", the kubelet's "scenario 3: node reboot";
  kubernetes/kubernetes#125579, seen on real kubelets by tests/real/test_real_node_reboot.py). Errors carry the
  kubelet's messages ("cannot allocate unregistered device", "no healthy devices present; cannot allocate
  unhealthy devices", "previously allocated devices are no longer healthy; cannot allocate unhealthy devices",
  "requested number of devices unavailable for R. Requested: N, Available: M", "no containers return in
  allocation response"). `update_allocated()` is `UpdateAllocatedDevices`: pods no longer active
  give their devices back, at an allocation and at a PodResources `List` (its only callers; not at a pod's
  termination). It does nothing while `sources_ready()` is False (a starting kubelet admits the pods of its first
  listing before the pod source counts as seen: kubelet.go `syncLoopIteration` calls `AddSource` after the
  handler), so a pod gone while the kubelet was down keeps its devices through that first batch; and in that
  batch a container the runtime still runs (`running=True`) skips allocation altogether, before any check
  ("Container detected running, nothing to do", the kubelet's "scenario 2: kubelet restart"; devicemanager/
  manager.go `devicesToAllocate` and `UpdateAllocatedDevices`, read at v1.37.2).
* The checkpoint `device-plugins/kubelet_internal_checkpoint` is written as manager.go writes it (format, checksum
  and moments in `bridge.sandbox.kubelet.dmcheckpoint`): after every ListAndWatch update (the healthy devices per
  resource), after every allocation that called Allocate, and when a resource past its grace period is dropped.
  Ended pods are forgotten in memory only (`UpdateAllocatedDevices`), so their entries stay in the file until the
  next write, as on a real node.
* `restart()` is a kubelet restart (`CleanupPluginDirectory`): clients dropped, every unix socket in
  `device-plugins/` deleted (regular files such as `kubelet_internal_checkpoint` and `DEPRECATION` kept), a fresh
  `kubelet.sock` served, and the new process's state read back from the checkpoint (`readCheckpoint`): the
  allocations it lists, and each resource it registered with no devices and a stopped endpoint. A corrupt or missing
  file starts the device manager empty (logged), as the kubelet does.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, Protocol

import grpc

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge.deviceplugin.registration import is_extended_resource_name
from bridge.sandbox.kubelet import dmcheckpoint
from bridge.sandbox.kubelet.dmcheckpoint import CHECKPOINT_FILE, NODE_WITHOUT_TOPOLOGY
from bridge.sandbox.kubelet.version import DEFAULT_VERSION, KubeletVersion
from bridge.unixsock import check_socket_path

log = logging.getLogger("bridge.sandbox.kubelet")

SUPPORTED_VERSIONS = ("v1beta1",)
DIAL_TIMEOUT_S = 10.0
KUBELET_SOCKET = "kubelet.sock"
ENDPOINT_STOP_GRACE_PERIOD_S = 300.0  # types.go endpointStopGracePeriod


class AllocationFailed(RuntimeError):
    """The device manager could not admit the container (not enough devices, plugin error, bad answer)."""


@dataclass(frozen=True)
class DeviceInfo:
    id: str
    healthy: bool  # in `healthyDevices`: what allocation and the node's allocatable count
    numa_nodes: tuple[int, ...]
    # `allDevices[...].Health`: as the plugin last reported it. A disconnected endpoint makes its devices unhealthy
    # for allocation (`markResourceUnhealthy`) but leaves this, which the pods' allocatedResourcesStatus shows.
    reported_healthy: bool = True


@dataclass(frozen=True)
class Assignment:
    pod_uid: str
    namespace: str
    pod_name: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    init_only: bool = False  # held by a non-restartable init container (PodResources does not report these)


@dataclass
class ResourceState:
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    connected: bool = False
    registrations: int = 0
    updates: int = 0
    options: pb.DevicePluginOptions | None = None
    stopped_at: float | None = None  # monotonic time the endpoint stopped (PluginDisconnected), None while serving

    @property
    def capacity(self) -> int:
        return len(self.devices)

    @property
    def allocatable(self) -> int:
        return sum(d.healthy for d in self.devices.values())

    @property
    def healthy(self) -> set[str]:
        return {d.id for d in self.devices.values() if d.healthy}


@dataclass(frozen=True)
class Capacity:
    """`GetCapacity`'s three answers: per resource, all devices and healthy devices; resources past the grace."""

    capacity: dict[str, int]
    allocatable: dict[str, int]
    removed: tuple[str, ...]


class _ResponseStream(Protocol):
    """What the reader needs of a server-streaming call: its messages, and a way to end it."""

    def __iter__(self) -> Iterator[pb.ListAndWatchResponse]: ...

    def cancel(self) -> bool: ...


class _Client:
    """The kubelet's client for one plugin instance (client.go): a channel and the ListAndWatch reader thread."""

    def __init__(self, manager: DeviceManager, resource: str, socket: str) -> None:
        self.resource = resource
        self.socket = socket
        self.channel = grpc.insecure_channel("unix://" + socket)
        self.stub = pb_grpc.DevicePluginStub(self.channel)
        self.options: pb.DevicePluginOptions | None = None
        self._manager = manager
        self._stream: _ResponseStream | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.closed = False

    def connect(self, dial_timeout: float, deadline: float | None = None) -> pb.DevicePluginOptions:
        """`deadline`: the monotonic time the plugin's Register call must be answered by (its gRPC deadline), which
        the kubelet's dial and GetDevicePluginOptions inherit: they run under Register's context
        (server.go `Register` -> `connectClient(ctx)` -> client.go `Connect(ctx)` -> `PluginConnected(ctx)`; seen on
        a real kubelet v1.37.2: GetDevicePluginOptions came with what was left of our Register's 15 s)."""
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            grpc.channel_ready_future(self.channel).result(
                timeout=dial_timeout if left is None else min(dial_timeout, left))
        except grpc.FutureTimeoutError as err:
            raise _Rejected(f"failed to dial device plugin: context deadline exceeded ({self.socket})") from err
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            self.options = self.stub.GetDevicePluginOptions(pb.Empty(), timeout=left)
        except grpc.RpcError as err:
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            raise _Rejected(f"failed to get device plugin options: {details}") from err
        return self.options

    def run(self) -> None:
        with self._lock:
            if self.closed:
                return
            self._stream = self.stub.ListAndWatch(pb.Empty())
        self._thread = threading.Thread(target=self._read, name=f"kubelet-law-{self.resource}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._stream is not None
        try:
            for msg in self._stream:
                self._manager._on_list(self, msg)
        except grpc.RpcError as err:
            if not self.closed:
                log.info("ListAndWatch ended unexpectedly for device plugin %s (%s): %s", self.resource, self.socket,
                         err.code() if isinstance(err, grpc.Call) else err)
        except ValueError:  # the channel was closed under the reader
            pass
        finally:
            self._manager._on_stream_end(self)

    def close(self) -> None:
        """`Disconnect`: close the gRPC connection (which ends this client's stream)."""
        with self._lock:
            self.closed = True
            stream = self._stream
        if stream is not None:
            stream.cancel()
        self.channel.close()

    def join(self, timeout: float = 10.0) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)


class _RegistrationServicer(pb_grpc.RegistrationServicer):
    def __init__(self, manager: DeviceManager) -> None:
        self._manager = manager

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        remaining = context.time_remaining()
        deadline = time.monotonic() + remaining if remaining is not None and remaining < 10**6 else None
        try:
            self._manager._register(request, deadline)
        except _Rejected as err:
            # The kubelet returns plain Go errors: grpc-go turns them into code Unknown.
            context.abort(grpc.StatusCode.UNKNOWN, str(err))
        return pb.Empty()


class _Rejected(Exception):
    pass


@dataclass
class _PodDevices:
    """`podDevices` for one pod: container -> resource -> device IDs, plus which containers are init containers."""

    namespace: str
    name: str
    containers: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    reusable: dict[str, set[str]] = field(default_factory=dict)  # resource -> devices freed by init containers
    init_containers: set[str] = field(default_factory=set)  # the non-restartable init containers among them
    responses: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (container, resource) -> AllocResp


class DeviceManager:
    def __init__(self, plugin_dir: Path, *, dial_timeout_s: float = DIAL_TIMEOUT_S,
                 version: KubeletVersion | None = None,
                 stop_grace_period_s: float = ENDPOINT_STOP_GRACE_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.dial_timeout_s = dial_timeout_s
        self.version = version or KubeletVersion.parse(DEFAULT_VERSION)
        self.stop_grace_period_s = stop_grace_period_s
        self.clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._resources: dict[str, ResourceState] = {}
        self._clients: dict[str, list[_Client]] = {}  # handler.go `clients` (one per resource through 1.36)
        self._endpoints: dict[str, _Client] = {}  # manager.go `endpoints`: the resource's current endpoint
        # 1.37+ manager.go `endpointStore`: the socket paths with a connected endpoint, per resource
        self._endpoint_sockets: dict[str, set[str]] = {}
        self._pods: dict[str, _PodDevices] = {}
        self._server: grpc.Server | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._orphans: list[_Client] = []  # disconnected clients whose reader threads are joined at stop
        self.register_errors: list[str] = []
        # `sourcesReady.AllReady()` (manager.go keeps the kubelet's `SourcesReady` it was started with): False while
        # a starting kubelet admits the pods of its first listing. The pod runner hands in its own; a device manager
        # without a pod runner counts its sources as ready.
        self.sources_ready: Callable[[], bool] = lambda: True
        # `activePods` (the pod runner's): the UIDs whose devices `UpdateAllocatedDevices` keeps before an allocation
        self.active_pods: Callable[[], Iterable[str]] | None = None
        # The sync loop's `containerManager.Updates()` consumer: pod UIDs to sync now (set by the pod runner).
        self.on_pod_updates: Callable[[list[str]], None] | None = None

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Clean the directory like a starting kubelet, then serve Registration on a fresh kubelet.sock."""
        check_socket_path(self.socket_path)
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.plugin_dir, 0o750)
        self._cleanup_dir()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kubelet-reg")
        self._server = grpc.server(self._pool)
        pb_grpc.add_RegistrationServicer_to_server(_RegistrationServicer(self), self._server)
        if self._server.add_insecure_port("unix:" + str(self.socket_path)) == 0:
            raise OSError(f"cannot listen on {self.socket_path}")
        self._server.start()

    def stop(self) -> None:
        """Stop serving and drop every plugin client (the kubelet process going away)."""
        if self._server is not None:
            self._server.stop(0.5).wait()
            self._server = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:
            clients = [c for cs in self._clients.values() for c in cs] + list(self._endpoints.values())
            clients += self._orphans
            self._clients.clear()
            self._endpoints.clear()
            self._endpoint_sockets.clear()
            self._orphans = []
            for state in self._resources.values():
                state.connected = False
        for c in set(clients):
            c.close()
        for c in set(clients):
            c.join()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    def restart(self) -> None:
        """A kubelet restart. The new process reads its checkpoint (`readCheckpoint`): the allocations it lists, and
        each registered resource with empty device sets and a stopped endpoint, so capacity is 0 until its plugin
        registers again. What the file does not say (pod names, which containers are init containers) the new
        kubelet learns from the pods it runs, so it is kept."""
        self.stop()
        try:
            stored = dmcheckpoint.read(self.plugin_dir)
        except dmcheckpoint.CheckpointCorrupt as err:
            log.error("Continue after failing to read checkpoint file. Device allocation info may NOT be "
                      "up-to-date: %s", err)
            stored = None
        entries, registered = stored if stored is not None else ([], {})
        with self._lock:
            now = self.clock()
            old = self._pods
            self._pods = {}
            for e in entries:
                before = old.get(e.pod_uid)
                pod = self._pods.setdefault(e.pod_uid, _PodDevices(before.namespace if before else "",
                                                                   before.name if before else e.pod_uid))
                ids = tuple(dict.fromkeys(i for node in sorted(e.device_ids) for i in e.device_ids[node]))
                pod.containers.setdefault(e.container, {})[e.resource] = ids
                pod.responses[(e.container, e.resource)] = e.alloc_resp or b""
                if before is not None and e.container in before.init_containers:
                    pod.init_containers.add(e.container)
            counts = {name: (st.registrations, st.updates) for name, st in self._resources.items()}  # test counters
            self._resources = {name: ResourceState(connected=False, registrations=counts.get(name, (0, 0))[0],
                                                   updates=counts.get(name, (0, 0))[1], stopped_at=now)
                               for name in registered}
            self._endpoints.clear()
        self.start()

    def _write_checkpoint(self) -> None:
        """`writeCheckpoint` (lock held): the allocations, and the healthy devices per resource."""
        entries = []
        for uid, pod in self._pods.items():
            for container, by_res in pod.containers.items():
                for resource, ids in by_res.items():
                    state = self._resources.get(resource)
                    numa: dict[int, tuple[str, ...]] = {}
                    for i in ids:
                        info = state.devices.get(i) if state is not None else None
                        for node in (info.numa_nodes if info is not None and info.numa_nodes else (NODE_WITHOUT_TOPOLOGY,)):
                            numa[node] = numa.get(node, ()) + (i,)
                    entries.append(dmcheckpoint.Entry(uid, container, resource, numa,
                                                      pod.responses.get((container, resource), b"")))
        registered = {name: sorted(state.healthy) for name, state in self._resources.items()}
        try:
            dmcheckpoint.write(self.plugin_dir, entries, registered)
        except OSError as err:
            log.error("Failed to write checkpoint file: %s", err)

    def no_checkpoints(self) -> bool:
        """`ShouldResetExtendedResourceCapacity`: the checkpoint store lists nothing, i.e. the device-plugin
        directory has no entry but temporary ones (manager.go asks `ListCheckpoints`; util/store/filestore.go `List`
        counts every name not starting with "."; sockets and DEPRECATION count too). True only for a kubelet
        directory no device manager ever wrote to, not after a kubelet restart or a reboot (it persists)."""
        try:
            return not any(not name.startswith(".") for name in os.listdir(self.plugin_dir))
        except OSError:  # ListCheckpoints failing: the kubelet answers False
            return False

    def _cleanup_dir(self) -> None:
        for entry in os.scandir(self.plugin_dir):
            if entry.name == CHECKPOINT_FILE:
                continue
            try:
                if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    os.unlink(entry.path)
            except FileNotFoundError:
                pass

    # -- registration (server.go Register, handler.go connectClient) ------------------------------------------------

    def _register(self, request: pb.RegisterRequest, deadline: float | None = None) -> None:
        def reject(message: str) -> NoReturn:
            self.register_errors.append(message)
            log.warning("Register rejected: %s", message)
            raise _Rejected(message)

        if request.version not in SUPPORTED_VERSIONS:
            reject(f'requested API version "{request.version}" is not supported by kubelet. Supported version is '
                   f'[{" ".join(chr(34) + v + chr(34) for v in SUPPORTED_VERSIONS)}]')
        if not is_extended_resource_name(request.resource_name):
            reject(f'the ResourceName "{request.resource_name}" is invalid')
        if not request.endpoint or "/" in request.endpoint:
            reject(f"failed to dial device plugin: endpoint {request.endpoint!r} is not a socket file name in "
                   f"{self.plugin_dir}")
        resource, socket = request.resource_name, str(self.plugin_dir / request.endpoint)
        client = _Client(self, resource, socket)
        with self._lock:
            if self.version.per_instance_device_plugin_clients:
                self._clients.setdefault(resource, []).append(client)
            else:
                self._clients[resource] = [client]  # registerClient overwrites; the old client keeps running
        try:
            opts = client.connect(self.dial_timeout_s, deadline)
        except _Rejected as err:
            self._deregister_client(resource, client)
            client.close()
            reject(str(err))
        with self._lock:
            if self.version.per_instance_device_plugin_clients and socket in self._endpoint_sockets.get(resource, ()):
                # PluginConnected refuses a second endpoint on a socket path after dialling it and asking its
                # options (manager.go, v1.37.2 and v1.38.0-beta.0), and connectClient's deregisterClient then
                # drops every client on that path: the connected one's too, so its stream's end later finds no
                # client and disconnects nothing (runClient: getClient(name, socketPath) is nil). v1.38's
                # handler.go tells plugins to retry on another socket.
                self._clients[resource] = [c for c in self._clients.get(resource, []) if c.socket != socket]
                if not self._clients[resource]:
                    del self._clients[resource]
                client.close()
                reject(f"device plugin already connected: {socket}")
            self._endpoint_sockets.setdefault(resource, set()).add(socket)
            state = self._resources.setdefault(resource, ResourceState())
            state.registrations += 1
            state.options = opts
            state.connected = True
            state.stopped_at = None
            self._endpoints[resource] = client  # PluginConnected overwrites the endpoint
            self._changed.notify_all()
        client.run()
        log.info("device plugin registered", extra={"resource": resource, "endpoint": socket})

    def _deregister_client(self, resource: str, client: _Client) -> None:
        with self._lock:
            clients = self._clients.get(resource, [])
            if self.version.per_instance_device_plugin_clients:
                remaining = [c for c in clients if c is not client]
            else:
                remaining = []  # deregisterClient(name) deletes the resource's entry, whoever it is
            if remaining:
                self._clients[resource] = remaining
            else:
                self._clients.pop(resource, None)

    def _on_list(self, client: _Client, msg: pb.ListAndWatchResponse) -> None:
        pods: list[str] = []
        with self._lock:
            if client.closed:
                return
            state = self._resources.setdefault(client.resource, ResourceState())
            old = state.devices
            state.devices = {
                d.ID: DeviceInfo(d.ID, d.health == "Healthy", tuple(n.ID for n in d.topology.nodes),
                                 d.health == "Healthy")
                for d in msg.devices
            }
            state.updates += 1
            # With ResourceHealthStatus, the pods holding a device whose reported health changed (or that is listed
            # again after it was gone) are synced, so their allocatedResourcesStatus follows.
            changed = {i for i, d in state.devices.items()
                       if i not in old or old[i].reported_healthy != d.reported_healthy}
            pods = sorted(uid for uid, pod in self._pods.items()
                          if any(changed.intersection(by_res.get(client.resource, ()))
                                 for by_res in pod.containers.values()))
            self._write_checkpoint()  # genericDeviceUpdateCallback
            self._changed.notify_all()
        if pods and self.version.resource_health_status and self.on_pod_updates is not None:
            self.on_pod_updates(pods)

    def _on_stream_end(self, ended: _Client) -> None:
        """`runClient` after `Run` returned: which client is disconnected is the release's rule."""
        with self._lock:
            if self.version.per_instance_device_plugin_clients:
                victim = ended if ended in self._clients.get(ended.resource, []) else None
            else:
                current = self._clients.get(ended.resource, [])
                victim = current[0] if current else None  # getClient(name): whoever is registered now
            if victim is None:
                self._changed.notify_all()
                return
            self._deregister_client(victim.resource, victim)
            self._orphans.append(victim)
        victim.close()  # Disconnect: close the connection (ends the victim's own stream) ...
        self._plugin_disconnected(victim)  # ... then PluginDisconnected

    def _plugin_disconnected(self, client: _Client) -> None:
        with self._lock:
            self._endpoint_sockets.get(client.resource, set()).discard(client.socket)
            state = self._resources.get(client.resource)
            if state is None or client.resource not in self._endpoints:
                return
            if self.version.per_instance_device_plugin_clients:
                others = [c for c in self._clients.get(client.resource, []) if c is not client]
                if others:
                    # Another instance of the resource is connected: it is (and stays) the endpoint.
                    self._endpoints[client.resource] = others[-1]
                    self._changed.notify_all()
                    return
            # markResourceUnhealthy + setStopTime on the resource's endpoint.
            state.devices = {k: DeviceInfo(v.id, False, v.numa_nodes, v.reported_healthy)
                             for k, v in state.devices.items()}
            state.connected = False
            state.stopped_at = self.clock()
            log.info("device plugin endpoint became unhealthy", extra={"resource": client.resource,
                                                                      "endpoint": client.socket})
            self._changed.notify_all()

    # -- queries ------------------------------------------------------------------------------------------------

    def resource(self, name: str) -> ResourceState:
        """A copy of what the device manager knows about `name` (empty when never registered)."""
        with self._lock:
            s = self._resources.get(name, ResourceState())
            return ResourceState(dict(s.devices), s.connected, s.registrations, s.updates, s.options, s.stopped_at)

    def clients(self, resource: str) -> list[str]:
        """Socket paths of the clients registered for `resource` (the handler's view)."""
        with self._lock:
            return [c.socket for c in self._clients.get(resource, [])]

    def endpoint(self, resource: str) -> str | None:
        """Socket path of the resource's current endpoint (the one Allocate calls), None when there is none."""
        with self._lock:
            c = self._endpoints.get(resource)
            return c.socket if c is not None else None

    def capacity(self) -> Capacity:
        """`GetCapacity`: drops resources whose endpoint stopped longer than the grace period ago."""
        cap: dict[str, int] = {}
        alloc: dict[str, int] = {}
        removed: list[str] = []
        with self._lock:
            now = self.clock()
            for name, state in list(self._resources.items()):
                if state.stopped_at is not None and now - state.stopped_at > self.stop_grace_period_s:
                    del self._resources[name]
                    self._endpoints.pop(name, None)
                    removed.append(name)
                    continue
                cap[name] = state.capacity
                alloc[name] = state.allocatable
            if removed:
                self._write_checkpoint()  # needsUpdateCheckpoint
                self._changed.notify_all()
        return Capacity(cap, alloc, tuple(sorted(removed)))

    def wait_for(self, predicate: Callable[[DeviceManager], bool], timeout: float) -> bool:
        """Wait until `predicate(self)` holds (re-checked on every change and every 100 ms)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.1))
            return True

    def resource_names(self) -> list[str]:
        with self._lock:
            return sorted(self._resources)

    def assignments(self) -> list[Assignment]:
        with self._lock:
            return [Assignment(uid, p.namespace, p.name, container, resource, ids, container in p.init_containers)
                    for uid, p in self._pods.items() for container, by_res in p.containers.items()
                    for resource, ids in by_res.items()]

    def allocated_ids(self, resource: str) -> set[str]:
        with self._lock:
            return {i for p in self._pods.values() for by_res in p.containers.values()
                    for i in by_res.get(resource, ())}

    def container_devices(self, pod_uid: str, container: str) -> dict[str, tuple[str, ...]]:
        with self._lock:
            pod = self._pods.get(pod_uid)
            return dict(pod.containers.get(container, {})) if pod is not None else {}

    def container_health(self, pod_uid: str, container: str) -> dict[str, list[tuple[str, bool]]]:
        """Per resource, the container's devices with their health as their plugin last reported it (a device it
        no longer lists counts as healthy): the device-plugin part of `allocatedResourcesStatus`."""
        with self._lock:
            pod = self._pods.get(pod_uid)
            held = pod.containers.get(container, {}) if pod is not None else {}
            out: dict[str, list[tuple[str, bool]]] = {}
            for resource, ids in held.items():
                known = self._resources.get(resource, ResourceState()).devices
                out[resource] = [(i, known[i].reported_healthy if i in known else True) for i in ids]
            return out

    def has_pod(self, pod_uid: str) -> bool:
        with self._lock:
            return pod_uid in self._pods

    # -- allocation ---------------------------------------------------------------------------------------------

    def seed_assignment(self, assignment: Assignment) -> None:
        """Record an assignment made before this process started (as if read from the kubelet checkpoint)."""
        with self._lock:
            pod = self._pods.setdefault(assignment.pod_uid, _PodDevices(assignment.namespace, assignment.pod_name))
            pod.containers.setdefault(assignment.container, {})[assignment.resource] = assignment.device_ids
            if assignment.init_only:
                pod.init_containers.add(assignment.container)
            self._write_checkpoint()

    def allocate(self, pod_uid: str, container: str, resource: str, count: int, *, namespace: str = "default",
                 pod_name: str | None = None, init: bool = False, restartable: bool = False,
                 running: bool = False) -> pb.ContainerAllocateResponse:
        """Admit one container asking for `count` devices of `resource`, like the kubelet's device manager.

        `init`: a non-restartable init container, whose devices later containers of the pod may reuse;
        `restartable` (with `init`): a sidecar, which keeps its devices. `running`: the runtime runs this container
        already (a kubelet started again while its pods ran); before the sources are ready that is "nothing to do":
        no check, no Allocate call, nothing recorded, and an empty response."""
        if self.active_pods is not None:  # allocateContainerResources: stranded devices back (once sources are ready)
            self.update_allocated({*self.active_pods(), pod_uid})
        with self._lock:
            pod = self._pods.setdefault(pod_uid, _PodDevices(namespace, pod_name or pod_uid))
            existing = pod.containers.get(container, {}).get(resource)
            if existing is not None and len(existing) != count:
                raise AllocationFailed(f'pod "{pod_uid}" container "{container}" changed request for resource '
                                       f'"{resource}" from {len(existing)} to {count}')
            if running and not self.sources_ready():
                self._drop_if_empty(pod_uid)
                return pb.ContainerAllocateResponse()
            if existing is not None:
                # devicesToAllocate with devices already allocated (kept from the checkpoint: a pod the kubelet
                # admits again after a restart, or a node reboot): the registration and health checks, then "no
                # devices needed, nothing to do": no Allocate call, the container runs with the response the
                # kubelet kept
                self._check_registered_and_healthy(resource, existing)
                self._note_reuse(pod, container, resource, existing, init and not restartable)
                return pb.ContainerAllocateResponse.FromString(pod.responses.get((container, resource), b""))
            client, chosen = self._devices_to_allocate(pod, resource, count)
            opts = client.options
        try:
            if opts is not None and opts.get_preferred_allocation_available:
                chosen = self._preferred(client, pod, resource, chosen, count)
            resp = client.stub.Allocate(pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=chosen)]))
        except grpc.RpcError as err:
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            code = err.code() if isinstance(err, grpc.Call) else None
            self._drop_if_empty(pod_uid)
            raise AllocationFailed(f"Allocate for {resource} failed: {code}: {details}") from err
        except ValueError as err:  # the endpoint's channel was closed (stopped endpoint)
            self._drop_if_empty(pod_uid)
            raise AllocationFailed(f"endpoint {client.socket} has been stopped") from err
        if not resp.container_responses:
            self._drop_if_empty(pod_uid)
            raise AllocationFailed("no containers return in allocation response")
        with self._lock:
            taken = (self.allocated_ids(resource) - set(pod.containers.get(container, {}).get(resource, ()))
                     - pod.reusable.get(resource, set())) & set(chosen)
            if taken:
                raise AllocationFailed(f"devices {sorted(taken)} were assigned concurrently")
            pod.containers.setdefault(container, {})[resource] = tuple(chosen)
            pod.responses[(container, resource)] = resp.container_responses[0].SerializeToString(deterministic=True)
            self._note_reuse(pod, container, resource, chosen, init and not restartable)
            self._write_checkpoint()  # allocateContainerResources: needsUpdateCheckpoint
        return resp.container_responses[0]

    @staticmethod
    def _note_reuse(pod: _PodDevices, container: str, resource: str, devices: Sequence[str], init_only: bool) -> None:
        """What `Allocate` does after `allocateContainerResources`, whether or not it called the plugin (lock held):
        a non-restartable init container's devices may be reused by the pod's later containers
        (addContainerAllocatedResources); any other container's may not (removeContainerAllocatedResources)."""
        reuse = pod.reusable.setdefault(resource, set())
        if init_only:
            reuse.update(devices)
            pod.init_containers.add(container)
        else:
            reuse.difference_update(devices)

    def _check_registered_and_healthy(self, resource: str, allocated: tuple[str, ...] = ()) -> set[str]:
        """`devicesToAllocate`'s checks for a node whose kubelet is starting (its "scenario 3: node reboot": a pod
        may be admitted before its plugin registered), made for every allocation: the resource must be known
        (registered, or read from the checkpoint with no devices), have healthy devices, and include every device
        already allocated to the container. Returns the healthy devices (lock held)."""
        state = self._resources.get(resource)
        if state is None:
            raise AllocationFailed(f"cannot allocate unregistered device {resource}")
        if not state.healthy:
            raise AllocationFailed(f"no healthy devices present; cannot allocate unhealthy devices {resource}")
        if not state.healthy.issuperset(allocated):
            raise AllocationFailed(f"previously allocated devices are no longer healthy; cannot allocate unhealthy "
                                   f"devices {resource}")
        return set(state.healthy)

    def _devices_to_allocate(self, pod: _PodDevices, resource: str, count: int) -> tuple[_Client, list[str]]:
        """`devicesToAllocate` (lock held): reusable devices first, then healthy unallocated ones."""
        healthy = self._check_registered_and_healthy(resource)
        client = self._endpoints.get(resource)
        if client is None:  # healthy devices come from a connected plugin's stream: not expected
            raise AllocationFailed(f"cannot allocate unregistered device {resource}")
        chosen = sorted(pod.reusable.get(resource, set()) & healthy)[:count]
        needed = count - len(chosen)
        if needed > 0:
            available = sorted(healthy - self.allocated_ids(resource))
            if len(available) < needed:
                raise AllocationFailed(f"requested number of devices unavailable for {resource}. Requested: "
                                       f"{needed}, Available: {len(available)}")
            chosen += available[:needed]
        return client, chosen

    def _preferred(self, client: _Client, pod: _PodDevices, resource: str, chosen: list[str],
                   count: int) -> list[str]:
        with self._lock:
            reused = [d for d in chosen if d in pod.reusable.get(resource, set())]
            state = self._resources.get(resource, ResourceState())
            available = sorted((state.healthy - self.allocated_ids(resource)) | set(reused))
        if len(reused) >= count:
            return chosen
        pref = client.stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, must_include_deviceIDs=reused,
                                                   allocation_size=count)]))
        answer = list(pref.container_responses[0].deviceIDs) if pref.container_responses else []
        # The kubelet takes the hint only as far as it names available devices, then fills up itself.
        picked = list(reused)
        for d in answer + chosen:
            if len(picked) == count:
                break
            if d in available and d not in picked:
                picked.append(d)
        return picked

    def _drop_if_empty(self, pod_uid: str) -> None:
        with self._lock:
            pod = self._pods.get(pod_uid)
            if pod is not None and not pod.containers:
                del self._pods[pod_uid]

    def remove_pod(self, pod_uid: str) -> list[Assignment]:
        with self._lock:
            gone = [a for a in self.assignments() if a.pod_uid == pod_uid]
            self._pods.pop(pod_uid, None)
            self._changed.notify_all()
            return gone

    def update_allocated(self, active_pod_uids: Iterable[str] | None = None) -> list[str]:
        """`UpdateAllocatedDevices`: forget the devices of every pod not in `active_pod_uids`, by default the
        kubelet's active pods (`active_pods`; a device manager without a pod runner then forgets nothing). Once the
        sources are ready; before, nothing."""
        if not self.sources_ready():
            return []
        if active_pod_uids is None:
            if self.active_pods is None:
                return []
            active_pod_uids = self.active_pods()
        active = set(active_pod_uids)
        with self._lock:
            gone = [uid for uid in self._pods if uid not in active]
            for uid in gone:
                del self._pods[uid]
            if gone:
                self._changed.notify_all()
            return gone


def device_ids(assignments: Iterable[Assignment]) -> set[str]:
    return {i for a in assignments for i in a.device_ids}
