"""The emulator's `--admission-control-config-file`: which kubeconfig user kube-apiserver presents to a webhook host
(staging/src/k8s.io/apiserver/pkg/util/webhook/authentication.go), including the surprising lookups, and the
configuration files the real server refuses at start."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bridge.sandbox.apiserver.webhookauth import AdmissionConfigError, WebhookAuth, WebhookUser, load_admission_config


def auth(*names: str, current: str | None = None) -> WebhookAuth:
    return WebhookAuth({n: WebhookUser(n) for n in names}, current)


def who(a: WebhookAuth, host: str, port: int) -> str | None:
    user = a.user_for(host, port)
    return None if user is None else user.name


def test_the_exact_host_and_port_wins_then_the_longest_wildcard_suffix() -> None:
    a = auth("webhook.ns.svc:8443", "*.ns.svc:8443", "*.svc:8443", "*")
    assert who(a, "webhook.ns.svc", 8443) == "webhook.ns.svc:8443"
    assert who(a, "other.ns.svc", 8443) == "*.ns.svc:8443"
    assert who(a, "x.other.svc", 8443) == "*.svc:8443"
    assert who(a, "example.com", 8443) == "*"


def test_a_wildcard_never_matches_the_bare_domain_and_a_bare_host_only_matches_port_443() -> None:
    a = auth("*.example.com", "hooks.example.com")
    assert who(a, "example.com", 443) is None  # "*.example.com" needs at least one more label
    assert who(a, "a.example.com", 443) == "*.example.com"
    assert who(a, "hooks.example.com", 443) == "hooks.example.com"
    assert who(a, "hooks.example.com", 8443) is None  # keyed without a port: only for the default HTTPS port


def test_the_catch_all_comes_after_every_suffix_and_the_current_context_after_it() -> None:
    assert who(auth("*", "*.com:9443"), "a.b.com", 9443) == "*.com:9443"
    assert who(auth("apiserver", current="apiserver"), "10.0.0.1", 443) == "apiserver"
    assert who(auth("*", "apiserver", current="apiserver"), "10.0.0.1", 443) == "*"
    assert who(auth(), "10.0.0.1", 443) is None  # anonymous


def write(path: Path, doc: Any) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def admission(tmp: Path, plugin: dict[str, Any]) -> Path:
    return write(tmp / "admission.yaml", {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
                                          "plugins": [{"name": "MutatingAdmissionWebhook", **plugin}]})


def webhook_config(kubeconfig: str) -> dict[str, Any]:
    return {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": kubeconfig}


def test_a_plugin_path_is_relative_to_the_admission_file_and_client_data_is_usable(tmp_path: Path) -> None:
    kubeconfig = write(tmp_path / "kc.yaml", {"users": [{"name": "*", "user": {
        "client-certificate-data": base64.b64encode(b"CERT").decode(),
        "client-key-data": base64.b64encode(b"KEY").decode()}}]})
    write(tmp_path / "webhook.yaml", webhook_config(str(kubeconfig)))
    loaded = load_admission_config(admission(tmp_path, {"path": "webhook.yaml"}))
    assert loaded is not None
    user = loaded.user_for("127.0.0.1", 8443)
    assert user is not None and user.cert_file and user.key_file
    assert Path(user.cert_file).read_bytes() == b"CERT" and Path(user.key_file).stat().st_mode & 0o777 == 0o600


def test_the_files_written_for_inline_client_data_are_removed_when_the_process_exits(tmp_path: Path) -> None:
    kubeconfig = write(tmp_path / "kc.yaml", {"users": [{"name": "*", "user": {
        "client-certificate-data": base64.b64encode(b"CERT").decode(),
        "client-key-data": base64.b64encode(b"KEY").decode()}}]})
    write(tmp_path / "webhook.yaml", webhook_config(str(kubeconfig)))
    config = admission(tmp_path, {"path": "webhook.yaml"})
    script = ("import sys; from bridge.sandbox.apiserver.webhookauth import load_admission_config\n"
              "print(load_admission_config(sys.argv[1]).user_for('127.0.0.1', 8443).cert_file)")
    done = subprocess.run([sys.executable, "-c", script, str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    written = Path(done.stdout.strip())
    assert written.name == "0-client-certificate" and not written.parent.exists()


@pytest.mark.parametrize(("kubeconfig", "message"), [
    ("relative/kc.yaml", "kubeConfigFile: Invalid value: 'relative/kc.yaml': must be an absolute file path"),
    ("/nowhere/kc.yaml", "cannot read the webhook kubeconfig /nowhere/kc.yaml"),
])
def test_a_webhook_kubeconfig_the_real_server_refuses_stops_the_emulator_at_start(
        tmp_path: Path, kubeconfig: str, message: str) -> None:
    from bridge.cli import main

    config = admission(tmp_path, {"configuration": webhook_config(kubeconfig)})
    with pytest.raises(AdmissionConfigError, match=message.replace("(", r"\(")):
        load_admission_config(config)
    out = CliRunner().invoke(main, ["sandbox", "apiserver", "--kubeconfig-out", str(tmp_path / "out"),
                                    "--admission-control-config-file", str(config)])
    assert out.exit_code == 2 and "--admission-control-config-file" in out.output and message in out.output


def test_a_user_with_a_certificate_but_no_key_is_refused(tmp_path: Path) -> None:
    kubeconfig = write(tmp_path / "kc.yaml", {"users": [{"name": "*", "user": {"client-certificate": "/c.crt"}}]})
    with pytest.raises(AdmissionConfigError, match="needs both a client certificate and its key"):
        load_admission_config(admission(tmp_path, {"configuration": webhook_config(str(kubeconfig))}))


def test_other_plugins_and_no_kubeconfig_mean_anonymous_calls(tmp_path: Path) -> None:
    other = write(tmp_path / "a.yaml", {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
                                        "plugins": [{"name": "EventRateLimit", "path": "erl.yaml"}]})
    assert load_admission_config(other) is None
    with pytest.raises(AdmissionConfigError, match="expected kind AdmissionConfiguration"):
        load_admission_config(write(tmp_path / "b.yaml", {"kind": "Config"}))
