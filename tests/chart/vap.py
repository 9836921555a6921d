"""A ValidatingAdmissionPolicy evaluator for the chart tests: the policies real Helm renders, run with CEL
(cel-python, through bridge.kvalues.cel's compiler) against sample admission requests.

Written from kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/:
* policy/matching/matching.go — `matchConstraints.resourceRules` select by group, version, resource and
  operation; with `matchPolicy: Equivalent` (the default) a request for another version of the same group resource
  matches too. A rule's resource matches a subresource only when it names it (`nodes/status`, `nodes/*`):
  apiserver pkg/admission/plugin/webhook/predicates/rules/rules.go `Matcher.resource` splits `res/sub` and compares
  both, so `nodes` matches `nodes` only and `*` every resource but no subresource.
* policy/validating/validator.go — `matchConditions` first (all true to go on; one false: the policy does not
  apply; an error: the failure policy decides); then each validation: true admits, false denies with the
  messageExpression's result if it is a non-empty single-line string, else `message`, else
  "failed expression: <expression>"; reason Invalid unless set; an evaluation error denies under
  `failurePolicy: Fail` and is ignored under Ignore.
* cel/filter.go — the activation: `object` (null on DELETE), `oldObject` (null on CREATE), `params`, `request` as
  `CreateAdmissionRequest` builds it (`userInfo.extra` and `subResource` omitted when empty: Go's omitempty through
  `ToUnstructured`), `namespaceObject`.
* cel/composition.go — `variables.<name>` are evaluated lazily, on first use, once per request.

Not modelled: CEL type checking against the OpenAPI schemas (cel-python only parses), cost limits, paramKind,
auditAnnotations, the binding's matchResources (the chart's bindings have none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
import celpy.celtypes as ct

from bridge.kvalues.cel import program

Obj = dict[str, Any]


@dataclass(frozen=True)
class Request:
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    group: str
    version: str
    resource: str
    kind: str
    username: str
    object: Obj | None = None
    old_object: Obj | None = None
    namespace: str = ""
    name: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    dry_run: bool = False
    sub_resource: str = ""  # "status" for a write to the status subresource

    def as_cel_request(self) -> Obj:
        user: Obj = {"username": self.username}
        if self.groups:
            user["groups"] = list(self.groups)
        if self.extra:
            user["extra"] = {k: list(v) for k, v in self.extra.items()}
        req: Obj = {
            "kind": {"group": self.group, "version": self.version, "kind": self.kind},
            "resource": {"group": self.group, "version": self.version, "resource": self.resource},
            "requestKind": {"group": self.group, "version": self.version, "kind": self.kind},
            "requestResource": {"group": self.group, "version": self.version, "resource": self.resource},
            "operation": self.operation,
            "userInfo": user,
            "dryRun": self.dry_run,
        }
        if self.sub_resource:
            req["subResource"] = self.sub_resource
            req["requestSubResource"] = self.sub_resource
        if self.name:
            req["name"] = self.name
        if self.namespace:
            req["namespace"] = self.namespace
        return req


@dataclass(frozen=True)
class Decision:
    allowed: bool
    applied: bool  # False: not matched, or a matchCondition was false
    message: str = ""
    reason: str = ""


class _LazyVariables(ct.MapType):
    """`variables`: each entry compiled and evaluated on first access, then remembered (composition.go)."""

    def __init__(self, definitions: Mapping[str, str], activation: dict[str, Any]) -> None:
        super().__init__({})
        self._definitions = dict(definitions)
        self._activation = activation

    def __getitem__(self, key: Any) -> Any:
        name = str(key)
        if not super().__contains__(ct.StringType(name)):
            if name not in self._definitions:
                raise KeyError(name)
            value = _run(self._definitions[name], self._activation)
            super().__setitem__(ct.StringType(name), value)
        return super().__getitem__(ct.StringType(name))

    def __contains__(self, key: Any) -> bool:
        return str(key) in self._definitions


class EvaluationError(Exception):
    pass


def _run(expression: str, activation: dict[str, Any]) -> Any:
    try:
        result = program(expression).evaluate(activation)
    except Exception as err:
        raise EvaluationError(f"expression '{expression}' resulted in error: {err}") from err
    if isinstance(result, Exception):
        raise EvaluationError(f"expression '{expression}' resulted in error: {result}")
    return result


def match_condition(expression: str, obj: Obj) -> bool:
    """A webhook's matchCondition for a CREATE of `obj` (webhook/matchconditions/matcher.go: `object`,
    `oldObject` null, `request`); an error raises EvaluationError (the failure policy then decides)."""
    activation: dict[str, Any] = {"object": celpy.json_to_cel(obj), "oldObject": None, "params": None,
                                  "request": celpy.json_to_cel({"operation": "CREATE", "userInfo": {"username": "u"}})}
    result = _run(expression, activation)
    if not isinstance(result, (bool, ct.BoolType)):
        raise EvaluationError(f"matchCondition returned {type(result).__name__}, not bool")
    return bool(result)


def _matches(policy: Obj, req: Request) -> bool:
    constraints = policy["spec"].get("matchConstraints") or {}
    equivalent = constraints.get("matchPolicy", "Equivalent") == "Equivalent"
    for rule in constraints.get("resourceRules") or []:
        def has(values: list[str], value: str) -> bool:
            return "*" in values or value in values

        def resource(values: list[str]) -> bool:
            for value in values:
                res, _, sub = value.partition("/")
                if res in ("*", req.resource) and sub in ("*", req.sub_resource):
                    return True
            return False

        if (has(rule.get("apiGroups") or [], req.group) and resource(rule.get("resources") or [])
                and has(rule.get("operations") or [], req.operation)
                and (equivalent or has(rule.get("apiVersions") or [], req.version))):
            return True
    return False


def evaluate(policy: Obj, req: Request) -> Decision:
    """What the API server decides for `req` under `policy` (bound with validationActions [Deny])."""
    if not _matches(policy, req):
        return Decision(allowed=True, applied=False)
    spec = policy["spec"]
    fail_closed = spec.get("failurePolicy", "Fail") == "Fail"
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(req.object) if req.object is not None else None,
        "oldObject": celpy.json_to_cel(req.old_object) if req.old_object is not None else None,
        "request": celpy.json_to_cel(req.as_cel_request()),
        "params": None,
    }
    activation["variables"] = _LazyVariables({v["name"]: v["expression"] for v in spec.get("variables") or []},
                                             activation)
    try:
        for cond in spec.get("matchConditions") or []:
            if not bool(_run(cond["expression"], activation)):
                return Decision(allowed=True, applied=False)
    except EvaluationError as err:
        return Decision(allowed=not fail_closed, applied=True, message=str(err))
    for validation in spec.get("validations") or []:
        try:
            ok = _run(validation["expression"], activation)
        except EvaluationError as err:
            if fail_closed:
                return Decision(allowed=False, applied=True, message=str(err))
            continue
        if isinstance(ok, (bool, ct.BoolType)) and bool(ok):
            continue
        message = ""
        if validation.get("messageExpression"):
            try:
                text = _run(validation["messageExpression"], activation)
            except EvaluationError:
                text = None
            if isinstance(text, str) and "\n" not in text.strip():
                message = text.strip()
        message = message or (validation.get("message") or "").strip() or \
            f"failed expression: {validation['expression'].strip()}"
        return Decision(allowed=False, applied=True, message=message, reason=validation.get("reason", "Invalid"))
    return Decision(allowed=True, applied=True)
