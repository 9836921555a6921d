"""`bridge webhook --self-signed DIR`: TLS for running the webhook outside a cluster (a laptop, the sandbox).

An API server calls a webhook only over HTTPS and only trusts the certificate the registration's `caBundle`
names. In a cluster the chart gets the certificate from cert-manager, a Secret or Helm; on one machine this module
makes a private CA and a serving certificate for the given DNS names and IP addresses:

    DIR/ca.crt, DIR/ca.key        the CA (ECDSA P-256, 1 year); ca.crt is the registration's caBundle
    DIR/tls.crt, DIR/tls.key      the serving certificate for the hosts (1 year), signed by the CA
    DIR/mutatingwebhookconfiguration.yaml
                                  the registration to apply: `registration()` with `clientConfig.url` and the
                                  caBundle filled in (`kubectl apply -f`, or `bridge webhook --register`)

An existing DIR is reused when its serving certificate was signed by its CA, covers every host asked for and is
valid for at least another day; otherwise everything is made anew (a new CA: re-apply the registration). Keys are
written mode 0600 in a 0700 directory, atomically (temp file + rename), so a half-written key is never read.

This is for local use only: the CA key sits next to the certificates it signs. Never point a production
registration at it.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bridge.webhook.registration import WEBHOOK_NAME, webhook_entry

CONFIG_NAME = "dra-bridge"
VALID_DAYS = 365
RENEW_BEFORE = dt.timedelta(days=1)
REGISTRATION_FILE = "mutatingwebhookconfiguration.yaml"


class SelfSignedError(ValueError):
    """A host that is neither a DNS name nor an IP address, or a directory that cannot be written."""


@dataclass(frozen=True)
class SelfSigned:
    directory: Path
    hosts: tuple[str, ...]
    generated: bool  # False: an existing, still valid set was reused

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def cert_file(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.directory / "tls.key"

    @property
    def registration_file(self) -> Path:
        return self.directory / REGISTRATION_FILE

    def ca_pem(self) -> bytes:
        return self.ca_file.read_bytes()


def registration(url: str, ca_pem: bytes, own_namespace: str = "dra-bridge") -> dict[str, Any]:
    """The MutatingWebhookConfiguration of `bridge/webhook/registration.py` (the one the chart and the example use:
    opt-in `namespaceSelector` on `dra-bridge.io/mode`, `matchConditions`, fail open, 5 s, reinvocation, no side
    effects on dry run), calling `url` with `ca_pem` as the caBundle instead of a Service."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIG_NAME, "labels": {"app.kubernetes.io/name": "dra-bridge-webhook",
                                                     "app.kubernetes.io/managed-by": "dra-bridge"}},
        "webhooks": [webhook_entry({"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                                   ["kube-system", own_namespace])],
    }


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if not host or len(host) > 253 or not all(
            label and len(label) <= 63 and label.replace("-", "").isalnum() and label.isascii()
            and not label.startswith("-") and not label.endswith("-") for label in labels):
        raise SelfSignedError(f"{host!r} is neither an IP address nor a DNS name")
    return x509.DNSName(host.lower())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _reusable(out: SelfSigned, sans: Sequence[x509.GeneralName], now: dt.datetime) -> bool:
    try:
        ca = x509.load_pem_x509_certificate(out.ca_file.read_bytes())
        cert = x509.load_pem_x509_certificate(out.cert_file.read_bytes())
        serialization.load_pem_private_key(out.key_file.read_bytes(), None)
        cert.verify_directly_issued_by(ca)
        have = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    return all(s in have for s in sans) and min(cert.not_valid_after_utc, ca.not_valid_after_utc) - now > RENEW_BEFORE


def ensure_self_signed(directory: Path, hosts: Sequence[str], *,
                       now: dt.datetime | None = None) -> SelfSigned:
    """A CA and a serving certificate for `hosts` in `directory` (reused when still good; see the module docstring)."""
    wanted = tuple(dict.fromkeys(h.strip() for h in hosts if h.strip()))
    if not wanted:
        raise SelfSignedError("give at least one DNS name or IP address for the serving certificate")
    sans = [_san(h) for h in wanted]
    out = SelfSigned(Path(directory), wanted, generated=True)
    now = now or dt.datetime.now(dt.timezone.utc)
    try:
        out.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if _reusable(out, sans, now):
            return SelfSigned(out.directory, wanted, generated=False)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("dra-bridge webhook local CA")
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
              .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                           content_commitment=False, key_encipherment=False, data_encipherment=False,
                                           key_agreement=False, encipher_only=False, decipher_only=False),
                             critical=True)
              .sign(ca_key, hashes.SHA256()))
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name(wanted[0])).issuer_name(ca_name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))

        def pem_key(k: ec.EllipticCurvePrivateKey) -> bytes:
            return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption())

        _write(out.directory / "ca.key", pem_key(ca_key), 0o600)
        _write(out.key_file, pem_key(key), 0o600)
        _write(out.cert_file, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        _write(out.ca_file, ca.public_bytes(serialization.Encoding.PEM), 0o644)
    except OSError as err:
        raise SelfSignedError(f"cannot write certificates to {directory}: {err.strerror or err}") from err
    return out


def write_registration(out: SelfSigned, url: str, own_namespace: str = "dra-bridge") -> dict[str, Any]:
    """Write `mutatingwebhookconfiguration.yaml` for `url` next to the certificates; returns the object."""
    obj = registration(url, out.ca_pem(), own_namespace)
    header = (f"# Written by `bridge webhook --self-signed {out.directory}`: the webhook at {url}, trusted through\n"
              "# the local CA in ca.crt. For local use (a laptop, the sandbox); a cluster uses the chart.\n")
    try:
        _write(out.registration_file, (header + yaml.safe_dump(obj, sort_keys=False)).encode(), 0o644)
    except OSError as err:
        raise SelfSignedError(f"cannot write {out.registration_file}: {err.strerror or err}") from err
    return obj


__all__ = ["SelfSigned", "SelfSignedError", "ensure_self_signed", "registration", "write_registration"]
