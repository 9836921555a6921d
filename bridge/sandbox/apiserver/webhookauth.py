"""How the API server authenticates to the webhooks it calls: `--admission-control-config-file`, as kube-apiserver.

kube-apiserver reads an `AdmissionConfiguration` (`apiserver.config.k8s.io/v1`, or `apiserver.k8s.io/v1alpha1`)
at start (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/config.go,
`ReadAdmissionConfiguration`): a list of `plugins`, each with a `name` and either an embedded `configuration` or a
`path` (relative paths are taken from the admission configuration file's directory). For the plugin
`MutatingAdmissionWebhook` the configuration is a `WebhookAdmissionConfiguration` (`apiserver.config.k8s.io/v1`,
or `WebhookAdmission` in `apiserver.config.k8s.io/v1alpha1`) whose `kubeConfigFile` must be an absolute path
(staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/config/kubeconfig.go, `LoadConfig`: "must be an
absolute file path").

That kubeconfig's `users` are looked up per webhook by the host and port of its URL
(staging/src/k8s.io/apiserver/pkg/util/webhook/authentication.go, `defaultAuthenticationInfoResolver.clientConfig`),
in this order: the exact `host:port`; `*.<domain>` for each shorter suffix of it; when the port is 443 the same two
without the port; the user named `*`; the user of the kubeconfig's current context; else anonymous. The surprising
parts are kept: `*` alone is a catch-all but is tried only after every suffix; a `*.example.com` entry does not
match `example.com` itself; with a port other than 443, a user keyed by the bare host never matches.

What a matched user gives the call: a client certificate (`client-certificate`/`client-key` files or their
`-data`), or a bearer token (`token` or `tokenFile`). Files are read at each call (client-go reloads rotated
client certificates too); the kubeconfig itself is read at start, as the real server does. Not emulated
(documented): `exec` and `auth-provider` users, impersonation, and basic auth.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PLUGIN = "MutatingAdmissionWebhook"
_ADMISSION_APIS = ("apiserver.config.k8s.io/v1", "apiserver.k8s.io/v1alpha1")
_WEBHOOK_KINDS = {("apiserver.config.k8s.io/v1", "WebhookAdmissionConfiguration"),
                  ("apiserver.config.k8s.io/v1alpha1", "WebhookAdmission")}


class AdmissionConfigError(ValueError):
    """An admission configuration or its kubeconfig that the real API server would refuse at start."""


@dataclass(frozen=True)
class WebhookUser:
    name: str
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    token_file: str | None = None

    def apply(self, ctx: ssl.SSLContext, headers: dict[str, str]) -> None:
        """Put this user's credentials on a client TLS context and request headers."""
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        token = self.token
        if not token and self.token_file:
            token = Path(self.token_file).read_text().strip()
        if token:
            headers["Authorization"] = f"Bearer {token}"


@dataclass(frozen=True)
class WebhookAuth:
    users: dict[str, WebhookUser]
    current: str | None  # the current context's user

    def user_for(self, host: str, port: int) -> WebhookUser | None:
        """The user for a webhook URL's host and port (None: anonymous), in the real resolver's order."""
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

        def lookup(key: str) -> WebhookUser | None:
            if key in self.users:
                return self.users[key]
            steps = key.split(".")
            for i in range(1, len(steps)):
                nick = "*." + ".".join(steps[i:])
                if nick in self.users:
                    return self.users[nick]
            return None

        found = lookup(target)
        if found is None and port == 443:
            found = lookup(host)
        if found is None:
            found = self.users.get("*")
        if found is None and self.current:
            found = self.users.get(self.current)
        return found


def _decode(text: bytes) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise AdmissionConfigError(f"not YAML or JSON: {err}") from err
    if not isinstance(doc, dict):
        raise AdmissionConfigError("not an object")
    return doc


def _materialise(data: str, directory: Path, name: str) -> str:
    """`client-certificate-data` and friends: ssl needs files, so write them (0600) into a private directory."""
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, base64.b64decode(data))
    finally:
        os.close(fd)
    return str(path)


def _users(kubeconfig: Path) -> WebhookAuth:
    try:
        doc = _decode(kubeconfig.read_bytes())
    except OSError as err:
        raise AdmissionConfigError(f"cannot read the webhook kubeconfig {kubeconfig}: {err.strerror or err}") from err
    base = kubeconfig.parent
    private: Path | None = None
    users: dict[str, WebhookUser] = {}
    for i, entry in enumerate(doc.get("users") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise AdmissionConfigError(f"{kubeconfig}: users[{i}] has no name")
        info = entry.get("user") or {}
        if not isinstance(info, dict):
            raise AdmissionConfigError(f"{kubeconfig}: users[{i}].user is not an object")
        if info.get("auth-provider") is not None:
            raise AdmissionConfigError(f"{kubeconfig}: users[{i}]: auth provider not supported")
        if info.get("exec") is not None:
            raise AdmissionConfigError(f"{kubeconfig}: users[{i}]: exec credentials are not emulated")

        def path(key: str) -> str | None:
            nonlocal private
            value = info.get(key)
            if isinstance(value, str) and value:
                return value if os.path.isabs(value) else str(base / value)
            data = info.get(f"{key}-data")
            if isinstance(data, str) and data:
                if private is None:  # ssl loads certificates from files only; gone when the emulator exits
                    private = Path(tempfile.mkdtemp(prefix="bridge-apiserver-webhook-auth-"))
                    atexit.register(shutil.rmtree, private, True)
                return _materialise(data, private, f"{i}-{key}")
            return None

        cert, key = path("client-certificate"), path("client-key")
        if (cert is None) != (key is None):
            raise AdmissionConfigError(f"{kubeconfig}: users[{i}] ({entry['name']}) needs both a client certificate "
                                       "and its key")
        token_file = info.get("tokenFile")
        users[entry["name"]] = WebhookUser(entry["name"], cert, key, info.get("token") or None,
                                           token_file if isinstance(token_file, str) and token_file else None)
    current_user = None
    for ctx in doc.get("contexts") or []:
        if isinstance(ctx, dict) and ctx.get("name") == doc.get("current-context"):
            current_user = (ctx.get("context") or {}).get("user")
    return WebhookAuth(users, current_user if isinstance(current_user, str) else None)


def load_admission_config(path: str | Path) -> WebhookAuth | None:
    """The webhook credentials an admission configuration file gives; None when it configures no webhook
    kubeconfig. Raises AdmissionConfigError (the emulator then refuses to start, like kube-apiserver)."""
    path = Path(path)
    try:
        doc = _decode(path.read_bytes())
    except OSError as err:
        raise AdmissionConfigError(f"unable to read admission control configuration from {str(path)!r}: "
                                   f"{err.strerror or err}") from err
    if doc.get("kind") != "AdmissionConfiguration" or doc.get("apiVersion") not in _ADMISSION_APIS:
        raise AdmissionConfigError(f"{path}: expected kind AdmissionConfiguration in {' or '.join(_ADMISSION_APIS)}, "
                                   f"got {doc.get('apiVersion')}/{doc.get('kind')}")
    for plugin in doc.get("plugins") or []:
        if not isinstance(plugin, dict) or plugin.get("name") != PLUGIN:
            continue
        config = plugin.get("configuration")
        if config is None and plugin.get("path"):
            ref = Path(str(plugin["path"]))
            ref = ref if ref.is_absolute() else path.parent / ref
            try:
                config = _decode(ref.read_bytes())
            except OSError as err:
                raise AdmissionConfigError(f"cannot read the {PLUGIN} configuration {ref}: {err.strerror or err}") \
                    from err
        if not isinstance(config, dict):
            return None
        if (config.get("apiVersion"), config.get("kind")) not in _WEBHOOK_KINDS:
            raise AdmissionConfigError(f"{path}: the {PLUGIN} configuration must be a WebhookAdmissionConfiguration "
                                       f"(apiserver.config.k8s.io/v1), got {config.get('apiVersion')}/"
                                       f"{config.get('kind')}")
        kubeconfig = config.get("kubeConfigFile")
        if not kubeconfig:
            return None
        if not isinstance(kubeconfig, str) or not os.path.isabs(kubeconfig):
            raise AdmissionConfigError(f"{path}: kubeConfigFile: Invalid value: {kubeconfig!r}: must be an absolute "
                                       "file path")
        return _users(Path(kubeconfig))
    return None


__all__ = ["AdmissionConfigError", "WebhookAuth", "WebhookUser", "load_admission_config"]
