"""The resource claim controller stand-in's I/O shell (kube-controller-manager's "resource-claim-controller").

A stand-in (never imported by production code), talking to the API server through `bridge.kube.KubeAPI` like the
real controller through client-go. Written from kubernetes/kubernetes pkg/controller/resourceclaim/controller.go:
* informers on pods, ResourceClaims and ResourceClaimTemplates; a work queue of `pod:<ns>/<name>` and
  `claim:<ns>/<name>` keys, each synced by one worker at a time and retried with backoff on errors;
* pod events (`enqueuePod`): a pod without claims is ignored; a deleted pod's uid is remembered (so its
  reservations can be dropped without asking the API server); a pod that no longer needs its claims (deleted,
  finished, deleted before scheduling) enqueues those claims; a pod that needs work (a template claim not created
  yet, or a scheduled pod whose allocated claim is not reserved for it) is enqueued;
* claim events enqueue the claim and the pods that use it;
* `syncPod` creates the template claims (see logic.py), records them in `status.resourceClaimStatuses` with one
  status patch, and reserves allocated claims for pods bound without the scheduler; a failure is an Event
  `FailedResourceClaimCreation` ("PodResourceClaim <name>: <error>") on the pod and a retry;
* `syncClaim` drops stale reservations, deallocates and un-finalizes claims nobody reserves, and deletes generated
  claims whose pod is done. A reservation of a pod missing from the informer is checked with a GET first, so a pod
  the informer has not seen yet is never dropped.
Events go through core/v1 with source component `resource_claim`, as the controller's event recorder does,
repeated ones counted on the first (the EventCorrelator).

Which claims each step sees, as in the real controller: `podNeedsWork`, `syncPod`'s reservations and `syncClaim`
read the claim informer (`claimLister`); whether a pod's claim exists (`claimExists`) and the orphan search read
client-go's mutation cache over it (`ClaimCache`: the claims this controller created, kept for an hour while newer
than the informer's copy, also after the informer dropped them; client-go tools/cache/mutation_cache.go,
`IncludeAdds`, TTL 1 h, 1,000 entries), then a GET. The controller never tells that cache of a deletion, so a
generated claim it deleted for a done pod still "exists" for `claimExists` and is not created again; the stand-in
forgot its entry at the claim's first event and re-created such a claim, deleted it, re-created it, without end
(found by tests/real/test_claim_differential.py against kube-controller-manager v1.37.2).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from bridge.kube import EVENTS, PODS, Conflict, Informer, KubeAPI, KubeError, NotFound, WatchEvent, record_event
from bridge.sandbox.apiserver.profiles import KubernetesProfile

from ..threads import join_all
from . import logic
from .workqueue import WorkQueue

log = logging.getLogger("bridge.sandbox.claimcontroller")
Obj = dict[str, Any]
MAX_UID_CACHE = 500  # maxUIDCacheEntries


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class _UIDCache:
    """An LRU of deleted pod uids (uid_cache.go)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, uid: str) -> None:
        with self._lock:
            self._items[uid] = None
            self._items.move_to_end(uid)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def has(self, uid: str) -> bool:
        with self._lock:
            return uid in self._items


def _rv(obj: Obj) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class ClaimCache:
    """client-go's `mutationCache` as the resource claim controller configures it (`IncludeAdds`, TTL 1 h, an LRU of
    1,000): `mutation(claim)` after a create; `get(key, stored)` returns the informer's copy, unless the cached one
    is newer (a higher resourceVersion), or the cached one when the informer has none (a claim not seen yet, or
    deleted since: a deletion is never told to the cache). A lookup that finds the informer's copy as new as the
    cached one drops the cached one (`newerObject`)."""

    TTL_S = 3600.0
    SIZE = 1000

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, Obj]] = OrderedDict()
        self._lock = threading.Lock()

    def mutation(self, obj: Obj) -> None:
        with self._lock:
            self._items[_key(obj)] = (self._clock() + self.TTL_S, obj)
            self._items.move_to_end(_key(obj))
            while len(self._items) > self.SIZE:
                self._items.popitem(last=False)

    def get(self, key: str, stored: Obj | None) -> Obj | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0] <= self._clock():
                del self._items[key]
                hit = None
            if hit is None:
                return stored
            if stored is not None and _rv(stored) >= _rv(hit[1]):
                del self._items[key]
                return stored
            return hit[1]

    def values(self) -> list[Obj]:
        now = self._clock()
        with self._lock:
            return [obj for expiry, obj in self._items.values() if expiry > now]


class ClaimController:
    """`ClaimController(api, profile=profile_for("1.37")).start()`; `stop()` ends every thread it started."""

    def __init__(self, api: KubeAPI, *, profile: KubernetesProfile, workers: int = 2) -> None:
        self.api = api
        self.profile = profile
        self.workers = workers
        self.queue = WorkQueue()
        self.deleted = _UIDCache(MAX_UID_CACHE)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._informers: dict[str, Informer] = {}
        self._created = ClaimCache()  # the claims this controller created (client-go's mutation cache)
        # The pod index by claim (podResourceClaimIndex): "ns/claim" -> pod keys, and each pod's entries.
        self._pods_by_claim: dict[str, set[str]] = {}
        self._claims_of_pod: dict[str, list[str]] = {}
        self._events: dict[tuple[str, str, str, str], list[Any]] = {}
        self._lock = threading.Lock()
        self.created = 0
        self.deleted_claims = 0
        self.deallocated = 0

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> ClaimController:
        rapi = self.api.resource_api()
        for name, res, handler in (("templates", rapi.claim_templates, None),
                                   ("claims", rapi.claims, self._claim_event),
                                   ("pods", PODS, self._pod_event)):
            inf = Informer(self.api, res, on_event=handler, watch_timeout=300)
            self._informers[name] = inf
            self._threads.append(inf.start(self._stop))
        for inf in self._informers.values():
            inf.wait_synced(30)
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"claim-controller-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        log.info("resource claim controller stand-in started (Kubernetes %s)", self.profile.version)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.queue.shutdown()
        self._threads = join_all(self._threads, timeout, "claim controller stand-in", log)

    def __enter__(self) -> ClaimController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- event handlers --------------------------------------------------------------------------------------------
    def _index(self, pod: Obj, deleted: bool) -> None:
        key, ns = _key(pod), str(pod["metadata"]["namespace"])
        with self._lock:
            for old in self._claims_of_pod.pop(key, []):
                self._pods_by_claim.get(old, set()).discard(key)
            if deleted:
                return
            names = [f"{ns}/{n}" for n in logic.claim_names(pod)]
            self._claims_of_pod[key] = names
            for n in names:
                self._pods_by_claim.setdefault(n, set()).add(key)

    def _pod_event(self, ev: WatchEvent) -> None:
        pod = ev.object
        deleted = ev.type == "DELETED"
        self._index(pod, deleted)
        spec = pod.get("spec") or {}
        if not spec.get("resourceClaims") and not (pod.get("status") or {}).get("extendedResourceClaimStatus"):
            return
        if deleted:
            self.deleted.add(str((pod.get("metadata") or {}).get("uid")))
        if not logic.pod_needs_claims(pod, deleted):
            for name in logic.claim_names(pod):
                self.queue.add(f"claim:{pod['metadata']['namespace']}/{name}")
        if not deleted and self._pod_needs_work(pod):
            self.queue.add(f"pod:{_key(pod)}")

    def _claim(self, ns: str, name: str) -> Obj | None:
        """The informer's copy (`claimLister`)."""
        return self._informers["claims"].store.get(f"{ns}/{name}")

    def _claim_exists_copy(self, ns: str, name: str) -> Obj | None:
        """`claimExists`: the mutation cache over the informer, then a GET."""
        claim = self._created.get(f"{ns}/{name}", self._claim(ns, name))
        if claim is None:
            try:
                claim = self.api.get(self.api.resource_api().claims, name, ns)
            except NotFound:
                return None
        return claim

    def _ignores(self, pod: Obj) -> bool:
        """A pod being deleted, or from 1.38 a terminal one (Succeeded or Failed): podNeedsWork and syncPod do nothing
        for it (pkg/controller/resourceclaim/controller.go, v1.38.0-beta.0: `podutil.IsPodTerminal`, "A terminal Pod
        must not reserve an allocated claim again after syncClaim removed its stale reservation"; through 1.37 a
        terminal pod still got claims from templates and, when bound, its reservation back)."""
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return True
        return self.profile.minor >= 38 and (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    def _pod_needs_work(self, pod: Obj) -> bool:
        """podNeedsWork."""
        if self._ignores(pod):
            return False
        ns = str(pod["metadata"]["namespace"])
        statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
            if pc.get("resourceClaimName"):
                name = str(pc["resourceClaimName"])
            elif pc.get("resourceClaimTemplateName"):
                if pc.get("name") not in statuses:
                    return True  # must create ResourceClaim from template
                name = statuses[pc.get("name")].get("resourceClaimName")
                if not name:
                    return False  # claim is not needed
            else:
                return True
            claim = self._claim(ns, str(name))
            if claim is None:
                return bool(pc.get("resourceClaimTemplateName"))
            if pc.get("resourceClaimTemplateName") and logic.owning_pod(claim) != (pod["metadata"]["name"],
                                                                                 pod["metadata"]["uid"]):
                return False  # conflicting claim needs to be removed by user
            if not (pod.get("spec") or {}).get("nodeName"):
                continue
            if self._reservable(pod, claim):
                return True
        return False

    @staticmethod
    def _reservable(pod: Obj, claim: Obj) -> bool:
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        return bool(status.get("allocation")) and not any(
            r.get("uid") == pod["metadata"]["uid"] for r in reserved) and len(reserved) < 256

    def _claim_event(self, ev: WatchEvent) -> None:
        claim = ev.object
        key = _key(claim)
        if ev.type != "DELETED":
            self.queue.add(f"claim:{key}")
        with self._lock:
            pod_keys = list(self._pods_by_claim.get(key, ()))
        pods = self._informers["pods"].store if "pods" in self._informers else {}
        for pod_key in pod_keys:
            pod = pods.get(pod_key)
            if pod is not None:
                self._pod_event(WatchEvent("MODIFIED", pod))

    # -- worker ----------------------------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                kind, _, ref = key.partition(":")
                ns, _, name = ref.partition("/")
                if kind == "pod":
                    self._sync_pod(ns, name)
                else:
                    self._sync_claim(ns, name)
                self.queue.forget(key)
            except Conflict as err:  # a benign race with another writer: retried at once with backoff
                log.info("%s: %s; retrying", key, err.message)
                self.queue.add_rate_limited(key)
            except KubeError as err:
                log.warning("%s failed with: %s", key, err.message)
                self.queue.add_rate_limited(key)
            except Exception:  # noqa: BLE001 - one bad object must not stop the controller
                log.exception("%s failed", key)
                self.queue.add_rate_limited(key)
            finally:
                self.queue.done(key)

    def _sync_pod(self, ns: str, name: str) -> None:
        pod = self._informers["pods"].store.get(f"{ns}/{name}")
        if pod is None or self._ignores(pod):
            return
        new_statuses: list[Obj] = []
        for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
            try:
                created = self._handle_claim(pod, pc)
            except _ClaimError as err:
                self._event(pod, "Warning", "FailedResourceClaimCreation", f"PodResourceClaim {pc.get('name')}: {err}")
                raise KubeError(f"pod {ns}/{name}, PodResourceClaim {pc.get('name')}: {err}") from err
            if created is not None:
                new_statuses.append({"name": pc.get("name"), "resourceClaimName": created})
        if new_statuses:
            self.api.patch(PODS, name, {"status": {"resourceClaimStatuses": new_statuses}}, ns,
                           patch_type="strategic", subresource="status")
        if not (pod.get("spec") or {}).get("nodeName"):
            return  # the scheduler reserves
        rapi = self.api.resource_api()
        for claim_name in logic.claim_names(pod):
            claim = self._claim(ns, claim_name)
            if claim is None or not self._reservable(pod, claim):
                continue
            status = claim.setdefault("status", {})
            status["reservedFor"] = [*(status.get("reservedFor") or []),
                                     {"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}]
            self.api.update(rapi.claims, claim, ns, subresource="status")

    def _handle_claim(self, pod: Obj, pc: Obj) -> str | None:
        """handleClaim: the name of a claim created (or adopted) for the pod, or None when nothing was to do."""
        ns = str(pod["metadata"]["namespace"])
        statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        template_name = pc.get("resourceClaimTemplateName")
        if not template_name:
            return None
        if pc.get("name") in statuses:
            recorded = statuses[pc.get("name")].get("resourceClaimName")
            if not recorded:
                return None
            claim = self._claim_exists_copy(ns, str(recorded))
            if claim is not None and logic.owning_pod(claim) == (pod["metadata"]["name"], pod["metadata"]["uid"]):
                return None  # already created
        claim = logic.find_pod_claim(pod, pc, self._owned_by(pod))
        if claim is None:
            template = self._informers["templates"].store.get(f"{ns}/{template_name}")
            if template is None:
                raise _ClaimError(f'resource claim template "{template_name}": resourceclaimtemplate.resource.k8s.io '
                                  f'"{template_name}" not found')
            if logic.needs_admin_access(template) and not self.profile.enabled("DRAAdminAccess"):
                raise _ClaimError("admin access is requested, but the feature is disabled")
            body = logic.claim_from_template(pod, pc, template, self.profile.minor)
            try:
                claim = self.api.create(self.api.resource_api().claims, body, ns)
            except KubeError as err:
                raise _ClaimError(f"create ResourceClaim {body['metadata'].get('name', '')}: {err.message}") from err
            self._created.mutation(claim)
            self.created += 1
        return str(claim["metadata"]["name"])

    def _owned_by(self, pod: Obj) -> list[Obj]:
        """`claimCache.ByIndex(claimPodOwnerIndex, ns/uid)`: the claims whose controller is the pod, each the newer of
        the informer's and the mutation cache's copy, and those only the mutation cache has. Only these are looked
        up: a lookup drops a cached copy the informer has caught up with (`newerObject`)."""
        ns, uid = pod["metadata"].get("namespace"), str(pod["metadata"].get("uid"))

        def mine(claim: Obj) -> bool:
            owner = logic.owning_pod(claim)
            return owner is not None and owner[1] == uid and (claim.get("metadata") or {}).get("namespace") == ns

        stored = {k: c for k, c in self._informers["claims"].snapshot().items() if mine(c)}
        owned = [self._created.get(k, c) or c for k, c in stored.items()]
        return owned + [c for c in self._created.values() if _key(c) not in stored and mine(c)]

    def _pod_gone(self, ns: str, name: str, uid: str) -> bool:
        """Whether the pod reserving a claim is certainly gone, replaced or done."""
        if self.deleted.has(uid):
            return True
        pod = self._informers["pods"].store.get(f"{ns}/{name}")
        if pod is None:
            try:
                pod = self.api.get(PODS, name, ns)
            except NotFound:
                return True
        return str(pod["metadata"].get("uid")) != uid or logic.is_pod_done(pod)

    def _sync_claim(self, ns: str, name: str) -> None:
        claim = self._claim(ns, name)
        if claim is None:
            return
        rapi = self.api.resource_api()
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        valid = []
        for entry in reserved:
            if entry.get("apiGroup", "") == "" and entry.get("resource") == "pods":
                if not self._pod_gone(ns, str(entry.get("name")), str(entry.get("uid"))):
                    valid.append(entry)
                continue
            if self.profile.minor >= 36:
                # 1.36+ keeps a consumer it cannot check (pkg/controller/resourceclaim/controller.go syncClaim: "We
                # don't know how to check this entry, so we just keep it"); PodGroup consumers, checked there under
                # the WorkloadResourceClaims gate, are kept here too (not modelled)
                valid.append(entry)
                continue
            raise KubeError(f"unsupported ReservedFor entry: {entry}")  # up to 1.35: the sync fails and retries
        has_finalizer = logic.FINALIZER in (claim["metadata"].get("finalizers") or [])
        if len(valid) < len(reserved):
            try:
                updated = self.api.update(rapi.claims, logic.deallocated(claim, valid), ns, subresource="status")
                if not valid and has_finalizer:
                    self.deallocated += 1
                if logic.FINALIZER in (updated["metadata"].get("finalizers") or []) and not (
                        updated.get("status") or {}).get("allocation"):
                    self.api.update(rapi.claims, logic.without_finalizer(updated), ns)
            except NotFound:
                return
        elif has_finalizer and claim["metadata"].get("deletionTimestamp") and not valid:
            current = claim
            if (claim.get("status") or {}).get("allocation"):
                current = self.api.update(rapi.claims, logic.deallocated(claim, []), ns, subresource="status")
            try:
                self.api.update(rapi.claims, logic.without_finalizer(current), ns)
            except (NotFound, Conflict):
                self.queue.add_rate_limited(f"claim:{ns}/{name}")
        if not valid:
            owner = logic.owning_pod(claim)
            if owner is None:
                return
            pod = self._informers["pods"].store.get(f"{ns}/{owner[0]}")
            if pod is not None and (str(pod["metadata"].get("uid")) != owner[1] or logic.is_pod_done(pod)):
                try:
                    self.api.delete(rapi.claims, name, ns)
                    self.deleted_claims += 1
                except NotFound:
                    pass

    def _event(self, pod: Obj, type_: str, reason: str, message: str) -> None:
        """client-go's record.EventRecorder with its EventCorrelator: the same event again (same object, reason,
        message, type, source) increments `count` and moves `lastTimestamp` on the stored Event instead of creating
        another one."""
        key = (str(pod["metadata"].get("uid")), reason, message, type_)
        with self._lock:
            seen = self._events.get(key)
            if seen is not None:
                seen[1] += 1
        try:
            if seen is not None:
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                self.api.patch(EVENTS, seen[0], {"count": seen[1], "lastTimestamp": now},
                               str(pod["metadata"]["namespace"]))
                return
            made = record_event(self.api, pod, reason, message, "Warning" if type_ == "Warning" else "Normal",
                                component="resource_claim")
            with self._lock:
                if len(self._events) > 4096:
                    self._events.clear()
                self._events[key] = [str(made["metadata"]["name"]), 1]
        except KubeError as err:
            log.warning("could not record event %s: %s", reason, err.message)


class _ClaimError(Exception):
    pass


__all__ = ["ClaimController"]
