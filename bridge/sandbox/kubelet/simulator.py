"""`KubeletSimulator`: one object playing the kubelet for a node daemon under test or in `bridge sandbox cluster`.

It owns the kubelet root layout (`device-plugins/`, `plugins/`, `plugins_registry/`, `pod-resources/`) and
composes the simulated device manager (legacy device plugins), the PodResources server and, when given an API
client and a node name, the DRA manager (plugin watcher on `plugins_registry`, NodePrepare/Unprepare caller,
health-stream consumer, slice wiping), whose prepared claims PodResources reports as `dynamic_resources`. With
`KubeletConfig.register_node` it registers its Node and posts the Node's status every
`node_status_frequency`; with `run_pods` it runs the pods bound to it (admission, devices, status, termination).

Lifecycle like the kubelet's: `start()` serves PodResources and `kubelet.sock`, watches `plugins_registry` and
wipes the node's ResourceSlices in the background. `stop()` is the kubelet process ending: every server and plugin
connection closes, nothing reacts to the API, the Node's status is no longer posted, and the pods' containers run
on. A `start()` after it is a new process on the same node: it deletes the device-plugin sockets, serves a fresh
`kubelet.sock`, reads the device manager's checkpoint back, forgets which claims are prepared (so Prepare is called
again for pods that had not started; running pods are not prepared again), wipes the node's ResourceSlices again,
rediscovers the DRA registration sockets, and lists its pods again, taking over those the runtime still runs and
killing the others as orphans (`bridge.sandbox.kubelet.pods`). `restart()` is the two at once. Further parts join
through `add_component`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Protocol

from bridge.kube.api import KubeAPI
from bridge.sandbox.kubelet.devicemanager import ENDPOINT_STOP_GRACE_PERIOD_S, DeviceManager
from bridge.sandbox.kubelet.dramanager import DraManager
from bridge.sandbox.kubelet.nodelease import DEFAULT_DURATION_S as LEASE_DURATION_S
from bridge.sandbox.kubelet.nodelease import NodeLease
from bridge.sandbox.kubelet.nodestatus import UPDATE_FREQUENCY_S, MachineInfo, NodeStatusReporter
from bridge.sandbox.kubelet.podresources import PodResourcesServer
from bridge.sandbox.kubelet.pods import (
    FIRST_SYNC_DELAY_S,
    RECONCILE_PERIOD_S,
    RESYNC_INTERVAL_S,
    SYNC_RETRY_S,
    PodRunner,
)
from bridge.sandbox.kubelet.slicewipe import WIPING_DELAY_S
from bridge.sandbox.kubelet.version import DEFAULT_VERSION, KubeletVersion

SUBDIRS = ("device-plugins", "plugins", "plugins_registry", "pod-resources")


class Component(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class KubeletConfig:
    """What the simulated kubelet is and does. Defaults are the real kubelet's; tests shorten the periods."""

    version: str = DEFAULT_VERSION  # decides the release-dependent rules (bridge.sandbox.kubelet.version)
    register_node: bool = False  # create/reconcile the Node and post its status (needs the API side)
    node_status_frequency: float = UPDATE_FREQUENCY_S  # nodeStatusUpdateFrequency
    node_lease_duration: int = LEASE_DURATION_S  # nodeLeaseDurationSeconds (the Lease is renewed every quarter)
    run_pods: bool = False  # run the pods bound to this node (needs the API side)
    machine: MachineInfo = field(default_factory=MachineInfo)
    sync_retry: float = SYNC_RETRY_S  # pod workers' backOffPeriod after a sync error (10 s, jittered)
    resync_interval: float = RESYNC_INTERVAL_S  # syncFrequency: a failed prepare is retried after 1-1.5x this
    restart_backoff: float = 10.0  # first container restart delay (crash-loop backoff)
    stop_grace_period: float = ENDPOINT_STOP_GRACE_PERIOD_S  # device plugin endpoint grace before removal
    wiping_delay: float = WIPING_DELAY_S  # DRA slices wiped this long after a driver's last connection
    startup_wipe_delay: float = 0.0  # delay the startup wipe's first attempt (to test a late wipe)
    dra_poll_interval: float = 0.1  # plugin watcher reconcile / connection probe period
    dra_reconcile_period: float = RECONCILE_PERIOD_S  # the DRA manager's reconcile loop (claims of inactive pods)
    first_sync_delay: float = FIRST_SYNC_DELAY_S  # a starting kubelet's wait before it admits its first listing


class KubeletSimulator:
    def __init__(self, root: Path, *, kube: KubeAPI | None = None, node_name: str | None = None,
                 dra_call_timeout: float = 45.0, dra_health_retry: float = 5.0,
                 config: KubeletConfig | None = None) -> None:
        if (kube is None) != (node_name is None):
            raise ValueError("the DRA side needs both an API client and the node name")
        self.config = config or KubeletConfig()
        if kube is None and (self.config.register_node or self.config.run_pods):
            raise ValueError("registering the Node and running pods need an API client and the node name")
        self.root = Path(root)
        self.node_name = node_name
        self.version = KubeletVersion.parse(self.config.version)
        self.devices = DeviceManager(self.root / "device-plugins", version=self.version,
                                     stop_grace_period_s=self.config.stop_grace_period)
        self.podresources = PodResourcesServer(self.root, self.devices)
        self.dra: DraManager | None = None
        self.node_status: NodeStatusReporter | None = None
        self.node_lease: NodeLease | None = None
        self.pods: PodRunner | None = None
        if kube is not None and node_name is not None:
            self.dra = DraManager(kube, node_name, str(self.root / "plugins_registry"),
                                  call_timeout=dra_call_timeout, health_retry=dra_health_retry,
                                  poll_interval=self.config.dra_poll_interval, version=self.version,
                                  wiping_delay=self.config.wiping_delay,
                                  startup_wipe_delay=self.config.startup_wipe_delay)
            self.podresources.add_dynamic_source(self.dra)
            if self.config.register_node:
                self.node_status = NodeStatusReporter(
                    kube, node_name, self.devices.capacity, version=self.version, machine=self.config.machine,
                    update_frequency=self.config.node_status_frequency,
                    fresh_device_state=lambda: self._fresh_device_state)
                self.node_lease = NodeLease(kube, node_name, self.config.node_lease_duration)
            if self.config.run_pods:
                self.pods = PodRunner(kube, node_name, self.devices, self.dra, version=self.version,
                                      machine=self.config.machine, sync_retry=self.config.sync_retry,
                                      resync_interval=self.config.resync_interval,
                                      restart_backoff=self.config.restart_backoff,
                                      reconcile_period=self.config.dra_reconcile_period,
                                      first_sync_delay=self.config.first_sync_delay)
                self.podresources.set_pods_provider(self.pods.active_pods)
        self._extra: list[Component] = []
        self.restarts = 0
        self._running = self._started = False
        self._fresh_device_state = True  # `ShouldResetExtendedResourceCapacity` as read at the last start
        self._serves_podresources = True

    @property
    def device_plugin_dir(self) -> Path:
        return self.root / "device-plugins"

    @property
    def kubelet_socket(self) -> Path:
        return self.devices.socket_path

    @property
    def podresources_socket(self) -> Path:
        return self.podresources.socket_path

    def add_component(self, component: Component) -> None:
        """Add a part (e.g. the DRA plugin watcher) that starts after and stops before the device manager."""
        self._extra.append(component)
        if self._running:
            component.start()

    @property
    def running(self) -> bool:
        return self._running

    def start(self, *, podresources: bool = True) -> KubeletSimulator:
        """Start the kubelet; after `stop`, a new kubelet process on the same node: it reads the device manager's
        checkpoint back, does not know which claims are prepared, lists its pods again and takes over those the
        runtime still runs (`PodRunner.start`)."""
        for d in SUBDIRS:
            (self.root / d).mkdir(parents=True, exist_ok=True)
        again = self._started
        self._serves_podresources = podresources
        # read as the node status registers on a real kubelet: before its device manager starts (kubelet.go Run
        # starts syncNodeStatus at once, the container manager only once the runtime is up), so before our
        # kubelet.sock is in the directory
        self._fresh_device_state = self.devices.no_checkpoints()
        if podresources:
            self.podresources.start()
        if again:
            self.devices.restart()
            self.restarts += 1
        else:
            self.devices.start()
        if self.node_status is not None:
            self.node_status.start()
        if self.node_lease is not None:
            self.node_lease.start()
        if self.dra is not None:
            if again:
                self.dra.forget_prepared()
            self.dra.start()
        if self.pods is not None:
            self.pods.start()
        for c in self._extra:
            c.start()
        self._running = self._started = True
        return self

    def stop(self) -> None:
        """The kubelet process stopping (and staying down until `start`): its servers and plugin connections close,
        the Node's status is no longer posted, nothing on the node reacts to the API, and the pods' containers keep
        running."""
        for c in reversed(self._extra):
            c.stop()
        if self.pods is not None:
            self.pods.stop()
        if self.dra is not None:
            self.dra.stop()
        if self.node_lease is not None:
            self.node_lease.stop()
        if self.node_status is not None:
            self.node_status.stop()
        self.devices.stop()
        self.podresources.stop()
        self._running = False

    def restart(self) -> None:
        """A kubelet restart: `stop` then `start`, a process ending and a new one starting where it ran."""
        self.stop()
        self.start(podresources=self._serves_podresources)

    def __enter__(self) -> KubeletSimulator:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
