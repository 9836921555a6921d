"""A test-local stand-in for the kubelet's node-status loop, until the kubelet simulator posts Node status itself.

What it plays (kubernetes/kubernetes pkg/kubelet/kubelet_node_status.go `syncNodeStatus` -> `tryUpdateNodeStatus`,
pkg/kubelet/nodestatus/setters.go `MachineInfo`): every `nodeStatusUpdateFrequency` the kubelet computes the
Node's status and patches `status` when it changed; `capacity[<resource>]` is the number of devices the device
plugin reported, `allocatable[<resource>]` the number it reported Healthy (the device manager's `GetCapacity`). The
real period is 10 s; tests use a short one. `pause()` stops posting (a kubelet that has not posted yet), so a test
can act inside the window in which the scheduler still counts the old allocatable.
"""

from __future__ import annotations

import threading

from bridge.kube import NODES, KubeAPI
from bridge.kube.errors import KubeError
from bridge.sandbox.kubelet.devicemanager import DeviceManager


class NodeStatusPoster:
    def __init__(self, api: KubeAPI, node_name: str, devices: DeviceManager, *, resource: str = "nvidia.com/gpu",
                 period_s: float = 0.2) -> None:
        self.api = api
        self.node_name = node_name
        self.devices = devices
        self.resource = resource
        self.period_s = period_s
        self.posts = 0
        self._last: tuple[int, int] | None = None
        self._paused = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-node-status", daemon=True)

    def start(self) -> NodeStatusPoster:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def post_now(self) -> bool:
        state = self.devices.resource(self.resource)
        now = (state.capacity, state.allocatable)
        if now == self._last:
            return False
        try:
            self.api.patch(NODES, self.node_name, {"status": {"capacity": {self.resource: str(now[0])},
                                                              "allocatable": {self.resource: str(now[1])}}},
                           subresource="status")
        except KubeError:
            return False  # the next period tries again, as the kubelet does
        self._last = now
        self.posts += 1
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            if not self._paused.is_set():
                self.post_now()
