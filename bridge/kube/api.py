"""The verbs the bridge needs from a Kubernetes API server, as a Protocol over plain dicts.

Every component (node daemon, webhook, report, demo) talks to Kubernetes only through `KubeAPI`; the one
implementation over the official client lives in `bridge/kube/client.py`. Objects are plain JSON dicts (exactly
what the server sends), never the client's model classes: cluster-wide lists must not pay model deserialization
(kubernetes-client/python#1921: 28 s of a 32 s list spent building models).

A `Resource` names one group/version/plural. `resource.k8s.io` is served as v1, v1beta2 or v1beta1 depending on the
cluster: callers ask `KubeAPI.resource_api()` once and use its `ResourceAPI` (claims, claim templates, slices,
device classes) for the version the server prefers, so version handling sits in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableSequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import quote

from bridge.humantext import escape
from bridge.kube.errors import InvalidName
from bridge.kvalues.names import label_problem, path_segment_problem

Obj = dict[str, Any]
PatchType = Literal["merge", "json", "strategic"]
# A JSON patch (RFC 6902) is a list of operations. Named at module level: inside `KubeAPI`, `list` is the method.
JsonPatch = list[Obj]


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The request path. A namespace must be a DNS-1123 label and a name a valid path segment (a Namespace's
        name a label), else `InvalidName` before any request; other characters are percent-encoded
        (bridge.kvalues.names)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            _check(namespace, label_problem(namespace), "namespace")
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:  # "" is refused too: it would name the collection
            is_namespace = self.plural == "namespaces" and not self.group
            _check(name, label_problem(name) if is_namespace else path_segment_problem(name),
                   "namespace" if is_namespace else f"{self.kind} name")
            base += "/" + quote(name, safe=_PCHAR)
            if subresource:
                base += f"/{subresource}"
        elif subresource:
            raise InvalidName(f"{self.kind}/{subresource}: a subresource needs an object name")
        return base


_PCHAR = "!$&'()*+,;=:@-._~"  # RFC 3986 path characters kept as they are (besides letters and digits)


def _check(value: str, problem: str, what: str) -> None:
    if problem:
        shown = repr(value[:80]) + ("..." if len(value) > 80 else "")
        raise InvalidName(f"invalid {what} {escape(shown)}: {problem}")


NODES = Resource("", "v1", "nodes", "Node", False)
PODS = Resource("", "v1", "pods", "Pod", True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
EVENTS = Resource("", "v1", "events", "Event", True)
RESOURCE_QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota", True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
DAEMON_SETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
STATEFUL_SETS = Resource("apps", "v1", "statefulsets", "StatefulSet", True)
REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)
JOBS = Resource("batch", "v1", "jobs", "Job", True)
CRON_JOBS = Resource("batch", "v1", "cronjobs", "CronJob", True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
SERVICES = Resource("", "v1", "services", "Service", True)
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True)
MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False
)

RESOURCE_GROUP = "resource.k8s.io"
# Newest first: the order in which the bridge prefers served versions.
RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1")


@dataclass(frozen=True)
class ResourceAPI:
    """resource.k8s.io at the version the cluster serves (newest of v1, v1beta2, v1beta1)."""

    version: str

    def _r(self, plural: str, kind: str, namespaced: bool) -> Resource:
        return Resource(RESOURCE_GROUP, self.version, plural, kind, namespaced)

    @property
    def claims(self) -> Resource:
        return self._r("resourceclaims", "ResourceClaim", True)

    @property
    def claim_templates(self) -> Resource:
        return self._r("resourceclaimtemplates", "ResourceClaimTemplate", True)

    @property
    def slices(self) -> Resource:
        return self._r("resourceslices", "ResourceSlice", False)

    @property
    def device_classes(self) -> Resource:
        return self._r("deviceclasses", "DeviceClass", False)

    @property
    def device_taint_rules(self) -> Resource:
        # DeviceTaintRule is alpha/beta (v1alpha3 / v1beta2); callers must check discovery before using it.
        return self._r("devicetaintrules", "DeviceTaintRule", False)


@dataclass(frozen=True)
class WatchEvent:
    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    object: Obj


@dataclass(frozen=True)
class Discovery:
    """What the server serves: `/version` plus every group/version and its resources."""

    git_version: str  # "v1.36.2"
    major: int
    minor: int
    # "group/version" ("v1" for core) -> {plural: {"kind":..., "namespaced":..., "verbs": [...]}}
    resources: dict[str, dict[str, dict[str, Any]]]

    def serves(self, group_version: str, plural: str | None = None) -> bool:
        gv = self.resources.get(group_version)
        return gv is not None and (plural is None or plural in gv)


class ListSink(Protocol):
    """Takes a list's items as their pages arrive, in place of the answer's `items` (`KubeAPI.list(sink=)`): a
    caller that writes each item somewhere holds one page at a time, however long the list."""

    def add(self, item: Obj) -> None: ...

    def restart(self) -> None:
        """The list starts again from its first page (its continue token expired): forget every item added so far."""
        ...


class KubeAPI(Protocol):
    """Errors are those of `bridge.kube.errors`. Transient failures (connection refused, 429, 5xx) are retried with
    backoff inside the implementation (honouring Retry-After) up to its configured deadline, then raised as
    `Unavailable`."""

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj: ...

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        on_page: Callable[[int], None] | None = None,
        transform: Callable[[Obj], Obj] | None = None,
        page_decoder: Callable[[bytes], Obj | None] | None = None,
        sink: ListSink | None = None,
    ) -> Obj:
        """A whole list (all pages joined): {"apiVersion", "kind", "metadata": {"resourceVersion"}, "items": [...]},
        each item with its `apiVersion` and `kind` (the API server leaves them out of a list's items).
        `on_page(count_so_far)` is called after each page (progress bars). `transform` replaces each item as its page
        arrives (after `apiVersion` and `kind` are filled in), so a caller that keeps a few fields of a large list
        never holds more than one page of whole objects. `page_decoder` reads a page's JSON bytes in place of the
        client's parser (a schema that skips fields, bridge.report.jsonlists); where it answers None the page is
        parsed as usual. `sink` takes each item (after `transform`) as its page arrives, and the answer's `items` is
        then empty."""
        ...

    def create(
        self, res: Resource, obj: Obj, namespace: str | None = None, *, dry_run: bool = False,
        subresource: str | None = None, warnings: MutableSequence[str] | None = None,
    ) -> Obj:
        """POST a new object; with `subresource` ("binding" for pods) POST to `<plural>/<metadata.name>/<sub>`
        and return the server's answer (a Status for pods/binding). `warnings`, when given, receives the texts of
        the answer's `Warning` headers (admission webhooks' warnings among them)."""
        ...

    def update(self, res: Resource, obj: Obj, namespace: str | None = None, *, subresource: str | None = None) -> Obj:
        """PUT with the object's metadata.resourceVersion as precondition (Conflict when stale)."""
        ...

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Obj | JsonPatch,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> Obj: ...

    def delete(self, res: Resource, name: str, namespace: str | None = None, *,
               grace_period_seconds: int | None = None, uid: str | None = None) -> None:
        """NotFound is raised; callers that don't care catch it. `grace_period_seconds` and `uid` go in the
        DeleteOptions (`gracePeriodSeconds`, `preconditions.uid`: a uid that no longer matches is a Conflict): a pod
        already being deleted is removed only by a delete with a shorter grace period, which is how the kubelet
        finishes it (0, with the pod's uid); a plain delete of it changes nothing."""
        ...

    def delete_collection(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> None: ...

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
    ) -> Iterator[WatchEvent]:
        """One raw watch stream (bookmarks requested and passed through). Raises Gone when the version is too old.
        For a resilient watch (resume, relist on Gone) use `bridge.kube.watch.Informer`-style helpers."""
        ...

    def discovery(self) -> Discovery: ...

    def server_version(self) -> tuple[int, int]:
        """(major, minor) from `/version` alone (one small GET, unlike `discovery`)."""
        ...

    def resource_api(self) -> ResourceAPI:
        """The resource.k8s.io version to use (newest served); raises NotFound when DRA is not served at all."""
        ...
