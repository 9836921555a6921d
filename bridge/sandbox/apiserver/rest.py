"""REST semantics over the store: what create/get/list/update/patch/delete/watch *mean* in Kubernetes.

This module knows nothing about HTTP: the handler parses a request into a `ResourceType`, namespace, name, query and
body, calls one method here and serialises the result (or the `ApiError`). Order of a write, as in the real server:
strategy (server-owned metadata, status reset, defaults) -> mutating admission (no lock held: webhooks are slow) ->
validation -> commit under the store lock with the resourceVersion precondition. An update whose object changed
between read and commit is retried when the caller gave no resourceVersion, and answered 409 Conflict when it did.
A write that changes nothing is a no-op (no new resourceVersion, no event), like the real server.
Defaulting and the gate-dependent `dropDisabledFields` of the registry strategies (`strategy.py`) run on the storage
shape right before validation, with the emulated minor's `KubernetesProfile`.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import patch as patches
from .clock import now_rfc3339
from .conversion import from_storage, to_storage
from .deletion import before_delete
from .profiles import KubernetesProfile, profile_for
from .registry import Registry, ResourceType
from .selectors import fields_match, labels_match, parse_field_selector, parse_label_selector
from .status import (
    ApiError,
    FieldError,
    already_exists,
    bad_request,
    conflict,
    expired,
    forbidden,
    invalid,
    invalid_list_options,
    not_found,
    too_large_resource_version,
)
from .store import Key, Store, object_key
from .strategy import apply_defaults, drop_disabled_fields
from .tolerationseconds import DefaultTolerationSeconds

Obj = dict[str, Any]
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
PRIORITY_CLASSES = "priorityclasses.scheduling.k8s.io"  # their storage key
_MAX_GENERATED_BASE = 58
_SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
# Resources whose status is reset by the server on create (their status is owned by controllers).
_STATUS_RESET_ON_CREATE = {
    "pods": {"phase": "Pending"},
    "namespaces": {"phase": "Active"},
    "resourceclaims": None,
    "deployments": None,
    "statefulsets": None,
    "daemonsets": None,
    "replicasets": None,
    "jobs": None,
    "cronjobs": None,
}


class Validator(Protocol):
    def validate(self, rt: ResourceType, wire: Obj, stored: Obj, old_stored: Obj | None) -> list[FieldError]: ...


class Admitter(Protocol):
    def admit(
        self, operation: str, rt: ResourceType, wire: Obj, old_wire: Obj | None, dry_run: bool, user: Obj
    ) -> tuple[Obj, list[str]]: ...


@dataclass
class Result:
    obj: Obj
    code: int = 200
    warnings: list[str] = field(default_factory=list)


def _meta(obj: Obj) -> Obj:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _content(obj: Obj) -> Obj:
    """Everything that counts for `generation`: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _strip_type(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def query_flag(query: dict[str, str], name: str) -> bool:
    return query.get(name, "").lower() in ("true", "1")


def parse_resource_version(value: str, what: str) -> int:
    if not value.isdigit():
        raise bad_request(f"invalid resource version: strconv.ParseUint: parsing {json.dumps(value)}: invalid syntax")
    return int(value)


def check_list_options(rv: str, match: str, token: str, query: dict[str, str], *, watch: bool) -> None:
    """apimachinery's ValidateListOptions: 422 Invalid on the ListOptions kind before anything is read."""
    errs: list[FieldError] = []
    send_initial = "sendInitialEvents" in query
    if watch:
        if send_initial and match != "NotOlderThan":
            errs.append(FieldError("resourceVersionMatch", "Forbidden",
                                   detail="sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
        if match:
            if not send_initial:
                errs.append(FieldError("resourceVersionMatch", "Forbidden",
                                       detail="resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"))
            if match != "NotOlderThan":
                errs.append(FieldError("resourceVersionMatch", "Unsupported value", match,
                                       'supported values: "NotOlderThan"'))
            if token:
                errs.append(FieldError("resourceVersionMatch", "Forbidden",
                                       detail="resourceVersionMatch is forbidden when continue is provided"))
    else:
        if match:
            if not rv:
                errs.append(FieldError("resourceVersionMatch", "Forbidden",
                                       detail="resourceVersionMatch is forbidden unless resourceVersion is provided"))
            if token:
                errs.append(FieldError("resourceVersionMatch", "Forbidden",
                                       detail="resourceVersionMatch is forbidden when continue is provided"))
            if match not in ("Exact", "NotOlderThan"):
                errs.append(FieldError("resourceVersionMatch", "Unsupported value", match,
                                       'supported values: "Exact", "NotOlderThan", ""'))
            if match == "Exact" and rv == "0":
                errs.append(FieldError("resourceVersionMatch", "Forbidden",
                                       detail='resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
        if send_initial:
            errs.append(FieldError("sendInitialEvents", "Forbidden", detail="sendInitialEvents is forbidden for list"))
    if errs:
        raise invalid_list_options(errs)


NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def _admit_node_taint(node: Obj) -> None:
    """The TaintNodesByCondition admission plugin on a Node CREATE (kubernetes plugin/pkg/admission/nodetaint/
    admission.go, v1.37.2; on by default): the Node gets `node.kubernetes.io/not-ready:NoSchedule` unless it has a
    taint of that key and effect already, so no pod is scheduled there before the node lifecycle controller has seen
    it Ready and removed the taint (bridge.sandbox.nodelifecycle, in sandbox clusters)."""
    spec = node.get("spec")
    if spec is None:
        spec = node["spec"] = {}
    if not isinstance(spec, dict):
        return  # validation refuses it
    taints = spec.get("taints")
    present = [t for t in taints if isinstance(t, dict)] if isinstance(taints, list) else []
    if not any(t.get("key") == NOT_READY_TAINT["key"] and t.get("effect") == NOT_READY_TAINT["effect"]
               for t in present):
        spec["taints"] = [*(taints if isinstance(taints, list) else ()), dict(NOT_READY_TAINT)]


class Rest:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        validator: Validator | None = None,
        admitter: Admitter | None = None,
        profile: KubernetesProfile | None = None,
        toleration_seconds: DefaultTolerationSeconds | None = None,
        node_taint: bool = True,
    ) -> None:
        self.store = store
        self.registry = registry
        self.validator = validator
        self.admitter = admitter
        self.profile = profile or profile_for("1.34")
        self.toleration_seconds = toleration_seconds or DefaultTolerationSeconds()
        self.node_taint = node_taint

    # -- helpers ---------------------------------------------------------------------------------------------------
    def wire(self, rt: ResourceType, stored: Obj) -> Obj:
        return from_storage(rt, stored)

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        ns = self.store.get("namespaces", ("", namespace))
        return None if ns is None else dict(_meta(ns).get("labels") or {})

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rt.namespaced else "", name)

    def _require(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self.store.get(rt.storage_key, self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt.plural, rt.group, name)
        return obj

    # -- reads -------------------------------------------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self.store.lock:
            obj = self._require(rt, namespace, name)
        return self.wire(rt, obj)

    def list(self, rt: ResourceType, namespace: str | None, query: dict[str, str]) -> Obj:
        """A list as the real server answers it: `resourceVersion` ""/"0" (now), "X" (not older than X) or
        "X" + `resourceVersionMatch=Exact` (the snapshot at X, 410 once compacted); `limit`/`continue` pages of one
        consistent snapshot (later pages are read at the first page's version, like an etcd read at a revision);
        `metadata.remainingItemCount` on a partial page of an unfiltered list; a version the server has not reached
        is 504 "Too large resource version"."""
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), rt.allows_field, rt.unsupported_field)
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise bad_request(f"invalid limit: {query.get('limit')!r}") from None
        token = query.get("continue") or ""
        rv_param, match = query.get("resourceVersion") or "", query.get("resourceVersionMatch") or ""
        check_list_options(rv_param, match, token, query, watch=False)
        if token and rv_param not in ("", "0"):
            raise bad_request("specifying resource version is not allowed when using continue")
        requested = parse_resource_version(rv_param, "list") if rv_param not in ("", "0") else None
        after: Key | None = None
        with self.store.lock:
            current = self.store.resource_version
            if requested is not None and requested > current:
                raise too_large_resource_version(requested, current)
            list_rv = current
            if token:
                list_rv, after = self._decode_continue(token)
            elif requested is not None and match == "Exact":
                if requested < self.store.compacted_rv:
                    raise expired("The resourceVersion for the provided list is too old.")
                list_rv = requested
            ns = namespace if rt.namespaced and namespace else None
            source = (
                self.store.scan_at(rt.storage_key, list_rv, ns, after) if list_rv < current
                else self.store.scan(rt.storage_key, ns, after)
            )
            items: list[Obj] = []
            last: Key | None = None
            more = False
            for obj in source:
                if not labels_match(labels, obj) or not fields_match(fields, obj):
                    continue
                if limit and len(items) >= limit:
                    more = True
                    break
                items.append(obj)
                last = object_key(obj)
            remaining: int | None = None
            if more and last is not None and not labels and not fields:
                if list_rv < current:
                    remaining = sum(1 for _ in self.store.scan_at(rt.storage_key, list_rv, ns, last))
                else:
                    remaining = self.store.count_after(rt.storage_key, ns, last)
        out_items = [_strip_type(self.wire(rt, o)) for o in items]
        meta: Obj = {"resourceVersion": str(list_rv)}
        if more and last is not None:
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"rv": list_rv, "start": list(last)}).encode()
            ).decode()
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        return {"kind": f"{rt.kind}List", "apiVersion": rt.group_version, "metadata": meta, "items": out_items}

    def _decode_continue(self, token: str) -> tuple[int, Key]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            rv, start = int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
        except (ValueError, KeyError, TypeError, IndexError):
            raise bad_request("continue key is not valid: incorrect encoded start resourceVersion") from None
        if rv < self.store.compacted_rv:
            raise expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a "
                "new list without the continue parameter, or use the continue token in this response to retrieve "
                "the remainder of the results. Continuing with the provided token results in an inconsistent list - "
                "objects that were created, modified, or deleted between the time the first chunk was returned and "
                "now may show up in the list."
            )
        return rv, start

    # -- create ------------------------------------------------------------------------------------------------------
    def create(
        self, rt: ResourceType, namespace: str | None, body: Any, query: dict[str, str], user: Obj, *,
        system: bool = False, validate: bool = True,
    ) -> Result:
        """`system`: a preload (status kept, no admission); `validate=False` skips validation (bulk benchmarks)."""
        dry_run = query.get("dryRun") == "All"
        obj = self._check_body(rt, body)
        meta = dict(_meta(obj))
        obj["metadata"] = meta
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if meta.get("generateName"):
                # apiserver names.SimpleNameGenerator: the base is cut to 63 - 5 characters, then 5 random ones.
                base = str(meta["generateName"])[:_MAX_GENERATED_BASE]
                meta["name"] = base + "".join(random.choices(_GENERATE_ALPHABET, k=5))
            else:
                raise invalid(rt.kind, rt.group, "", [FieldError("metadata.name", "Required value", detail="name or generateName is required")])
        if meta.get("resourceVersion") and not system:
            raise bad_request("resourceVersion should not be set on objects to be created")
        meta.pop("resourceVersion", None)
        for k in _SERVER_META:
            meta.pop(k, None)
        self._prepare_create(rt, obj, system)
        if not system and rt.plural == "pods" and rt.group == "":
            self._check_service_account(obj)
            self._admit_priority(obj)
            self.toleration_seconds.admit(obj)
        if not system and rt.plural == "nodes" and rt.group == "" and self.node_taint:
            _admit_node_taint(obj)
        obj = apply_defaults(rt, obj, self.profile)  # decoding defaults: what mutating webhooks see
        warnings: list[str] = []
        if self.admitter is not None and not system:
            obj, warnings = self.admitter.admit("CREATE", rt, obj, None, dry_run, user)
            obj = self._check_body(rt, obj)
            meta = obj.setdefault("metadata", {})
            if rt.namespaced:
                meta["namespace"] = namespace or meta.get("namespace") or "default"
        self._fix_invariants(rt, obj)
        stored = self._strategy(rt, to_storage(rt, obj), None)
        if validate:
            self._validate(rt, obj, stored, None)
        with self.store.lock:
            key = object_key(stored)
            if self.store.get(rt.storage_key, key) is not None:
                raise already_exists(rt.plural, rt.group, key[1])
            if rt.namespaced:
                ns = self.store.get("namespaces", ("", key[0]))
                if ns is None:
                    raise not_found("namespaces", "", key[0])
                if _meta(ns).get("deletionTimestamp"):
                    raise forbidden(
                        rt.plural, rt.group, key[1],
                        f"unable to create new content in namespace {key[0]} because it is being terminated",
                    )
            m = stored["metadata"] = dict(stored["metadata"])
            m["uid"] = str(uuid.uuid4())
            m["creationTimestamp"] = now_rfc3339()
            if rt.has_generation:
                m["generation"] = 1
            if dry_run:
                # Nothing is written, so no resourceVersion is assigned (the real dry-run storage answers the same).
                return Result(self.wire(rt, stored), 201, warnings)
            m["resourceVersion"] = str(self.store.next_rv())
            self.store.put(rt.storage_key, stored, "ADDED")
        return Result(self.wire(rt, stored), 201, warnings)

    def _check_body(self, rt: ResourceType, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request(f"the body of the request must be a JSON object, got {type(body).__name__}")
        obj = dict(body)
        if obj.get("apiVersion") not in (None, "", rt.group_version):
            raise bad_request(
                f"the API version in the data ({obj['apiVersion']}) does not match the expected API version ({rt.group_version})"
            )
        if obj.get("kind") not in (None, "", rt.kind):
            raise bad_request(f"the kind in the data ({obj['kind']}) does not match the expected kind ({rt.kind})")
        obj["apiVersion"], obj["kind"] = rt.group_version, rt.kind
        if obj.get("metadata") is not None and not isinstance(obj["metadata"], dict):
            raise bad_request("metadata must be an object")
        return obj

    def _prepare_create(self, rt: ResourceType, obj: Obj, system: bool) -> None:
        if not system and rt.plural in _STATUS_RESET_ON_CREATE:
            reset = _STATUS_RESET_ON_CREATE[rt.plural]
            if reset is None:
                obj.pop("status", None)
            else:
                obj["status"] = dict(reset)
        if rt.plural == "namespaces":
            spec = dict(obj.get("spec") or {})
            spec.setdefault("finalizers", ["kubernetes"])
            obj["spec"] = spec
            obj.setdefault("status", {"phase": "Active"})
        if rt.plural == "pods":
            status = dict(obj.get("status") or {})
            status.setdefault("phase", "Pending")
            obj["status"] = status

    def _check_service_account(self, pod: Obj) -> None:
        """The ServiceAccount admission plugin refuses a pod naming a ServiceAccount that does not exist: 403
        Forbidden "error looking up service account <ns>/<name>: serviceaccount "<name>" not found" (kubernetes
        plugin/pkg/admission/serviceaccount/admission.go `Admit`/`getServiceAccount`; kube-apiserver v1.37.2, observed
        by tests/real/test_differential.py). The `default` ServiceAccount is taken to exist: the real plugin waits up
        to ten tries for the one the controller manager creates in every new namespace, which the emulator has no
        controller manager to create (see the package docstring)."""
        meta, spec = _meta(pod), pod.get("spec") or {}
        account = spec.get("serviceAccountName") if isinstance(spec, dict) else None
        if not account or account == "default":
            return
        ns = meta.get("namespace") or "default"
        with self.store.lock:
            exists = self.store.get("serviceaccounts", (ns, str(account))) is not None
        if not exists:
            raise forbidden("pods", "", str(meta.get("name") or ""),
                            f'error looking up service account {ns}/{account}: serviceaccount "{account}" not found')

    def _admit_priority(self, pod: Obj) -> None:
        """The Priority admission plugin on a pod CREATE (kubernetes plugin/pkg/admission/priority/admission.go
        `admitPod`, v1.37.2; it runs before the mutating webhooks): `spec.priority` and `spec.preemptionPolicy` from
        the pod's `priorityClassName`, or from the globalDefault class (the lowest one if several; its name is
        written too), else 0 and PreemptLowerPriority. A class that does not exist: 403 "no PriorityClass with name
        <n> was found"; a `priority` or `preemptionPolicy` in the spec that differs from the class's: 403. The
        scheduler stand-in and `bridge controller` order pods by `spec.priority`, as the real ones do; without
        this a pod naming a class had priority 0 in the sandbox."""
        meta, spec = _meta(pod), pod.get("spec")
        if not isinstance(spec, dict):
            return
        name = str(meta.get("name") or "")
        wanted = spec.get("priorityClassName") or ""
        with self.store.lock:
            classes = [c for c in self.store.scan(PRIORITY_CLASSES) if not _meta(c).get("deletionTimestamp")]
        if wanted:
            found = next((c for c in classes if _meta(c).get("name") == wanted), None)
            if found is None:
                raise forbidden("pods", "", name, f"no PriorityClass with name {wanted} was found")
        else:
            defaults = [c for c in classes if c.get("globalDefault") is True]
            found = min(defaults, key=lambda c: int(c.get("value") or 0)) if defaults else None
        value = int(found.get("value") or 0) if found is not None else 0
        policy = (found.get("preemptionPolicy") if found is not None else None) or "PreemptLowerPriority"
        given = spec.get("priority")
        if given is not None and given != value:
            raise forbidden("pods", "", name, f"the integer value of priority ({given}) must not be provided in pod "
                                              f"spec; priority admission controller computed {value} from the given "
                                              "PriorityClass name")
        if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
            raise forbidden("pods", "", name, f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) "
                                              "must not be provided in pod spec; priority admission controller "
                                              f"computed {policy} from the given PriorityClass name")
        if found is not None:
            spec["priorityClassName"] = _meta(found).get("name")
        spec["priority"] = value
        spec["preemptionPolicy"] = policy

    def _fix_invariants(self, rt: ResourceType, obj: Obj) -> None:
        if rt.plural == "namespaces" and rt.group == "":
            meta = obj["metadata"] = dict(_meta(obj))
            labels = dict(meta.get("labels") or {})
            labels["kubernetes.io/metadata.name"] = meta.get("name", "")
            meta["labels"] = labels

    def _strategy(self, rt: ResourceType, stored: Obj, old: Obj | None) -> Obj:
        """Defaults, then the fields of disabled feature gates dropped (PrepareForCreate / PrepareForUpdate)."""
        return drop_disabled_fields(rt, apply_defaults(rt, stored, self.profile), old, self.profile)

    def _validate(self, rt: ResourceType, wire: Obj, stored: Obj, old: Obj | None) -> None:
        if self.validator is None:
            return
        errors = self.validator.validate(rt, wire, stored, old)
        if errors:
            raise invalid(rt.kind, rt.group, _meta(wire).get("name", ""), errors)

    # -- update / patch ----------------------------------------------------------------------------------------------
    def update(
        self, rt: ResourceType, namespace: str | None, name: str, body: Any, subresource: str | None,
        query: dict[str, str], user: Obj,
    ) -> Result:
        obj = self._check_body(rt, body)
        body_name = _meta(obj).get("name")
        if body_name and body_name != name:
            raise bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        want_rv = _meta(obj).get("resourceVersion") or None
        if want_rv is None and not rt.unconditional_update:
            with self.store.lock:
                self._require(rt, namespace, name)  # a missing object is 404 first
            # generic registry Store.Update: the Invalid error names the resource, not the kind
            raise invalid(rt.plural, rt.group, name, [FieldError("metadata.resourceVersion", "Invalid value", 0,
                                                                 "must be specified for an update")])
        return self._update_loop(rt, namespace, name, lambda current: obj, want_rv, subresource, query, user)

    def patch(
        self, rt: ResourceType, namespace: str | None, name: str, content_type: str, raw: bytes,
        subresource: str | None, query: dict[str, str], user: Obj,
    ) -> Result:
        ctype = content_type.split(";")[0].strip().lower()
        if ctype == patches.APPLY:
            with self.store.lock:
                exists = self.store.get(rt.storage_key, self._key(rt, namespace, name)) is not None
            if not exists:
                body = patches.apply_patch(ctype, {}, raw)
                body.setdefault("metadata", {})["name"] = name
                return self.create(rt, namespace, body, query, user)
        explicit: dict[str, str | None] = {"rv": None}

        def make(current: Obj) -> Obj:
            try:
                patched = patches.apply_patch(ctype, current, raw)
            except patches.PatchError as err:
                raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request",
                               {}) from err
            rv = _meta(patched).get("resourceVersion") if isinstance(patched, dict) else None
            if rv and rv != _meta(current).get("resourceVersion"):
                explicit["rv"] = rv
            return self._check_body(rt, patched)

        return self._update_loop(rt, namespace, name, make, None, subresource, query, user, explicit)

    def _update_loop(
        self, rt: ResourceType, namespace: str | None, name: str, make: Callable[[Obj], Obj], want_rv: str | None,
        subresource: str | None, query: dict[str, str], user: Obj, explicit: dict[str, str | None] | None = None,
    ) -> Result:
        dry_run = query.get("dryRun") == "All"
        if subresource not in (None, "status"):
            raise bad_request(f"subresource {subresource!r} does not support this verb")
        if subresource == "status" and not rt.has_status:
            raise not_found(f"{rt.plural}/status", rt.group, name)
        for _attempt in range(20):
            with self.store.lock:
                current = self._require(rt, namespace, name)
            base_rv = _meta(current)["resourceVersion"]
            current_wire = self.wire(rt, current)
            new = make(copy.deepcopy(current_wire))
            precondition = want_rv or (explicit or {}).get("rv")
            if precondition and precondition != base_rv:
                raise conflict(rt.plural, rt.group, name)
            new = self._merge_update(rt, current_wire, new, subresource)
            if subresource is None and rt.plural == "pods" and rt.group == "":
                self.toleration_seconds.admit(new)
            warnings: list[str] = []
            if self.admitter is not None and subresource is None:
                new = apply_defaults(rt, new, self.profile)  # decoding defaults: what mutating webhooks see
                new, warnings = self.admitter.admit("UPDATE", rt, new, current_wire, dry_run, user)
                new = self._merge_update(rt, current_wire, self._check_body(rt, new), subresource)
            self._fix_invariants(rt, new)
            stored = self._strategy(rt, to_storage(rt, new), current)
            self._check_finalizers(rt, current, stored)
            self._validate(rt, new, stored, current)
            with self.store.lock:
                latest = self._require(rt, namespace, name)
                if _meta(latest)["resourceVersion"] != base_rv:
                    if precondition:
                        raise conflict(rt.plural, rt.group, name)
                    continue  # unconditional update / patch: redo it on the newest object
                stored_meta = stored["metadata"] = dict(stored["metadata"])
                if rt.has_generation and _content(stored) != _content(current):
                    stored_meta["generation"] = int(_meta(current).get("generation") or 0) + 1
                stored_meta["resourceVersion"] = base_rv
                if stored == current:
                    return Result(self.wire(rt, current), 200, warnings)
                if dry_run:  # nothing written: the answer keeps the stored resourceVersion
                    return Result(self.wire(rt, stored), 200, warnings)
                stored_meta["resourceVersion"] = str(self.store.next_rv())
                # k8s.io/apiserver pkg/registry/generic/registry/store.go `ShouldDeleteDuringUpdate`: an update
                # leaving no finalizers removes an object being deleted only when its grace period is 0 or unset;
                # a pod in its grace period stays (its status updates included) until deleted with grace 0
                grace = _meta(current).get("deletionGracePeriodSeconds")
                gone = (bool(_meta(current).get("deletionTimestamp")) and not stored_meta.get("finalizers")
                        and not grace)
                if gone:
                    self._remove(rt, stored, propagation="Background")
                else:
                    self.store.put(rt.storage_key, stored, "MODIFIED")
            return Result(self.wire(rt, stored), 200, warnings)
        raise conflict(rt.plural, rt.group, name, "too many concurrent changes; please retry")

    def _merge_update(self, rt: ResourceType, current: Obj, new: Obj, subresource: str | None) -> Obj:
        """Apply the rules for what an update may change: server-owned metadata is kept; the main resource cannot
        change status and the status subresource can change nothing but status (for kinds with a status)."""
        cur_meta = _meta(current)
        if subresource == "status":
            out = dict(current)
            if "status" in new:
                out["status"] = new["status"]
            else:
                out.pop("status", None)
            return out
        out = dict(new)
        meta = dict(_meta(new))
        for k in _SERVER_META + ("name", "namespace"):
            if k in cur_meta:
                meta[k] = cur_meta[k]
            else:
                meta.pop(k, None)
        meta["resourceVersion"] = cur_meta.get("resourceVersion")
        out["metadata"] = meta
        if rt.has_status:
            if "status" in current:
                out["status"] = current["status"]
            else:
                out.pop("status", None)
        return out

    def _check_finalizers(self, rt: ResourceType, current: Obj, new: Obj) -> None:
        if not _meta(current).get("deletionTimestamp"):
            return
        added = [f for f in _meta(new).get("finalizers") or [] if f not in (_meta(current).get("finalizers") or [])]
        if added:
            raise invalid(
                rt.kind, rt.group, _meta(current).get("name", ""),
                [FieldError("metadata.finalizers", "Forbidden", detail=f"no new finalizers can be added if the object is being deleted, found new finalizers {json.dumps(added)}")],
            )

    # -- delete ------------------------------------------------------------------------------------------------------
    def delete(self, rt: ResourceType, namespace: str | None, name: str, options: Obj, query: dict[str, str]) -> Result:
        dry_run = query.get("dryRun") == "All" or "All" in (options.get("dryRun") or [])
        with self.store.lock:
            current = self._require(rt, namespace, name)
            self._check_preconditions(rt, current, options.get("preconditions") or {})
            final = self._delete_locked(rt, current, options, query, dry_run)
        # Deletion pending (finalizers, grace period): the object is answered with its deletionTimestamp.
        still_there = bool(_meta(final).get("deletionTimestamp"))
        if still_there or rt.returns_deleted_object:
            return Result(self.wire(rt, final), 200)  # waiting for finalizers / grace, or a kind that returns it
        # Removed for good: most kinds answer a Status that names what was deleted (the generic registry's
        # finalizeDelete); kinds whose storage sets ReturnDeletedObject (registry.py) answer the object itself.
        meta = _meta(final)
        details: Obj = {"name": meta.get("name", "")}
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
        details["uid"] = meta.get("uid", "")
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
        return Result(status, 200)

    def _check_preconditions(self, rt: ResourceType, current: Obj, pre: Obj) -> None:
        meta = _meta(current)
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise conflict(rt.plural, rt.group, meta.get("name", ""),
                           f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta.get('uid')}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise conflict(rt.plural, rt.group, meta.get("name", ""),
                           f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                           f"ResourceVersion in object meta: {meta.get('resourceVersion')}")

    def _delete_locked(self, rt: ResourceType, current: Obj, options: Obj, query: dict[str, str], dry_run: bool) -> Obj:
        meta = _meta(current)
        propagation = options.get("propagationPolicy") or query.get("propagationPolicy") or "Background"
        if options.get("orphanDependents") is True or query.get("orphanDependents") == "true":
            propagation = "Orphan"
        if rt.plural == "namespaces" and rt.group == "":
            return self._delete_namespace(rt, current, dry_run)
        decision = before_delete(current, is_pod=rt.plural == "pods" and rt.group == "", options=options, query=query)
        if decision.pending:
            return current  # graceful deletion pending: only a shorter grace period changes anything
        if decision.grace is None and meta.get("finalizers") and meta.get("deletionTimestamp"):
            return current  # waiting for its finalizers
        if decision.grace is not None or meta.get("finalizers"):
            # store.go updateForGracefulDeletionAndFinalizers: the mark is written first
            new = dict(current)
            m = new["metadata"] = dict(meta)
            first = not meta.get("deletionTimestamp")
            m["deletionTimestamp"] = decision.timestamp if decision.grace is not None else now_rfc3339()
            m["deletionGracePeriodSeconds"] = decision.grace or 0
            if first and m.get("generation"):
                m["generation"] = int(m["generation"]) + 1
            m["resourceVersion"] = str(self.store.next_rv())
            if not dry_run:
                self.store.put(rt.storage_key, new, "MODIFIED")
            if decision.grace or meta.get("finalizers"):
                return new  # terminating until its kubelet's final delete, or its finalizers
            final = dict(new, metadata=dict(m))  # grace 0: then removed at once; the marked pod is the answer
        else:
            final = dict(current)
            final["metadata"] = dict(meta, resourceVersion=str(self.store.next_rv()))
        if not dry_run:
            self._remove(rt, final, propagation)
        return final

    def _remove(self, rt: ResourceType, final: Obj, propagation: str) -> None:
        """Remove for good (lock held), then collect dependents and finish a terminating namespace."""
        final["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.remove(rt.storage_key, final)
        uid = _meta(final).get("uid")
        if uid:
            for storage_key, key in self.store.dependents(uid):
                dep = self.store.get(storage_key, key)
                dep_rt = self._storage_type(storage_key)
                if dep is None or dep_rt is None:
                    continue
                if propagation == "Orphan":
                    new = copy.deepcopy(dep)
                    new["metadata"]["ownerReferences"] = [
                        r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != uid
                    ]
                    new["metadata"]["resourceVersion"] = str(self.store.next_rv())
                    self.store.put(storage_key, new, "MODIFIED")
                else:
                    self._delete_locked(dep_rt, dep, {}, {}, False)
        ns = _meta(final).get("namespace")
        if ns and rt.namespaced:
            ns_obj = self.store.get("namespaces", ("", ns))
            if ns_obj is not None and _meta(ns_obj).get("deletionTimestamp"):
                self._finish_namespace(ns_obj)

    def _storage_type(self, storage_key: str) -> ResourceType | None:
        for rt in self.registry.all():
            if rt.storage_key == storage_key:
                return rt
        return None

    def _delete_namespace(self, rt: ResourceType, current: Obj, dry_run: bool) -> Obj:
        """The namespace turns Terminating (kubernetes pkg/registry/core/namespace/storage/storage.go `Delete`: a
        deletionTimestamp, no grace period, phase Terminating, `spec.finalizers` kept) and that is the answer, as
        kube-apiserver v1.37.2 answers it (observed by tests/real/test_differential.py). Then the content is deleted
        and an empty namespace removed at once: the namespace controller's work, which the real cluster does a
        moment later (see the package docstring: not modelled)."""
        if dry_run or _meta(current).get("deletionTimestamp"):
            return current
        new = copy.deepcopy(current)
        new["metadata"]["deletionTimestamp"] = now_rfc3339()
        new.setdefault("status", {})["phase"] = "Terminating"
        new["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(rt.storage_key, new, "MODIFIED")
        name = _meta(current)["name"]
        seen: set[str] = set()
        for content_rt in list(self.registry.all()):
            if not content_rt.namespaced or content_rt.storage_key in seen:
                continue
            seen.add(content_rt.storage_key)
            for obj in list(self.store.scan(content_rt.storage_key, name)):
                self._delete_locked(content_rt, obj, {}, {}, False)
        latest = self.store.get("namespaces", ("", name))
        if latest is not None:
            self._finish_namespace(latest)
        return new

    def _finish_namespace(self, ns_obj: Obj) -> Obj | None:
        name = _meta(ns_obj)["name"]
        for rt in self.registry.all():
            if rt.namespaced and next(self.store.scan(rt.storage_key, name), None) is not None:
                return None
        if _meta(ns_obj).get("finalizers"):
            return None
        final = copy.deepcopy(ns_obj)
        final["spec"] = {"finalizers": []} if "spec" in final else final.get("spec")
        ns_rt = self.registry.get("", "v1", "namespaces")
        assert ns_rt is not None
        self._remove(ns_rt, final, "Background")
        return final

    def delete_collection(self, rt: ResourceType, namespace: str | None, options: Obj, query: dict[str, str]) -> Obj:
        dry_run = query.get("dryRun") == "All" or "All" in (options.get("dryRun") or [])
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), rt.allows_field, rt.unsupported_field)
        ns = namespace if rt.namespaced and namespace else None
        items = []
        with self.store.lock:
            for obj in list(self.store.scan(rt.storage_key, ns)):
                if labels_match(labels, obj) and fields_match(fields, obj):
                    if self.store.get(rt.storage_key, object_key(obj)) is None:
                        continue  # removed meanwhile by garbage collection of an earlier item
                    items.append(self._delete_locked(rt, obj, options, query, dry_run))
            rv = self.store.resource_version
        return {
            "kind": f"{rt.kind}List", "apiVersion": rt.group_version, "metadata": {"resourceVersion": str(rv)},
            "items": [_strip_type(self.wire(rt, o)) for o in items],
        }

    # -- pods/binding --------------------------------------------------------------------------------------------------
    def bind(self, rt: ResourceType, namespace: str | None, name: str, body: Any, query: dict[str, str], user: Obj) -> Result:
        """POST pods/<name>/binding, as kubernetes/kubernetes pkg/registry/core/pod/storage/storage.go `BindingREST`:
        the Binding's name must be the pod's ("name in URL does not match name in Binding object", 400);
        `ValidatePodBinding` (target.kind empty or Node, target.name required) fails as a plain error, which the
        handler answers 500 with an empty reason; the Binding's uid / resourceVersion are preconditions on the pod;
        a pod being deleted or already assigned is a 409 on `pods/binding`; success sets `spec.nodeName`, merges the
        Binding's annotations, clears `status.nominatedNodeName` (with ClearingNominatedNodeNameAfterBinding, on
        from 1.35: `assignPod`) and sets the `PodScheduled` condition to True. The node is *not* checked: binding to
        a node that does not exist succeeds, as on a real server. The answer is a Status `Success` (201)."""
        if not isinstance(body, dict):
            raise bad_request(f"not a Binding object: {type(body).__name__}")
        meta: Obj = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
        if meta.get("name") != name:
            raise bad_request("name in URL does not match name in Binding object")
        target: Obj = body["target"] if isinstance(body.get("target"), dict) else {}
        errors = []
        if target.get("kind") not in (None, "", "Node"):
            errors.append(str(FieldError("target.kind", "Unsupported value", target.get("kind"),
                                         'supported values: "<empty>", "Node"')))
        if not target.get("name"):
            errors.append(str(FieldError("target.name", "Required value")))
        if errors:
            message = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            raise ApiError(500, "", message)
        node = str(target["name"])
        with self.store.lock:
            current = self._require(rt, namespace, name)
            cmeta = _meta(current)
            if meta.get("uid") and meta["uid"] != cmeta.get("uid"):
                raise conflict(rt.plural, rt.group, name,
                               f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {cmeta.get('uid')}")
            if meta.get("resourceVersion") and meta["resourceVersion"] != cmeta.get("resourceVersion"):
                raise conflict(rt.plural, rt.group, name, "the object has been modified; please apply your changes "
                                                          "to the latest version and try again")
            if cmeta.get("deletionTimestamp"):
                raise conflict("pods/binding", "", name, f"pod {name} is being deleted, cannot be assigned to a host")
            if (current.get("spec") or {}).get("nodeName"):
                raise conflict("pods/binding", "", name,
                               f"pod {name} is already assigned to node \"{current['spec']['nodeName']}\"")
            new = copy.deepcopy(current)
            new.setdefault("spec", {})["nodeName"] = node
            if meta.get("annotations"):
                new["metadata"]["annotations"] = {**(new["metadata"].get("annotations") or {}), **meta["annotations"]}
            if self.profile.enabled("ClearingNominatedNodeNameAfterBinding"):
                new.setdefault("status", {}).pop("nominatedNodeName", None)
            _set_condition(new, "PodScheduled", "True")
            new["metadata"]["resourceVersion"] = str(self.store.next_rv())
            if query.get("dryRun") != "All":
                self.store.put(rt.storage_key, new, "MODIFIED")
        return Result({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)


def _set_condition(pod: Obj, kind: str, status: str) -> None:
    """pkg/api/v1/pod UpdatePodCondition: replace the condition of that type (keeping lastProbeTime), else append;
    lastTransitionTime moves only when the status changes."""
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    now = now_rfc3339()
    for i, cond in enumerate(conditions):
        if isinstance(cond, dict) and cond.get("type") == kind:
            changed = cond.get("status") != status
            conditions[i] = {k: v for k, v in {**cond, "status": status,
                                               "lastTransitionTime": now if changed else cond.get("lastTransitionTime"),
                                               }.items() if v is not None and k not in ("reason", "message")}
            return
    conditions.append({"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": now})
