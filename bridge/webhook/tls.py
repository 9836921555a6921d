"""Server TLS from a certificate and key file, reloaded when they change on disk (no restart).

cert-manager and Kubernetes Secret volumes rotate certificates by swapping files (Secret volumes swap a `..data`
symlink), so the reloader compares `(inode, mtime_ns, size)` of both files, following symlinks, every time a
connection is accepted (a `stat` pair costs microseconds; connections are long-lived keep-alives). New handshakes
use the new certificate; established connections keep theirs. A rotation caught half-way (new cert, old key) fails
to load: the previous context stays in use and the next accept tries again, so a rotation never takes the
webhook down. TLS 1.2 is the floor.

Client certificates (`--client-ca-file`): the API server authenticates to a webhook with the client certificate
its admission configuration names (kube-apiserver `--admission-control-config-file`, plugin
`MutatingAdmissionWebhook`, a `WebhookAdmissionConfiguration` whose `kubeConfigFile` lists a user per webhook
host; kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/util/webhook/authentication.go). With a client CA the
server asks every client for a certificate and verifies what it gets against that CA (`CERT_OPTIONAL`: a client
that sends none, such as the kubelet's HTTPS probe, still connects; one that sends a certificate the CA did not
sign fails the handshake). `ClientAuth.check` then decides per request whether the certificate is the API
server's: any certificate the CA signed, or only those whose subject CN or a DNS SAN is in `names`. The CA file
is part of the reload signature, so rotating it needs no restart either.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClientAuth:
    """Who may POST AdmissionReviews: clients with a certificate signed by `ca_file` and, when `names` is not empty,
    whose certificate's subject CN or one of its DNS SANs is listed."""

    ca_file: str
    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, ca_file: str, names: Iterable[str] = ()) -> ClientAuth:
        return cls(ca_file, frozenset(n.strip() for n in names if n.strip()))

    def check(self, cert: Mapping[str, Any] | None) -> str | None:
        """None when `cert` (`SSLSocket.getpeercert()` of a verified peer) is acceptable, else why not."""
        if not cert:
            return "no client certificate (configure the API server's admission kubeconfig with one)"
        if not self.names:
            return None
        held = certificate_names(cert)
        if held & self.names:
            return None
        return (f"client certificate {', '.join(sorted(held)) or '(no names)'} is not one of the accepted API server "
                f"identities ({', '.join(sorted(self.names))})")


def certificate_names(cert: Mapping[str, Any]) -> frozenset[str]:
    """The subject CNs and DNS SANs of a certificate as `getpeercert()` returns it."""
    names = {value for rdn in cert.get("subject") or () for key, value in rdn if key == "commonName"}
    names |= {value for kind, value in cert.get("subjectAltName") or () if kind == "DNS"}
    return frozenset(names)


def _signature(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def server_context(cert_file: str, key_file: str, client_ca_file: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.set_alpn_protocols(["http/1.1"])
    if client_ca_file:
        ctx.load_verify_locations(cafile=client_ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


class ReloadingContext:
    def __init__(self, cert_file: str, key_file: str, on_reload: Callable[[str], None] | None = None,
                 client_ca_file: str | None = None) -> None:
        """Raises (OSError / ssl.SSLError) when the files cannot be loaded at start: a webhook without a
        certificate must not start."""
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self._on_reload = on_reload
        self._lock = threading.Lock()
        self._sig = self._signature()
        self._ctx = server_context(cert_file, key_file, client_ca_file)
        self._failed_sig: tuple[object, ...] | None = None

    def _signature(self) -> tuple[object, ...]:
        files = (self.cert_file, self.key_file) + ((self.client_ca_file,) if self.client_ca_file else ())
        return tuple(_signature(f) for f in files)

    def current(self) -> ssl.SSLContext:
        try:
            sig = self._signature()
        except OSError as err:  # mid-rotation: a file briefly missing
            log.warning("TLS files unreadable (%s); keeping the current certificate", err)
            return self._ctx
        if sig == self._sig or sig == self._failed_sig:
            return self._ctx
        with self._lock:
            if sig == self._sig:
                return self._ctx
            try:
                ctx = server_context(self.cert_file, self.key_file, self.client_ca_file)
            except (OSError, ssl.SSLError, ValueError) as err:
                self._failed_sig = sig
                log.warning("TLS reload failed (%s); keeping the current certificate", err)
                if self._on_reload:
                    self._on_reload("failed")
                return self._ctx
            self._ctx, self._sig, self._failed_sig = ctx, sig, None
            log.info("TLS certificate reloaded", extra={"cert": self.cert_file})
            if self._on_reload:
                self._on_reload("ok")
            return ctx
