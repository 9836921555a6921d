"""Which resources the emulator serves, and how each is addressed.

A `ResourceType` is one group/version/plural as seen on the wire. Objects are stored once per *group resource*
(`storage_key`: group + plural), in one storage version, so the same ResourceSlice is visible through every served
`resource.k8s.io` version, exactly like a real server converting between versions. `field_labels` lists the field
selectors the real server accepts for the kind (anything else is a 400, as on the real server).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
RESOURCE_GROUP = "resource.k8s.io"
KNOWN_RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1")


def version_priority(version: str) -> tuple[int, int, int]:
    """Sort key of Kubernetes version names (apimachinery's CompareKubeAwareVersionStrings): GA first, then beta,
    then alpha; higher major first, then higher minor (v1 < v2 sorts v2 first; v1beta2 before v1beta1)."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0))


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()  # e.g. {"status"}
    field_labels: frozenset[str] = frozenset()  # beyond metadata.name / metadata.namespace
    storage_version: str = ""  # the version objects are stored in; defaults to `version`
    # How the kind's field-label conversion words an unsupported field selector: "custom" (kinds with their own
    # conversion function: "field label not supported: X"), "meta" (the default one that only knows metadata.name
    # and metadata.namespace) or a literal prefix ("field label not supported for <GVK>: ").
    field_errors: str = "meta"
    namespace_field: bool = True  # whether `metadata.namespace` is a selectable field (not for ResourceSlice)
    has_generation: bool = False  # the strategy sets metadata.generation = 1 and bumps it on spec changes
    # Another group resource whose storage this one shares (events.k8s.io Events are core Events).
    storage_resource: str = ""
    # DELETE answers the deleted object instead of a Status (the registry's `ReturnDeletedObject`).
    returns_deleted_object: bool = False
    # An update (PUT) without metadata.resourceVersion is allowed (the strategy's `AllowUnconditionalUpdate`).
    unconditional_update: bool = True

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> str:
        if self.storage_resource:
            return self.storage_resource
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def stored_api_version(self) -> str:
        if self.storage_resource:
            return "v1"
        v = self.storage_version or self.version
        return f"{self.group}/{v}" if self.group else v

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def verbs(self) -> tuple[str, ...]:
        """What discovery advertises and the router allows (namespaces have no DeleteCollection)."""
        if self.group == "" and self.plural == "namespaces":
            return tuple(v for v in ALL_VERBS if v != "deletecollection")
        return ALL_VERBS

    def allows_field(self, label: str) -> bool:
        return label == "metadata.name" or (label == "metadata.namespace" and self.namespace_field) or (
            label in self.field_labels
        )

    def unsupported_field(self, label: str) -> str:
        """The 400 message of the real server for a field selector on a label this kind does not select on."""
        if self.field_errors == "custom":
            return f"field label not supported: {label}"
        if self.field_errors == "meta":
            return f'"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"'
        return f"{self.field_errors}{label}"


@dataclass
class Registry:
    """Lookup by (group, version, plural); keeps the discovery order of groups and versions."""

    types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)

    def add(self, rt: ResourceType) -> None:
        self.types[(rt.group, rt.version, rt.plural)] = rt

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self.types.values():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions in preference order (first is preferred): like the real server, GA before beta
        before alpha, newer before older (v1 > v1beta2 > v1beta1), whatever order they were registered in."""
        out: dict[str, list[str]] = {}
        for rt in self.types.values():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return {g: sorted(vs, key=version_priority) for g, vs in out.items()}

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self.types.values() if rt.group == group and rt.version == version]

    def all(self) -> Iterable[ResourceType]:
        return self.types.values()


_STATUS = frozenset({"status"})
_POD_FIELDS = frozenset(
    {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)
# The real server selects ResourceSlices on metadata.name, spec.nodeName and spec.driver (never metadata.namespace),
# and from 1.37 on spec.pool.name too: pkg/apis/resource/*/conversion.go, read at v1.32.0 to v1.36.0 (without it)
# and v1.37.2 (with it; kube-apiserver v1.37.2, observed by tests/real/test_differential.py).
_SLICE_FIELDS = frozenset({"spec.nodeName", "spec.driver"})
_SLICE_POOL_FIELD = "spec.pool.name"
# Kinds with their own field-label conversion function ("field label not supported: X").
_CUSTOM_FIELD_ERRORS = frozenset({"namespaces", "nodes", "pods", "events", "secrets", "services", "jobs"})
# Kinds whose storage sets `ReturnDeletedObject: true` (DELETE answers the object, not a Status). Read in
# kubernetes/kubernetes pkg/registry/<group>/<kind>/storage/storage.go for: pods, services (the 1.23+ REST),
# namespaces, serviceaccounts, resourcequotas, resourceclaims, resourceclaimtemplates, resourceslices,
# deviceclasses (true); nodes, events, configmaps, secrets, deployments, statefulsets, daemonsets, replicasets,
# jobs, cronjobs, leases, priorityclasses, mutating- and validatingwebhookconfigurations (not set: a Status).
_RETURNS_DELETED_OBJECT = frozenset({
    ("", "pods"), ("", "services"), ("", "namespaces"), ("", "serviceaccounts"), ("", "resourcequotas"),
    (RESOURCE_GROUP, "resourceclaims"), (RESOURCE_GROUP, "resourceclaimtemplates"),
    (RESOURCE_GROUP, "resourceslices"), (RESOURCE_GROUP, "deviceclasses"),
})
# Kinds whose strategy's `AllowUnconditionalUpdate` is false: a PUT without metadata.resourceVersion is 422
# "must be specified for an update". Read in kubernetes/kubernetes v1.37.2 pkg/registry/<group>/<kind>/strategy.go
# (every other kind served here returns true); kube-apiserver v1.37.2, observed by tests/real/test_differential.py.
_NO_UNCONDITIONAL_UPDATE = frozenset({
    ("coordination.k8s.io", "leases"), ("policy", "poddisruptionbudgets"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
})
# Kinds whose registry strategy maintains metadata.generation (1 on create, +1 per spec change).
_WITH_GENERATION = frozenset({
    "pods", "deployments", "statefulsets", "daemonsets", "replicasets", "jobs", "cronjobs",
    "mutatingwebhookconfigurations", "validatingwebhookconfigurations", "resourceslices", "deviceclasses",
    "networkpolicies", "validatingadmissionpolicies", "validatingadmissionpolicybindings",
})


def _install_types() -> list[ResourceType]:
    """Built-in kinds a Helm install of charts/dra-bridge creates besides workloads: RBAC, the webhook's
    PodDisruptionBudget and NetworkPolicy, and the node daemons' ValidatingAdmissionPolicies (stored and
    schema-validated; the emulator neither authorizes requests with RBAC, evaluates the policies, nor enforces a
    NetworkPolicy: that is the network plugin's job, and the emulator has no pod network). A NetworkPolicy has no
    status subresource (NetworkPolicyStatus was removed in 1.28), short name `netpol`, and its strategy sets
    metadata.generation (kubernetes/kubernetes pkg/registry/networking/networkpolicy/strategy.go and
    storage/storage.go); like the other kinds here it prints the generic NAME / CREATED AT columns."""
    rbac = "rbac.authorization.k8s.io"
    adm = "admissionregistration.k8s.io"
    return [
        ResourceType(rbac, "v1", "clusterroles", "ClusterRole", False, "clusterrole"),
        ResourceType(rbac, "v1", "clusterrolebindings", "ClusterRoleBinding", False, "clusterrolebinding"),
        ResourceType(rbac, "v1", "roles", "Role", True, "role"),
        ResourceType(rbac, "v1", "rolebindings", "RoleBinding", True, "rolebinding"),
        ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, "poddisruptionbudget",
                     ("pdb",), _STATUS),
        ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, "networkpolicy",
                     ("netpol",)),
        ResourceType(adm, "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", False,
                     "validatingadmissionpolicy", (), _STATUS),
        ResourceType(adm, "v1", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False,
                     "validatingadmissionpolicybinding"),
    ]


def default_registry(resource_versions: Iterable[str] = KNOWN_RESOURCE_VERSIONS, *,
                     slice_pool_selector: bool = False) -> Registry:
    """Every resource the bridge and its tests touch. `resource_versions` picks the served resource.k8s.io versions;
    the preferred one is the newest of them (see `version_priority`), as on a real server. `slice_pool_selector`:
    ResourceSlices are selectable by spec.pool.name (1.37 and later)."""
    reg = Registry()
    core = [
        ResourceType("", "v1", "namespaces", "Namespace", False, "namespace", ("ns",), _STATUS, frozenset({"status.phase"})),
        ResourceType("", "v1", "nodes", "Node", False, "node", ("no",), _STATUS, frozenset({"spec.unschedulable"})),
        ResourceType("", "v1", "pods", "Pod", True, "pod", ("po",), frozenset({"status", "binding"}), _POD_FIELDS),
        ResourceType("", "v1", "events", "Event", True, "event", ("ev",), frozenset(), _EVENT_FIELDS),
        ResourceType("", "v1", "resourcequotas", "ResourceQuota", True, "resourcequota", ("quota",), _STATUS),
        ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",)),
        ResourceType("", "v1", "services", "Service", True, "service", ("svc",), _STATUS,
                     frozenset({"spec.clusterIP", "spec.type"})),
        ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, "serviceaccount", ("sa",)),
        ResourceType("", "v1", "secrets", "Secret", True, "secret", (), frozenset(), frozenset({"type"})),
    ]
    apps = [
        ResourceType("apps", "v1", "deployments", "Deployment", True, "deployment", ("deploy",), _STATUS),
        ResourceType("apps", "v1", "statefulsets", "StatefulSet", True, "statefulset", ("sts",), _STATUS),
        ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, "daemonset", ("ds",), _STATUS),
        ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, "replicaset", ("rs",), _STATUS),
    ]
    batch = [
        ResourceType("batch", "v1", "jobs", "Job", True, "job", (), _STATUS, frozenset({"status.successful"})),
        ResourceType("batch", "v1", "cronjobs", "CronJob", True, "cronjob", ("cj",), _STATUS),
    ]
    other = [
        ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, "priorityclass", ("pc",)),
        ResourceType(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            False,
            "mutatingwebhookconfiguration",
        ),
        ResourceType(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            False,
            "validatingwebhookconfiguration",
        ),
        ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease"),
        # The webhook's Service endpoints (`bridge namespace status` asks whether the webhook has ready ones).
        ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True, "endpointslice"),
        ResourceType("events.k8s.io", "v1", "events", "Event", True, "event", ("ev",), storage_resource="events"),
    ]
    for rt in core + apps + batch + other:
        reg.add(_behaviour(rt))
    for version in resource_versions:
        if version not in KNOWN_RESOURCE_VERSIONS:
            raise ValueError(f"unknown resource.k8s.io version {version!r}; known: {', '.join(KNOWN_RESOURCE_VERSIONS)}")
        # One storage version for the whole group (v1 shape); see conversion.py.
        for plural, kind, namespaced, subs, fields in (
            ("deviceclasses", "DeviceClass", False, frozenset(), frozenset()),
            ("resourceclaims", "ResourceClaim", True, _STATUS, frozenset()),
            ("resourceclaimtemplates", "ResourceClaimTemplate", True, frozenset(), frozenset()),
            ("resourceslices", "ResourceSlice", False, frozenset(),
             _SLICE_FIELDS | ({_SLICE_POOL_FIELD} if slice_pool_selector else set())),
        ):
            rt = ResourceType(RESOURCE_GROUP, version, plural, kind, namespaced, kind.lower(), (), subs, fields, "v1")
            if plural == "resourceslices":
                rt = replace(rt, namespace_field=False,
                             field_errors=f"field label not supported for {RESOURCE_GROUP}/{version}, Kind={kind}: ")
            reg.add(_behaviour(rt))
    for rt in _install_types():
        reg.add(_behaviour(rt))
    return reg


def _behaviour(rt: ResourceType) -> ResourceType:
    return replace(
        rt,
        has_generation=rt.plural in _WITH_GENERATION,
        returns_deleted_object=(rt.group, rt.plural) in _RETURNS_DELETED_OBJECT,
        unconditional_update=(rt.group, rt.plural) not in _NO_UNCONDITIONAL_UPDATE,
        field_errors="custom" if rt.group in ("", "batch") and rt.plural in _CUSTOM_FIELD_ERRORS else rt.field_errors,
    )
