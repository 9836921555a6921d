"""The sandbox cluster's control plane: the scheduler and claim-controller stand-ins, or a minimal binder.

The stand-ins live in `bridge.sandbox.scheduler.Scheduler` and `bridge.sandbox.claimcontroller.ClaimController`
(constructed with `(api, profile=profile_for(version))`, started with `start()`, stopped with `stop(timeout)`).
They are looked up at run time: while they are not installed, the cluster runs `MinimalBinder` instead and says so
on start. `MinimalBinder` is NOT a scheduler stand-in and does not pretend to be one: it binds pods without
resource claims to the first node (by name) whose `nodeSelector` labels match and whose allocatable extended
resources, minus what the pods bound there request, fit the pod; pods with claims or extended resources no node
advertises get a `FailedScheduling` Warning Event saying that this sandbox has no DRA scheduler, and stay Pending.
"""

from __future__ import annotations

import importlib
import logging
import threading
from fractions import Fraction
from typing import Any, Protocol

from bridge.deviceplugin.registration import is_extended_resource_name
from bridge.kube.api import NODES, PODS, KubeAPI, Obj, Resource
from bridge.kube.errors import KubeError
from bridge.kube.events import record_event
from bridge.kvalues.quantity import QuantityError, parse_quantity
from bridge.sandbox.podrequests import pod_requests

log = logging.getLogger(__name__)


class Controller(Protocol):
    def stop(self, timeout: float = 5.0) -> None: ...


def stand_ins(api: KubeAPI, kubernetes_version: str) -> tuple[list[Controller], str]:
    """Start the control plane for `kubernetes_version`; returns the running controllers and what they are."""
    try:
        scheduler_mod = importlib.import_module("bridge.sandbox.scheduler")
        claims_mod = importlib.import_module("bridge.sandbox.claimcontroller")
        profiles = importlib.import_module("bridge.sandbox.apiserver.profiles")
    except ImportError:
        binder = MinimalBinder(api).start()
        return [binder], "minimal binder (the scheduler and claim-controller stand-ins are not installed)"
    profile: Any = profiles.profile_for(kubernetes_version)
    controller = claims_mod.ClaimController(api, profile=profile).start()
    scheduler = scheduler_mod.Scheduler(api, profile=profile).start()
    return [scheduler, controller], "scheduler and claim-controller stand-ins"


def _quantities(values: dict[str, Any]) -> dict[str, Fraction]:
    out = {}
    for k, v in values.items():
        try:
            out[k] = parse_quantity(v)
        except QuantityError:
            continue
    return out


class MinimalBinder:
    """See the module docstring: a polling binder for pods without claims, standing in for nothing."""

    def __init__(self, api: KubeAPI, *, interval: float = 0.2, scheduler_name: str = "default-scheduler") -> None:
        self.api = api
        self.interval = interval
        self.scheduler_name = scheduler_name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()
        self.bound = 0

    def start(self) -> MinimalBinder:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="minimal-binder", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.bind_once()
            except KubeError as err:
                log.warning("minimal binder: %s", err)

    def bind_once(self) -> int:
        pods = self.api.list(PODS)["items"]
        nodes = sorted(self.api.list(NODES)["items"], key=lambda n: n["metadata"]["name"])
        used: dict[str, dict[str, Fraction]] = {}
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                for k, v in pod_requests(p).items():
                    used.setdefault(node, {})[k] = used.setdefault(node, {}).get(k, Fraction(0)) + v
        bound = 0
        for p in pods:
            spec = p.get("spec") or {}
            if spec.get("nodeName") or spec.get("schedulerName", "default-scheduler") != self.scheduler_name:
                continue
            if (p.get("metadata") or {}).get("deletionTimestamp"):
                continue
            node = self._choose(p, nodes, used)
            if node is None:
                continue
            self._bind(p, node)
            for k, v in pod_requests(p).items():
                used.setdefault(node, {})[k] = used.setdefault(node, {}).get(k, Fraction(0)) + v
            bound += 1
        self.bound += bound
        return bound

    def _choose(self, pod: Obj, nodes: list[Obj], used: dict[str, dict[str, Fraction]]) -> str | None:
        spec = pod.get("spec") or {}
        if spec.get("resourceClaims"):
            self._warn(pod, "0/{n} nodes are available: this sandbox runs no DRA scheduler (the scheduler stand-in "
                            "is not installed), so pods with resource claims are not scheduled.".format(n=len(nodes)))
            return None
        wanted = {k: v for k, v in pod_requests(pod).items() if is_extended_resource_name(k)}
        selector = spec.get("nodeSelector") or {}
        for node in nodes:
            name = str(node["metadata"]["name"])
            labels = node["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            alloc = _quantities((node.get("status") or {}).get("allocatable") or {})
            if all(v <= alloc.get(k, Fraction(0)) - used.get(name, {}).get(k, Fraction(0)) for k, v in wanted.items()):
                return name
        self._warn(pod, f"0/{len(nodes)} nodes are available: no node has the pod's extended resources free "
                        f"({', '.join(f'{k}: {v}' for k, v in sorted(wanted.items()))}) or matches its nodeSelector.")
        return None

    def _bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        binding = Resource("", "v1", f"pods/{meta['name']}/binding", "Binding", True)
        self.api.create(binding, {"apiVersion": "v1", "kind": "Binding",
                                  "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                                  "target": {"apiVersion": "v1", "kind": "Node", "name": node}}, meta["namespace"])
        log.info("minimal binder: bound %s/%s to %s", meta["namespace"], meta["name"], node)

    def _warn(self, pod: Obj, message: str) -> None:
        uid = pod["metadata"].get("uid", "")
        if uid in self._warned:
            return
        self._warned.add(uid)
        try:
            record_event(self.api, {**pod, "apiVersion": "v1", "kind": "Pod"}, "FailedScheduling", message,
                         "Warning", component="sandbox-minimal-binder")
        except (KubeError, ValueError) as err:
            log.debug("minimal binder: recording an event failed: %s", err)
