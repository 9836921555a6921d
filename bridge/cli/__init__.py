"""The `bridge` command: a thin click shell over the library.

Each subcommand lives in its own module and is imported only when it is run (or when `--help` lists it), so
`bridge webhook` never pays for the node daemon's gRPC imports and vice versa. Every option is also settable
through an environment variable declared on the option and shown by `--help` (tests/test_cli.py holds us to it).
"""

from __future__ import annotations

import importlib

import click

# name -> "module:attribute"; the module is imported lazily.
_COMMANDS: dict[str, str] = {
    "node": "bridge.cli.node:node",
    "controller": "bridge.cli.controller:controller",
    "webhook": "bridge.cli.webhook:webhook",
    "namespace": "bridge.cli.namespace:namespace",
    "migrate-report": "bridge.cli.report:migrate_report",
    "sandbox": "bridge.cli.sandbox:sandbox",
    "demo": "bridge.cli.demo:demo",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "BRIDGE"})
@click.version_option(package_name="dra-bridge", prog_name="bridge")
def main() -> None:
    """dra-bridge: move GPU workloads from the device-plugin API to DRA one namespace at a time.

    \b
    bridge node            node daemon: serves GPUs to the kubelet via device plugin AND DRA
    bridge controller      sets each node's split from pending GPU demand (leader-elected)
    bridge webhook         admission webhook: translates nvidia.com/gpu requests in DRA namespaces
    bridge migrate-report  read-only readiness report for a cluster or a snapshot
    bridge namespace       flip a namespace between legacy, shadow and dra
    bridge sandbox         API emulator, kubelet simulator, a whole cluster on one machine
    bridge demo            the whole migration story on one machine, step by step

    Every option can also be set through an environment variable: each command's --help
    shows its name (e.g. BRIDGE_NODE_NAME, BRIDGE_WEBHOOK_PORT).
    """
