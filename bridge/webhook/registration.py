"""How the webhook is registered: the one source of its `matchConditions` and recommended settings (pure).

The chart (charts/dra-bridge/templates/webhook-admission.yaml), the example (examples/webhook/
mutatingwebhookconfiguration.yaml) and `bridge sandbox cluster` (bridge/sandbox/cluster/webhook.py) register the same
entry; tests check that the first two carry exactly `MATCH_CONDITIONS`, and the third builds its entry from here.

`matchConditions` (GA in Kubernetes 1.30) are evaluated by the API server before it calls the webhook, so pods that
have nothing to translate never cost a TLS round trip (and never depend on the webhook being up):

* `asks-for-nvidia-resources`: some container or init container names an `nvidia.com/` resource in its limits or
  requests. Wider than `nvidia.com/gpu` on purpose: pods asking MIG or time-sliced names (`nvidia.com/mig-1g.10gb`,
  `nvidia.com/gpu.shared`) still reach the webhook, which leaves them on the device plugin with a warning and an
  Event saying why (`bridge namespace status` counts a GPU pod that never reached the webhook as a problem).
* `not-translated-yet`: the pod carries no translation record (`dra-bridge.io/translated`,
  `dra-bridge.io/shadow-translation`): under `reinvocationPolicy: IfNeeded` the API server would otherwise call the
  webhook again on its own output.

Both only use `has()` and map membership, so they cannot fail to evaluate on any pod the API server accepts (an
evaluation error would follow `failurePolicy`). The annotation keys are the policy's (bridge/webhook/policy.py).
"""

from __future__ import annotations

from typing import Any

from bridge.webhook.policy import SHADOW_ANNOTATION, TRANSLATED_ANNOTATION

WEBHOOK_NAME = "pods.dra-bridge.io"

_ASKS = ("(has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('nvidia.com/')))"
         " || (has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('nvidia.com/')))))")

MATCH_CONDITIONS: tuple[dict[str, str], ...] = (
    {"name": "asks-for-nvidia-resources",
     "expression": f"object.spec.containers.exists(c, {_ASKS}) || (has(object.spec.initContainers) && "
                   f"object.spec.initContainers.exists(c, {_ASKS}))"},
    {"name": "not-translated-yet",
     "expression": f"!has(object.metadata.annotations) || (!('{TRANSLATED_ANNOTATION}' in object.metadata.annotations)"
                   f" && !('{SHADOW_ANNOTATION}' in object.metadata.annotations))"},
)


def webhook_entry(client_config: dict[str, Any], excluded_namespaces: list[str]) -> dict[str, Any]:
    """The recommended MutatingWebhookConfiguration entry: opt-in namespaces, pod CREATE only, the conditions above,
    fail open, 5 s, reinvocation, no side effects on dry run; the bridge's own objects (labelled managed-by
    dra-bridge, e.g. its serve check) are never sent."""
    return {
        "name": WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config,
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                   "scope": "Namespaced"}],
        "namespaceSelector": {"matchExpressions": [
            {"key": "dra-bridge.io/mode", "operator": "In", "values": ["shadow", "dra"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(excluded_namespaces)}]},
        "objectSelector": {"matchExpressions": [
            {"key": "app.kubernetes.io/managed-by", "operator": "NotIn", "values": ["dra-bridge"]}]},
        "matchConditions": [dict(c) for c in MATCH_CONDITIONS],
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": 5,
        "reinvocationPolicy": "IfNeeded",
    }


__all__ = ["MATCH_CONDITIONS", "WEBHOOK_NAME", "webhook_entry"]
