"""Mutating admission: calling the webhooks of stored MutatingWebhookConfigurations, like the real server.

For each write the configurations are read from the store (sorted by name, webhooks in order). A webhook is called
when one of its `rules` matches (operations, apiGroups, apiVersions, resources, scope), its `namespaceSelector`
matches the labels of the object's namespace and its `objectSelector` the object's labels. The call is a real
`admission.k8s.io/v1` AdmissionReview POSTed over HTTPS to `clientConfig.url`, verified against
`clientConfig.caBundle`, with `timeoutSeconds` (default 10). The response may deny (its `status` becomes the
error), patch (base64 JSONPatch) and warn (`Warning: 299` headers). A failed call follows `failurePolicy`: Fail
(the default) answers 500 `failed calling webhook "<name>"`, Ignore proceeds. `reinvocationPolicy: IfNeeded`
webhooks run once more when a later webhook changed the object (only webhooks called in the first round).

`matchConditions` are evaluated after the rules and selectors matched, as kubernetes/kubernetes
staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/generic/webhook.go (`ShouldCallHook`) and
.../webhook/matchconditions/matcher.go (`Match`) do: each is a CEL expression over `object` (null on DELETE),
`oldObject` (null on CREATE) and `request` (the AdmissionRequest: kind, resource, name, namespace, operation,
userInfo, dryRun, options), all dynamically typed as in the admission CEL environment (cel/compile.go declares them
`DynType`), so a missing field is a "no such key" error and `has()` is how an expression asks. Then:
* any condition false -> the webhook is skipped, even when another condition failed to evaluate;
* otherwise, if any condition failed (a runtime error, or an expression that does not compile or is not a bool),
  `failurePolicy` decides: Fail rejects the request with 403 `<resource> "<name>" is forbidden: expression '<e>'
  resulted in error: <detail>` (the error texts of cel/filter.go, aggregated), Ignore skips the webhook;
* all true -> the webhook is called.
The error detail comes from the Python CEL runtime, so its wording differs from cel-go's; the outcome does not.
`authorizer` and `params` are not emulated (no authorization here): an expression that uses them fails to
evaluate and follows `failurePolicy`. The real server also rejects a configuration whose condition does not
compile when it is written; the emulator stores it and fails at evaluation instead.

Not emulated (documented limits): `clientConfig.service` (answered as a failed call), `matchPolicy: Equivalent`
conversion, and validating webhooks.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import ssl
import uuid

import celpy.celtypes as ct
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from celpy.adapter import json_to_cel

from bridge.kvalues import cel as kcel

from .patch import PatchError, json_patch
from .registry import ResourceType
from .selectors import match_label_selector_object
from .status import ApiError
from .store import Store

log = logging.getLogger("bridge.sandbox.apiserver.admission")
Obj = dict[str, Any]


class WebhookCallError(Exception):
    pass


@dataclass(frozen=True)
class _Hook:
    config: str
    spec: Obj

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))


def _rule_matches(rule: Obj, operation: str, rt: ResourceType) -> bool:
    def has(values: Any, value: str) -> bool:
        values = values or []
        return "*" in values or value in values

    if not has(rule.get("operations"), operation):
        return False
    if not has(rule.get("apiGroups"), rt.group) or not has(rule.get("apiVersions"), rt.version):
        return False
    resources = rule.get("resources") or []
    if not any(r in (rt.plural, "*", "*/*") for r in resources):
        return False
    scope = rule.get("scope") or "*"
    return scope == "*" or (scope == "Namespaced") == rt.namespaced


class WebhookAdmitter:
    def __init__(self, store: Store) -> None:
        self.store = store

    def _hooks(self) -> list[_Hook]:
        with self.store.lock:
            configs = list(self.store.scan("mutatingwebhookconfigurations.admissionregistration.k8s.io"))
        hooks = []
        for cfg in sorted(configs, key=lambda c: c["metadata"]["name"]):
            for spec in cfg.get("webhooks") or []:
                hooks.append(_Hook(cfg["metadata"]["name"], spec))
        return hooks

    def _matches(self, hook: _Hook, operation: str, rt: ResourceType, obj: Obj, old: Obj | None, user: Obj,
                 dry_run: bool) -> bool:
        if not any(_rule_matches(r, operation, rt) for r in hook.spec.get("rules") or []):
            return False
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if not match_label_selector_object(hook.spec.get("objectSelector"), labels):
            return False
        if rt.group == "" and rt.plural == "namespaces":
            ns_labels = labels
        elif rt.namespaced:
            ns = (obj.get("metadata") or {}).get("namespace") or ""
            with self.store.lock:
                ns_obj = self.store.get("namespaces", ("", ns))
            ns_labels = ((ns_obj or {}).get("metadata") or {}).get("labels") or {}
        else:
            ns_labels = None
        if ns_labels is not None and not match_label_selector_object(hook.spec.get("namespaceSelector"), ns_labels):
            return False
        return self._conditions_match(hook, operation, rt, obj, old, user, dry_run)

    def _conditions_match(self, hook: _Hook, operation: str, rt: ResourceType, obj: Obj, old: Obj | None,
                          user: Obj, dry_run: bool) -> bool:
        """matchconditions/matcher.go `Match` (see the module docstring); raises the 403 under failurePolicy Fail."""
        conditions = [c for c in hook.spec.get("matchConditions") or [] if isinstance(c, dict)]
        if not conditions:
            return True
        meta = obj.get("metadata") or {}
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        gvr = {"group": rt.group, "version": rt.version, "resource": rt.plural}
        request = {"kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
                   "name": meta.get("name", ""), "namespace": meta.get("namespace", "") if rt.namespaced else "",
                   "operation": operation, "userInfo": user, "dryRun": dry_run}
        activation = {"object": json_to_cel(None if operation == "DELETE" else obj), "oldObject": json_to_cel(old),
                      "request": json_to_cel(request)}
        errors: list[str] = []
        for cond in conditions:
            expression = str(cond.get("expression", ""))
            try:
                result = kcel.program(expression).evaluate(dict(activation))
            except Exception as err:  # a compile error or a runtime error: an evaluation error either way
                result = err
            if isinstance(result, Exception) or not isinstance(result, (bool, ct.BoolType)):
                detail = result if isinstance(result, Exception) else f"not a bool: {result!r}"
                errors.append(f"expression '{expression}' resulted in error: {detail}")
                continue
            if not result:
                return False  # one false condition skips the webhook, whatever the others did
        if not errors:
            return True
        if hook.spec.get("failurePolicy", "Fail") == "Ignore":
            log.warning("webhook %s: match conditions failed to evaluate, skipping it (failurePolicy=Ignore): %s",
                        hook.name, errors)
            return False
        message = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        raise ApiError(403, "Forbidden", f'{rt.plural} "{meta.get("name", "")}" is forbidden: {message}')

    def admit(
        self, operation: str, rt: ResourceType, wire: Obj, old_wire: Obj | None, dry_run: bool, user: Obj
    ) -> tuple[Obj, list[str]]:
        hooks = self._hooks()
        if not hooks:
            return wire, []
        obj, warnings = wire, []
        invoked: list[int] = []
        last_change = -1
        for i, hook in enumerate(hooks):
            if self._matches(hook, operation, rt, obj, old_wire, user, dry_run):
                new, warns = self._call(hook, operation, rt, obj, old_wire, dry_run, user)
                invoked.append(i)
                warnings += warns
                if new != obj:
                    last_change = i
                obj = new
        for i in invoked:
            hook = hooks[i]
            if hook.spec.get("reinvocationPolicy") == "IfNeeded" and i < last_change:
                if self._matches(hook, operation, rt, obj, old_wire, user, dry_run):
                    obj, warns = self._call(hook, operation, rt, obj, old_wire, dry_run, user)
                    warnings += warns
        return obj, warnings

    def _call(
        self, hook: _Hook, operation: str, rt: ResourceType, obj: Obj, old: Obj | None, dry_run: bool, user: Obj
    ) -> tuple[Obj, list[str]]:
        if dry_run and hook.spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise ApiError(400, "BadRequest", f'admission webhook "{hook.name}" does not support dry run')
        uid = str(uuid.uuid4())
        meta = obj.get("metadata") or {}
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        gvr = {"group": rt.group, "version": rt.version, "resource": rt.plural}
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": gvk,
                "resource": gvr,
                "requestKind": gvk,
                "requestResource": gvr,
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace", "") if rt.namespaced else "",
                "operation": operation,
                "userInfo": user,
                "object": obj,
                "oldObject": old,
                "dryRun": dry_run,
                "options": {
                    "apiVersion": "meta.k8s.io/v1",
                    "kind": "CreateOptions" if operation == "CREATE" else "UpdateOptions",
                },
            },
        }
        try:
            response = self._post(hook, review)
            if response.get("uid") != uid:
                raise WebhookCallError(f"expected response.uid={uid!r}, got {response.get('uid')!r}")
        except WebhookCallError as err:
            if hook.spec.get("failurePolicy", "Fail") == "Ignore":
                log.warning("webhook %s failed, ignoring (failurePolicy=Ignore): %s", hook.name, err)
                return obj, []
            raise ApiError(
                500, "InternalError", f'Internal error occurred: failed calling webhook "{hook.name}": {err}',
                {"causes": [{"message": f'failed calling webhook "{hook.name}": {err}'}]},
            ) from err
        warnings = [str(w) for w in response.get("warnings") or []]
        if not response.get("allowed"):
            status = response.get("status") or {}
            message = f'admission webhook "{hook.name}" denied the request'
            message += f": {status['message']}" if status.get("message") else " without explanation"
            raise ApiError(int(status.get("code") or 400), str(status.get("reason") or ""), message, None)
        if response.get("patch"):
            if response.get("patchType") != "JSONPatch":
                raise ApiError(500, "InternalError", f'Internal error occurred: webhook "{hook.name}" returned unsupported patchType {response.get("patchType")!r}')
            try:
                ops = json.loads(base64.b64decode(response["patch"]))
                obj = json_patch(obj, ops)
            except (ValueError, PatchError) as err:
                raise ApiError(500, "InternalError", f'Internal error occurred: webhook "{hook.name}" returned an invalid patch: {err}') from err
        return obj, warnings

    def _post(self, hook: _Hook, review: Obj) -> Obj:
        cc = hook.spec.get("clientConfig") or {}
        url = cc.get("url")
        if not url:
            raise WebhookCallError("clientConfig.service is not supported by the API emulator; use clientConfig.url")
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise WebhookCallError(f"webhook URL must be https://host[:port]/path, got {url!r}")
        ctx = ssl.create_default_context()
        if cc.get("caBundle"):
            try:
                ctx = ssl.create_default_context(cadata=base64.b64decode(cc["caBundle"]).decode())
            except (ValueError, ssl.SSLError) as err:
                raise WebhookCallError(f"invalid caBundle: {err}") from err
        timeout = float(hook.spec.get("timeoutSeconds") or 10)
        body = json.dumps(review).encode()
        conn = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout, context=ctx)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request("POST", path, body, {"Content-Type": "application/json", "Accept": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        except TimeoutError as err:
            raise WebhookCallError(f'failed to call webhook: Post "{url}": context deadline exceeded') from err
        except (OSError, http.client.HTTPException) as err:
            raise WebhookCallError(f'failed to call webhook: Post "{url}": {err}') from err
        finally:
            conn.close()
        if resp.status != 200:
            raise WebhookCallError(f"received HTTP {resp.status} from webhook: {data[:200]!r}")
        try:
            answer = json.loads(data)
        except ValueError as err:
            raise WebhookCallError(f"the webhook answered something that is not JSON: {err}") from err
        response = answer.get("response") if isinstance(answer, dict) else None
        if not isinstance(response, dict):
            raise WebhookCallError("the webhook answer has no response object")
        return response
