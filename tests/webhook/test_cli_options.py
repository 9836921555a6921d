"""`bridge webhook` option validation: bad values exit 2 naming the option, before anything is started."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from bridge.cli import main as cli
from tests.webhook.pki import Pki


def invoke(*args: str) -> tuple[int, str]:
    out = CliRunner().invoke(cli, ["webhook", *args])
    return out.exit_code, out.output


def test_a_certificate_and_key_that_do_not_load_are_refused_naming_the_options(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    pki.issue()
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    code, out = invoke("--tls-cert-file", str(garbage), "--tls-key-file", str(pki.key_file))
    assert code == 2 and "--tls-cert-file/--tls-key-file" in out and "do not load" in out
    code, out = invoke("--tls-cert-file", str(pki.cert_file), "--tls-key-file", str(tmp_path / "missing.pem"))
    assert code == 2 and "--tls-key-file" in out and "does not exist" in out


def test_bad_device_class_target_and_port_are_refused(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    pki.issue()
    certs = ("--tls-cert-file", str(pki.cert_file), "--tls-key-file", str(pki.key_file))
    code, out = invoke(*certs, "--device-class", "GPU_Class")
    assert code == 2 and "--device-class" in out and "DNS subdomain" in out
    code, out = invoke(*certs, "--target", "dra")
    assert code == 2 and "--target" in out and "'auto', 'claims', 'extended'" in out
    code, out = invoke(*certs, "--port", "70000")
    assert code == 2 and "--port" in out


def test_every_option_can_come_from_the_environment(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    pki.issue()
    out = CliRunner().invoke(cli, ["webhook"], env={"BRIDGE_WEBHOOK_TLS_CERT_FILE": str(pki.cert_file),
                                                   "BRIDGE_WEBHOOK_TLS_KEY_FILE": str(pki.key_file),
                                                   "BRIDGE_WEBHOOK_DEVICE_CLASS": "Bad_Class"})
    assert out.exit_code == 2 and "--device-class" in out.output  # the env values reached the validation
