"""`bridge webhook`: the admission webhook that translates nvidia.com/gpu requests in DRA namespaces.

Thin shell: options (each also an env var), validation, then one `bridge.webhook.app.run()`. Exit codes
(bridge/cli/exits.py): 0 clean stop (SIGTERM/SIGINT), 2 bad options or a start failure caused by configuration or
connections (unreadable certificate, no or unreachable cluster, the port already in use), message on stderr.
"""

from __future__ import annotations

import ssl
import sys
from pathlib import Path

import click

from bridge.cli.exits import EXIT_CONFIG, listen_error
from bridge.logs import setup_logging


@click.command("webhook")
@click.option("--port", show_envvar=True, envvar="BRIDGE_WEBHOOK_PORT", type=click.IntRange(1, 65535), default=8443, show_default=True,
              help="HTTPS port for /mutate, /healthz, /readyz and /metrics.")
@click.option("--bind-address", show_envvar=True, envvar="BRIDGE_WEBHOOK_BIND_ADDRESS", default="127.0.0.1", show_default=True,
              help="Address to listen on. In a cluster the API server comes through the Service: the chart passes "
                   "0.0.0.0 (and a NetworkPolicy can admit only the API server).")
@click.option("--tls-cert-file", show_envvar=True, envvar="BRIDGE_WEBHOOK_TLS_CERT_FILE", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="Serving certificate (PEM); reloaded when it changes on disk (cert-manager rotation). Required "
                   "unless --self-signed.")
@click.option("--tls-key-file", show_envvar=True, envvar="BRIDGE_WEBHOOK_TLS_KEY_FILE", default=None,
              type=click.Path(exists=True, dir_okay=False), help="Private key of the serving certificate (PEM).")
@click.option("--self-signed", "self_signed", show_envvar=True, envvar="BRIDGE_WEBHOOK_SELF_SIGNED", default=None,
              type=click.Path(file_okay=False),
              help="For running outside a cluster: make (or reuse) a local CA and a serving certificate for "
                   "--self-signed-hosts in this directory and serve with them; writes ca.crt (the caBundle) and "
                   "mutatingwebhookconfiguration.yaml (the registration for https://<first host>:<port>/mutate).")
@click.option("--self-signed-hosts", show_envvar=True, envvar="BRIDGE_WEBHOOK_SELF_SIGNED_HOSTS",
              default="127.0.0.1,localhost", show_default=True,
              help="DNS names and IP addresses the --self-signed certificate is for, comma-separated; the first "
                   "is the registration URL's host.")
@click.option("--register", is_flag=True, show_envvar=True, envvar="BRIDGE_WEBHOOK_REGISTER", default=False,
              help="With --self-signed: create or update the MutatingWebhookConfiguration 'dra-bridge' through the "
                   "API once serving (needs write access to mutatingwebhookconfigurations; the chart does not use "
                   "it).")
@click.option("--client-ca-file", show_envvar=True, envvar="BRIDGE_WEBHOOK_CLIENT_CA_FILE", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="Accept AdmissionReviews only from clients with a certificate signed by this CA (the API server, "
                   "configured with a client certificate for this webhook in its --admission-control-config-file); "
                   "others get 403. Probes need no certificate.")
@click.option("--client-name", "client_names", show_envvar=True, envvar="BRIDGE_WEBHOOK_CLIENT_NAMES", default="",
              help="With --client-ca-file: accept only certificates whose subject CN or a DNS SAN is one of these "
                   "(comma-separated). Default: any certificate the CA signed.")
@click.option("--max-templates-per-namespace", show_envvar=True, envvar="BRIDGE_WEBHOOK_MAX_TEMPLATES_PER_NAMESPACE",
              type=click.IntRange(1, 100_000), default=100, show_default=True,
              help="ResourceClaimTemplates of ours (one per GPU count and selector in use) the webhook creates in a "
                   "namespace at most; a pod that would need another is admitted untranslated with a warning.")
@click.option("--kubeconfig", show_envvar=True, envvar="BRIDGE_WEBHOOK_KUBECONFIG", default=None,
              help="Kubeconfig file (default: KUBECONFIG, ~/.kube/config, then in-cluster).")
@click.option("--context", show_envvar=True, envvar="BRIDGE_WEBHOOK_CONTEXT", default=None, help="Kubeconfig context.")
@click.option("--device-class", show_envvar=True, envvar="BRIDGE_WEBHOOK_DEVICE_CLASS", default="gpu.dra-bridge.io", show_default=True,
              help="The bridge's DeviceClass: claims request it; the extended target uses its implicit name.")
@click.option("--target", show_envvar=True, envvar="BRIDGE_WEBHOOK_TARGET", type=click.Choice(["auto", "claims", "extended"]),
              default="auto", show_default=True,
              help="claims: ResourceClaimTemplates; extended: deviceclass.resource.kubernetes.io/<class> (needs "
                   "DRAExtendedResource, 1.36+); auto: extended when the API server and every GPU node's kubelet "
                   "are 1.36+ and the DeviceClass exists, else claims. A namespace label dra-bridge.io/target "
                   "overrides it.")
@click.option("--translate-scheduler", "translate_schedulers", show_envvar=True,
              envvar="BRIDGE_WEBHOOK_TRANSLATE_SCHEDULERS", multiple=True, metavar="NAME",
              help="Also translate pods whose spec.schedulerName is NAME (repeatable; the variable takes names "
                   "separated by spaces). Only kube-scheduler allocates claims: give the names of kube-scheduler "
                   "profiles, or of schedulers that allocate DRA claims. default-scheduler is always translated; "
                   "pods of any other scheduler (Volcano, KAI, YuniKorn, ...) stay on the device plugin with a "
                   "warning and an Event.")
@click.option("--serve-check-interval", show_envvar=True, envvar="BRIDGE_WEBHOOK_SERVE_CHECK_INTERVAL",
              type=click.FloatRange(min=1.0), default=300.0, show_default=True,
              help="Seconds between checks that the API server keeps a pod's claims (a dry-run pod create in the "
                   "webhook's namespace; nothing is translated while it drops them or cannot be checked) and that "
                   "the DeviceClass exists.")
@click.option("--namespace", show_envvar=True, envvar=["BRIDGE_WEBHOOK_NAMESPACE", "POD_NAMESPACE"], default="",
              help="The webhook's own namespace, never mutated (default: the service account's namespace).")
@click.option("--api-timeout", show_envvar=True, envvar="BRIDGE_WEBHOOK_API_TIMEOUT", type=click.FloatRange(min=0.1),
              default=3.0, show_default=True,
              help="Seconds for one API request, retries included (a namespace lookup or template create on the "
                   "admission path; at start, discovery).")
@click.option("--max-body-bytes", show_envvar=True, envvar="BRIDGE_WEBHOOK_MAX_BODY_BYTES", type=click.IntRange(1024, 64 << 20),
              default=3 << 20, show_default=True, help="Larger request bodies are refused with 413.")
@click.option("--log-format", show_envvar=True, envvar="BRIDGE_LOG_FORMAT", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--log-level", show_envvar=True, envvar="BRIDGE_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              help="info: start-up, registration, and each review that needs a look (untranslatable, invalid, "
                   "error); debug: also one line per routine review (translated, shadow, skipped, no-gpu), which the "
                   "pod's dra-bridge.io/translated annotation and the dra_bridge_webhook_reviews counter record anyway.")
def webhook(port: int, bind_address: str, tls_cert_file: str | None, tls_key_file: str | None,
            self_signed: str | None, self_signed_hosts: str, register: bool, client_ca_file: str | None,
            client_names: str, max_templates_per_namespace: int, kubeconfig: str | None,
            context: str | None, device_class: str, target: str, translate_schedulers: tuple[str, ...],
            serve_check_interval: float, namespace: str, api_timeout: float,
            max_body_bytes: int, log_format: str, log_level: str) -> None:
    """Serve the mutating admission webhook (HTTPS, AdmissionReview v1).

    \b
    Namespaces opt in with the label dra-bridge.io/mode:
      legacy  (default) nothing changes
      shadow  the translation is recorded on each new pod (annotation), nothing else changes
      dra     new pods asking nvidia.com/gpu are translated to DRA
    A pod opts out with the annotation dra-bridge.io/translate: "false". Pods whose
    nvidia.com/gpu is not a whole GPU where they can run (MIG single,
    time-slicing, MPS), pods with spec.nodeName or another scheduler, and
    every pod while the API server drops claims, stay on the device plugin
    with a warning and a DRABridgeUntranslatable Event.

    \b
    On one machine (the sandbox; TLS from a local CA, registered through the API):
      bridge webhook --kubeconfig /tmp/sandbox.kubeconfig --self-signed /tmp/webhook --register
    """
    from bridge.kube.errors import KubeError
    from bridge.webhook.app import WebhookOptions, run
    from bridge.webhook.selfsigned import SelfSignedError, ensure_self_signed, write_registration
    from bridge.webhook.tls import server_context

    if len(device_class) > 63 or not device_class.replace("-", "").replace(".", "").isalnum() or device_class != device_class.lower():
        raise click.BadParameter("must be a lower-case DNS subdomain of at most 63 characters", param_hint="--device-class")
    for name in translate_schedulers:
        if not name or len(name) > 253 or any(ch.isspace() for ch in name):
            raise click.BadParameter(f"{name!r} is not a scheduler name", param_hint="--translate-scheduler")
    if self_signed is not None and (tls_cert_file or tls_key_file):
        raise click.UsageError("give either --self-signed or --tls-cert-file/--tls-key-file, not both")
    if self_signed is None and not (tls_cert_file and tls_key_file):
        raise click.UsageError("Missing option '--tls-cert-file' and '--tls-key-file' (or --self-signed DIR to make a "
                               "local certificate)")
    if register and self_signed is None:
        raise click.UsageError("--register needs --self-signed (it registers the local CA as the caBundle)")
    names = tuple(n.strip() for n in client_names.split(",") if n.strip())
    if names and not client_ca_file:
        raise click.UsageError("--client-name needs --client-ca-file")
    setup_logging(log_format, log_level)
    registration = None
    if self_signed is not None:
        try:
            made = ensure_self_signed(Path(self_signed), self_signed_hosts.split(","))
            url = f"https://{_url_host(made.hosts[0])}:{port}/mutate"
            registration = write_registration(made, url, namespace or "dra-bridge")
        except SelfSignedError as err:
            raise click.BadParameter(str(err), param_hint="--self-signed/--self-signed-hosts") from err
        tls_cert_file, tls_key_file = str(made.cert_file), str(made.key_file)
        click.echo(f"bridge webhook: {'made' if made.generated else 'reusing'} a local CA and a certificate for "
                   f"{', '.join(made.hosts)} in {made.directory}; caBundle {made.ca_file}; registration for {url} in "
                   f"{made.registration_file}", err=True)
    assert tls_cert_file is not None and tls_key_file is not None
    try:
        server_context(tls_cert_file, tls_key_file, client_ca_file)
    except (OSError, ssl.SSLError) as err:
        hint = "--tls-cert-file/--tls-key-file" + ("/--client-ca-file" if client_ca_file else "")
        raise click.BadParameter(f"certificate and key do not load: {err}", param_hint=hint)
    options = WebhookOptions(cert_file=tls_cert_file, key_file=tls_key_file, port=port, host=bind_address,
                             kubeconfig=kubeconfig, context=context, device_class=device_class, target=target,
                             namespace=namespace, max_body=max_body_bytes, api_timeout=api_timeout,
                             client_ca_file=client_ca_file, client_names=names,
                             max_templates_per_namespace=max_templates_per_namespace,
                             register=registration if register else None,
                             schedulers=tuple(translate_schedulers), serve_check_interval=serve_check_interval)
    try:
        run(options)
    except OSError as err:
        friendly = listen_error(err, "webhook HTTPS port", f"{bind_address}:{port}", "--port", "BRIDGE_WEBHOOK_PORT")
        click.echo(f"bridge webhook: {friendly or err}", err=True)
        sys.exit(EXIT_CONFIG)
    except KubeError as err:
        click.echo(f"bridge webhook: {err}", err=True)
        sys.exit(EXIT_CONFIG)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
