"""`bridge sandbox cluster`: a whole GPU cluster on loopback (API emulator, kubelet simulators, control-plane
stand-ins, real node daemons and webhook). Entry point: `SandboxCluster(ClusterSpec(...))`."""

from bridge.sandbox.cluster.cluster import ClusterError, SandboxCluster, SandboxNode, device_class
from bridge.sandbox.cluster.spec import ClusterSpec, NodeSpec, SpecError, nodes_from_count, nodes_from_file

__all__ = ["ClusterError", "ClusterSpec", "NodeSpec", "SandboxCluster", "SandboxNode", "SpecError", "device_class",
           "nodes_from_count", "nodes_from_file"]
