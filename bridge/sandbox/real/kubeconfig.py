"""Kubeconfig files for the real control plane's clients: one per identity (a client certificate or a bearer
token), all trusting the throwaway CA. Written atomically with mode 0600 (a reader polling for the file never sees
it half-written), in the layout `kubectl`, client-go and the Python client read
(kubernetes `staging/src/k8s.io/client-go/tools/clientcmd/api/v1/types.go`)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from bridge.atomicfile import atomic_write_bytes
from bridge.sandbox.real.pki import CertPair


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, ca: Path, *, client: CertPair | None = None,
                     token: str | None = None, context: str = "sandbox", namespace: str = "default") -> Path:
    if (client is None) == (token is None):
        raise ValueError("a kubeconfig needs exactly one of a client certificate or a token")
    user: dict[str, Any] = ({"token": token} if token is not None else
                            {"client-certificate-data": _b64(client.cert), "client-key-data": _b64(client.key)}
                            if client is not None else {})
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority-data": _b64(ca)}}],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}],
        "current-context": context,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, yaml.safe_dump(config, sort_keys=False).encode(), mode=0o600)
    return path
