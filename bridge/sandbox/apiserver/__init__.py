"""A Kubernetes API emulator: real HTTP(S) on loopback, real REST semantics, for tests and `bridge demo`.

    from bridge.sandbox.apiserver import ApiServer
    with ApiServer(version="1.34.2", resource_versions=("v1", "v1beta1")) as srv:
        srv.write_kubeconfig(path)          # the official client and kubectl load it unmodified
        srv.faults.fail(2, status=429, retry_after=1)

Layout: `store` (objects, resourceVersion, history), `rest` (what each verb means), `watch` (streams),
`selectors`, `patch`, `conversion` (served versions <-> storage), `validation` + `dra_rules` (422 Invalid like the
real server), `admission` (mutating webhooks over HTTPS), `faults`, `discovery`, `http` (the HTTP shell) and
`server` (lifecycle), `profiles` (what an emulated minor serves and enables), `strategy` (defaulting and the
gate-dependent dropDisabledFields of the registry strategies), `pod_rules` (pods' DRA validation). Written from the Kubernetes API conventions and apimachinery's behaviour, not on `kmock`:
kmock (the kopf author's mock server) is an asyncio/aiohttp server driven by a DSL of scripted responses, with a
loose in-memory Kubernetes mode; it documents none of what the bridge's tests stand on (resourceVersion
preconditions, a bounded watch history with 410 Expired, list snapshots, OpenAPI + resource.k8s.io validation with
the real 422 causes, field-selector rules per kind), so it would have been a thin layer under all of this code.
"""

from .faults import Faults
from .loader import LoadError
from .profiles import KubernetesProfile, profile_for
from .server import ApiServer
from .status import ApiError, FieldError

__all__ = ["ApiError", "ApiServer", "FieldError", "Faults", "KubernetesProfile", "LoadError", "profile_for"]
