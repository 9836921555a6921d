"""The kubelet's PodResources service (`pod-resources/kubelet.sock`), simulated: `List`, `Get`,
`GetAllocatableResources`.

Written from kubernetes/kubernetes pkg/kubelet/apis/podresources/server_v1.go (@b7fd57a: `List` walks the active
pods and reports, per pod, the restartable init containers (sidecars) and the regular containers; **ordinary init
containers are not reported**, so a device an init container holds is invisible here, even while the init
container runs) and pkg/kubelet/cm/devicemanager/pod_devices.go (`getContainerDevices`: one `ContainerDevices` per
resource and NUMA node; devices without topology in one group). `List` first calls the device manager's
`UpdateAllocatedDevices` (v1.37.2 server_v1.go; `Get` does not), so a List gives back the devices of pods that
ended, as it does on a real kubelet.

Pods: when a pods provider is set (the simulator's pod runner: the kubelet's active pods), every active pod is
listed, with or without devices; otherwise the pods the device manager has assignments for. DRA assignments come
from any number of `DynamicResourcesSource`s (the DRA side of the simulator adds one) and are reported as
`dynamic_resources` on the containers using the claim.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from bridge._proto.podresources.v1 import podresources_pb2 as pb
from bridge._proto.podresources.v1 import podresources_pb2_grpc as pb_grpc
from bridge.kube.api import Obj
from bridge.unixsock import check_socket_path
from bridge.sandbox.kubelet.devicemanager import Assignment, DeviceManager

SOCKET_DIR = "pod-resources"
SOCKET_NAME = "kubelet.sock"


@dataclass(frozen=True)
class DynamicAssignment:
    """One DRA device prepared for a container, as PodResources reports it."""

    namespace: str
    pod_name: str
    container: str
    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...] = ()


class DynamicResourcesSource(Protocol):
    def dynamic_assignments(self) -> Iterable[DynamicAssignment]: ...


def _container_devices(manager: DeviceManager, assignments: Iterable[Assignment]) -> list[pb.ContainerDevices]:
    out = []
    for a in assignments:
        numa = {d.id: d.numa_nodes for d in manager.resource(a.resource).devices.values()}
        groups: dict[tuple[int, ...], list[str]] = defaultdict(list)
        for i in a.device_ids:
            groups[numa.get(i, ())].append(i)
        for nodes, ids in sorted(groups.items()):
            out.append(pb.ContainerDevices(
                resource_name=a.resource, device_ids=ids,
                topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in nodes]) if nodes else None))
    return out


class _Servicer(pb_grpc.PodResourcesListerServicer):
    def __init__(self, server: PodResourcesServer) -> None:
        self._s = server

    def List(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext) -> pb.ListPodResourcesResponse:
        self._s.manager.update_allocated()  # server_v1.go: UpdateAllocatedDevices first (Get does not)
        return pb.ListPodResourcesResponse(pod_resources=self._s.pods())

    def Get(self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext) -> pb.GetPodResourcesResponse:
        for pod in self._s.pods():
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return pb.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND,
                      f"pod {request.pod_namespace}/{request.pod_name} not found")

    def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        devices = []
        for resource in self._s.manager.resource_names():
            state = self._s.manager.resource(resource)
            for d in sorted(state.devices.values(), key=lambda d: d.id):
                if d.healthy:
                    devices.append(pb.ContainerDevices(
                        resource_name=resource, device_ids=[d.id],
                        topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in d.numa_nodes])
                        if d.numa_nodes else None))
        return pb.AllocatableResourcesResponse(devices=devices)


class PodResourcesServer:
    def __init__(self, kubelet_root: Path, manager: DeviceManager) -> None:
        self.socket_path = Path(kubelet_root) / SOCKET_DIR / SOCKET_NAME
        self.manager = manager
        self._dynamic: list[DynamicResourcesSource] = []
        self._pods_provider: Callable[[], list[Obj]] | None = None
        self._server: grpc.Server | None = None
        self._pool: ThreadPoolExecutor | None = None

    def add_dynamic_source(self, source: DynamicResourcesSource) -> None:
        self._dynamic.append(source)

    def set_pods_provider(self, provider: Callable[[], list[Obj]]) -> None:
        """The kubelet's active pods (pod objects); `List` then reports every one of them."""
        self._pods_provider = provider

    def pods(self) -> list[pb.PodResources]:
        # (namespace, pod) -> container -> (device assignments, dynamic assignments), in the order reported
        pods: dict[tuple[str, str], dict[str, tuple[list[Assignment], list[DynamicAssignment]]]] = {}
        listed: set[tuple[str, str, str]] | None = None  # (ns, pod, container) a pod spec says to report
        if self._pods_provider is not None:
            listed = set()
            for pod in self._pods_provider():
                meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
                key = (meta.get("namespace", ""), meta.get("name", ""))
                containers = pods.setdefault(key, {})
                for c in [*(c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"),
                          *(spec.get("containers") or [])]:
                    containers.setdefault(c["name"], ([], []))
                    listed.add((*key, c["name"]))
        for a in self.manager.assignments():
            if a.init_only or (listed is not None and (a.namespace, a.pod_name, a.container) not in listed):
                continue
            pods.setdefault((a.namespace, a.pod_name), {}).setdefault(a.container, ([], []))[0].append(a)
        for src in self._dynamic:
            for d in src.dynamic_assignments():
                if listed is not None and (d.namespace, d.pod_name, d.container) not in listed:
                    continue
                pods.setdefault((d.namespace, d.pod_name), {}).setdefault(d.container, ([], []))[1].append(d)
        out = []
        items = pods.items() if listed is not None else sorted(pods.items())
        for (ns, name), containers in items:
            crs = []
            ordered = containers.items() if listed is not None else sorted(containers.items())
            for cname, (assigned, dynamic) in ordered:
                crs.append(pb.ContainerResources(
                    name=cname,
                    devices=_container_devices(self.manager, assigned),
                    dynamic_resources=[
                        pb.DynamicResource(
                            claim_name=d.claim_name, claim_namespace=d.claim_namespace,
                            claim_resources=[pb.ClaimResource(
                                cdi_devices=[pb.CDIDevice(name=n) for n in d.cdi_devices],
                                driver_name=d.driver, pool_name=d.pool, device_name=d.device)])
                        for d in dynamic
                    ],
                ))
            out.append(pb.PodResources(name=name, namespace=ns, containers=crs))
        return out

    def start(self) -> None:
        check_socket_path(self.socket_path)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kubelet-podres")
        self._server = grpc.server(self._pool)
        pb_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), self._server)
        if self._server.add_insecure_port("unix:" + str(self.socket_path)) == 0:
            raise OSError(f"cannot listen on {self.socket_path}")
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0.5).wait()
            self._server = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass


@dataclass(frozen=True)
class ListedDevice:
    """One device in a PodResources `List` answer: a device-plugin device or a DRA claim's device."""

    namespace: str
    pod: str
    container: str
    resource: str  # the extended resource name, or "<driver>" for DRA devices
    device: str  # device-plugin ID, or "<pool>/<device>" for DRA devices
    claim: str = ""  # "<namespace>/<name>" of the claim, for DRA devices


def list_devices(socket_path: Path | str, timeout: float = 10.0) -> list[ListedDevice]:
    """Call `List` on a PodResources socket (ours or a real kubelet's) and flatten the answer."""
    out: list[ListedDevice] = []
    with grpc.insecure_channel(f"unix://{socket_path}") as ch:
        resp = pb_grpc.PodResourcesListerStub(ch).List(pb.ListPodResourcesRequest(), timeout=timeout)
    for p in resp.pod_resources:
        for c in p.containers:
            out.extend(ListedDevice(p.namespace, p.name, c.name, d.resource_name, i)
                       for d in c.devices for i in d.device_ids)
            out.extend(ListedDevice(p.namespace, p.name, c.name, r.driver_name, f"{r.pool_name}/{r.device_name}",
                                    f"{dr.claim_namespace}/{dr.claim_name}")
                       for dr in c.dynamic_resources for r in dr.claim_resources)
    return out


def allocatable_devices(socket_path: Path | str, resource: str, timeout: float = 10.0) -> set[str]:
    """Call `GetAllocatableResources` on a PodResources socket (ours or a real kubelet's): the device IDs of
    `resource` the kubelet counts as healthy (kubernetes `pkg/kubelet/cm/devicemanager/manager.go`
    `GetAllocatableDevices`: "all the healthy devices known to the manager"), i.e. what it offers to new pods."""
    with grpc.insecure_channel(f"unix://{socket_path}") as ch:
        resp = pb_grpc.PodResourcesListerStub(ch).GetAllocatableResources(pb.AllocatableResourcesRequest(),
                                                                          timeout=timeout)
    return {i for d in resp.devices if d.resource_name == resource for i in d.device_ids}
