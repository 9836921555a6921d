"""AdmissionReview v1 in, response out. Pure (the namespace label lookup is injected), and it never raises.

Three kinds of answer:

* not an AdmissionReview at all (not JSON, not an object, wrong apiVersion/kind, no `request.uid`): HTTP 400 with a
  `Status`-shaped body whose message says what is wrong, so the API server's log names the problem;
* a review this webhook should not touch (not a Pod CREATE, legacy namespace, opted out, no GPUs, ...): allowed,
  no patch;
* a pod that is malformed, or whose translation fails: allowed, no patch, with a warning. The webhook fails OPEN:
  the API server still validates the pod, and refusing it here would only turn a bridge bug into an outage.

Warnings keep to the API's guidance: each at most 120 characters, prefix included (kubernetes/api
admission/v1/types.go, `AdmissionResponse.Warnings`: "Limit warnings to 120 characters if possible. Warnings over
256 characters and large numbers of warnings may be truncated."). A pod left on the device plugin gets the short reason as a warning and the full text, with what to do,
in a `DRABridgeUntranslatable` Event.

`serve` is the snapshot of the facts that change while the webhook runs (`facts.ServeFacts`); None means a cluster
that keeps claims and whose nodes are unknown (what pure callers get).

The result also lists the side effects the shell must perform (ResourceClaimTemplates to ensure, Events to
record), with `dry_run` set when the API server said the request is a dry run: the shell then skips them all.
"""

from __future__ import annotations

import json
import logging
from binascii import b2a_base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.webhook import jsoncodec
from bridge.webhook.facts import ClusterFacts, ServeFacts, effective_target
from bridge.webhook.policy import SHADOW, SKIP, PolicyConfig, resolve
from bridge.webhook.translate import DEFAULT_SCHEDULER, Translation, translate

log = logging.getLogger(__name__)


def _b64_stdlib(data: bytes) -> str:
    return b2a_base64(data, newline=False).decode()  # = base64.b64encode


_b64: Callable[[bytes], str] = _b64_stdlib
try:  # SIMD base64 (a dependency): the standard library's encoder was a tenth of a new pod's review
    from pybase64 import b64encode_as_string as _b64
except ImportError:  # pragma: no cover - the same string, slower
    pass

API_VERSION = "admission.k8s.io/v1"
WARNING_PREFIX = "dra-bridge: "
MAX_WARNING_LEN = 120


NamespaceLabels = Callable[[str], Mapping[str, str] | None]


@dataclass(frozen=True)
class ReviewConfig:
    policy: PolicyConfig
    facts: ClusterFacts
    target: str = "auto"  # auto | claims | extended
    # schedulers that allocate claims (kube-scheduler's profiles): pods naming another one are left alone
    schedulers: frozenset[str] = frozenset({DEFAULT_SCHEDULER})


@dataclass(frozen=True)
class EventSpec:
    namespace: str
    pod_name: str  # the name, or generateName when the name is not assigned yet
    pod_uid: str
    reason: str
    message: str


@dataclass(slots=True)
class ReviewResult:
    """Not frozen, like policy.Decision: one per request, and nothing changes it after `review` (the shell makes a
    new one with `dataclasses.replace`)."""

    status: int  # HTTP status
    body: dict[str, Any]
    outcome: str  # metrics label: translated|shadow|skipped|no-gpu|untranslatable|invalid|error
    mode: str = ""
    target: str = ""
    uid: str = ""
    namespace: str = ""
    pod: str = ""
    dry_run: bool = False
    templates: tuple[dict[str, Any], ...] = ()
    events: tuple[EventSpec, ...] = ()
    reason: str = ""


def bad_request(message: str, code: int = 400) -> ReviewResult:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": "BadRequest" if code == 400 else "RequestEntityTooLarge" if code == 413 else "Error",
            "message": message}
    return ReviewResult(code, body, "invalid", reason=message)


def allow(uid: str, patch: tuple[dict[str, Any], ...] | list[dict[str, Any]] = (), warnings: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = _b64(jsoncodec.dumps(patch))
    if warnings:
        response["warnings"] = [_fit(WARNING_PREFIX + w) for w in warnings]
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _fit(text: str) -> str:
    return text if len(text) <= MAX_WARNING_LEN else text[:MAX_WARNING_LEN - 3] + "..."


def parse(raw: bytes | str | Any) -> dict[str, Any] | ReviewResult:
    """The review dict, or the 400 answer explaining why it is not one."""
    if isinstance(raw, (bytes, bytearray, str)):
        try:
            doc = jsoncodec.loads(raw)
        except (ValueError, RecursionError) as err:
            return bad_request(f"body is not JSON: {str(err)[:200]}")
    else:
        doc = raw
    if not isinstance(doc, dict):
        return bad_request(f"body must be a JSON object (AdmissionReview), got {type(doc).__name__}")
    if doc.get("kind") != "AdmissionReview" or doc.get("apiVersion") != API_VERSION:
        return bad_request(f"expected kind AdmissionReview, apiVersion {API_VERSION}; got kind "
                           f"{str(doc.get('kind'))[:60]!r}, apiVersion {str(doc.get('apiVersion'))[:60]!r}")
    request = doc.get("request")
    if not isinstance(request, dict):
        return bad_request("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return bad_request("AdmissionReview request has no uid")
    return doc


def _pod_shape_error(pod: Any) -> str | None:
    if not isinstance(pod, dict):
        return "request.object is not a Pod object"
    meta = pod.get("metadata", {})
    if not isinstance(meta, dict):
        return "pod metadata is not an object"
    ann = meta.get("annotations")
    if ann is not None and not isinstance(ann, dict):
        return "pod annotations are not an object"
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return "pod has no spec"
    node_selector, aff = spec.get("nodeSelector"), spec.get("affinity")
    if node_selector is not None and not isinstance(node_selector, dict):
        return "pod spec.nodeSelector is not an object"
    if aff is not None and not isinstance(aff, dict):
        return "pod spec.affinity is not an object"
    claims = spec.get("resourceClaims")
    if claims is not None and not isinstance(claims, list):
        return "pod spec.resourceClaims is not a list"
    for kind in ("containers", "initContainers"):
        items = spec.get(kind)
        if items is None:
            continue
        if not isinstance(items, list):
            return f"pod spec.{kind} is not a list"
        for c in items:
            if not isinstance(c, dict):
                return f"pod spec.{kind} has an entry that is not an object"
            res = c.get("resources")
            if res is None:
                continue
            if not isinstance(res, dict):
                return f"container {str(c.get('name'))[:63]} resources is not an object"
            part = res.get("requests")
            if part is not None and not isinstance(part, dict):
                return f"container {str(c.get('name'))[:63]} resources.requests is not an object"
            part = res.get("limits")
            if part is not None and not isinstance(part, dict):
                return f"container {str(c.get('name'))[:63]} resources.limits is not an object"
            part = res.get("claims")
            if part is not None and not isinstance(part, list):
                return f"container {str(c.get('name'))[:63]} resources.claims is not a list"
    if not aff:
        return None
    node_aff = aff.get("nodeAffinity")
    if node_aff is not None:
        if not isinstance(node_aff, dict):
            return "pod nodeAffinity is not an object"
        req = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
        if req is not None:
            if not isinstance(req, dict) or not isinstance(req.get("nodeSelectorTerms", []), list):
                return "pod required node affinity is malformed"
            for t in req.get("nodeSelectorTerms", []):
                if not isinstance(t, dict) or not isinstance(t.get("matchExpressions", []) or [], list):
                    return "pod node selector term is malformed"
                if not all(isinstance(e, dict) for e in t.get("matchExpressions") or []):
                    return "pod node selector requirement is not an object"
    return None


def review(raw: bytes | str | Any, config: ReviewConfig, namespace_labels: NamespaceLabels,
           reraise: tuple[type[Exception], ...] = (), serve: ServeFacts | None = None) -> ReviewResult:
    """`raw`: the body, or the already-parsed JSON document. Exceptions of the `reraise` types raised by
    `namespace_labels` propagate (the caller's way to abandon a review that needs I/O); nothing else does."""
    try:
        return _review(raw, config, namespace_labels, serve)
    except reraise:
        raise
    except Exception as err:  # the contract: never raise; fail open with a message
        log.exception("admission review failed")
        doc = raw if isinstance(raw, dict) else None
        uid = ""
        if doc is None:
            try:
                doc = json.loads(raw) if isinstance(raw, (bytes, bytearray, str)) else None
            except Exception:
                doc = None
        if isinstance(doc, dict) and isinstance(doc.get("request"), dict):
            uid = str(doc["request"].get("uid") or "")
        if not uid:
            return bad_request(f"internal error handling the review: {type(err).__name__}", 500)
        return ReviewResult(200, allow(uid, warnings=[f"not translated: internal error ({type(err).__name__})"]),
                            "error", uid=uid, reason=str(err))


def _review(raw: bytes | str | Any, config: ReviewConfig, namespace_labels: NamespaceLabels,
            serve: ServeFacts | None) -> ReviewResult:
    doc = parse(raw)
    if isinstance(doc, ReviewResult):
        return doc
    req = doc["request"]
    uid = req["uid"]
    kind = req.get("kind") if isinstance(req.get("kind"), dict) else {}
    if (kind.get("group"), kind.get("kind")) != ("", "Pod") or req.get("operation") != "CREATE" or req.get("subResource"):
        return ReviewResult(200, allow(uid), "skipped", uid=uid, reason="not a pod CREATE")
    namespace = req.get("namespace") or ""
    pod = req.get("object")
    shape_error = _pod_shape_error(pod)
    if not isinstance(namespace, str) or not namespace:
        shape_error = shape_error or "request has no namespace"
    if shape_error:
        return ReviewResult(200, allow(uid, warnings=[f"not translated: {shape_error}"]), "invalid", uid=uid,
                            namespace=str(namespace)[:253], reason=shape_error)
    assert isinstance(pod, dict)
    meta = pod.get("metadata") or {}
    pod_name = str(req.get("name") or meta.get("name") or meta.get("generateName") or "")
    dry_run = req.get("dryRun") is True

    policy = config.policy
    skip_namespace = namespace in policy.excluded_namespaces or namespace == policy.own_namespace
    decision = resolve(namespace, None if skip_namespace else namespace_labels(namespace), pod, policy)
    target = effective_target(config.facts, config.target, decision.target, serve)
    action, mode = decision.action, decision.mode._value_
    if action is SKIP:
        return ReviewResult(200, allow(uid, warnings=decision.warnings), "skipped", mode, target._value_, uid,
                            namespace, pod_name, dry_run, reason=decision.reason)
    t: Translation = translate(pod, namespace, action, target, config.facts, serve, config.schedulers)
    target_value = (t.target or target)._value_
    warnings = list(decision.warnings)
    if not t.has_gpus:
        return ReviewResult(200, allow(uid, warnings=warnings), "no-gpu", mode, target_value, uid, namespace,
                            pod_name, dry_run, reason="pod asks for no GPUs")
    events: tuple[EventSpec, ...] = ()
    if t.untranslatable:
        verb = "would stay" if action is SHADOW else "stays"
        warnings += [f"{verb} on the device plugin: {r}" for r in t.short]
        message = (f"dra-bridge ({mode} mode) left the pod on nvidia.com/gpu: " + "; ".join(t.untranslatable))[:1024]
        events = (EventSpec(namespace, pod_name, str(meta.get("uid") or ""), "DRABridgeUntranslatable", message),)
        return ReviewResult(200, allow(uid, t.patch, warnings), "untranslatable", mode, target_value, uid, namespace,
                            pod_name, dry_run, events=events, reason="untranslatable")
    if t.warnings:
        warnings += t.warnings
    if action is SHADOW:
        return ReviewResult(200, allow(uid, t.patch, warnings), "shadow", mode, target_value, uid, namespace,
                            pod_name, dry_run, reason="shadow translation recorded")
    return ReviewResult(200, allow(uid, t.patch, warnings), "translated", mode, target_value, uid, namespace, pod_name,
                        dry_run, t.templates, reason="translated to " + target_value)
