"""Find the cluster like kubectl does, and build a `RestKube` for it.

Order (the first that applies wins; later ones are not consulted):
1. an explicit kubeconfig path (`--kubeconfig`): must exist;
2. `KUBECONFIG`: a path list (`:`-separated, `;` on Windows); missing entries are skipped, the existing files are
   merged: for clusters, users and contexts the first file that defines a name wins, and the current-context
   is taken from the first file that sets one (kubectl's rule; the client's own merger lets the last file win,
   so it is computed here);
3. `~/.kube/config`, only when `KUBECONFIG` is not set (as client-go: a set KUBECONFIG whose files are all missing
   goes on to in-cluster, never to the home file);
4. in-cluster: `KUBERNETES_SERVICE_HOST`/`_PORT` plus the service-account token, CA and namespace files
   (the token is re-read as kubelet rotates it).

`context` overrides the current context (kubeconfig sources only). When nothing applies, `ConfigError` lists
every place that was tried, so "why can't it find my cluster" is answered by the message itself.

Nothing here runs at import time; `connect()` is the composition helper every CLI command calls once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes.client import ApiClient, Configuration
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader
from kubernetes.config.kube_config import ENV_KUBECONFIG_PATH_SEPARATOR, KubeConfigLoader, KubeConfigMerger

from bridge.kube.client import RestKube
from bridge.kube.errors import ConfigError
from bridge.kube.retry import RetryPolicy

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
USER_AGENT = "dra-bridge/0.1"


@dataclass(frozen=True)
class LoadedConfig:
    configuration: Configuration
    namespace: str  # the context's (or service account's) namespace, "default" when unset
    source: str  # human-readable: "kubeconfig /home/u/.kube/config (context kind-a)" / "in-cluster"


def _load_kubeconfig(paths: list[str], context: str | None) -> LoadedConfig:
    shown = ", ".join(paths)
    try:
        merger = KubeConfigMerger(ENV_KUBECONFIG_PATH_SEPARATOR.join(paths))  # type: ignore[no-untyped-call]
    except (ConfigException, yaml.YAMLError, OSError, AttributeError, TypeError) as err:
        raise ConfigError(f"cannot read kubeconfig {shown}: {err}") from err
    if merger.config is None:
        raise ConfigError(f"kubeconfig {shown}: no configuration found")
    merged = merger.config
    if context is None:
        for p in merger.paths:
            current = (merger.config_files.get(p) or {}).get("current-context")
            if current:
                context = str(current)
                break
    # Merged entries are the client's ConfigNode wrappers; `.value` is the plain dict.
    entries = [getattr(c, "value", c) for c in merged.value.get("contexts") or []]
    names = [str(c["name"]) for c in entries if isinstance(c, dict) and c.get("name")]
    if context is None:
        raise ConfigError(
            f"kubeconfig {shown} sets no current-context; pass a context (available: {', '.join(names) or 'none'})"
        )
    if context not in names:
        raise ConfigError(
            f"context {context!r} not found in kubeconfig {shown} (available: {', '.join(names) or 'none'})"
        )
    cfg = Configuration()
    try:
        loader = KubeConfigLoader(  # type: ignore[no-untyped-call]
            config_dict=merged, active_context=context, config_base_path=None
        )
        loader.load_and_set(cfg)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"kubeconfig {shown}, context {context!r}: {err}") from err
    ctx = next(c for c in entries if isinstance(c, dict) and c.get("name") == context)
    namespace = str(((ctx.get("context") or {}).get("namespace")) or "default")
    return LoadedConfig(cfg, namespace, f"kubeconfig {shown} (context {context})")


def _load_incluster(environ: Mapping[str, str], sa_dir: str) -> LoadedConfig:
    cfg = Configuration()
    token, ca = os.path.join(sa_dir, "token"), os.path.join(sa_dir, "ca.crt")
    try:
        sa = InClusterConfigLoader(token_filename=token, cert_filename=ca, environ=environ)  # type: ignore[no-untyped-call]
        sa.load_and_set(cfg)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError) as err:
        raise ConfigError(f"in-cluster configuration ({sa_dir}): {err}") from err
    ns_file = Path(sa_dir, "namespace")
    namespace = ns_file.read_text().strip() if ns_file.is_file() else "default"
    return LoadedConfig(cfg, namespace or "default", f"in-cluster ({cfg.host})")


def load_configuration(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
    sa_dir: str = SA_DIR,
) -> LoadedConfig:
    """Resolve the client configuration (see module docstring for the order). `environ`, `home` and `sa_dir`
    default to the process's own; tests pass their own."""
    env = os.environ if environ is None else environ
    tried: list[str] = []

    if kubeconfig is not None:
        path = os.path.expanduser(os.fspath(kubeconfig))
        if not os.path.isfile(path):
            raise ConfigError(f"kubeconfig {path} does not exist")
        return _load_kubeconfig([path], context)

    listed = env.get("KUBECONFIG", "")
    default = Path(home if home is not None else Path.home(), ".kube", "config")
    if listed:
        entries = [os.path.expanduser(p) for p in listed.split(ENV_KUBECONFIG_PATH_SEPARATOR) if p]
        existing = [p for p in entries if os.path.isfile(p)]
        if existing:
            return _load_kubeconfig(existing, context)
        tried.append(f"KUBECONFIG={listed} (no such file)")
        # client-go's loading rules: a set KUBECONFIG replaces ~/.kube/config, even when none of its files exist.
        tried.append(f"{default} (not consulted: KUBECONFIG is set)")
    else:
        tried.append("KUBECONFIG (not set)")
        if default.is_file():
            return _load_kubeconfig([str(default)], context)
        tried.append(f"{default} (no such file)")

    if context is not None:
        raise ConfigError(f"context {context!r} requested but no kubeconfig was found; tried: {'; '.join(tried)}")
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"):
        return _load_incluster(env, sa_dir)
    tried.append("in-cluster (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set)")
    raise ConfigError("no Kubernetes configuration found; tried: " + "; ".join(tried))


def connect(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    *,
    timeout: float = 30.0,
    retry: RetryPolicy | None = None,
    environ: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
    sa_dir: str = SA_DIR,
) -> RestKube:
    """A `RestKube` for the configured cluster. `timeout` bounds one request (the read); `retry` bounds the
    retrying of transient failures per request (default: 30 s deadline)."""
    loaded = load_configuration(kubeconfig, context, environ=environ, home=home, sa_dir=sa_dir)
    cfg = loaded.configuration
    cfg.retries = False  # the layer retries with its own policy; urllib3 must not retry non-idempotent requests
    # The proxy the environment names, resolved ONCE. With a kubeconfig token, the client's refresh hook assigns
    # `host` again before every request, and assigning `host` re-reads every environment variable
    # (urllib.request.getproxies) to pick a proxy for it: a third of a claim GET's CPU here, more in a pod with
    # many service variables. The connection pool takes the proxy once, when `ApiClient` is built below, so that
    # per-request re-resolution never changed what a request used. Assigning `proxy` pins it (the client then
    # stops re-resolving); a kubeconfig `proxy-url` was assigned the same way by the loader.
    cfg.proxy = cfg.proxy
    client = ApiClient(configuration=cfg)
    client.user_agent = USER_AGENT
    return RestKube(client, timeout=timeout, retry=retry, default_namespace=loaded.namespace, source=loaded.source)


__all__ = ["LoadedConfig", "connect", "load_configuration"]
