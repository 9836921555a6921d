"""Fixtures for the chart tests: an API emulator to install into, and releases rendered by real Helm.

`installed(values, version=...)` installs the chart with real Helm into a fresh emulator and returns the release's
objects (Helm's rendered manifest, every object of which the emulator has accepted). Results are cached per
(values, version) for the session: several test files read the same default release.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import connect
from bridge.kube.api import NAMESPACES, KubeAPI
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.apiserver.profiles import KubernetesProfile
from bridge.sandbox.apiserver.registry import ResourceType
from tests.chart import helm

NAMESPACE = "dra-bridge"
RELEASE = "dra-bridge"

# Custom resources the chart can create, present in a real cluster once cert-manager / the Prometheus Operator are
# installed (their CRDs); the emulator serves them like a CRD without a schema.
CRD_KINDS = (
    ResourceType("cert-manager.io", "v1", "issuers", "Issuer", True, "issuer"),
    ResourceType("cert-manager.io", "v1", "certificates", "Certificate", True, "certificate"),
    ResourceType("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor", True, "servicemonitor"),
)


@dataclass
class Cluster:
    server: ApiServer
    kubeconfig: Path
    api: KubeAPI
    workdir: Path

    def install(self, values: dict[str, Any], release: str = RELEASE) -> dict[str, Any]:
        return helm.install(self.kubeconfig, values, namespace=NAMESPACE, release=release, workdir=self.workdir)

    def install_then_upgrade(self, values: dict[str, Any], upgrade_values: dict[str, Any] | None = None,
                             release: str = RELEASE) -> list[dict[str, Any]]:
        """Install, then upgrade the same release (one Helm process: the memory driver keeps releases in it)."""
        base = {"chart": str(helm.CHART), "release": release, "namespace": NAMESPACE,
                "kubeconfig": str(self.kubeconfig), "home": str(self.workdir)}
        result: list[dict[str, Any]] = helm.helm_action({**base, "action": "steps", "steps": [
            {"action": "install", "values": values},
            {"action": "upgrade", "values": values if upgrade_values is None else upgrade_values}]})
        return result


@contextmanager
def emulated_cluster(version: str = "1.34.2", resource_versions: tuple[str, ...] = ("v1", "v1beta2", "v1beta1"),
                     crds: bool = True, profile: KubernetesProfile | None = None) -> Iterator[Cluster]:
    with tempfile.TemporaryDirectory(prefix="br-chart-") as d, \
            ApiServer(version=version, resource_versions=resource_versions, profile=profile) as srv:
        if crds:
            for rt in CRD_KINDS:
                srv.registry.add(rt)
        kubeconfig = Path(d) / "kubeconfig"
        srv.write_kubeconfig(kubeconfig)
        api = connect(str(kubeconfig), None)
        api.create(NAMESPACES, {"metadata": {"name": NAMESPACE,
                                             "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
        yield Cluster(srv, kubeconfig, api, Path(d))


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    helm.require_helm()
    with emulated_cluster() as c:
        yield c


_CACHE: dict[str, list[dict[str, Any]]] = {}
_NOTES: dict[str, str] = {}  # the release's NOTES.txt as Helm rendered it, for the releases installed here


def _install(values: dict[str, Any] | None, version: str, resource_versions: tuple[str, ...]) -> str:
    key = json.dumps([values or {}, version, resource_versions], sort_keys=True)
    if key not in _CACHE or key not in _NOTES:
        helm.require_helm()
        with emulated_cluster(version, resource_versions) as c:
            release = c.install(values or {})
        _CACHE[key] = helm.manifests(release)
        _NOTES[key] = str((release.get("info") or {}).get("notes") or "")
    return key


@pytest.fixture(scope="session")
def installed() -> Callable[..., list[dict[str, Any]]]:
    def render(values: dict[str, Any] | None = None, version: str = "1.34.2",
               resource_versions: tuple[str, ...] = ("v1", "v1beta2", "v1beta1")) -> list[dict[str, Any]]:
        key = json.dumps([values or {}, version, resource_versions], sort_keys=True)
        return _CACHE[key] if key in _CACHE else _CACHE[_install(values, version, resource_versions)]

    return render


@pytest.fixture(scope="session")
def installed_notes() -> Callable[..., str]:
    """The NOTES Helm prints after installing the chart with `values`."""
    def notes(values: dict[str, Any] | None = None) -> str:
        return _NOTES[_install(values, "1.34.2", ("v1", "v1beta2", "v1beta1"))]

    return notes


def remember(objects: list[dict[str, Any]], values: dict[str, Any] | None = None, version: str = "1.34.2",
             resource_versions: tuple[str, ...] = ("v1", "v1beta2", "v1beta1")) -> None:
    """Keep a release a test installed itself for later `installed(...)` calls with the same values."""
    _CACHE[json.dumps([values or {}, version, resource_versions], sort_keys=True)] = objects


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]
