"""`bridge sandbox`: stand-ins for a cluster on one machine: the API emulator, the kubelet simulator, and a whole
cluster of both with the control-plane stand-ins and the real bridge components (`cluster`)."""

from __future__ import annotations

import shlex
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


def _resource_versions(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    from bridge.sandbox.apiserver.registry import KNOWN_RESOURCE_VERSIONS

    if value is None:
        return None  # the release's default
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
@click.option("--resource-versions", default=None, callback=_resource_versions,
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_RESOURCE_VERSIONS",
              help="resource.k8s.io versions to serve (comma-separated; e.g. v1,v1beta2,v1beta1, as kube-apiserver's "
                   "--runtime-config enables betas); the newest is preferred, as on a real server. Default: what the "
                   "release serves by default (v1 alone from 1.34; v1beta2,v1beta1 for 1.33; v1beta1 for 1.32).")
@click.option("--tls/--no-tls", default=False, show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_TLS",
              help="Serve HTTPS with a throwaway self-signed certificate (embedded in the kubeconfig).")
@click.option("--validate/--no-validate", default=True, show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_VALIDATE",
              help="Validate objects against the Kubernetes schemas and DRA rules (422 on invalid objects).")
@click.option("--history-limit", type=click.IntRange(1), default=1000, show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_HISTORY_LIMIT",
              help="Watch history window; resuming from an older resourceVersion answers 410 Gone.")
@click.option("--admission-control-config-file", "admission_config", default=None,
              type=click.Path(exists=True, dir_okay=False, path_type=Path), show_envvar=True,
              envvar="BRIDGE_SANDBOX_APISERVER_ADMISSION_CONTROL_CONFIG_FILE",
              help="As kube-apiserver's: an AdmissionConfiguration whose MutatingAdmissionWebhook plugin names a "
                   "kubeconfig with the client certificate (or token) to present to each webhook host.")
@click.option("--default-not-ready-toleration-seconds", "not_ready_seconds", type=click.IntRange(0), default=300,
              show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_DEFAULT_NOT_READY_TOLERATION_SECONDS",
              help="As kube-apiserver's (DefaultTolerationSeconds admission): the tolerationSeconds of the "
                   "not-ready:NoExecute toleration added to every pod that has no such toleration.")
@click.option("--default-unreachable-toleration-seconds", "unreachable_seconds", type=click.IntRange(0), default=300,
              show_default=True, show_envvar=True,
              envvar="BRIDGE_SANDBOX_APISERVER_DEFAULT_UNREACHABLE_TOLERATION_SECONDS",
              help="As kube-apiserver's: the same for unreachable:NoExecute.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_LOG_LEVEL")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_APISERVER_LOG_FORMAT")
def apiserver(
    host: str, port: int, kubeconfig_out: Path, context_name: str, load_paths: tuple[Path, ...], k8s_version: str,
    resource_versions: tuple[str, ...] | None, tls: bool, validate: bool, history_limit: int, admission_config: Path | None,
    not_ready_seconds: int, unreachable_seconds: int, log_level: str, log_format: str,
) -> None:
    """Run the Kubernetes API emulator until Ctrl-C.

    \b
    Example:
      bridge sandbox apiserver --port 8001 --kubeconfig-out /tmp/sandbox.kubeconfig --load examples/
      kubectl --kubeconfig /tmp/sandbox.kubeconfig get nodes

    Exit codes: 0 after Ctrl-C/SIGTERM, 2 on bad options, objects to load that are invalid, or a port in use.
    """
    from bridge.sandbox.apiserver import ApiServer, LoadError
    from bridge.sandbox.apiserver.tolerationseconds import DefaultTolerationSeconds
    from bridge.sandbox.apiserver.webhookauth import AdmissionConfigError

    setup_logging(log_format, log_level.upper())
    try:
        srv = ApiServer(host=host, port=port, version=k8s_version, resource_versions=resource_versions, tls=tls,
                        validate=validate, history_limit=history_limit, admission_config=admission_config,
                        toleration_seconds=DefaultTolerationSeconds(not_ready_seconds, unreachable_seconds))
    except AdmissionConfigError as err:
        click.echo(f"bridge sandbox apiserver: --admission-control-config-file: {err}", err=True)
        sys.exit(EXIT_CONFIG)
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
                   f"{','.join(srv.resource_versions)}); kubeconfig: {kubeconfig_out}")
        while not stop.wait(0.5):
            pass
    finally:
        srv.stop()
    click.echo("stopped", err=True)


def _kubelet_version(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from bridge.sandbox.kubelet.version import KubeletVersion, VersionError

    try:
        KubeletVersion.parse(value)
    except VersionError as err:
        raise click.BadParameter(str(err)) from err
    return value


def _labels(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        for part in item.split(","):
            key, sep, val = part.strip().partition("=")
            if not part.strip():
                continue
            if not sep or not key:
                raise click.BadParameter(f"expected KEY=VALUE, got {part!r}")
            out[key] = val
    return out


@sandbox.command()
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), required=True, show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_ROOT",
              help="Kubelet root to simulate (device-plugins/, plugins/, plugins_registry/, pod-resources/ below it).")
@click.option("--node-name", required=True, show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_NODE_NAME", help="The node this kubelet runs.")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_KUBECONFIG",
              help="API server: registers the Node, posts its status, runs the pods bound to it and serves the DRA "
                   "side (claims, ResourceSlice wipes). Without it, device plugins and PodResources only.")
@click.option("--kubernetes-version", "version", default="1.34", show_default=True, callback=_kubelet_version,
              show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_KUBERNETES_VERSION",
              help="Kubelet release to play (1.32-1.38): decides e.g. the device-plugin disconnect rule (1.37 "
                   "disconnects only the plugin instance whose stream ended) and DRA extended resources (1.36+).")
@click.option("--node-status-frequency", type=click.FloatRange(min=0.05), default=10.0, show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_NODE_STATUS_FREQUENCY",
              help="Seconds between Node status updates (the kubelet's nodeStatusUpdateFrequency).")
@click.option("--node-label", "node_labels", multiple=True, callback=_labels, show_envvar=True,
              envvar="BRIDGE_SANDBOX_KUBELET_NODE_LABELS",
              help="KEY=VALUE label to register the Node with (repeatable or comma-separated; the kubelet's "
                   "--node-labels).")
@click.option("--register-node/--no-register-node", default=True, show_default=True, show_envvar=True,
              envvar="BRIDGE_SANDBOX_KUBELET_REGISTER_NODE",
              help="Create the Node (or reconcile an existing one) and post its status, as a kubelet does.")
@click.option("--run-pods/--no-run-pods", default=True, show_default=True, show_envvar=True,
              envvar="BRIDGE_SANDBOX_KUBELET_RUN_PODS",
              help="Run the pods bound to this node (admission, Allocate, NodePrepareResources, status).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_LOG_LEVEL")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_KUBELET_LOG_FORMAT")
def kubelet(root: Path, node_name: str, kubeconfig: Path | None, version: str, node_status_frequency: float,
            node_labels: dict[str, str], register_node: bool, run_pods: bool, log_level: str, log_format: str) -> None:
    """Run the kubelet simulator until Ctrl-C: device-plugin registration, PodResources and, with --kubeconfig,
    the Node's registration and status, the pods bound to it and the DRA plugin watcher, on real unix sockets
    under --root.

    \b
    Example:
      bridge sandbox kubelet --root /tmp/kl --node-name node-a --kubeconfig /tmp/sandbox.kubeconfig
    """
    from bridge.unixsock import SocketPathError
    from bridge.sandbox.kubelet import KubeletConfig, KubeletSimulator, MachineInfo

    setup_logging(log_format, log_level.upper())
    kube = None
    if kubeconfig is not None:
        from bridge.kube import ConfigError, connect

        try:
            kube = connect(str(kubeconfig))
        except ConfigError as err:
            raise click.BadParameter(str(err), param_hint="--kubeconfig") from err
    on_api = kube is not None
    config = KubeletConfig(version=version, register_node=register_node and on_api, run_pods=run_pods and on_api,
                           node_status_frequency=node_status_frequency, machine=MachineInfo(labels=node_labels))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        sim = KubeletSimulator(root, kube=kube, node_name=node_name if on_api else None, config=config).start()
    except (SocketPathError, OSError) as err:
        raise click.ClickException(str(err)) from err
    parts = [f"DRA side {'on' if on_api else 'off: no --kubeconfig'}"]
    if on_api:
        parts += [f"Node registration {'on' if config.register_node else 'off'}",
                  f"pods {'run' if config.run_pods else 'not run'}"]
    click.echo(f"kubelet simulator v{sim.version.git_version[1:]} for node {node_name} serving under {root} "
               f"({', '.join(parts)})")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        sim.stop()
    click.echo("stopped", err=True)


@sandbox.command()
@click.option("--backend", type=click.Choice(["standin", "real"]), default="standin", show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_BACKEND",
              help="standin: the API emulator and the scheduler, claim-controller, node lifecycle and taint "
                   "eviction controller stand-ins, in this process (needs "
                   "nothing but this package). real: etcd, kube-apiserver, kube-controller-manager and "
                   "kube-scheduler built from source by `python scripts/build_real.py` (real TLS, RBAC, Node "
                   "authorizer, admission); the nodes are kubelet simulators with their own node credentials.")
@click.option("--kubelets", type=click.Choice(["real", "simulated"]), default=None, show_envvar=True,
              envvar="BRIDGE_SANDBOX_CLUSTER_KUBELETS",
              help="With --backend real: real kubelets, each with its own containerd, runc and CNI bridge, running "
                   "pods in real containers that get our CDI devices (the default there; needs the node set of "
                   "scripts/build_real.py and root), or the kubelet simulators. The stand-in backend always "
                   "simulates them.")
@click.option("--kubernetes-version", "version", default="1.34", show_default=True, callback=_kubelet_version,
              show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_KUBERNETES_VERSION",
              help="Kubernetes release (1.32-1.38) of the API emulator and the kubelets: the served resource.k8s.io "
                   "versions and the DRA features follow it. With --backend real: the built line, 1.37 (v1.37.2, "
                   "the default there), 1.35 (v1.35.4) or 1.38 (v1.38.0-beta.0).")
@click.option("--nodes", "node_count", type=click.IntRange(1, 64), default=2, show_default=True, show_envvar=True,
              envvar="BRIDGE_SANDBOX_CLUSTER_NODES", help="Number of nodes (node-0, node-1, ...).")
@click.option("--gpus", default="8xH100-80GB", show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_GPUS",
              help="Simulated GPUs per node, as `bridge node --devices simulated:<spec>` takes them "
                   "(e.g. 8xH100-80GB, 4xA100-40GB,2xL4).")
@click.option("--nodes-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_NODES_FILE",
              help="YAML listing the nodes instead (name, gpus, labels, split per node; format in "
                   "bridge/sandbox/cluster/spec.py). Excludes --nodes and --gpus.")
@click.option("--bridge/--no-bridge", "with_bridge", default=False, show_default=True, show_envvar=True,
              envvar="BRIDGE_SANDBOX_CLUSTER_BRIDGE",
              help="Run a real `bridge node` per node with the simulated GPUs, and create the bridge's DeviceClass.")
@click.option("--split", default=None, show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_SPLIT",
              help="Which GPUs of each node serve DRA (`bridge node --dra-devices`: 0, N, all, gpu-6,gpu-7); a "
                   "node's own split in --nodes-file wins. Needs --bridge.")
@click.option("--split-grace", default="auto", show_default=True, show_envvar=True,
              envvar="BRIDGE_SANDBOX_CLUSTER_SPLIT_GRACE",
              help="`bridge node --split-grace` for every node daemon: auto (5 s from 1.35, where kube-scheduler and "
                   "the scheduler stand-in nominate pods before they write their allocation; 605 s before) or "
                   "seconds. Set e.g. 5 to watch GPUs move from DRA to the device plugin quickly on an "
                   "older release. Needs --bridge.")
@click.option("--webhook/--no-webhook", "with_webhook", default=False, show_default=True, show_envvar=True,
              envvar="BRIDGE_SANDBOX_CLUSTER_WEBHOOK",
              help="Run the real `bridge webhook` (HTTPS, throwaway CA) and register it in the API emulator. Needs "
                   "--bridge.")
@click.option("--controller/--no-controller", "with_controller", default=False, show_default=True, show_envvar=True,
              envvar="BRIDGE_SANDBOX_CLUSTER_CONTROLLER",
              help="Run the real `bridge controller` (one replica, no leader election): it sets each node's split "
                   "from pending GPU demand. A split from --nodes-file is an annotation the controller may change; "
                   "pin a node with the label dra-bridge.io/split-pinned: \"true\" there. Needs --bridge.")
@click.option("--controller-interval", type=click.FloatRange(min=0.05), default=5.0, show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_CONTROLLER_INTERVAL",
              help="Seconds between the controller's decisions at most (`bridge controller --interval`).")
@click.option("--controller-args", default="", show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_CONTROLLER_ARGS",
              help="More `bridge controller` options, as one shell-quoted string (e.g. \"--dry-run\" or "
                   "\"--cooldown 10s --max-moves-per-minute 8\").")
@click.option("--kubeconfig-out", type=click.Path(dir_okay=False, path_type=Path), default=None, show_envvar=True,
              envvar="BRIDGE_SANDBOX_CLUSTER_KUBECONFIG_OUT",
              help="Also write the kubeconfig here (it is always written into the work directory).")
@click.option("--host", default="127.0.0.1", show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_HOST",
              help="Address of the API emulator (loopback by default; it has no authentication).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, show_envvar=True,
              envvar="BRIDGE_SANDBOX_CLUSTER_PORT", help="Port of the API emulator; 0 picks a free one.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None, show_envvar=True,
              envvar="BRIDGE_SANDBOX_CLUSTER_WORK_DIR",
              help="Where sockets, state, CDI specs and logs go (at most 40 bytes long: unix socket paths are "
                   "limited). Default: a temporary directory, removed on exit; a given one is kept.")
@click.option("--node-status-frequency", type=click.FloatRange(min=0.05), default=10.0, show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_NODE_STATUS_FREQUENCY",
              help="The kubelets' nodeStatusUpdateFrequency in seconds (GPU moves from the device plugin to DRA "
                   "wait for the Node status to show them).")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True, show_envvar=True,
              envvar="BRIDGE_SANDBOX_CLUSTER_TIMEOUT", help="Seconds to wait for everything to start.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="warning",
              show_default=True, show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_LOG_LEVEL",
              help="Log level of the in-process parts (emulator, kubelets, control plane); each node daemon and the "
                   "webhook log to their own files.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              show_envvar=True, envvar="BRIDGE_SANDBOX_CLUSTER_LOG_FORMAT")
def cluster(backend: str, kubelets: str | None, version: str, node_count: int, gpus: str, nodes_file: Path | None,
            with_bridge: bool, split: str | None, split_grace: str, with_webhook: bool, with_controller: bool,
            controller_interval: float, controller_args: str,
            kubeconfig_out: Path | None, host: str, port: int, work_dir: Path | None,
            node_status_frequency: float, timeout: float, log_level: str, log_format: str) -> None:
    """Run a whole GPU cluster on this machine until Ctrl-C/SIGTERM: the API emulator, one kubelet simulator per
    node (registers its Node, runs the pods bound to it), the scheduler, claim-controller, node lifecycle and taint
    eviction controller stand-ins and,
    optionally, a real `bridge node` per node with simulated GPUs, the real `bridge webhook` and the real
    `bridge controller`.

    \b
    Examples:
      bridge sandbox cluster --nodes 2 --gpus 8xH100-80GB --bridge --split 4 --kubeconfig-out /tmp/sb.kubeconfig
      bridge sandbox cluster --kubernetes-version 1.37 --nodes-file nodes.yaml --bridge --webhook
      bridge sandbox cluster --nodes 4 --bridge --webhook --controller --controller-args "--cooldown 10s"
      bridge sandbox cluster --backend real --bridge --webhook --controller   # after scripts/build_real.py
      kubectl --kubeconfig /tmp/sb.kubeconfig get nodes

    Exit codes: 0 after Ctrl-C/SIGTERM (everything stopped, the temporary work directory removed), 1 when a part
    fails to start (its log's tail is printed), 2 on bad options.
    """
    from bridge.sandbox.cluster import ClusterError, ClusterSpec, SandboxCluster, SpecError, nodes_from_count
    from bridge.sandbox.cluster.spec import nodes_from_file

    ctx = click.get_current_context()
    if backend == "real" and ctx.get_parameter_source("version") in (click.core.ParameterSource.DEFAULT, None):
        version = "1.37"
    if kubelets == "real" and backend != "real":
        raise click.BadParameter("real kubelets run on the real backend: add --backend real", param_hint="--kubelets")
    real_kubelets = backend == "real" and kubelets != "simulated"
    if nodes_file is not None:
        for opt in ("node_count", "gpus"):
            if ctx.get_parameter_source(opt) not in (click.core.ParameterSource.DEFAULT, None):
                raise click.UsageError("--nodes-file lists the nodes: do not combine it with --nodes or --gpus")
    if with_controller and not with_bridge:
        raise click.BadParameter("the controller sets the split the bridge's node daemons apply: add --bridge",
                                 param_hint="--controller")
    try:
        extra_controller_args = tuple(shlex.split(controller_args))
    except ValueError as err:
        raise click.BadParameter(f"not a shell-quoted list of options: {err}", param_hint="--controller-args") from err
    if extra_controller_args and not with_controller:
        raise click.BadParameter("options for a controller that does not run: add --controller",
                                 param_hint="--controller-args")
    from bridge.node.bindinggrace import parse_grace

    try:
        grace = parse_grace(split_grace)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--split-grace") from err
    if grace is not None and not with_bridge:
        raise click.BadParameter("the grace is the bridge's node daemons': add --bridge", param_hint="--split-grace")
    if split is not None and not with_bridge:
        raise click.BadParameter("the split is applied by the bridge's node daemons: add --bridge", param_hint="--split")
    if split is not None:
        from bridge.ledger import parse_split

        try:
            parse_split(split)
        except ValueError as err:  # the ledger's split errors are ValueErrors
            raise click.BadParameter(str(err), param_hint="--split") from err
    try:
        nodes = nodes_from_file(nodes_file) if nodes_file is not None else nodes_from_count(node_count, gpus)
        spec = ClusterSpec(nodes=nodes, kubernetes_version=version, backend=backend, real_kubelets=real_kubelets,
                           bridge=with_bridge,
                           webhook=with_webhook,
                           controller=with_controller, controller_interval=controller_interval,
                           controller_args=extra_controller_args, split=split, split_grace=grace,
                           node_status_frequency=node_status_frequency)
        sandbox_cluster = SandboxCluster(spec, work_dir=work_dir, kubeconfig_out=kubeconfig_out, host=host, port=port)
    except SpecError as err:
        hint = ("--kubernetes-version" if "real backend builds" in str(err)
                else "--nodes-file" if nodes_file else "--gpus")
        raise click.BadParameter(str(err), param_hint=hint) from err
    setup_logging(log_format, log_level.upper())
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        sandbox_cluster.start(timeout=timeout)
    except (ClusterError, OSError) as err:
        click.echo(f"bridge sandbox cluster: {err}", err=True)
        sys.exit(1)
    try:
        click.echo(sandbox_cluster.describe())
        click.echo("ready; Ctrl-C to stop", err=True)
        while not stop.wait(0.5):
            pass
    finally:
        click.echo("stopping", err=True)
        sandbox_cluster.stop()
    click.echo("stopped", err=True)
