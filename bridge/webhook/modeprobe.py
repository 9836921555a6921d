"""Does the webhook apply a namespace's mode yet? Ask the API server, with a dry-run create of a probe pod.

The webhook learns namespace labels from a watch (`effects.NamespaceCache`), so for a moment after `bridge namespace
set` (normally milliseconds, longer when the webhook's watch lags or is re-listing) it may still admit new pods
under the old mode. `wait_applied` closes that gap: it sends the probe pod below through admission until the answer
shows the new mode, and says how long that took.

* **The probe**: a pod asking `nvidia.com/gpu: 1`, created server-side with `dryRun=All`: the API server runs every
  admission step (our webhook included: the registration's `matchConditions` select it, its `objectSelector` does
  not exclude it) and stores nothing. The webhook sees `request.dryRun` and skips all side effects (no
  ResourceClaimTemplate, no Event: `app.Admitter._side_effects`, `sideEffects: NoneOnDryRun`), so the probe leaves
  no trace. It is labelled `dra-bridge.io/probe=mode` (a label no workload selector uses, for policies that want
  to exempt it), named `dra-bridge-mode-probe-<random>`, asks tiny CPU and memory requests and limits (namespaces
  with quotas that require them) and is restricted-PSA compliant.
* **What the answer shows** (`observe`): `dra` when the pod comes back translated (annotation
  `dra-bridge.io/translated`) or when the webhook says in a warning that it leaves this pod on the device plugin
  (dra mode applied, translation impossible here, e.g. DRA off in the API server: the reason is reported); `shadow`
  when it carries `dra-bridge.io/shadow-translation`; `legacy` when nothing of the webhook shows. Warnings arrive
  as the response's `Warning` headers (`KubeAPI.create(warnings=...)`).
* **When it counts as applied**: `confirmations` answers in a row show the new mode. Probes start 0.1 s apart,
  doubling to 0.5 s, so the time reported is the webhook's lag plus at most half a second. Each dry run reaches one
  webhook replica (the API server's connection to the Service picks one); replicas watch the same API server and
  converge within moments of each other, but the command cannot prove that every replica has: asking more than
  once makes a lagging replica likelier to show.

In a namespace created moments ago the API server refuses every pod until kube-controller-manager has created
the namespace's `default` ServiceAccount (the ServiceAccount admission plugin); the probes go on until it exists
or the wait's timeout, and only then say so (never as a missing RBAC grant).

RBAC: `create` on pods in the namespace (RBAC cannot limit a grant to dry runs). A Forbidden answer, another
webhook that does not support dry runs (`sideEffects: Unknown|Some`: the API server refuses every dry run it would
call), a quota the probe exceeds: the wait ends at once with the API server's message (`Applied.error`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.kube.api import PODS, KubeAPI
from bridge.kube.errors import Forbidden, KubeError
from bridge.webhook.policy import PREFIX, SHADOW_ANNOTATION, TRANSLATED_ANNOTATION, Mode
from bridge.webhook.review import WARNING_PREFIX

PROBE_LABEL = PREFIX + "probe"
PROBE_VALUE = "mode"
PROBE_NAME_PREFIX = "dra-bridge-mode-probe-"
LEFT_LEGACY = WARNING_PREFIX + "stays on the device plugin: "  # review.py: dra mode, pod left on the device plugin
DEFAULT_CONFIRMATIONS = 2


def probe_pod(namespace: str, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                  "seccompProfile": {"type": "RuntimeDefault"}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": PROBE_NAME_PREFIX, "namespace": namespace, "labels": {PROBE_LABEL: PROBE_VALUE}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10", "securityContext": restricted,
                            "resources": {"requests": {"cpu": "1m", "memory": "1Mi"},
                                          "limits": {"cpu": "1m", "memory": "1Mi", resource: "1"}}}],
        },
    }


@dataclass(frozen=True)
class Observed:
    mode: Mode  # the mode the webhook applied to the probe, as far as the answer shows
    detail: str  # what showed it ("translated (claims)", the webhook's reason for leaving it legacy, ...)
    notes: tuple[str, ...] = ()  # the webhook's other warnings on the probe
    left_legacy: str = ""  # dra applied, but the webhook leaves the probe on the device plugin: why


def observe(pod: Mapping[str, Any], warnings: Sequence[str]) -> Observed:
    """What the dry-run answer (the pod as admitted, the response's warnings) says about the webhook's mode. Pure."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    ours = [w for w in warnings if w.startswith(WARNING_PREFIX)]
    left = [w[len(LEFT_LEGACY):] for w in ours if w.startswith(LEFT_LEGACY)]
    notes = tuple(w[len(WARNING_PREFIX):] for w in ours if not w.startswith(LEFT_LEGACY))
    if TRANSLATED_ANNOTATION in ann:
        return Observed(Mode.DRA, f"translated ({ann[TRANSLATED_ANNOTATION]})", notes)
    if left:
        why = "; ".join(left)
        return Observed(Mode.DRA, f"dra applied, but the webhook leaves this pod on the device plugin: {why}", notes,
                        why)
    if SHADOW_ANNOTATION in ann:
        return Observed(Mode.SHADOW, "shadow record written", notes)
    return Observed(Mode.LEGACY, "not translated, no shadow record", notes)


@dataclass(frozen=True)
class Applied:
    ok: bool | None  # True: seen applied; False: not within the timeout; None: could not be checked (`error`)
    seconds: float  # from the start of the wait to the answer that settled it
    probes: int
    last: Observed | None = None
    error: str = ""
    rbac: bool = False  # `error` is a missing RBAC grant


def wait_applied(api: KubeAPI, namespace: str, mode: Mode, timeout: float, *,
                 confirmations: int = DEFAULT_CONFIRMATIONS, once: bool = False,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Applied:
    """Dry-run the probe pod in `namespace` until `confirmations` answers in a row show `mode`, or `timeout` seconds
    pass (a request already sent may finish after it: each is bounded by the API client's own timeout). `once`:
    one probe, no waiting (report what the webhook does now)."""
    start = clock()
    deadline = start + timeout
    streak, probes, pause = 0, 0, 0.1
    seen_at = start
    last: Observed | None = None
    while True:
        warnings: list[str] = []
        try:
            pod = api.create(PODS, probe_pod(namespace), namespace, dry_run=True, warnings=warnings)
        except Forbidden as err:
            if err.service_account_missing:  # a namespace created moments ago: its `default` ServiceAccount follows
                if once or clock() >= deadline:
                    return Applied(None, clock() - start, probes, last,
                                   f"namespace {namespace} has no default ServiceAccount yet, so the API server "
                                   "refuses every pod there (kube-controller-manager creates it in each new "
                                   f"namespace; is it running?): {err.message[:200]}")
                sleep(min(pause, max(0.0, deadline - clock())))
                pause = min(pause * 2, 0.5)
                continue
            return Applied(None, clock() - start, probes, last, f"{err.rbac_hint} in namespace {namespace} "
                           "(a dry-run create of a probe pod)", rbac=True)
        except KubeError as err:
            return Applied(None, clock() - start, probes, last,
                           f"the dry-run create of a probe pod was refused: {err.message[:300]}")
        probes += 1
        now = clock()
        last = observe(pod, warnings)
        if last.mode is mode:
            if streak == 0:
                seen_at = now
            streak += 1
            if streak >= confirmations or once:
                return Applied(True, seen_at - start, probes, last)
        else:
            streak = 0
        if once or now >= deadline:  # seen at the very end but not yet confirmed: seen counts
            return Applied(True, seen_at - start, probes, last) if streak else Applied(False, now - start, probes, last)
        sleep(min(pause, max(0.0, deadline - now)) if streak == 0 else 0.05)
        pause = min(pause * 2, 0.5)


__all__ = ["Applied", "Observed", "PROBE_LABEL", "observe", "probe_pod", "wait_applied"]
