"""The kubelet simulator: plays the kubelet's side of every node-local contract (device-plugin registration and
client, PodResources; the DRA plugin watcher lives beside them) on real unix sockets."""

from bridge.sandbox.kubelet.devicemanager import AllocationFailed, Assignment, DeviceManager
from bridge.sandbox.kubelet.podresources import DynamicAssignment, PodResourcesServer
from bridge.sandbox.kubelet.simulator import KubeletSimulator

__all__ = ["AllocationFailed", "Assignment", "DeviceManager", "DynamicAssignment", "KubeletSimulator",
           "PodResourcesServer"]
