"""Fixtures for DRA end-to-end tests: the API emulator with a kubeconfig, and a kubelet simulator's DRA side."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.kube import KubeAPI, connect
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet.dramanager import DraManager
from tests.dra.cluster import NODE


@dataclass
class Cluster:
    server: ApiServer
    kubeconfig: Path
    api: KubeAPI
    root: Path  # short directory: kubelet root, state and CDI dirs live under it

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kl"

    @property
    def state_dir(self) -> Path:
        return self.root / "st"

    @property
    def cdi_root(self) -> Path:
        return self.root / "cdi"


@pytest.fixture
def cluster(short_tmp: Path) -> Iterator[Cluster]:
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(short_tmp / "kubeconfig")
        yield Cluster(srv, kubeconfig, connect(str(kubeconfig)), short_tmp)


@pytest.fixture
def kubelet(cluster: Cluster) -> Iterator[DraManager]:
    manager = DraManager(connect(str(cluster.kubeconfig)), NODE, str(cluster.kubelet_root / "plugins_registry"),
                         call_timeout=15, health_retry=0.2)
    manager.start()
    yield manager
    manager.stop()
