"""The kubelet simulator: plays the kubelet's side of every node-local contract (device-plugin registration and
client, PodResources, the DRA plugin watcher and manager) on real unix sockets, and optionally registers its Node,
posts the Node's status and runs the pods bound to it."""

from bridge.sandbox.kubelet.devicemanager import AllocationFailed, Assignment, DeviceManager
from bridge.sandbox.kubelet.nodestatus import MachineInfo
from bridge.sandbox.kubelet.podresources import DynamicAssignment, PodResourcesServer
from bridge.sandbox.kubelet.pods import EXIT_CODE_ANNOTATION, RUN_SECONDS_ANNOTATION, STOP_SECONDS_ANNOTATION
from bridge.sandbox.kubelet.simulator import KubeletConfig, KubeletSimulator
from bridge.sandbox.kubelet.version import KubeletVersion

__all__ = ["AllocationFailed", "Assignment", "DeviceManager", "DynamicAssignment", "EXIT_CODE_ANNOTATION",
           "KubeletConfig", "KubeletSimulator", "KubeletVersion", "MachineInfo", "PodResourcesServer",
           "RUN_SECONDS_ANNOTATION", "STOP_SECONDS_ANNOTATION"]
