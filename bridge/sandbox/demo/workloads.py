"""The demo's workloads and the waits around them: plain pods asking `nvidia.com/gpu: N`, as the teams of a real
cluster write them today (the webhook, not the demo, turns them into DRA requests), and Job-like pods that finish on
their own (the kubelet simulator ends a pod `sandbox.dra-bridge.io/run-seconds` after it started)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from bridge.kube.api import PODS, KubeAPI, Obj
from bridge.kube.errors import KubeError, NotFound
from bridge.sandbox.demo.observe import claim_devices, phase
from bridge.sandbox.kubelet import RUN_SECONDS_ANNOTATION


class WaitFailed(Exception):
    """A wait ran past its bound; the message says what was awaited and what was seen last."""


def gpu_pod(namespace: str, name: str, gpus: int, *, job_seconds: float | None = None) -> Obj:
    """A pod asking `nvidia.com/gpu: <gpus>`; with `job_seconds`, one that finishes (restartPolicy Never) after
    running that long."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": name.rstrip("-0123456789")}}
    if job_seconds is not None:
        meta["annotations"] = {RUN_SECONDS_ANNOTATION: f"{job_seconds:g}"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"restartPolicy": "Never" if job_seconds is not None else "Always",
                     "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def wait_for(what: str, check: Callable[[], Any], timeout: float, seen: Callable[[], str] = lambda: "",
             interval: float = 0.1) -> Any:
    """Call `check` until it returns something truthy and return that; WaitFailed after `timeout` seconds, naming
    `what` and `seen()` (the last state, in words). API errors while polling count as "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except KubeError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitFailed(f"{what}: not within {timeout:.0f}s; last seen: {seen() or 'nothing'}")
        time.sleep(interval)


@dataclass
class RunWatch:
    """Waits for pods to run, noting for each when it was first seen Running and, for DRA pods, the devices its
    claims were allocated (a Job-like pod may have finished, and its claim been deleted, by the time one looks)."""

    api: KubeAPI
    namespace: str
    names: list[str]
    started: float = field(default_factory=time.monotonic)
    running_after: dict[str, float] = field(default_factory=dict)
    dra_devices: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)

    def poll(self) -> bool:
        for name in self.names:
            if name in self.running_after:
                continue
            try:
                pod = self.api.get(PODS, name, self.namespace)
            except NotFound:
                continue
            if phase(pod) != "Running":
                continue
            self.running_after[name] = time.monotonic() - self.started
            self.nodes[name] = str(pod["spec"].get("nodeName", ""))
            if pod["spec"].get("resourceClaims") or (pod.get("status") or {}).get("extendedResourceClaimStatus"):
                self.dra_devices[name] = claim_devices(self.api, pod)
        return len(self.running_after) == len(self.names)

    def phases(self) -> str:
        out = []
        for name in self.names:
            try:
                out.append(f"{name} {phase(self.api.get(PODS, name, self.namespace))}")
            except KubeError:
                out.append(f"{name} unreadable")
        return ", ".join(out)

    def wait(self, timeout: float) -> RunWatch:
        wait_for(f"pods {', '.join(self.names)} in {self.namespace} running", self.poll, timeout, self.phases, 0.1)
        return self


def create_all(api: KubeAPI, pods: Iterable[Obj]) -> list[Obj]:
    return [api.create(PODS, p, p["metadata"]["namespace"]) for p in pods]
