"""Helpers for end-to-end DRA tests: the API emulator, pods and claims allocated "as the scheduler would"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bridge.kube import NAMESPACES, PODS, KubeAPI
from tests.polling import wait_until  # noqa: F401  (re-exported to the tests here)

DRIVER = "gpu.dra-bridge.io"
NODE = "node-a"


def ensure_namespace(api: KubeAPI, ns: str) -> None:
    try:
        api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    except Exception:
        pass


def make_pod(api: KubeAPI, ns: str, name: str, claims: list[str]) -> dict[str, Any]:
    ensure_namespace(api, ns)
    return api.create(PODS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": NODE,
                 "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": c} for c in claims]}}],
                 "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims]},
    }, ns)


def make_claim(api: KubeAPI, ns: str, name: str, pod: dict[str, Any] | None, results: list[dict[str, str]] | None,
               *, request: str = "gpu") -> dict[str, Any]:
    """Create a claim and, like the scheduler, write its allocation (`results`) and the pod into `reservedFor`."""
    ensure_namespace(api, ns)
    claims = api.resource_api().claims
    claim = api.create(claims, {
        "apiVersion": f"resource.k8s.io/{api.resource_api().version}", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {"deviceClassName": DRIVER}}]}},
    }, ns)
    status: dict[str, Any] = {}
    if results is not None:
        status["allocation"] = {
            "devices": {"results": [{"request": request, **r} for r in results]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]},
        }
    if pod is not None:
        status["reservedFor"] = [{"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}]
    if status:
        claim["status"] = status
        claim = api.update(claims, claim, ns, subresource="status")
    return claim


def gpu(device: str, driver: str = DRIVER, pool: str = NODE) -> dict[str, str]:
    return {"driver": driver, "pool": pool, "device": device}


def cdi_files(cdi_root: Path) -> dict[str, Path]:
    """Claim UID -> spec file, for our driver's per-claim specs."""
    prefix = f"k8s.{DRIVER}-claim_"
    if not cdi_root.exists():
        return {}
    return {p.name[len(prefix):-5]: p for p in cdi_root.iterdir() if p.name.startswith(prefix) and p.name.endswith(".json")}


def reallocate(api: KubeAPI, ns: str, name: str, pod: dict[str, Any], device: str) -> None:
    """As the claim controller and the scheduler would: clear the allocation (no pod reserves the claim any more),
    then allocate `device` and reserve the claim for `pod`."""
    claims = api.resource_api().claims
    claim = api.get(claims, name, ns)
    claim["status"] = {}
    claim = api.update(claims, claim, ns, subresource="status")
    claim["status"] = {
        "allocation": {"devices": {"results": [{"request": "gpu", **gpu(device)}]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}},
        "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}],
    }
    api.update(claims, claim, ns, subresource="status")
