"""A kube-scheduler stand-in for the sandbox: binds pending pods, allocating their ResourceClaims from the published
ResourceSlices as the real DynamicResources plugin and structured allocator do.

    from bridge.sandbox.scheduler import Scheduler
    sched = Scheduler(api, profile=profile_for("1.37")).start()   # api: a bridge.kube.KubeAPI
    ...
    sched.stop()

Layout: `podresources` (what a pod requests), `nodefilters` (NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit), `allocator` (structured parameters), `extended` (KEP-5004), `preemption` (DefaultPreemption),
`cycle` (one pure scheduling cycle and its messages), `recorder` (events.k8s.io Events), `scheduler` (the I/O
shell). A stand-in: production code never imports it (import-linter contract "sandbox-not-in-production").
"""

from .allocator import AllocatedState, AllocatorError, Features, MatchCache, allocate
from .cycle import Scheduled, Snapshot, Unschedulable, schedule
from .scheduler import Scheduler, profile_of

__all__ = [
    "AllocatedState", "AllocatorError", "Features", "MatchCache", "Scheduled", "Scheduler", "Snapshot",
    "Unschedulable", "allocate", "profile_of", "schedule",
]
