"""The node lifecycle controller stand-in (kube-controller-manager's node-lifecycle-controller): Nodes whose kubelet
stopped posting become Unknown and tainted, and their pods not Ready. See controller.py."""

from .controller import NodeLifecycleController, NodeMonitorTimes

__all__ = ["NodeLifecycleController", "NodeMonitorTimes"]
