"""The DefaultTolerationSeconds admission plugin, on by default in kube-apiserver.

Written from kubernetes/kubernetes v1.37.2 plugin/pkg/admission/defaulttolerationseconds/admission.go (the same in
v1.35.4 and v1.38.0-beta.0). On every pod CREATE and UPDATE (the pod itself, not a subresource), before the mutating
webhooks (the plugin order of pkg/kubeapiserver/options/plugins.go), it appends

    {key: node.kubernetes.io/not-ready,   operator: Exists, effect: NoExecute, tolerationSeconds: 300}
    {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 300}

each unless the pod already has a toleration that counts as one for that taint. What counts is read loosely: a
toleration whose key is the taint's **or empty**, and whose effect is NoExecute **or empty**, whatever its operator,
value or tolerationSeconds. So a pod tolerating `unreachable:NoSchedule` still gets the 300 s `unreachable:NoExecute`
toleration, and one with `{operator: Exists}` (tolerates everything) gets neither. The 300 s are kube-apiserver's
`--default-not-ready-toleration-seconds` / `--default-unreachable-toleration-seconds`.

Why it matters here: these tolerations are what keeps a pod bound to a node whose kubelet stopped for 5 minutes
before the taint eviction controller (bridge.sandbox.tainteviction) deletes it; a pod without them is deleted the
moment the node is tainted `unreachable:NoExecute`. Every pod a real API server stores carries them, and so does
every pod a mutating webhook (ours) is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
DEFAULT_SECONDS = 300


@dataclass(frozen=True)
class DefaultTolerationSeconds:
    not_ready: int = DEFAULT_SECONDS  # --default-not-ready-toleration-seconds
    unreachable: int = DEFAULT_SECONDS  # --default-unreachable-toleration-seconds

    def flags(self) -> list[str]:
        """The same settings as kube-apiserver flags."""
        return [f"--default-not-ready-toleration-seconds={self.not_ready}",
                f"--default-unreachable-toleration-seconds={self.unreachable}"]

    def admit(self, pod: dict[str, Any]) -> None:
        """Append the missing default tolerations to `pod` (in place); a pod without a spec object is left alone
        for validation to refuse."""
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return
        tolerations = spec.get("tolerations")
        present = [t for t in tolerations if isinstance(t, dict)] if isinstance(tolerations, list) else []
        added = [_toleration(key, seconds) for key, seconds in ((NOT_READY, self.not_ready),
                                                                 (UNREACHABLE, self.unreachable))
                 if not any(_counts_for(t, key) for t in present)]
        if added:
            spec["tolerations"] = [*(tolerations if isinstance(tolerations, list) else ()), *added]


def _counts_for(toleration: dict[str, Any], key: str) -> bool:
    return (toleration.get("key") or "") in ("", key) and (toleration.get("effect") or "") in ("", "NoExecute")


def _toleration(key: str, seconds: int) -> dict[str, Any]:
    return {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}


__all__ = ["DEFAULT_SECONDS", "NOT_READY", "UNREACHABLE", "DefaultTolerationSeconds"]
