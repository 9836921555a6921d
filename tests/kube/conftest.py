"""Fixtures for the API-layer tests: an in-process API emulator and a `RestKube` connected to it through a real
kubeconfig file, exactly as a user's `bridge` command would connect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.kube import NAMESPACES, RestKube, RetryPolicy, connect

# Fast enough for tests, patient enough to ride out the 5 s outages the fault tests inject.
TEST_RETRY = RetryPolicy(initial_backoff=0.05, factor=2.0, max_backoff=1.0, deadline=20.0)


@pytest.fixture
def server() -> Iterator["object"]:
    from bridge.sandbox.apiserver import ApiServer

    with ApiServer() as srv:
        yield srv


@pytest.fixture
def kubeconfig(server: "object", tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(path)  # type: ignore[attr-defined]
    return path


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[RestKube]:
    with connect(kubeconfig, retry=TEST_RETRY, timeout=30) as client:
        yield client


@pytest.fixture
def ns(api: RestKube) -> str:
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t"}})
    return "t"
