"""`bridge node`: the node daemon, ONE process serving the GPUs through the device-plugin API AND DRA; and
`bridge node status NODE`, which shows a node's split from anywhere with API access.

Thin shell: options (each also an env var), validation, then one library call: `DualNode.run()` (or
`cleanup()` with `--cleanup`). SIGTERM and SIGINT stop serving, remove all our sockets and exit 0. Exit codes
(bridge/cli/exits.py): 0 clean stop / cleanup done; 2 bad options or a start failure caused by configuration or
connections (a CDI setup that cannot work, a socket path over 107 bytes, an unwritable state directory, an
unreadable kubeconfig, an unreachable API server, the --http-address port already in use, NVML not usable, the
state directory held by another running daemon: the message names its PID);
1 a corrupt checkpoint (runtime state, not configuration). Messages on stderr, never a traceback.
`bridge node status`: 0 shown, 1 the node has no (readable) split status, 2 bad options, no API connection or
no such node.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import click

from bridge.cli.exits import EXIT_CONFIG, EXIT_NO, listen_error
from bridge.cli.params import node_name as valid_node_name
from bridge.node.bindinggrace import parse_grace
from bridge.inventory.catalog import model_names
from bridge.logs import setup_logging
from bridge.ledger.checkpoint import BOOT_ID_PATH


@click.group("node", invoke_without_command=True)
@click.option("--node-name", show_envvar=True, envvar=["BRIDGE_NODE_NAME", "NODE_NAME"], default=None,
              help="This node's Kubernetes name (env BRIDGE_NODE_NAME or NODE_NAME, e.g. from the downward API). "
                   "Required to run the daemon.")
@click.option("--devices", "devices", show_envvar=True, envvar="BRIDGE_DEVICES", default="nvml", show_default=True,
              help="Where GPUs come from: 'nvml' (the node's GPUs), or simulated ones: 'simulated:8xH100-80GB', a mix "
                   "'simulated:4xA100-40GB,2xL4' (models: " + ", ".join(model_names()) + "), or "
                   "'simulated:/path/devices.yaml'.")
@click.option("--simulated-faults", show_envvar=True, envvar="BRIDGE_SIMULATED_FAULTS", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="With simulated GPUs: a file of health faults to play, one JSON object per line, e.g. "
                   "{\"gpu\": 3, \"xid\": 79} or {\"gpu\": \"GPU-...\", \"healthy\": false, \"reason\": \"...\"} "
                   "(bridge/inventory/faults.py). Read from its start and every 100 ms for new lines; a missing file "
                   "is no fault. How `bridge sandbox cluster` and tests make a simulated GPU fail.")
@click.option("--ignore-xids", show_envvar=True, envvar="BRIDGE_IGNORE_XIDS", default="",
              help="XIDs that do NOT mark a GPU unhealthy, in addition to NVIDIA's defaults 13,31,43,45,68,109 "
                   "(comma-separated, e.g. '48,79'; as the NVIDIA DRA driver's additionalXidsToIgnore).")
@click.option("--kubelet-root", show_envvar=True, envvar="BRIDGE_KUBELET_ROOT", default="/var/lib/kubelet", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="The kubelet's --root-dir; plugins/, plugins_registry/ and pod-resources/ live below it.")
@click.option("--device-plugin-dir", show_envvar=True, envvar="BRIDGE_DEVICE_PLUGIN_DIR",
              default="/var/lib/kubelet/device-plugins", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="The kubelet's device-plugin directory (its kubelet.sock, our plugin socket, its checkpoint). The "
                   "kubelet compiles this path in: it stays /var/lib/kubelet/device-plugins when the kubelet's "
                   "--root-dir (and so --kubelet-root) is elsewhere.")
@click.option("--cdi-root", show_envvar=True, envvar="BRIDGE_CDI_ROOT", default="/var/run/cdi", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Directory for CDI spec files.")
@click.option("--driver-root", show_envvar=True, envvar="BRIDGE_DRIVER_ROOT", default=None,
              help="Host path of the NVIDIA driver's user space (libraries, nvidia-smi, firmware) for CDI specs: '/' "
                   "for a driver installed on the host, '/run/nvidia/driver' under the GPU Operator. Libraries are "
                   "looked for in NVIDIA's standard directories (/usr/lib64, /usr/lib/x86_64-linux-gnu, …) and, "
                   "when those hold none, where the root's /etc/ld.so.cache puts them. Default: '/' "
                   "with --devices nvml; none with simulated GPUs (specs then carry device nodes only).")
@click.option("--dev-root", show_envvar=True, envvar="BRIDGE_DEV_ROOT", default=None,
              help="Host path under which dev/nvidia* exist (default '/'). With --devices nvml, and with simulated "
                   "GPUs when given, specs list only the device nodes that exist there.")
@click.option("--host-root", show_envvar=True, envvar="BRIDGE_HOST_ROOT", default="/", show_default=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Where this process sees the host's '/': '/' on the host, the mount point of a read-only "
                   "hostPath volume of '/' (e.g. /host) in a DaemonSet. --driver-root, --dev-root, the hook and "
                   "/etc/cdi, /var/run/cdi are read through it; specs always name host paths.")
@click.option("--cdi-hook-path", show_envvar=True, envvar="BRIDGE_CDI_HOOK_PATH", default=None,
              help="Host path of the NVIDIA Container Toolkit's nvidia-cdi-hook; specs run its create-symlinks and "
                   "update-ldcache hooks when it exists. Default: /usr/bin/nvidia-cdi-hook, then "
                   "/usr/local/nvidia/toolkit/nvidia-cdi-hook (GPU Operator).")
@click.option("--cdi-source", show_envvar=True, envvar="BRIDGE_CDI_SOURCE", type=click.Choice(["auto", "toolkit", "own"]),
              default="auto", show_default=True,
              help="Whose CDI names claims and Allocate hand out. auto: the NVIDIA Container Toolkit's "
                   "(nvidia.com/gpu=GPU-<uuid>) when its spec in /etc/cdi or /var/run/cdi names the GPUs, else our "
                   "own spec; toolkit: require the toolkit's (exit 2 at start without one); own: always ours.")
@click.option("--state-dir", show_envvar=True, envvar="BRIDGE_STATE_DIR", default="/var/lib/dra-bridge", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Checkpoint and ledger directory. One daemon per directory: it is locked (node.lock), and a "
                   "second daemon on it exits with status 2 naming the holder's PID (see --pod-uid for rolling "
                   "updates).")
@click.option("--claims-dir", show_envvar=True, envvar="BRIDGE_CLAIMS_DIR", default=None,
              type=click.Path(file_okay=False, path_type=Path),
              help="Directory of the prepared-claim records (claims.json), written twice in every "
                   "NodePrepareResources. They are void after a reboot, so a tmpfs such as /var/run/dra-bridge "
                   "(what the chart passes) keeps the kubelet's prepare off the disk. Default: the --state-dir. "
                   "Records a daemon left in another directory are not read: change it on a drained node.")
@click.option("--boot-id-file", show_envvar=True, envvar="BRIDGE_BOOT_ID_FILE", default=BOOT_ID_PATH,
              show_default=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where the node's boot ID is read: prepared-claim records of an earlier boot are void. Keep the "
                   "default on a real node (a container reads the host's there); a sandbox gives each simulated "
                   "node its own file.")
@click.option("--resource-name", show_envvar=True, envvar="BRIDGE_RESOURCE_NAME", default="nvidia.com/gpu", show_default=True,
              help="Extended resource name served through the device-plugin API.")
@click.option("--device-list-strategy", show_envvar=True, envvar="BRIDGE_DEVICE_LIST_STRATEGY", default="envvar", show_default=True,
              help="How Allocate passes devices to the runtime, comma-separated: envvar, volume-mounts, "
                   "cdi-annotations, cdi-cri (as NVIDIA's deviceListStrategy).")
@click.option("--http-address", show_envvar=True, envvar="BRIDGE_HTTP_ADDRESS", default="127.0.0.1:8080", show_default=True,
              help="Health (/healthz, /readyz) and Prometheus /metrics endpoint: HOST:PORT, :PORT (every interface: "
                   "what a pod's probes and Prometheus need; the chart passes it), or 'off'.")
@click.option("--kubeconfig", show_envvar=True, envvar="BRIDGE_KUBECONFIG", default=None,
              help="Kubeconfig for the API server (default: KUBECONFIG, ~/.kube/config, then the in-cluster service "
                   "account, like kubectl).")
@click.option("--context", "kube_context", show_envvar=True, envvar="BRIDGE_CONTEXT", default=None,
              help="Kubeconfig context to use (default: the current context).")
@click.option("--driver-name", show_envvar=True, envvar="BRIDGE_DRIVER_NAME", default="gpu.dra-bridge.io",
              show_default=True, help="DRA driver name: ResourceSlices, DeviceClass selector, CDI vendor, sockets.")
@click.option("--dra", "dra_mode", show_envvar=True, envvar="BRIDGE_DRA", type=click.Choice(["auto", "on", "off"]),
              default="auto", show_default=True,
              help="Serve the DRA kubelet-plugin API too. auto: on when an API connection is configured or the "
                   "daemon runs in a cluster, else device-plugin only (with a warning).")
@click.option("--dra-devices", show_envvar=True, envvar="BRIDGE_DRA_DEVICES", default=None,
              help="Cluster default split: which GPUs serve DRA, the rest serving the device plugin. '0': none; 'N' "
                   "(a count, e.g. '2'): that many GPUs, chosen by the daemon (free ones first, NVLink/NUMA islands "
                   "kept on one side, the highest indexes on an idle node); 'all'; or a list 'gpu-6,gpu-7' (names or "
                   "UUIDs). Case-insensitive. The Node's dra-bridge.io/dra-devices annotation or label overrides it. "
                   "Default: 0 (all legacy).")
@click.option("--slice-taints", show_envvar=True, envvar="BRIDGE_SLICE_TAINTS", type=click.Choice(["auto", "on", "off"]),
              default="auto", show_default=True,
              help="Unhealthy DRA devices: NoSchedule device taint (on), removal from the slice (off), or probe "
                   "whether the API server keeps taints (auto).")
@click.option("--pod-uid", show_envvar=True, envvar=["BRIDGE_POD_UID", "POD_UID"], default=None,
              help="This pod's UID (downward API metadata.uid): put in socket names, and marks a rolling update: "
                   "a daemon whose state directory is held by one with another pod UID waits in standby (reporting "
                   "ready) and takes over when that one exits, instead of being refused.")
@click.option("--split-grace", show_envvar=True, envvar="BRIDGE_SPLIT_GRACE", default="auto", show_default=True,
              help="A GPU leaving DRA is offered to the device plugin only this many seconds after the ResourceSlice "
                   "without it is published (bindings the scheduler decided on the old slice), and only if no claim "
                   "then holds it nor a pod nominated to this node waits for an allocation. auto: 5 from Kubernetes "
                   "1.35, where the scheduler nominates pods to their node before it writes their allocation; 605 "
                   "before (VolumeBinding's PreBind may hold a binding 600 s): set a number (seconds) to override.")
@click.option("--move-timeout", show_envvar=True, envvar="BRIDGE_MOVE_TIMEOUT", type=click.FloatRange(min=1),
              default=60.0, show_default=True,
              help="A GPU leaving the device plugin goes to DRA only once the Node's allocatable shows the smaller "
                   "count (the kubelet posts node status every 10 s); a move the scheduler cannot see after this "
                   "many seconds is aborted and retried later. Raise it with a longer nodeStatusUpdateFrequency.")
@click.option("--cleanup", is_flag=True, show_envvar=True, envvar="BRIDGE_CLEANUP", default=False,
              help="Uninstall: delete this node's ResourceSlices of the driver, remove our CDI specs and sockets, "
                   "exit 0.")
@click.option("--log-format", show_envvar=True, envvar="BRIDGE_LOG_FORMAT", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Log lines on stderr: text for people, json (one object a line) for pipelines.")
@click.option("--log-level", show_envvar=True, envvar="BRIDGE_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              help="Least severe log level written.")
@click.pass_context
def node(ctx: click.Context, node_name: str | None, devices: str, simulated_faults: Path | None, ignore_xids: str,
         kubelet_root: Path, device_plugin_dir: Path, cdi_root: Path, driver_root: str | None, dev_root: str | None,
         host_root: Path, cdi_hook_path: str | None,
         cdi_source: str, state_dir: Path, claims_dir: Path | None, boot_id_file: Path, resource_name: str,
         device_list_strategy: str,
         http_address: str,
         kubeconfig: str | None, kube_context: str | None, driver_name: str, dra_mode: str,
         dra_devices: str | None, slice_taints: str, pod_uid: str | None, split_grace: str,
         move_timeout: float, cleanup: bool, log_format: str, log_level: str) -> None:
    """Run the node daemon: discover GPUs and serve each one to exactly one kubelet API, the device plugin
    (v1beta1, nvidia.com/gpu) or DRA (v1/v1beta1 kubelet plugin, ResourceSlices, CDI), from one inventory.

    \b
    Example (device plugin + DRA, 2 GPUs on the DRA side unless the Node says otherwise):
      bridge node --node-name $NODE_NAME --kubeconfig /etc/bridge/kubeconfig --dra-devices 2
    Uninstall (delete this node's slices, CDI specs and sockets):
      bridge node --node-name $NODE_NAME --cleanup
    A node's split (sides, holders, moves not done yet and why, refusals), from anywhere:
      bridge node status NODE

    \b
    Host paths a DaemonSet must mount (hostPath volumes):
      /var/lib/kubelet  at the same path (--kubelet-root: DRA plugin sockets, pod-resources; and
                        --device-plugin-dir, always /var/lib/kubelet/device-plugins)
      /var/run/cdi      at the same path, read-write (--cdi-root: the specs we write)
      /var/lib/dra-bridge at the same path (--state-dir: checkpoint)
      /                 read-only at /host with mountPropagation HostToContainer, and --host-root /host
                        (the driver root, /dev/nvidia*, nvidia-cdi-hook and /etc/cdi are read through it;
                        HostToContainer lets a GPU Operator driver root mounted later appear)
    Under the GPU Operator's driver container add --driver-root /run/nvidia/driver --dev-root /run/nvidia/driver
    (its root holds dev/nvidia*: NVIDIA's device plugin takes a driver root with dev/ as the dev root too).
    Stuck? `kill -USR1 <pid>` writes every thread's stack to the log and the daemon carries on. A stop that
    takes over 20 s after SIGTERM (the chart gives 30) writes them too and exits with status 1.
    """
    if ctx.invoked_subcommand is not None:
        return
    if node_name is None:
        raise click.MissingParameter(ctx=ctx, param=next(p for p in ctx.command.params if p.name == "node_name"))
    from bridge.cdi import CdiConfigError, CdiOptions
    from bridge.cdi.provider import DEFAULT_HOOK_PATHS
    from bridge.deviceplugin.allocate import StrategyError, parse_strategies
    from bridge.inventory.model import InventoryError
    from bridge.inventory.options import parse_devices_option
    from bridge.inventory.xid import parse_xid_list
    from bridge.node.daemon import NodeConfig
    from bridge.node.http import AddressError, parse_address
    from bridge.node.instance import InstanceBusy
    from bridge.node.podresources import AdoptionError
    from bridge.unixsock import SocketPathError
    from bridge.node.statedir import ensure_state_dir
    from bridge.deviceplugin.registration import is_extended_resource_name
    from bridge.dra.slices import SliceError, validate_driver_name
    from bridge.kube.errors import KubeError
    from bridge.ledger.checkpoint import CheckpointError
    from bridge.ledger.target import SplitError, parse_split
    from bridge.node.dual import (DraOptions, DualNode, arm_stop_deadline, cleanup as run_cleanup,
                                   device_plugin_socket_name, dra_wanted, enable_stack_dumps)

    if not node_name.strip():
        raise click.BadParameter("must not be empty", param_hint="--node-name")
    if not is_extended_resource_name(resource_name):
        raise click.BadParameter(f"{resource_name!r} is not an extended resource name (e.g. nvidia.com/gpu)",
                                 param_hint="--resource-name")
    try:
        strategies = parse_strategies(device_list_strategy)
    except StrategyError as err:
        raise click.BadParameter(str(err), param_hint="--device-list-strategy") from err
    try:
        address = parse_address(http_address)
    except AddressError as err:
        raise click.BadParameter(str(err), param_hint="--http-address") from err
    try:
        grace = parse_grace(split_grace)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--split-grace") from err
    try:
        validate_driver_name(driver_name)
    except SliceError as err:
        raise click.BadParameter(str(err), param_hint="--driver-name") from err
    if dra_devices is not None and dra_devices.strip():
        try:
            parse_split(dra_devices)
        except SplitError as err:
            raise click.BadParameter(str(err), param_hint="--dra-devices") from err
    if pod_uid is not None:
        pod_uid = pod_uid.strip() or None
    if pod_uid is not None and not all(c.isalnum() or c == "-" for c in pod_uid):
        raise click.BadParameter(f"{pod_uid!r} is not a pod UID (letters, digits and '-')", param_hint="--pod-uid")
    try:
        extra_ignored = parse_xid_list(ignore_xids)
    except InventoryError as err:
        raise click.BadParameter(str(err), param_hint="--ignore-xids") from err
    try:
        source = parse_devices_option(devices, node_name, additional_ignored_xids=extra_ignored,
                                      faults=simulated_faults)
    except InventoryError as err:
        hint = "--simulated-faults" if "--simulated-faults" in str(err) else "--devices"
        raise click.BadParameter(str(err), param_hint=hint) from err

    for value, hint in ((driver_root, "--driver-root"), (dev_root, "--dev-root"), (cdi_hook_path, "--cdi-hook-path")):
        if value is not None and not value.startswith("/"):
            raise click.BadParameter(f"{value!r} is not an absolute host path", param_hint=hint)
    real_gpus = devices.strip() == "nvml"
    cdi = CdiOptions(source=cdi_source,  # type: ignore[arg-type]
                     driver_root=driver_root if driver_root is not None else ("/" if real_gpus else None),
                     dev_root=dev_root or "/", check_device_nodes=real_gpus or dev_root is not None,
                     host_root=host_root, hook_paths=(cdi_hook_path,) if cdi_hook_path else DEFAULT_HOOK_PATHS)

    setup_logging(log_format, log_level)
    config = NodeConfig(node_name=node_name, kubelet_root=kubelet_root, device_plugin_dir=device_plugin_dir,
                        cdi_root=cdi_root, state_dir=state_dir, claims_dir=claims_dir,
                        resource_name=resource_name, device_list_strategy=strategies, http_address=address,
                        device_plugin_socket_name=device_plugin_socket_name(resource_name, pod_uid), cdi=cdi)
    opts = DraOptions(mode=dra_mode, kubeconfig=kubeconfig, context=kube_context,  # type: ignore[arg-type]
                      driver=driver_name, dra_devices=dra_devices, slice_taints=slice_taints,  # type: ignore[arg-type]
                      pod_uid=pod_uid, split_grace_s=grace, move_timeout_s=move_timeout,
                      boot_id_path=boot_id_file)
    if cleanup:
        try:
            kube = None
            if dra_wanted(opts)[0]:
                from bridge.kube import connect

                kube = connect(kubeconfig, kube_context)
            else:
                click.echo("bridge node --cleanup: no API connection configured: ResourceSlices not touched", err=True)
            report = run_cleanup(config, opts, kube)
        except (KubeError, OSError, SocketPathError, InstanceBusy) as err:
            click.echo(f"bridge node --cleanup: {err}", err=True)
            sys.exit(EXIT_CONFIG)
        click.echo(f"cleanup: deleted {report.slices_deleted} ResourceSlice(s), removed "
                   f"{len(report.cdi_specs_removed)} CDI spec(s) and {len(report.sockets_removed)} socket(s)")
        return
    if dra_wanted(opts)[0]:
        from bridge.ledger.checkpoint import read_boot_id

        try:  # the claim records are stamped with it: an unreadable one would fail every prepare
            read_boot_id(boot_id_file)
        except CheckpointError as err:
            raise click.BadParameter(str(err), param_hint="--boot-id-file") from err
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if not stop.is_set():
            arm_stop_deadline()  # the stop is bounded, stuck or not (STOP_DEADLINE_S)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # `kill -USR1 <pid>` writes every thread's stack to stderr (the pod log) and the daemon carries on: what an
    # operator (or a test) reads when the daemon seems stuck.
    enable_stack_dumps()
    try:
        ensure_state_dir(state_dir)
        if claims_dir is not None:
            ensure_state_dir(claims_dir, option="--claims-dir")
        DualNode(config, source, opts).run(stop)
    except CheckpointError as err:
        click.echo(f"bridge node: {err}", err=True)
        sys.exit(EXIT_NO)
    except OSError as err:
        where = f"{address[0] or '0.0.0.0'}:{address[1]}" if address is not None else ""
        friendly = listen_error(err, "health and metrics endpoint", where, "--http-address", "BRIDGE_HTTP_ADDRESS",
                                can_disable=True) if where and where in str(err) else None
        click.echo(f"bridge node: {friendly or err}", err=True)
        sys.exit(EXIT_CONFIG)
    except (CdiConfigError, SocketPathError, InventoryError, AdoptionError, KubeError, InstanceBusy) as err:
        click.echo(f"bridge node: {err}", err=True)
        sys.exit(EXIT_CONFIG)


@node.command("status")
@click.argument("name", metavar="NODE", callback=valid_node_name)
@click.option("--output", "-o", show_envvar=True, envvar="BRIDGE_NODE_STATUS_OUTPUT",
              type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--kubeconfig", show_envvar=True, envvar="BRIDGE_KUBECONFIG", default=None,
              help="Kubeconfig for the API server (default: KUBECONFIG, ~/.kube/config, then in-cluster).")
@click.option("--context", "kube_context", show_envvar=True, envvar="BRIDGE_CONTEXT", default=None,
              help="Kubeconfig context to use (default: the current context).")
@click.option("--timeout", show_envvar=True, envvar="BRIDGE_NODE_STATUS_TIMEOUT", type=click.FloatRange(min=0.1),
              default=10.0, show_default=True, help="Seconds to wait for the API server.")
def status(name: str, output: str, kubeconfig: str | None, kube_context: str | None, timeout: float) -> None:
    """Show NODE's DRA split: what it asks for, each GPU's side and holders, the GPUs not yet where the target
    asks and why, and the latest refusals (from the daemon's dra-bridge.io/split-status annotation)."""
    from bridge.kube import NODES, connect
    from bridge.kube.errors import KubeError, NotFound
    from bridge.kube.retry import RetryPolicy
    from bridge.humantext import escape
    from bridge.node.statusview import render_json, render_table, view_of

    try:
        api = connect(kubeconfig, kube_context, timeout=timeout, retry=RetryPolicy(deadline=timeout))
        obj = api.get(NODES, name)
    except NotFound:
        click.echo(f"bridge node status: node {name!r} not found", err=True)
        sys.exit(2)
    except KubeError as err:
        click.echo(f"bridge node status: {escape(err.message)}", err=True)
        sys.exit(2)
    view = view_of(obj)
    click.echo(render_json(view) if output == "json" else render_table(view))
    if view.status is None:
        sys.exit(1)
