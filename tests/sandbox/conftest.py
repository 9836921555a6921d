"""Fixtures for the API emulator tests: a running emulator and official `kubernetes` clients pointed at it through
a kubeconfig the emulator wrote (the path every real user takes)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from bridge.sandbox.apiserver import ApiServer
from tests.polling import wait_until as wait_for


@pytest.fixture
def make_server() -> Iterator[Callable[..., ApiServer]]:
    """Start emulators with custom options; every one is stopped and checked for leaked threads afterwards."""
    baseline = threading.active_count()
    servers: list[ApiServer] = []

    def make(**kwargs: Any) -> ApiServer:
        kwargs.setdefault("bookmark_interval", 0.2)
        srv = ApiServer(**kwargs)
        srv.start()
        servers.append(srv)
        return srv

    yield make
    for srv in servers:
        srv.stop()
    wait_for(lambda: threading.active_count() <= baseline, timeout=15)


@pytest.fixture
def server(make_server: Callable[..., ApiServer]) -> ApiServer:
    return make_server()


def http(srv: ApiServer, method: str, path: str, body: bytes | None = None,
         **headers: str) -> tuple[int, Any, bytes]:
    """One raw HTTP request to the emulator (status, headers, body), errors included: for what the official client
    hides (media types, protobuf, Warning headers)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(srv.url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def client_for(srv: ApiServer, directory: Path) -> kubernetes.client.ApiClient:
    kubeconfig = srv.write_kubeconfig(directory / f"kubeconfig-{srv.port}")
    return kubernetes.config.new_client_from_config(str(kubeconfig))


@pytest.fixture
def api_client(server: ApiServer, tmp_path: Path) -> Iterator[kubernetes.client.ApiClient]:
    client = client_for(server, tmp_path)
    yield client
    client.close()


@pytest.fixture
def core(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client)


@pytest.fixture
def dra(api_client: kubernetes.client.ApiClient) -> kubernetes.client.ResourceV1Api:
    return kubernetes.client.ResourceV1Api(api_client)


@pytest.fixture
def custom(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api_client)


def pod(name: str, namespace: str = "default", *, labels: dict[str, str] | None = None, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }


def resource_slice(name: str, node: str = "node-a", devices: int = 1, driver: str = "gpu.bridge.dev", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"index": {"int": i}, "productName": {"string": "H100"}}}
                for i in range(devices)
            ],
            **extra,
        },
    }
