"""The kubelet's node heartbeat Lease, simulated.

Written from kubernetes/kubernetes pkg/kubelet/kubelet.go (`nodeLeaseRenewIntervalFraction` 0.25: the Lease is
renewed every quarter of `nodeLeaseDurationSeconds`, 40 s by default, so every 10 s), pkg/kubelet/util/nodelease.go
(`SetNodeOwnerFunc`) and k8s.io/component-helpers apimachinery/lease/controller.go (v0.37.2), which it follows:

* The Lease is `kube-node-lease/<node name>`, `spec.holderIdentity` the node name, `leaseDurationSeconds` and
  `renewTime` (a MicroTime) set at every renewal. Its owner is the Node (`ownerReferences`, `v1` `Node` with the
  Node's uid). A Lease is created only once that owner reference can be set: while the Node does not exist yet,
  nothing is created and the next period tries again (the post-process function's error blocks a CREATE).
* Each period: with a Lease from the last renewal, an UPDATE from that copy (no GET first); a conflict reads the
  Lease again and retries, up to 5 tries; otherwise GET the Lease, creating it when missing (a failed GET or
  CREATE retried after 0.2 s doubling to 7 s), then UPDATE it unless it was just created.
* The period is jittered by up to 4 % (`wait.JitterUntil(..., 0.04, sliding)`).

The node lifecycle controller takes a renewed Lease as a heartbeat (bridge.sandbox.nodelifecycle): without it, a
kubelet that posts its status only when it changes (every 5 min otherwise) would be marked unreachable after the
controller's 50 s grace period. A stopped simulator stops renewing, as a stopped kubelet does.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import random
from typing import Any

from bridge.kube.api import LEASES, NODES, KubeAPI, Obj
from bridge.kube.errors import Conflict, KubeError, NotFound
from bridge.sandbox.threads import Worker

log = logging.getLogger(__name__)

NAMESPACE = "kube-node-lease"
DEFAULT_DURATION_S = 40
RENEW_FRACTION = 0.25
MAX_UPDATE_TRIES = 5
MAX_BACKOFF_S = 7.0


def micro_now() -> str:
    """A MicroTime as the API server writes it: RFC 3339 with six fraction digits."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeLease:
    """Keeps the node's Lease renewed from `start` to `stop` (a thread)."""

    def __init__(self, kube: KubeAPI, node_name: str, duration_s: int = DEFAULT_DURATION_S) -> None:
        if duration_s <= 0:
            raise ValueError(f"nodeLeaseDurationSeconds must be positive, not {duration_s}")
        self.kube = kube
        self.node_name = node_name
        self.duration_s = duration_s
        self.renew_interval = duration_s * RENEW_FRACTION
        self.renewals = 0
        self.last_error = ""
        self._latest: Obj | None = None
        self._worker = Worker(f"node-lease-{node_name}")
        self._stop = self._worker.stopping

    def start(self) -> None:
        self._latest = None  # a new kubelet process holds no copy of the Lease
        self._worker.start(self._run)

    def stop(self) -> None:
        self._worker.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sync()
            if self._stop.wait(self.renew_interval * (1 + random.uniform(0, 0.04))):
                return

    def sync(self) -> None:
        """One period: renew from the last copy, else ensure the Lease exists and renew it."""
        if self._latest is not None and self._retry_update(self._latest):
            return
        lease, created = self._backoff_ensure()
        self._latest = lease
        if lease is not None and not created:
            self._retry_update(lease)

    def _backoff_ensure(self) -> tuple[Obj | None, bool]:
        sleep = 0.1
        while not self._stop.is_set():
            try:
                return self._ensure()
            except KubeError as err:
                self.last_error = str(err)
                sleep = min(2 * sleep, MAX_BACKOFF_S)
                log.warning("failed to ensure the node lease exists, will retry",
                            extra={"node": self.node_name, "error": str(err), "interval": sleep})
                if self._stop.wait(sleep):
                    break
        return None, False

    def _ensure(self) -> tuple[Obj | None, bool]:
        try:
            return self.kube.get(LEASES, self.node_name, NAMESPACE), False
        except NotFound:
            pass
        lease = self._renewed(None)
        if lease is None:  # no owner yet: the Node is not registered; the next period tries again
            return None, False
        return self.kube.create(LEASES, lease, NAMESPACE), True

    def _retry_update(self, base: Obj) -> bool:
        for _ in range(MAX_UPDATE_TRIES):
            lease = self._renewed(base)
            if lease is None:  # "Failed to prepare lease": this try sends nothing
                continue
            try:
                self._latest = self.kube.update(LEASES, lease, NAMESPACE)
                self.renewals += 1
                return True
            except Conflict:
                fresh, _ = self._backoff_ensure()
                if fresh is None:
                    return False
                base = fresh
            except KubeError as err:
                self.last_error = str(err)
                log.warning("failed to update the node lease", extra={"node": self.node_name, "error": str(err)})
        return False

    def _renewed(self, base: Obj | None) -> Obj | None:
        """`newLease`: a copy of `base` (or a new Lease) with the duration and renew time asserted and, when it has
        none, the Node as its owner; None when the owner cannot be read."""
        if base is None:
            lease: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                     "metadata": {"name": self.node_name, "namespace": NAMESPACE},
                                     "spec": {"holderIdentity": self.node_name}}
        else:
            lease = copy.deepcopy(base)
        lease["spec"]["leaseDurationSeconds"] = self.duration_s
        lease["spec"]["renewTime"] = micro_now()
        if not lease["metadata"].get("ownerReferences"):
            try:
                node = self.kube.get(NODES, self.node_name)
            except NotFound:
                return None  # not registered yet (the kubelet registers its Node in parallel)
            except KubeError as err:
                self.last_error = str(err)
                log.warning("failed to get the node to set the owner of its lease",
                            extra={"node": self.node_name, "error": str(err)})
                return None
            lease["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.node_name,
                                                     "uid": node["metadata"]["uid"]}]
        return lease
