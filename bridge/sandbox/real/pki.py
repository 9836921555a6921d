"""A throwaway certificate authority for the real control plane (what controller-runtime's envtest calls its
`tinyca`, and kubernetes `hack/local-up-cluster.sh` makes with openssl): one CA that signs the API server's serving
certificate and every client certificate, plus the service-account signing key pair.

Who is who is decided by the client certificate's subject, as kube-apiserver reads it
(kubernetes `staging/src/k8s.io/apiserver/pkg/authentication/request/x509/x509.go` `CommonNameUserConversion`: the
Common Name is the user name, each Organization a group):

* `admin`: CN `kubernetes-admin`, O `system:masters` (every permission, bypassing RBAC);
* `system:kube-controller-manager`, `system:kube-scheduler`: the users the bootstrap RBAC policy grants the
  controller manager's and scheduler's roles (kubernetes `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`);
* `system:node:<name>` in `system:nodes`: a kubelet, which the Node authorizer and the NodeRestriction admission
  plugin restrict to its own Node and the pods bound to it (kubernetes `plugin/pkg/auth/authorizer/node/`,
  `plugin/pkg/admission/noderestriction/admission.go`).

Keys are ECDSA P-256 (fast to make; every Go TLS stack here accepts them), valid for one day: useless anywhere else
by design. Everything is written with mode 0600 under one directory that the cluster removes on stop.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.chmod(0o600)


class TinyCA:
    """A CA under `directory` (`ca.crt`, `ca.key`) that issues serving and client certificates next to itself."""

    def __init__(self, directory: Path, name: str = "dra-bridge-sandbox-ca") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pair = CertPair(self.dir / "ca.crt", self.dir / "ca.key")
        _write_cert(self.pair.cert, self._cert)
        _write_key(self.pair.key, self._key)

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, name: str, *, common_name: str, organizations: tuple[str, ...] = (),
              dns_names: tuple[str, ...] = (), ips: tuple[str, ...] = (), server: bool = False,
              client: bool = False) -> CertPair:
        """Issue `<name>.crt`/`<name>.key`, signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs)).issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=False,
                                         crl_sign=False, content_commitment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                           critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = CertPair(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        _write_cert(pair.cert, cert)
        _write_key(pair.key, key)
        return pair

    def client(self, name: str, user: str, *groups: str) -> CertPair:
        return self.issue(name, common_name=user, organizations=groups, client=True)


def service_account_keys(directory: Path) -> CertPair:
    """The key pair kube-apiserver signs service-account tokens with (`--service-account-signing-key-file`) and
    verifies them by (`--service-account-key-file`); the controller manager signs with the same private key. The
    `cert` field holds the public key (PEM), not a certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    pub = directory / "sa.pub"
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    priv = directory / "sa.key"
    _write_key(priv, key)
    return CertPair(pub, priv)
