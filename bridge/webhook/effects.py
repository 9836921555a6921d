"""The webhook's side effects through `bridge.kube`: namespace label cache, ResourceClaimTemplates, Events.

* `NamespaceCache`: the AdmissionReview does not carry namespace labels, so a watch (the kube layer's `Informer`)
  keeps `name -> labels` in memory; a miss (namespace created a moment ago, cache not yet synced) falls back to one
  GET. Unknown or unreadable namespaces are treated as legacy by the policy (fail safe). `peek` is the
  non-blocking half: the cached labels or `MISS`, never an API call.
* `TemplateEnsurer`: creates the templates a translated pod references BEFORE the pod is admitted, so the claim
  controller never waits on a missing template. Create-if-absent: AlreadyExists is success. Names seen recently
  are remembered (TTL) so the hot path makes no API call; a failure is returned to the caller, which then admits
  the pod untranslated rather than admitting a pod that cannot start. `ensure_cached` is the non-blocking half:
  it succeeds only when every template was ensured within the TTL. **Bounded**: at most `max_per_namespace`
  templates of ours (label `app.kubernetes.io/managed-by=dra-bridge`) per namespace. Before creating a template
  it has not seen, the ensurer lists ours in that namespace (cached for the TTL, counted up by its own creates);
  an existing name is fine, a new one beyond the limit is refused (`result="capped"`), and the pod is admitted
  untranslated with a warning. Legitimate pods need one template per distinct (GPU count, selector) pair in a
  namespace, a handful; the cap stops a caller who can reach the webhook (forged AdmissionReviews, with no client
  certificate check) from creating templates without limit. Only namespaces in `dra` mode get templates at all,
  so the total is bounded by (dra namespaces x cap); with two replicas each counts its own creates between lists,
  so a burst can overshoot by at most what the other replica created within one TTL. **What exists**: the ensurer
  also watches the templates of ours (one informer, cluster-wide, by the managed-by label; started with the
  namespace cache). A template someone deletes leaves the remembered names and the namespace's count the moment
  the watch says so, so the next pod needing it gets it created again rather than referencing a template that no
  longer exists (before, a deleted template was trusted until the TTL ran out, up to 60 s, while a new shape was
  still refused as capped); one the other replica creates counts at once. Without the watch (not started, or down),
  the TTL and the list are what it has.
* `EventRecorder`: Events about untranslatable pods go through a bounded queue drained by one thread: they never
  add latency to admission, and under a flood they are dropped (counted), never block. `submit` only enqueues (the
  Event object is built on the recorder's thread), so it is safe on the server's event loop.

`peek`, `ensure_cached` and `submit` are what the webhook's inline fast path may call on the event loop: none of
them does I/O or waits on anything but a lock held for a dict operation.

The shell skips templates and Events entirely for dryRun requests (`sideEffects: NoneOnDryRun`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import enum
from collections.abc import Callable, Mapping
from typing import Any, Final

from bridge.kube.api import EVENTS, NAMESPACES, KubeAPI, Resource, ResourceAPI, WatchEvent
from bridge.kube.errors import AlreadyExists, KubeError, NotFound
from bridge.kube.events import build_event
from bridge.kube.watch import Informer, kept_metadata
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.policy import MANAGED_BY_LABEL, MANAGED_BY_VALUE, MODE_LABEL
from bridge.webhook.review import EventSpec

log = logging.getLogger(__name__)


class _Miss(enum.Enum):
    MISS = "miss"


MISS: Final = _Miss.MISS  # `NamespaceCache.peek`: not in the cache; only the blocking `labels` can tell
Peek = Callable[[str], "Mapping[str, str] | _Miss"]


def namespace_labels_only(ns: dict[str, Any]) -> dict[str, Any]:
    """What the namespace cache's informer keeps of a Namespace: its name, uid, resourceVersion and labels (not its
    managedFields, annotations, finalizers or status)."""
    if not isinstance(ns.get("metadata"), dict):
        return ns
    return {"metadata": kept_metadata(ns, "labels")}


class NamespaceCache:
    def __init__(self, api: KubeAPI, metrics: WebhookMetrics | None = None) -> None:
        self._api = api
        self._metrics = metrics
        self._labels: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self._informer = Informer(api, NAMESPACES, on_event=self._on_event, transform=namespace_labels_only)
        self._companions: list[Callable[[threading.Event], object]] = []

    def start_with(self, start: Callable[[threading.Event], object]) -> None:
        """Start another watch of the webhook's (the templates of ours) whenever this cache is started."""
        self._companions.append(start)

    def start(self, stop: threading.Event) -> threading.Thread:
        for start in self._companions:
            start(stop)
        return self._informer.start(stop)

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._informer.wait_synced(timeout)

    @property
    def synced(self) -> bool:
        return self._informer.synced.is_set()

    def _on_event(self, ev: WatchEvent) -> None:
        meta = ev.object.get("metadata") or {}
        name = meta.get("name")
        if not name:
            return
        with self._lock:
            if ev.type == "DELETED":
                self._labels.pop(name, None)
            elif ev.type in ("ADDED", "MODIFIED"):
                self._labels[name] = dict(meta.get("labels") or {})
            modes = [ls.get(MODE_LABEL, "legacy") for ls in self._labels.values()]
        if self._metrics is not None:
            for mode in ("legacy", "shadow", "dra"):
                self._metrics.namespaces.labels(mode).set(sum(1 for m in modes if m == mode))

    def peek(self, namespace: str) -> Mapping[str, str] | _Miss:
        """The cached labels of `namespace`, or MISS. Never blocks on the API, nor on the lock: one `dict.get` is
        atomic, writers (under the lock) only ever put a new labels dict in place, and no dict in it is changed
        after it is put there. Every review calls this; the lock cost as much as the rest of the memo key."""
        found = self._labels.get(namespace)
        return MISS if found is None else found

    def labels(self, namespace: str) -> Mapping[str, str] | None:
        found = self.peek(namespace)
        if found is not MISS:
            return found
        try:
            obj = self._api.get(NAMESPACES, namespace)
        except NotFound:
            return None
        except KubeError as err:
            log.warning("namespace %s: labels unavailable (%s); treating it as legacy", namespace, err.message)
            return None
        labels = dict((obj.get("metadata") or {}).get("labels") or {})
        with self._lock:
            self._labels.setdefault(namespace, labels)
        return labels


DEFAULT_MAX_TEMPLATES_PER_NAMESPACE = 100


class TemplateEnsurer:
    def __init__(self, api: KubeAPI, metrics: WebhookMetrics | None = None, ttl: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 max_per_namespace: int = DEFAULT_MAX_TEMPLATES_PER_NAMESPACE, watch: Resource | None = None) -> None:
        if max_per_namespace < 1:
            raise ValueError("max_per_namespace must be >= 1")
        self._api = api
        self._metrics = metrics
        self._ttl = ttl
        self._clock = clock
        self.max_per_namespace = max_per_namespace
        self._seen: dict[tuple[str, str, str], float] = {}
        self._ours: dict[tuple[str, str], tuple[float, set[str]]] = {}  # (version, ns) -> (listed at, names)
        self._lock = threading.Lock()
        self._informer = None if watch is None else Informer(
            api, watch, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}", on_event=self._on_event)

    def start(self, stop: threading.Event) -> threading.Thread | None:
        """Watch the templates of ours (see the module docstring); None when built without a resource to watch."""
        return None if self._informer is None else self._informer.start(stop)

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._informer is None or self._informer.wait_synced(timeout)

    def _on_event(self, ev: WatchEvent) -> None:
        """A template of ours appeared or went away: the remembered names and the namespace's count follow."""
        meta = ev.object.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        version = str(ev.object.get("apiVersion", "")).rpartition("/")[2]
        with self._lock:
            if ev.type == "DELETED":
                for key in [k for k in self._seen if k[1] == namespace and k[2] == name]:
                    del self._seen[key]
                for (_, ns), (_, names) in self._ours.items():
                    if ns == namespace:
                        names.discard(name)
            elif ev.type in ("ADDED", "MODIFIED"):
                listed = self._ours.get((version, namespace))
                if listed is not None:
                    listed[1].add(name)
        if ev.type == "DELETED":
            log.info("ResourceClaimTemplate of ours deleted: it is created again when a pod needs it",
                     extra={"namespace": namespace, "template": name})

    def _count(self, result: str, n: int = 1) -> None:
        if self._metrics is not None:
            self._metrics.templates.inc((result,), n)

    def ensure_cached(self, templates: tuple[dict[str, Any], ...]) -> bool:
        """True (each counted as `cached`) when every template was ensured within the TTL, so `ensure` would make
        no API call; False, counting nothing, when any needs one. Never blocks on the API."""
        oldest = self._clock() - self._ttl
        seen = self._seen  # read without the lock: `ensure` only sets entries (under it), one lookup is atomic
        for t in templates:
            meta = t["metadata"]
            if seen.get((t["apiVersion"], meta["namespace"], meta["name"]), -1e18) <= oldest:
                return False
        if templates:
            self._count("cached", len(templates))
        return True

    def ensure(self, templates: tuple[dict[str, Any], ...]) -> list[str]:
        """Create each template unless it exists; the error messages of those that could not be ensured."""
        errors: list[str] = []
        for t in templates:
            meta = t["metadata"]
            key = _key(t)
            now = self._clock()
            with self._lock:
                fresh = self._seen.get(key, -1e18) > now - self._ttl
            if fresh:
                self._count("cached")
                continue
            res = ResourceAPI(t["apiVersion"].split("/", 1)[1]).claim_templates
            room, why = self._room(res, meta["namespace"], meta["name"])
            if room == "exists":
                self._count("exists")
            elif room != "ok":
                self._count(room)
                errors.append(why)
                continue
            else:
                try:
                    self._api.create(res, t, meta["namespace"])
                    self._count("created")
                    log.info("created ResourceClaimTemplate", extra={"namespace": meta["namespace"],
                                                                     "template": meta["name"]})
                except AlreadyExists:
                    self._count("exists")
                except KubeError as err:
                    self._count("failed")
                    errors.append(f"ResourceClaimTemplate {meta['namespace']}/{meta['name']}: {err.message}")
                    continue
                with self._lock:
                    listed = self._ours.get((res.version, meta["namespace"]))
                    if listed is not None:
                        listed[1].add(meta["name"])
            with self._lock:
                self._seen[key] = now
        return errors

    def _room(self, res: Resource, namespace: str, name: str) -> tuple[str, str]:
        """(`ok`, "") below the cap: create; (`exists`, "") one of ours has this name; (`capped` or `failed`, why)."""
        key = (res.version, namespace)
        now = self._clock()
        with self._lock:
            listed = self._ours.get(key)
        if listed is None or listed[0] <= now - self._ttl:
            try:
                items = self._api.list(res, namespace, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")["items"]
            except KubeError as err:
                return "failed", (f"ResourceClaimTemplate {namespace}/{name}: cannot count the templates of ours in "
                                  f"the namespace (list): {err.message}")
            listed = (now, {str((i.get("metadata") or {}).get("name", "")) for i in items})
            with self._lock:
                self._ours[key] = listed
        names = listed[1]
        if name in names:
            return "exists", ""
        if len(names) >= self.max_per_namespace:
            # Short: it becomes the pod's warning, which keeps to the API's 120 characters (review.py).
            return "capped", (f"template limit reached in {namespace}: {len(names)} of "
                              f"--max-templates-per-namespace {self.max_per_namespace}")
        return "ok", ""


def _key(template: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = template["metadata"]
    return (template["apiVersion"], meta["namespace"], meta["name"])


def involved_object(spec: EventSpec, pod: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The object an Event is about: the pod when it has a name; else its controller (a pod being created by a
    ReplicaSet has only a generateName, and `kubectl describe rs` is where an operator looks)."""
    meta = (pod or {}).get("metadata") or {}
    name = meta.get("name") or ""
    owner = next((o for o in meta.get("ownerReferences") or [] if isinstance(o, dict) and o.get("controller")), None)
    if not name and owner and owner.get("name") and owner.get("kind") and owner.get("apiVersion"):
        md: dict[str, Any] = {"name": owner["name"], "namespace": spec.namespace}
        if owner.get("uid"):
            md["uid"] = owner["uid"]
        return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "metadata": md}
    md = {"name": (name or spec.pod_name).rstrip("-.") or "unnamed-pod", "namespace": spec.namespace}
    if spec.pod_uid:
        md["uid"] = spec.pod_uid
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md}


class EventRecorder:
    def __init__(self, api: KubeAPI, metrics: WebhookMetrics | None = None, capacity: int = 1000) -> None:
        self._api = api
        self._metrics = metrics
        self._queue: queue.Queue[tuple[EventSpec, dict[str, Any]] | None] = queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None

    def _count(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.events.labels(result).inc()

    def submit(self, spec: EventSpec, pod: Mapping[str, Any] | None = None) -> None:
        """Enqueue an Event about `pod` (the object under review, for its name and controller); never blocks."""
        try:
            self._queue.put_nowait((spec, involved_object(spec, pod)))
        except queue.Full:
            self._count("dropped")

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self._run, name="webhook-events", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            try:
                self._queue.put(None, timeout=timeout)
            except queue.Full:
                return
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            spec, involved = item
            try:
                event = build_event(involved, spec.reason, spec.message, type="Warning", component="dra-bridge-webhook")
            except ValueError as err:
                log.warning("event not recorded: %s", err)
                self._count("failed")
                continue
            try:
                self._api.create(EVENTS, event, event["metadata"]["namespace"])
                self._count("recorded")
            except KubeError as err:
                self._count("failed")
                log.warning("event not recorded: %s", err.message, extra={"namespace": event["metadata"]["namespace"]})
