"""What `bridge namespace` checks through the API: is our webhook registered, reachable and covering the namespace,
and which GPU pods arrived untranslated since the flip.

The webhook fails open (`failurePolicy: Ignore`: a webhook outage costs migration progress, never pod creation), so
nothing fails when it is missing, unreachable or not selecting the namespace: pods are simply admitted untranslated.
These checks are how an operator notices.

* Registered and covering: `coverage.py` on every MutatingWebhookConfiguration entry named `pods.dra-bridge.io`.
* Reachable, chosen per registration kind: `clientConfig.service` -> the Service exists and its EndpointSlices
  (label `kubernetes.io/service-name`) list at least one ready endpoint (`conditions.ready` unset or true, as
  kube-proxy reads it: kubernetes/api discovery/v1 types.go); `clientConfig.url` -> a TLS handshake with that host
  and port verifies against the registration's `caBundle` (what the API server does before it POSTs a review). A
  Service answer says the API server has somewhere to send reviews; it does not prove the replicas answer.
* Untranslated since the flip: `set` records when the mode last changed in the namespace annotation
  `dra-bridge.io/mode-changed-at` (RFC 3339, seconds). Pods created at or after it that ask for an `nvidia.com/`
  resource and carry no record of the webhook (`dra-bridge.io/translated` in dra mode, the shadow record in shadow
  mode) were either left legacy on purpose (the webhook emits a `DRABridgeUntranslatable` Event naming the pod) or
  never reached the webhook: those are the alarm. Pods the registration's objectSelector excludes and pods that
  opted out (`dra-bridge.io/translate: "false"`) are expected to stay legacy and are counted apart. Timestamps have
  one-second resolution, so a pod created in the very second of the flip cannot be placed before or after it: only
  pods created in a later second are counted (no false alarm for the pods created just before the flip; a pod
  created within that same second after it goes uncounted).
"""

from __future__ import annotations

import base64
import socket
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from bridge.kube.api import ENDPOINT_SLICES, EVENTS, MUTATING_WEBHOOKS, SERVICES, KubeAPI
from bridge.kube.errors import Forbidden, KubeError, NotFound
from bridge.webhook.coverage import DEFAULT_WEBHOOK_NAME, Coverage, Hook, coverage, find_hooks, selector_matches
from bridge.webhook.policy import OPT_OUT_ANNOTATION, PREFIX, SHADOW_ANNOTATION, TRANSLATED_ANNOTATION

Obj = dict[str, Any]
FLIP_ANNOTATION = PREFIX + "mode-changed-at"
UNTRANSLATABLE_REASON = "DRABridgeUntranslatable"  # the Event reason of bridge/webhook/review.py


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


# -- reachability ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reachability:
    ok: bool | None  # None: could not be checked (RBAC, API error)
    detail: str


def reachability(api: KubeAPI, hook: Hook, timeout: float) -> Reachability:
    svc = hook.service
    if svc is not None:
        ns, name, port = svc
        try:
            api.get(SERVICES, name, ns)
        except NotFound:
            return Reachability(False, f"Service {ns}/{name} does not exist")
        except Forbidden as err:
            return Reachability(None, f"cannot read Service {ns}/{name} ({err.rbac_hint})")
        except KubeError as err:
            return Reachability(None, f"cannot read Service {ns}/{name}: {err.message}")
        try:
            slices = api.list(ENDPOINT_SLICES, ns, label_selector=f"kubernetes.io/service-name={name}")["items"]
        except Forbidden as err:
            return Reachability(None, f"Service {ns}/{name} exists; cannot read its EndpointSlices ({err.rbac_hint})")
        except KubeError as err:
            return Reachability(None, f"Service {ns}/{name} exists; cannot read its EndpointSlices: {err.message}")
        ready = sum(1 for s in slices for e in s.get("endpoints") or []
                    if e.get("addresses") and (e.get("conditions") or {}).get("ready") is not False)
        if not ready:
            return Reachability(False, f"Service {ns}/{name} (port {port}) has no ready endpoints: no webhook "
                                       "replica is running or ready")
        return Reachability(True, f"Service {ns}/{name} (port {port}) has {ready} ready endpoint(s)")
    if hook.url:
        return tls_handshake(hook.url, hook.ca_bundle, timeout)
    return Reachability(False, "clientConfig has neither a service nor a url")


def tls_handshake(url: str, ca_bundle_b64: str, timeout: float) -> Reachability:
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    if parts.scheme != "https" or not host:
        return Reachability(False, f"webhook URL {url!r} is not https://HOST[:PORT]/PATH")
    try:
        ctx = ssl.create_default_context(cadata=base64.b64decode(ca_bundle_b64).decode()) if ca_bundle_b64 \
            else ssl.create_default_context()
    except (ValueError, ssl.SSLError) as err:
        return Reachability(False, f"the registration's caBundle does not load: {err}")
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                ctx.wrap_socket(raw, server_hostname=host):
            pass
    except ssl.SSLCertVerificationError as err:
        return Reachability(False, f"{host}:{port} answers TLS but its certificate does not verify against the "
                                   f"registration's caBundle: {err.verify_message}")
    except (OSError, ssl.SSLError) as err:
        return Reachability(False, f"no TLS handshake with {host}:{port} within {timeout:g}s: {err}")
    return Reachability(True, f"TLS handshake with {host}:{port} verified against the registration's caBundle")


# -- the webhook, for one namespace ------------------------------------------------------------------------------
@dataclass(frozen=True)
class WebhookCheck:
    webhook_name: str
    hooks: tuple[Hook, ...] = ()
    coverage: tuple[Coverage, ...] = ()
    reachable: tuple[Reachability, ...] = ()
    error: str = ""  # the configurations could not be read

    @property
    def registered(self) -> bool | None:
        return None if self.error else bool(self.hooks)

    @property
    def covered(self) -> bool | None:
        """True when some registration calls the webhook for every pod here, None when it depends on the pod (or
        nothing could be read), False when none does."""
        if self.error:
            return None
        verdicts = [c.covered for c in self.coverage]
        if True in verdicts:
            return True
        return None if None in verdicts else False

    @property
    def reachable_ok(self) -> bool | None:
        if self.error or not self.hooks:
            return None
        covering = [r for c, r in zip(self.coverage, self.reachable) if c.covered is not False] or list(self.reachable)
        oks = [r.ok for r in covering]
        return True if True in oks else (None if None in oks else False)

    def problems(self) -> list[str]:
        if self.error:
            return [self.error]
        if not self.hooks:
            return [f"no MutatingWebhookConfiguration has a webhook named {self.webhook_name}: the API server never "
                    "calls the bridge, so new pods stay on the device plugin (deploy the webhook: examples/webhook/ "
                    "or the Helm chart)"]
        out = []
        if self.covered is False:
            for c in self.coverage:
                out.append(f"webhook {c.hook.name} in MutatingWebhookConfiguration {c.hook.configuration} does not "
                           f"cover this namespace: {'; '.join(c.problems)}")
        if self.reachable_ok is False:
            out += [f"webhook {h.name} is not reachable: {r.detail}" for h, r in zip(self.hooks, self.reachable)
                    if r.ok is False]
        return out

    def notes(self) -> list[str]:
        out = [f"webhook {c.hook.name}: {n}" for c in self.coverage for n in c.notes]
        out += [f"webhook {h.name}: {r.detail}" for h, r in zip(self.hooks, self.reachable) if r.ok is not False]
        return out

    def as_dict(self) -> Obj:
        return {"name": self.webhook_name, "registered": self.registered, "reachable": self.reachable_ok,
                "covered": self.covered,
                "configurations": sorted({h.configuration for h in self.hooks}), "problems": self.problems(),
                "notes": self.notes()}


def read_hooks(api: KubeAPI, webhook_name: str = DEFAULT_WEBHOOK_NAME) -> tuple[list[Hook], str]:
    """Our webhook entries, or an error text when the configurations cannot be read."""
    try:
        configs = api.list(MUTATING_WEBHOOKS)["items"]
    except Forbidden as err:
        return [], f"cannot read MutatingWebhookConfigurations ({err.rbac_hint}): whether the webhook covers the " \
                   "namespace is unknown"
    except KubeError as err:
        return [], f"cannot read MutatingWebhookConfigurations: {err.message}"
    return find_hooks(configs, webhook_name), ""


def check_webhook(api: KubeAPI, namespace: Mapping[str, Any], hooks: list[Hook], error: str, webhook_name: str,
                  timeout: float, reach: dict[str, Reachability] | None = None) -> WebhookCheck:
    """`namespace` as it is (status) or will be (set) labelled; `reach` caches reachability across namespaces."""
    if error:
        return WebhookCheck(webhook_name, error=error)
    cache = reach if reach is not None else {}
    reachable = []
    for h in hooks:
        key = f"{h.configuration}/{h.name}"
        if key not in cache:
            cache[key] = reachability(api, h, timeout)
        reachable.append(cache[key])
    return WebhookCheck(webhook_name, tuple(hooks), tuple(coverage(h, namespace) for h in hooks), tuple(reachable))


# -- untranslated pods since the flip ----------------------------------------------------------------------------
def _asks_nvidia(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or []:
            res = c.get("resources") or {}
            if any(k.startswith("nvidia.com/") for part in ("requests", "limits") for k in (res.get(part) or {})):
                return True
    return False


@dataclass
class SinceFlip:
    since: str
    mode: str
    gpu_pods: int = 0
    handled: int = 0  # translated (dra) or recorded (shadow)
    left_legacy: dict[str, str] = field(default_factory=dict)  # pod -> the webhook's Event message
    expected_legacy: int = 0  # opted out, or outside the objectSelector
    unseen: list[str] = field(default_factory=list)  # never reached the webhook: the alarm

    def as_dict(self) -> Obj:
        return {"since": self.since, "mode": self.mode, "gpuPods": self.gpu_pods, "handled": self.handled,
                "leftLegacyByWebhook": len(self.left_legacy), "expectedLegacy": self.expected_legacy,
                "untranslated": len(self.unseen), "untranslatedPods": sorted(self.unseen)}


def since_flip(namespace: Mapping[str, Any], mode: str, pods: Iterable[Mapping[str, Any]],
               untranslatable_events: Iterable[Mapping[str, Any]], hooks: Iterable[Hook] = ()) -> SinceFlip | None:
    """GPU pods created since the mode last changed, sorted into handled / left legacy / expected / never seen.
    None when the namespace has no flip time (set before this was recorded, or never flipped)."""
    meta = namespace.get("metadata") or {}
    since_text = str((meta.get("annotations") or {}).get(FLIP_ANNOTATION) or "")
    since = _time(since_text)
    if since is None or mode not in ("shadow", "dra"):
        return None
    out = SinceFlip(since_text, mode)
    explained = {str((e.get("involvedObject") or {}).get("name", "")): str(e.get("message") or "")
                 for e in untranslatable_events}
    selectors = [h.spec.get("objectSelector") for h in hooks]
    record = TRANSLATED_ANNOTATION if mode == "dra" else SHADOW_ANNOTATION
    for pod in pods:
        pmeta = pod.get("metadata") or {}
        created = _time(pmeta.get("creationTimestamp"))
        # creationTimestamp has whole seconds: a pod created in the flip's own second counts (one created just before
        # the flip in that second then shows as not translated: the safe side).
        if created is None or created < since.replace(microsecond=0):
            continue
        ann = pmeta.get("annotations") or {}
        if record in ann:
            out.gpu_pods += 1
            out.handled += 1
            continue
        if not _asks_nvidia(pod):
            continue
        out.gpu_pods += 1
        name = str(pmeta.get("name", ""))
        labels = pmeta.get("labels") or {}
        if str(ann.get(OPT_OUT_ANNOTATION, "")).lower() == "false" or (
                selectors and not any(selector_matches(s, labels) for s in selectors)):
            out.expected_legacy += 1
        elif name in explained:
            out.left_legacy[name] = explained[name]
        else:
            out.unseen.append(name)
    return out


def untranslatable_events(api: KubeAPI, namespace: str | None) -> list[Obj]:
    try:
        return list(api.list(EVENTS, namespace, field_selector=f"reason={UNTRANSLATABLE_REASON}")["items"])
    except KubeError:
        return []  # without Events every untranslated pod counts as never seen: the conservative answer
