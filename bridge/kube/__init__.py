"""The bridge's Kubernetes API layer: the only package that imports the official `kubernetes` client.

    from bridge.kube import connect, PODS, NotFound
    api = connect()                      # --kubeconfig / KUBECONFIG / ~/.kube/config / in-cluster
    pods = api.list(PODS, "ns", label_selector="app=x")["items"]   # plain dicts, all pages
    rapi = api.resource_api()            # resource.k8s.io at the newest served version
    api.create(rapi.slices, {...})

Components depend on the `KubeAPI` Protocol (plain dicts in and out); tests may pass any object implementing it.
Submodules: `client` (RestKube), `config` (connect), `retry` (RetryPolicy), `update` (update_with_retry),
`watch` (Informer), `events` (record_event), `leaderelection` (LeaderElector over a coordination.k8s.io Lease),
`translate` (error mapping), `discovery` (pure parsing).
Importing this package does not import the `kubernetes` client: `connect` and `RestKube` load it on first use, so
components that only need the Protocol, the constants and the errors stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridge.kube.api import (
    CONFIG_MAPS,
    CRON_JOBS,
    DAEMON_SETS,
    DEPLOYMENTS,
    EVENTS,
    JOBS,
    LEASES,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    REPLICA_SETS,
    RESOURCE_GROUP,
    RESOURCE_QUOTAS,
    RESOURCE_VERSIONS,
    STATEFUL_SETS,
    Discovery,
    JsonPatch,
    KubeAPI,
    Obj,
    PatchType,
    Resource,
    ResourceAPI,
    WatchEvent,
)
from bridge.kube.errors import (
    AlreadyExists,
    BadRequest,
    Cause,
    ConfigError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    TooLargeResourceVersion,
    Unavailable,
)
from bridge.kube.events import build_event, record_event
from bridge.kube.retry import Retrier, RetryPolicy
from bridge.kube.update import update_with_retry
from bridge.kube.watch import Informer, object_key, watch_forever

if TYPE_CHECKING:
    from bridge.kube.client import RestKube
    from bridge.kube.config import LoadedConfig, connect, load_configuration

_LAZY = {
    "RestKube": "bridge.kube.client",
    "connect": "bridge.kube.config",
    "load_configuration": "bridge.kube.config",
    "LoadedConfig": "bridge.kube.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge.kube' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "AlreadyExists",
    "BadRequest",
    "CONFIG_MAPS",
    "CRON_JOBS",
    "Cause",
    "ConfigError",
    "Conflict",
    "DAEMON_SETS",
    "DEPLOYMENTS",
    "Discovery",
    "EVENTS",
    "Forbidden",
    "Gone",
    "Informer",
    "Invalid",
    "JOBS",
    "JsonPatch",
    "KubeAPI",
    "LEASES",
    "KubeError",
    "LoadedConfig",
    "MUTATING_WEBHOOKS",
    "NAMESPACES",
    "NODES",
    "NotFound",
    "Obj",
    "PODS",
    "PRIORITY_CLASSES",
    "PatchType",
    "REPLICA_SETS",
    "RESOURCE_GROUP",
    "RESOURCE_QUOTAS",
    "RESOURCE_VERSIONS",
    "Resource",
    "ResourceAPI",
    "RestKube",
    "Retrier",
    "RetryPolicy",
    "STATEFUL_SETS",
    "TooLargeResourceVersion",
    "Unavailable",
    "WatchEvent",
    "build_event",
    "connect",
    "load_configuration",
    "object_key",
    "record_event",
    "update_with_retry",
    "watch_forever",
]
