"""Does our webhook registration cover a namespace? The API server's matching rules, evaluated without a pod.

A namespace labelled `dra-bridge.io/mode=dra` is translated only if the API server actually calls the webhook for
its pods. The webhook fails open (`failurePolicy: Ignore`), so a registration that does not cover the namespace is
silent: pods keep arriving untranslated. `bridge namespace set` checks it before (or while) flipping, with the
namespace's labels as they will be after the flip.

Ours: every webhook entry named `pods.dra-bridge.io` (`DEFAULT_WEBHOOK_NAME`; `bridge namespace --webhook-name`)
in any MutatingWebhookConfiguration, whatever the configuration is called (the Helm chart prefixes it with the
release name; examples/webhook/ calls it `dra-bridge`).

The rules, written from kubernetes/apiserver pkg/admission/plugin/webhook (generic/webhook.go `ShouldCallHook`,
predicates/rules/rules.go, predicates/namespace/matcher.go, predicates/object/matcher.go) and
pkg/admission/plugin/webhook/matchconditions/matcher.go:

* one of `rules` must match CREATE of `pods` in core `v1` (`*` wildcards; `resources` `*` or `*/*`; `scope`
  `Namespaced` or `*`);
* `namespaceSelector` is a label selector on the namespace's labels (absent or `{}` selects everything;
  `NotIn`/`DoesNotExist` also match a missing key; every `matchExpressions` entry and `matchLabels` must hold);
* `objectSelector` is evaluated on the pod's labels: reported, not judged here;
* `matchConditions` are CEL expressions over `object`, `oldObject`, `request`, `namespaceObject` and `authorizer`;
  all must be true for the call to happen, a false one skips the webhook, an error follows `failurePolicy`. Here
  each is evaluated with `namespaceObject` (the namespace after the flip) and the parts of `request` known before
  any pod exists (operation, kind, resource, namespace). An expression that decides without the pod gets a verdict;
  one that needs `object`, `oldObject`, `authorizer` or the requesting user is reported as decided per pod.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from celpy.adapter import json_to_cel
import celpy.celtypes as ct

from bridge.kvalues import cel as kcel

DEFAULT_WEBHOOK_NAME = "pods.dra-bridge.io"
_PER_REQUEST_VARS = ("object", "oldObject", "authorizer", "params")


@dataclass(frozen=True)
class Hook:
    """One webhook entry of a MutatingWebhookConfiguration."""

    configuration: str
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def service(self) -> tuple[str, str, int] | None:
        svc = (self.spec.get("clientConfig") or {}).get("service")
        if not isinstance(svc, Mapping):
            return None
        return str(svc.get("namespace", "")), str(svc.get("name", "")), int(svc.get("port") or 443)

    @property
    def url(self) -> str | None:
        url = (self.spec.get("clientConfig") or {}).get("url")
        return str(url) if url else None

    @property
    def own_namespace(self) -> str | None:
        """The namespace the webhook runs in, when the registration says (clientConfig.service)."""
        svc = self.service
        return svc[0] if svc else None

    @property
    def ca_bundle(self) -> str:
        return str((self.spec.get("clientConfig") or {}).get("caBundle") or "")

    @property
    def failure_policy(self) -> str:
        return str(self.spec.get("failurePolicy") or "Fail")


def find_hooks(configurations: Iterable[Mapping[str, Any]], webhook_name: str = DEFAULT_WEBHOOK_NAME) -> list[Hook]:
    out = []
    for cfg in configurations:
        name = str((cfg.get("metadata") or {}).get("name", ""))
        for spec in cfg.get("webhooks") or []:
            if isinstance(spec, Mapping) and spec.get("name") == webhook_name:
                out.append(Hook(name, spec))
    return out


# -- label selectors -------------------------------------------------------------------------------------------
def selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector semantics; None or {} selects everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key", ""), req.get("operator", ""), list(req.get("values") or [])
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False  # the API server rejects such a configuration; it never selects
    return True


def _rule_matches_pod_create(rule: Mapping[str, Any]) -> bool:
    def has(field: str, value: str) -> bool:
        values = rule.get(field) or []
        return "*" in values or value in values

    resources = rule.get("resources") or []
    return (has("operations", "CREATE") and has("apiGroups", "") and has("apiVersions", "v1")
            and any(r in ("pods", "*", "*/*") for r in resources) and (rule.get("scope") or "*") in ("*", "Namespaced"))


# -- match conditions ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConditionVerdict:
    name: str
    expression: str
    verdict: bool | None  # None: decided per pod (or per user) at admission time
    detail: str


def _needs(expression: str) -> list[str]:
    found = [v for v in _PER_REQUEST_VARS if re.search(rf"(?<![\w.]){v}\b", expression)]
    if re.search(r"\brequest\.userInfo\b", expression):
        found.append("request.userInfo")
    return found


def judge_condition(name: str, expression: str, namespace: Mapping[str, Any]) -> ConditionVerdict:
    try:
        prog = kcel.program(expression)
    except kcel.CelError as err:
        return ConditionVerdict(name, expression, False, f"does not compile ({err}); the API server rejects it")
    ns_name = str((namespace.get("metadata") or {}).get("name", ""))
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    request = {"operation": "CREATE", "namespace": ns_name, "name": "", "kind": gvk, "requestKind": gvk,
               "resource": gvr, "requestResource": gvr, "subResource": "", "dryRun": False}
    activation = {"namespaceObject": json_to_cel(dict(namespace)), "request": json_to_cel(request)}
    needs = _needs(expression)
    try:
        result = prog.evaluate(activation)
    except Exception as err:  # celpy raises for unbound variables and runtime errors
        result = err
    if isinstance(result, Exception) or not isinstance(result, (bool, ct.BoolType)):
        what = ", ".join(f"`{n}`" for n in needs) or "values only known at admission time"
        return ConditionVerdict(name, expression, None, f"depends on {what}: decided for each pod at admission")
    return ConditionVerdict(name, expression, bool(result), "true for this namespace" if result else
                            "false for this namespace: the API server never calls the webhook here")


# -- verdict -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Coverage:
    hook: Hook
    covered: bool | None  # True: every pod CREATE here reaches the webhook; None: depends on the pod; False: never
    problems: tuple[str, ...]  # why not covered
    notes: tuple[str, ...]  # what is decided per pod (objectSelector, matchConditions needing the pod)
    conditions: tuple[ConditionVerdict, ...] = ()


def coverage(hook: Hook, namespace: Mapping[str, Any]) -> Coverage:
    """Whether `hook` is called for pods created in `namespace` (the object with its labels after the flip)."""
    labels = dict(((namespace.get("metadata") or {}).get("labels") or {}))
    problems: list[str] = []
    notes: list[str] = []
    rules = [r for r in hook.spec.get("rules") or [] if isinstance(r, Mapping)]
    if not any(_rule_matches_pod_create(r) for r in rules):
        problems.append("its rules do not include CREATE of pods (core v1)")
    if not selector_matches(hook.spec.get("namespaceSelector"), labels):
        problems.append(f"its namespaceSelector does not select the namespace (labels: "
                        f"{', '.join(f'{k}={v}' for k, v in sorted(labels.items())) or 'none'})")
    if hook.spec.get("objectSelector"):
        notes.append(f"objectSelector {_selector_text(hook.spec['objectSelector'])} is applied to each pod's labels")
    verdicts = tuple(judge_condition(str(c.get("name", "")), str(c.get("expression", "")), namespace)
                     for c in hook.spec.get("matchConditions") or [] if isinstance(c, Mapping))
    for v in verdicts:
        if v.verdict is False:
            problems.append(f"matchCondition {v.name!r} is {v.detail}")
        elif v.verdict is None:
            notes.append(f"matchCondition {v.name!r} {v.detail}")
    covered: bool | None = False if problems else (None if any(v.verdict is None for v in verdicts) else True)
    return Coverage(hook, covered, tuple(problems), tuple(notes), verdicts)


def _selector_text(selector: Mapping[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for r in selector.get("matchExpressions") or []:
        values = ",".join(r.get("values") or [])
        parts.append(f"{r.get('key')} {r.get('operator')}" + (f" ({values})" if values else ""))
    return "{" + ", ".join(parts) + "}"
