"""`bridge sandbox`: stand-ins for a cluster on one machine (the API emulator; the kubelet simulator joins later)."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import click

from bridge.cli.exits import EXIT_CONFIG, listen_error
from bridge.logs import setup_logging


@click.group()
def sandbox() -> None:
    """Stand-ins for a Kubernetes cluster on one machine, for tests and demos."""


def _resource_versions(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    from bridge.sandbox.apiserver.registry import KNOWN_RESOURCE_VERSIONS

    versions = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [v for v in versions if v not in KNOWN_RESOURCE_VERSIONS]
    if not versions or unknown:
        raise click.BadParameter(f"expected a comma-separated subset of {','.join(KNOWN_RESOURCE_VERSIONS)}, got {value!r}")
    return versions


def _k8s_version(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from bridge.sandbox.apiserver.discovery import parse_version

    try:
        parse_version(value)
    except ValueError as err:
        raise click.BadParameter(str(err)) from err
    return value.lstrip("v")


@sandbox.command()
@click.option("--host", default="127.0.0.1", show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_HOST",
              help="Address to listen on (loopback by default; the emulator has no authentication).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_PORT",
              help="Port to listen on; 0 picks a free one.")
@click.option("--kubeconfig-out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_KUBECONFIG_OUT", help="Write a kubeconfig for this server here.")
@click.option("--context", "context_name", default="sandbox", show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_CONTEXT",
              help="Context (and cluster/user) name in the kubeconfig.")
@click.option("--load", "load_paths", multiple=True, type=click.Path(exists=True, path_type=Path),
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_LOAD",
              help="YAML/JSON file or directory of objects to create at start (repeatable; env: space-separated).")
@click.option("--version", "k8s_version", default="1.34.2", show_default=True, callback=_k8s_version,
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_VERSION", help="Kubernetes version to report (MAJOR.MINOR.PATCH).")
@click.option("--resource-versions", default="v1,v1beta2,v1beta1", show_default=True, callback=_resource_versions,
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_RESOURCE_VERSIONS",
              help="resource.k8s.io versions to serve (comma-separated); the newest is preferred, as on a real server.")
@click.option("--tls/--no-tls", default=False, show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_TLS",
              help="Serve HTTPS with a throwaway self-signed certificate (embedded in the kubeconfig).")
@click.option("--validate/--no-validate", default=True, show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_VALIDATE",
              help="Validate objects against the Kubernetes schemas and DRA rules (422 on invalid objects).")
@click.option("--history-limit", type=click.IntRange(1), default=1000, show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_HISTORY_LIMIT",
              help="Watch history window; resuming from an older resourceVersion answers 410 Gone.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_LOG_LEVEL")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_LOG_FORMAT")
def apiserver(
    host: str, port: int, kubeconfig_out: Path, context_name: str, load_paths: tuple[Path, ...], k8s_version: str,
    resource_versions: tuple[str, ...], tls: bool, validate: bool, history_limit: int, log_level: str, log_format: str,
) -> None:
    """Run the Kubernetes API emulator until Ctrl-C.

    \b
    Example:
      bridge sandbox apiserver --port 8001 --kubeconfig-out /tmp/sandbox.kubeconfig --load examples/
      kubectl --kubeconfig /tmp/sandbox.kubeconfig get nodes

    Exit codes: 0 after Ctrl-C/SIGTERM, 2 on bad options, objects to load that are invalid, or a port in use.
    """
    from bridge.sandbox.apiserver import ApiServer, LoadError

    setup_logging(log_format, log_level.upper())
    srv = ApiServer(host=host, port=port, version=k8s_version, resource_versions=resource_versions, tls=tls,
                    validate=validate, history_limit=history_limit)
    try:
        for path in load_paths:
            count = srv.load_dir(path)
            click.echo(f"loaded {count} objects from {path}", err=True)
    except LoadError as err:
        click.echo(f"bridge sandbox apiserver: {err}", err=True)
        sys.exit(EXIT_CONFIG)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        srv.start()
    except OSError as err:
        friendly = listen_error(err, "API emulator", f"{host}:{port}", "--port", "BRIDGE_SANDBOX_APISERVER_PORT",
                                any_port=True)
        click.echo(f"bridge sandbox apiserver: {friendly or err}", err=True)
        sys.exit(EXIT_CONFIG)
    try:
        srv.write_kubeconfig(kubeconfig_out, context=context_name)
        click.echo(f"API emulator serving at {srv.url} (Kubernetes v{k8s_version}, resource.k8s.io "
                   f"{','.join(resource_versions)}); kubeconfig: {kubeconfig_out}")
        while not stop.wait(0.5):
            pass
    finally:
        srv.stop()
    click.echo("stopped", err=True)


@sandbox.command()
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), required=True, show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_ROOT",
              help="Kubelet root to simulate (device-plugins/, plugins/, plugins_registry/, pod-resources/ below it).")
@click.option("--node-name", required=True, show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_NODE_NAME", help="The node this kubelet runs.")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_KUBECONFIG",
              help="API server for the DRA side (claims, ResourceSlice wipe at start); without it, device plugins only.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_LOG_LEVEL")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_LOG_FORMAT")
def kubelet(root: Path, node_name: str, kubeconfig: Path | None, log_level: str, log_format: str) -> None:
    """Run the kubelet simulator until Ctrl-C: device-plugin registration, PodResources and (with --kubeconfig)
    the DRA plugin watcher, on real unix sockets under --root.

    \b
    Example:
      bridge sandbox kubelet --root /tmp/kl --node-name node-a --kubeconfig /tmp/sandbox.kubeconfig
    """
    from bridge.node.sockets import SocketPathError
    from bridge.sandbox.kubelet import KubeletSimulator

    setup_logging(log_format, log_level.upper())
    kube = None
    if kubeconfig is not None:
        from bridge.kube import connect

        kube = connect(str(kubeconfig))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        sim = KubeletSimulator(root, kube=kube, node_name=node_name if kube is not None else None).start()
    except (SocketPathError, OSError) as err:
        raise click.ClickException(str(err)) from err
    click.echo(f"kubelet simulator for node {node_name} serving under {root} (DRA side "
               f"{'on' if kube is not None else 'off: no --kubeconfig'})")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        sim.stop()
    click.echo("stopped", err=True)
