"""The kubelet's device manager, simulated: the Registration server on `kubelet.sock` and one client per plugin.

What it reproduces (kubernetes/kubernetes pkg/kubelet/cm/devicemanager: manager.go, endpoint.go, plugin/v1beta1):
* `Register` checks the version (∈ ["v1beta1"]) and that the resource is an extended resource name, then dials
  `<device-plugins dir>/<endpoint>` with a 10 s blocking dial, calls `GetDevicePluginOptions` and only then
  answers; the ListAndWatch stream is opened in the background and kept open. A failure is a gRPC error.
* Each ListAndWatch message is the complete device list: healthy / unhealthy sets are replaced, capacity is the
  number of devices, allocatable the number of healthy ones. When the stream ends, every device of the resource
  becomes unhealthy (allocatable 0, capacity unchanged). A re-registration replaces the old client.
* `allocate()` picks from healthy devices not assigned to any container, asks GetPreferredAllocation when the
  plugin offers it (and checks the answer like the kubelet: right size, only available devices), then calls
  Allocate with exactly one container request and records the assignment; `remove_pod()` frees it.
* `restart()` is a kubelet restart: clients dropped, every unix socket in `device-plugins/` deleted (regular files
  such as `kubelet_internal_checkpoint` and `DEPRECATION` are kept), and a fresh `kubelet.sock` served.
  Assignments survive, as they do through the kubelet's checkpoint.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NoReturn, Protocol
from pathlib import Path

import grpc

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge.deviceplugin.registration import is_extended_resource_name
from bridge.node.sockets import check_socket_path

log = logging.getLogger("bridge.sandbox.kubelet")

SUPPORTED_VERSIONS = ("v1beta1",)
DIAL_TIMEOUT_S = 10.0
CHECKPOINT_FILE = "kubelet_internal_checkpoint"
KUBELET_SOCKET = "kubelet.sock"

class AllocationFailed(RuntimeError):
    """The device manager could not admit the container (not enough devices, plugin error, bad answer)."""


@dataclass(frozen=True)
class DeviceInfo:
    id: str
    healthy: bool
    numa_nodes: tuple[int, ...]


@dataclass(frozen=True)
class Assignment:
    pod_uid: str
    namespace: str
    pod_name: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


@dataclass
class ResourceState:
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    connected: bool = False
    registrations: int = 0
    updates: int = 0
    options: pb.DevicePluginOptions | None = None

    @property
    def capacity(self) -> int:
        return len(self.devices)

    @property
    def allocatable(self) -> int:
        return sum(d.healthy for d in self.devices.values())

    @property
    def healthy(self) -> set[str]:
        return {d.id for d in self.devices.values() if d.healthy}


class _ResponseStream(Protocol):
    """What the reader needs of a server-streaming call: its messages, and a way to end it."""

    def __iter__(self) -> Iterator[pb.ListAndWatchResponse]: ...

    def cancel(self) -> bool: ...


class _Endpoint:
    """The kubelet's client for one registered plugin: a channel and the ListAndWatch reader thread."""

    def __init__(self, manager: DeviceManager, resource: str, path: str) -> None:
        self.resource = resource
        self.path = path
        self.channel = grpc.insecure_channel("unix://" + path)
        self.stub = pb_grpc.DevicePluginStub(self.channel)
        self._manager = manager
        self._stream: _ResponseStream | None = None
        self._thread: threading.Thread | None = None
        self.closed = False

    def connect(self, dial_timeout: float) -> pb.DevicePluginOptions:
        grpc.channel_ready_future(self.channel).result(timeout=dial_timeout)
        return self.stub.GetDevicePluginOptions(pb.Empty())

    def run(self) -> None:
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
                log.info("ListAndWatch for %s ended: %s", self.resource, err.code() if isinstance(err, grpc.Call) else err)
        finally:
            self._manager._on_stream_end(self)

    def close(self) -> None:
        self.closed = True
        if self._stream is not None:
            self._stream.cancel()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self.channel.close()


class _RegistrationServicer(pb_grpc.RegistrationServicer):
    def __init__(self, manager: DeviceManager) -> None:
        self._manager = manager

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        try:
            self._manager._register(request)
        except _Rejected as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT if err.invalid else grpc.StatusCode.UNAVAILABLE, str(err))
        return pb.Empty()


class _Rejected(Exception):
    def __init__(self, message: str, invalid: bool) -> None:
        super().__init__(message)
        self.invalid = invalid


class DeviceManager:
    def __init__(self, plugin_dir: Path, *, dial_timeout_s: float = DIAL_TIMEOUT_S) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.dial_timeout_s = dial_timeout_s
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._resources: dict[str, ResourceState] = {}
        self._endpoints: dict[str, _Endpoint] = {}
        self._assignments: dict[tuple[str, str, str], Assignment] = {}
        self._server: grpc.Server | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.register_errors: list[str] = []

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
            endpoints = list(self._endpoints.values())
            self._endpoints.clear()
        for ep in endpoints:
            ep.close()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    def restart(self) -> None:
        self.stop()
        self.start()

    def _cleanup_dir(self) -> None:
        for entry in os.scandir(self.plugin_dir):
            if entry.name == CHECKPOINT_FILE:
                continue
            try:
                if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    os.unlink(entry.path)
            except FileNotFoundError:
                pass

    # -- registration -------------------------------------------------------------------------------------------

    def _register(self, request: pb.RegisterRequest) -> None:
        def reject(message: str, invalid: bool = True) -> NoReturn:
            self.register_errors.append(message)
            log.warning("Register rejected: %s", message)
            raise _Rejected(message, invalid)

        if request.version not in SUPPORTED_VERSIONS:
            reject(f"requested device plugin API version {request.version!r} is not supported by the kubelet; "
                   f"supported versions: {list(SUPPORTED_VERSIONS)}")
        if not is_extended_resource_name(request.resource_name):
            reject(f"invalid name of device plugin socket / resource: {request.resource_name!r} is not an "
                   f"extended resource name")
        if not request.endpoint or "/" in request.endpoint:
            reject(f"endpoint {request.endpoint!r} must be a socket file name inside {self.plugin_dir}")
        path = str(self.plugin_dir / request.endpoint)
        endpoint = _Endpoint(self, request.resource_name, path)
        try:
            opts = endpoint.connect(self.dial_timeout_s)
        except (grpc.FutureTimeoutError, grpc.RpcError) as err:
            endpoint.close()
            reject(f"failed to dial device plugin at {path}: {type(err).__name__} {err}", invalid=False)
        with self._lock:
            old = self._endpoints.pop(request.resource_name, None)
        if old is not None:
            old.close()
        with self._lock:
            state = self._resources.setdefault(request.resource_name, ResourceState())
            state.registrations += 1
            state.options = opts
            state.connected = True
            self._endpoints[request.resource_name] = endpoint
            self._changed.notify_all()
        endpoint.run()
        log.info("device plugin registered", extra={"resource": request.resource_name, "endpoint": path})

    def _on_list(self, endpoint: _Endpoint, msg: pb.ListAndWatchResponse) -> None:
        with self._lock:
            if self._endpoints.get(endpoint.resource) is not endpoint:
                return
            state = self._resources[endpoint.resource]
            state.devices = {
                d.ID: DeviceInfo(d.ID, d.health == "Healthy", tuple(n.ID for n in d.topology.nodes))
                for d in msg.devices
            }
            state.updates += 1
            self._changed.notify_all()

    def _on_stream_end(self, endpoint: _Endpoint) -> None:
        with self._lock:
            state = self._resources.get(endpoint.resource)
            if state is None:
                return
            if self._endpoints.get(endpoint.resource) in (endpoint, None):
                # The kubelet marks every device unhealthy when its plugin's stream ends: allocatable 0.
                state.devices = {k: DeviceInfo(v.id, False, v.numa_nodes) for k, v in state.devices.items()}
                state.connected = False
                if self._endpoints.get(endpoint.resource) is endpoint:
                    del self._endpoints[endpoint.resource]
            self._changed.notify_all()

    # -- queries ------------------------------------------------------------------------------------------------

    def resource(self, name: str) -> ResourceState:
        """A copy of what the device manager knows about `name` (empty when never registered)."""
        with self._lock:
            s = self._resources.get(name, ResourceState())
            return ResourceState(dict(s.devices), s.connected, s.registrations, s.updates, s.options)

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
            return list(self._assignments.values())

    def allocated_ids(self, resource: str) -> set[str]:
        with self._lock:
            return {i for a in self._assignments.values() if a.resource == resource for i in a.device_ids}

    # -- allocation ---------------------------------------------------------------------------------------------

    def seed_assignment(self, assignment: Assignment) -> None:
        """Record an assignment made before this process started (as if read from the kubelet checkpoint)."""
        with self._lock:
            self._assignments[(assignment.pod_uid, assignment.container, assignment.resource)] = assignment

    def allocate(self, pod_uid: str, container: str, resource: str, count: int, *, namespace: str = "default",
                 pod_name: str | None = None) -> pb.ContainerAllocateResponse:
        """Admit one container asking for `count` devices of `resource`, like the kubelet's device manager."""
        with self._lock:
            endpoint = self._endpoints.get(resource)
            state = self._resources.get(resource)
            if endpoint is None or state is None:
                raise AllocationFailed(f"cannot allocate unregistered device {resource}")
            available = sorted(state.healthy - self.allocated_ids(resource))
            if len(available) < count:
                raise AllocationFailed(
                    f"requested number of devices unavailable for {resource}. Requested: {count}, "
                    f"Available: {len(available)}")
            opts = state.options
        chosen = available[:count]
        try:
            if opts is not None and opts.get_preferred_allocation_available:
                pref = endpoint.stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
                    pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, must_include_deviceIDs=[],
                                                           allocation_size=count)]))
                answer = list(pref.container_responses[0].deviceIDs) if pref.container_responses else []
                # The kubelet uses the hint only when it is a valid choice.
                if len(answer) == count and set(answer) <= set(available):
                    chosen = answer
            resp = endpoint.stub.Allocate(pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=chosen)]))
        except grpc.RpcError as err:
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            code = err.code() if isinstance(err, grpc.Call) else None
            raise AllocationFailed(f"Allocate for {resource} failed: {code}: {details}") from err
        if not resp.container_responses:
            raise AllocationFailed("no containers return in allocation response")
        with self._lock:
            taken = self.allocated_ids(resource) & set(chosen)
            if taken:
                raise AllocationFailed(f"devices {sorted(taken)} were assigned concurrently")
            self._assignments[(pod_uid, container, resource)] = Assignment(
                pod_uid, namespace, pod_name or pod_uid, container, resource, tuple(chosen))
        return resp.container_responses[0]

    def remove_pod(self, pod_uid: str) -> list[Assignment]:
        with self._lock:
            gone = [k for k in self._assignments if k[0] == pod_uid]
            return [self._assignments.pop(k) for k in gone]


def device_ids(assignments: Iterable[Assignment]) -> set[str]:
    return {i for a in assignments for i in a.device_ids}
