"""`bridge webhook --self-signed DIR`: a local CA and serving certificate (reused while good), the registration to
apply next to them, and the option rules around it (issue 15 item 4)."""

from __future__ import annotations

import base64
import datetime as dt
import socket
import ssl
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bridge.cli import main as cli
from bridge.webhook.selfsigned import SelfSignedError, ensure_self_signed, registration, write_registration
from bridge.webhook.server import WebhookServer
from bridge.webhook.tls import ReloadingContext
from tests.webhook.test_e2e import EXAMPLES


def handshake(ca: Path, cert: Path, key: Path, server_name: str) -> int:
    """Serve with the certificate; GET /healthz verifying it against `ca` for `server_name`; the status code."""
    with WebhookServer({}, ReloadingContext(str(cert), str(key)), host="127.0.0.1", port=0) as srv:
        ctx = ssl.create_default_context(cafile=str(ca))
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname=server_name) as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return int(tls.recv(64).split()[1])


def test_a_local_ca_and_a_serving_certificate_for_the_hosts_are_made_and_verify(tmp_path: Path) -> None:
    made = ensure_self_signed(tmp_path / "wh", ["127.0.0.1", "localhost", "webhook.example.test"])
    assert made.generated
    assert {p.name for p in made.directory.iterdir()} == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    assert made.directory.stat().st_mode & 0o777 == 0o700
    assert (made.directory / "ca.key").stat().st_mode & 0o777 == 0o600 and made.key_file.stat().st_mode & 0o777 == 0o600
    for name in ("127.0.0.1", "localhost", "webhook.example.test"):
        assert handshake(made.ca_file, made.cert_file, made.key_file, name) == 200
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(made.ca_file, made.cert_file, made.key_file, "elsewhere.example.test")


def test_a_good_directory_is_reused_and_a_new_host_or_an_expiring_certificate_renews_it(tmp_path: Path) -> None:
    first = ensure_self_signed(tmp_path, ["127.0.0.1"])
    ca = first.ca_file.read_bytes()
    again = ensure_self_signed(tmp_path, ["127.0.0.1"])
    assert not again.generated and again.ca_file.read_bytes() == ca
    wider = ensure_self_signed(tmp_path, ["127.0.0.1", "::1"])
    assert wider.generated and wider.ca_file.read_bytes() != ca  # a new CA: the registration must be re-applied
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=365)
    assert ensure_self_signed(tmp_path, ["127.0.0.1"], now=later).generated


@pytest.mark.parametrize("host", ["", "not a host", "-bad.example", "a..b"])
def test_a_host_that_is_neither_a_name_nor_an_address_is_refused(tmp_path: Path, host: str) -> None:
    with pytest.raises(SelfSignedError):
        ensure_self_signed(tmp_path, [host])


def test_the_written_registration_is_the_recommended_one_calling_the_url_with_the_local_ca(tmp_path: Path) -> None:
    made = ensure_self_signed(tmp_path, ["127.0.0.1"])
    write_registration(made, "https://127.0.0.1:9443/mutate")
    written = yaml.safe_load(made.registration_file.read_text())
    [hook] = written["webhooks"]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate",
                                    "caBundle": base64.b64encode(made.ca_file.read_bytes()).decode()}
    example = yaml.safe_load((EXAMPLES / "mutatingwebhookconfiguration.yaml").read_text())
    assert written["metadata"] == {k: v for k, v in example["metadata"].items() if k != "annotations"}
    assert {k: v for k, v in hook.items() if k != "clientConfig"} == {
        k: v for k, v in example["webhooks"][0].items() if k != "clientConfig"}
    assert registration("https://x/mutate", b"pem", "ops")["webhooks"][0]["namespaceSelector"]["matchExpressions"][1][
        "values"] == ["kube-system", "ops"]


@pytest.mark.parametrize(("args", "message"), [
    (["--register"], "Missing option '--tls-cert-file'"),
    (["--self-signed", "{tmp}/a", "--tls-cert-file", "{cert}", "--tls-key-file", "{cert}"],
     "either --self-signed or --tls-cert-file/--tls-key-file, not both"),
    (["--tls-cert-file", "{cert}", "--tls-key-file", "{cert}", "--register"], "--register needs --self-signed"),
    (["--self-signed", "{tmp}/a", "--client-name", "kube-apiserver"], "--client-name needs --client-ca-file"),
    (["--self-signed", "{tmp}/a", "--self-signed-hosts", "no way"], "neither an IP address nor a DNS name"),
])
def test_option_mistakes_exit_2_with_a_message(tmp_path: Path, args: list[str], message: str) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    argv = [a.format(tmp=tmp_path, cert=cert) for a in args]
    out = CliRunner().invoke(cli, ["webhook", *argv])
    assert out.exit_code == 2 and message in out.output, out.output


def test_register_creates_the_configuration_and_then_replaces_its_webhooks(tmp_path: Path) -> None:
    from bridge.kube import connect
    from bridge.kube.api import MUTATING_WEBHOOKS
    from bridge.sandbox.apiserver import ApiServer
    from bridge.webhook.app import register

    with ApiServer() as srv:
        api = connect(str(srv.write_kubeconfig(tmp_path / "kc")))
        register(api, registration("https://127.0.0.1:1111/mutate", b"first"))
        register(api, registration("https://127.0.0.1:2222/mutate", b"second"))
        [hook] = api.get(MUTATING_WEBHOOKS, "dra-bridge")["webhooks"]
        assert hook["clientConfig"] == {"url": "https://127.0.0.1:2222/mutate",
                                        "caBundle": base64.b64encode(b"second").decode()}
