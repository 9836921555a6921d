"""Keeping `ServeFacts` current: what the cluster can serve right now (the shell; all I/O through bridge.kube).

* **Do pod claims survive?** A server-side dry-run create (`dryRun=All`: admitted, defaulted, validated, nothing
  stored) of a pod with one claim, in the webhook's own namespace, at start and every `interval`. An API server
  with DynamicResourceAllocation off answers 201 with the claim gone (kubernetes/kubernetes pkg/api/pod/util.go
  `dropDisabledDynamicResourceAllocationFields`, run in PrepareForCreate, after the mutating webhooks): claims are
  not kept and nothing is translated, loudly (log at ERROR, metric, the reason in every untranslated pod's warning
  and Event). A check that cannot run (retried after `UNKNOWN_RETRY` seconds rather than the interval) (403 without the RBAC grant, the API unreachable) leaves the answer unknown,
  which also translates nothing: a pod that keeps its device-plugin GPU is better than one that silently runs
  without any. The probe pod is labelled `app.kubernetes.io/managed-by: dra-bridge` (the registration's
  `objectSelector` keeps it from our own webhook), opted out, restricted-PSA compliant, and names a claim that need
  not exist (a pod may reference a claim before it is created). In a namespace created moments before the webhook
  started, pods are refused until its `default` ServiceAccount exists (the ServiceAccount admission plugin): the
  check waits up to 5 s for it instead of leaving the answer unknown, and nothing translated, for `UNKNOWN_RETRY`.
* **Does the DeviceClass exist?** One GET of the bridge's DeviceClass with every check (`auto` picks `extended`
  only when it does).
* **The GPU nodes**: an informer on Nodes whose objects are slimmed on arrival (bridge/webhook/nodes.py `slim`),
  so the webhook holds labels, taints and the kubelet version of GPU nodes only. Changes mark the view dirty; the
  checker thread rebuilds the `NodeView` (O(GPU nodes)) at most once per wake, so a relist of thousands of nodes is
  one rebuild, not thousands, and a review never pays for it.

`LiveFacts.current()` is what the review path calls: one attribute read of an immutable snapshot. Every change of
any of the three publishes a new snapshot with the next `generation`.

RBAC (charts/dra-bridge/templates/webhook.yaml): `list`/`watch` on nodes (cluster), `get` on deviceclasses
(cluster), `create` on pods in the webhook's own namespace only (RBAC cannot say "dry run only"; the grant is
confined to the namespace the webhook itself runs in, which no workload shares).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bridge.kube.api import NODES, PODS, KubeAPI, WatchEvent
from bridge.kube.errors import Forbidden, KubeError, NotFound
from bridge.kube.watch import Informer
from bridge.webhook.facts import ClusterFacts, ServeFacts
from bridge.webhook.nodes import MAX_NODES, NodeInfo, NodeView, project, slim
from bridge.webhook.policy import MANAGED_BY_LABEL, MANAGED_BY_VALUE, OPT_OUT_ANNOTATION

log = logging.getLogger(__name__)

PROBE_CLAIM = "dra-bridge-serve-check"
DEFAULT_INTERVAL = 300.0
UNKNOWN_RETRY = 10.0  # seconds before a check that could not run is tried again
SERVICE_ACCOUNT_TRIES = 10  # probes 0.5 s apart while the namespace's default ServiceAccount does not exist yet


def probe_pod(namespace: str) -> dict[str, Any]:
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                  "seccompProfile": {"type": "RuntimeDefault"}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "dra-bridge-serve-check-", "namespace": namespace,
                     "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
                     "annotations": {OPT_OUT_ANNOTATION: "false"}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "check", "image": "registry.k8s.io/pause:3.10", "securityContext": restricted,
                            "resources": {"requests": {"cpu": "1m", "memory": "1Mi"},
                                          "limits": {"cpu": "1m", "memory": "1Mi"},
                                          "claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": PROBE_CLAIM}],
        },
    }


def check_claims_kept(api: KubeAPI, namespace: str) -> tuple[bool | None, str]:
    """(True, "") when a dry-run pod keeps its claim; (False, why) when the server dropped it; (None, why) when the
    check could not run."""
    tries = 0
    while True:
        try:
            pod = api.create(PODS, probe_pod(namespace), namespace, dry_run=True)
            break
        except KubeError as err:
            tries += 1
            if isinstance(err, Forbidden) and err.service_account_missing and tries < SERVICE_ACCOUNT_TRIES:
                time.sleep(0.5)  # the namespace is new: its default ServiceAccount is on its way
                continue
            return None, f"dry-run pod create in {namespace} failed: {err.message[:160]}"
    spec = pod.get("spec") or {}
    container = (spec.get("containers") or [{}])[0]
    if spec.get("resourceClaims") and (container.get("resources") or {}).get("claims"):
        return True, ""
    return False, "a dry-run pod lost spec.resourceClaims"


def check_device_class(api: KubeAPI, facts: ClusterFacts) -> bool | None:
    if facts.resource_version is None:
        return False
    try:
        api.get(api.resource_api().device_classes, facts.device_class)
    except NotFound:
        return False
    except KubeError as err:
        log.warning("DeviceClass %s: cannot tell whether it exists (%s)", facts.device_class, err.message)
        return None
    return True


def one_shot(api: KubeAPI, facts: ClusterFacts) -> ServeFacts:
    """The facts `auto` depends on, read once (GPU nodes and the DeviceClass; the claim check is not run): for
    commands that say which target the webhook would pick (`bridge namespace set`)."""
    nodes = [n for n in (project(o) for o in api.list(NODES)["items"]) if n is not None]
    return ServeFacts(0, True, "", check_device_class(api, facts), NodeView.of(nodes))


class LiveFacts:
    """The current `ServeFacts` and the thread that keeps them so (see the module docstring)."""

    def __init__(self, api: KubeAPI, facts: ClusterFacts, namespace: str, *, interval: float = DEFAULT_INTERVAL,
                 unknown_retry: float = UNKNOWN_RETRY,
                 on_change: Callable[[ServeFacts], None] | None = None) -> None:
        self._api = api
        self._facts = facts
        self._namespace = namespace or "default"
        self._interval = interval
        self._unknown_retry = unknown_retry
        self._on_change = on_change
        self._current = ServeFacts.unknown()
        self._nodes: dict[str, NodeInfo] = {}
        self._truncated = False
        self._dirty = False
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self.checked = threading.Event()  # the first API server check has run (whatever its answer)
        self._informer = Informer(api, NODES, on_event=self._on_node, transform=slim)

    def current(self) -> ServeFacts:
        return self._current

    @property
    def synced(self) -> bool:
        return self.checked.is_set() and self._informer.synced.is_set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._informer.wait_synced(timeout):
            return False
        return self.checked.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        informer = self._informer.start(stop)
        checker = threading.Thread(target=self._run, args=(stop,), name="webhook-serve-check", daemon=True)
        checker.start()
        return [informer, checker]

    def refresh(self) -> ServeFacts:
        """Run the API server and DeviceClass checks now and publish the result (the thread calls this)."""
        kept, why = check_claims_kept(self._api, self._namespace)
        device_class = check_device_class(self._api, self._facts)
        if kept is False:
            log.error("the API server drops pod resourceClaims (DynamicResourceAllocation is off): translating "
                      "nothing until it keeps them", extra={"reason": why})
        elif kept is None:
            log.warning("cannot check whether the API server keeps pod claims; translating nothing until it can",
                        extra={"reason": why})
        with self._lock:
            self._publish(claims_kept=kept, claims_problem=why, device_class=device_class)
        self.checked.set()
        return self._current

    def _on_node(self, ev: WatchEvent) -> None:
        name = str((ev.object.get("metadata") or {}).get("name", ""))
        info = None if ev.type == "DELETED" else project(ev.object)
        with self._lock:
            old = self._nodes.get(name)
            if info is None:
                if old is None:
                    return
                del self._nodes[name]
            elif old == info:
                return
            elif old is None and len(self._nodes) >= MAX_NODES:
                self._truncated = True
                return
            else:
                self._nodes[name] = info
            self._dirty = True
        self._wake.set()

    def _publish(self, **changes: Any) -> None:
        """Under the lock: a new snapshot when something changed."""
        new = replace(self._current, **changes)
        if new != self._current:
            self._current = replace(new, generation=self._current.generation + 1)
            if self._on_change is not None:
                self._on_change(self._current)

    def _run(self, stop: threading.Event) -> None:
        next_check = 0.0
        while not stop.is_set():
            if time.monotonic() >= next_check:
                try:
                    kept = self.refresh().claims_kept
                except Exception:  # noqa: BLE001 - the checker must outlive a bug in one check
                    log.exception("serve check failed")
                    kept = None
                # an unanswered check is retried soon: until it answers, nothing is translated
                retry = self._interval if kept is not None else min(self._interval, self._unknown_retry)
                next_check = time.monotonic() + retry
            with self._lock:
                if self._dirty and self._informer.synced.is_set():
                    self._dirty = False
                    self._publish(nodes=NodeView.of(self._nodes.values(), self._truncated))
            self._wake.wait(max(0.05, min(1.0, next_check - time.monotonic())))
            self._wake.clear()


__all__ = ["DEFAULT_INTERVAL", "LiveFacts", "PROBE_CLAIM", "check_claims_kept", "check_device_class", "one_shot",
           "probe_pod"]
