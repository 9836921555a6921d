"""`bridge node`: the node daemon (device plugin for nvidia.com/gpu; the DRA half joins the same process).

Thin shell: options (each also an env var), validation, then one `NodeDaemon.run()`. SIGTERM and SIGINT stop
serving, remove our sockets and exit 0. Exit codes: 0 clean stop, 2 bad options, 1 start failure (message on
stderr: e.g. a socket path over 107 bytes, an NVML error).
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import click

from bridge.logs import setup_logging


@click.command("node")
@click.option("--node-name", show_envvar=True, envvar=["BRIDGE_NODE_NAME", "NODE_NAME"], required=True,
              help="This node's Kubernetes name (env BRIDGE_NODE_NAME or NODE_NAME, e.g. from the downward API).")
@click.option("--devices", "devices", show_envvar=True, envvar="BRIDGE_DEVICES", default="nvml", show_default=True,
              help="Where GPUs come from: 'nvml', 'simulated:8xH100-80GB' or 'simulated:/path/devices.yaml'.")
@click.option("--kubelet-root", show_envvar=True, envvar="BRIDGE_KUBELET_ROOT", default="/var/lib/kubelet", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Kubelet root; device-plugins/, plugins/, plugins_registry/ and pod-resources/ live below it.")
@click.option("--cdi-root", show_envvar=True, envvar="BRIDGE_CDI_ROOT", default="/var/run/cdi", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Directory for CDI spec files.")
@click.option("--state-dir", show_envvar=True, envvar="BRIDGE_STATE_DIR", default="/var/lib/dra-bridge", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Checkpoint and ledger directory.")
@click.option("--resource-name", show_envvar=True, envvar="BRIDGE_RESOURCE_NAME", default="nvidia.com/gpu", show_default=True,
              help="Extended resource name served through the device-plugin API.")
@click.option("--device-list-strategy", show_envvar=True, envvar="BRIDGE_DEVICE_LIST_STRATEGY", default="envvar", show_default=True,
              help="How Allocate passes devices to the runtime, comma-separated: envvar, volume-mounts, "
                   "cdi-annotations, cdi-cri (as NVIDIA's deviceListStrategy).")
@click.option("--http-address", show_envvar=True, envvar="BRIDGE_HTTP_ADDRESS", default=":8080", show_default=True,
              help="Health (/healthz, /readyz) and Prometheus /metrics endpoint: HOST:PORT, :PORT, or 'off'.")
@click.option("--log-format", show_envvar=True, envvar="BRIDGE_LOG_FORMAT", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--log-level", show_envvar=True, envvar="BRIDGE_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def node(node_name: str, devices: str, kubelet_root: Path, cdi_root: Path, state_dir: Path, resource_name: str,
         device_list_strategy: str, http_address: str, log_format: str, log_level: str) -> None:
    """Run the node daemon: discover GPUs and serve them to the kubelet (device plugin API v1beta1)."""
    from bridge.deviceplugin.allocate import StrategyError, parse_strategies
    from bridge.inventory.model import InventoryError
    from bridge.inventory.options import parse_devices_option
    from bridge.node.daemon import NodeConfig, NodeDaemon
    from bridge.node.http import AddressError, parse_address
    from bridge.node.podresources import AdoptionError
    from bridge.node.sockets import SocketPathError
    from bridge.deviceplugin.registration import is_extended_resource_name

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
        source = parse_devices_option(devices, node_name)
    except InventoryError as err:
        raise click.BadParameter(str(err), param_hint="--devices") from err

    setup_logging(log_format, log_level)
    config = NodeConfig(node_name=node_name, kubelet_root=kubelet_root, cdi_root=cdi_root, state_dir=state_dir,
                        resource_name=resource_name, device_list_strategy=strategies, http_address=address)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        NodeDaemon(config, source).run(stop)
    except (SocketPathError, InventoryError, AdoptionError, OSError) as err:
        click.echo(f"bridge node: {err}", err=True)
        sys.exit(1)
