"""The sandbox cluster's control plane: the scheduler, claim-controller, node lifecycle and taint eviction controller
stand-ins for the cluster's Kubernetes release (`bridge.sandbox.scheduler.Scheduler`,
`bridge.sandbox.claimcontroller.ClaimController`, `bridge.sandbox.nodelifecycle.NodeLifecycleController`,
`bridge.sandbox.tainteviction.TaintEvictionController`, each written from the upstream component it stands in for
and citing it). The claim controller starts first, so the
claims of pods created from templates exist by the time the scheduler looks at the pods."""

from __future__ import annotations

from typing import Protocol

from bridge.kube.api import KubeAPI
from bridge.sandbox.apiserver.profiles import profile_for
from bridge.sandbox.claimcontroller import ClaimController
from bridge.sandbox.nodelifecycle import NodeLifecycleController, NodeMonitorTimes
from bridge.sandbox.scheduler import Scheduler
from bridge.sandbox.tainteviction import TaintEvictionController


class Controller(Protocol):
    def stop(self, timeout: float = 5.0) -> None: ...


def stand_ins(api: KubeAPI, kubernetes_version: str,
              node_monitor: NodeMonitorTimes | None = None) -> tuple[list[Controller], str]:
    """Start the control plane for `kubernetes_version`; returns the running controllers and what they are."""
    profile = profile_for(kubernetes_version)
    controller = ClaimController(api, profile=profile).start()
    scheduler = Scheduler(api, profile=profile).start()
    nodes = NodeLifecycleController(api, profile=profile, times=node_monitor).start()
    evictions = TaintEvictionController(api, profile=profile).start()
    return ([evictions, nodes, scheduler, controller],
            "scheduler, claim-controller, node lifecycle and taint eviction controller stand-ins")
