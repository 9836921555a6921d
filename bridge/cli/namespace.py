"""`bridge namespace`: flip a namespace between legacy, shadow and dra, and show where namespaces stand.

Exit codes: 0 done, 1 API error (message on stderr: e.g. namespace not found, missing RBAC), 2 bad arguments.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click

if TYPE_CHECKING:
    from bridge.kube.api import KubeAPI

_F = TypeVar("_F", bound=Callable[..., object])


def _api(kubeconfig: str | None, context: str | None) -> KubeAPI:
    from bridge.kube import connect

    return connect(kubeconfig, context)


_kube_options = [
    click.option("--kubeconfig", show_envvar=True, envvar="BRIDGE_NAMESPACE_KUBECONFIG", default=None,
                 help="Kubeconfig file (default: KUBECONFIG, ~/.kube/config, then in-cluster)."),
    click.option("--context", show_envvar=True, envvar="BRIDGE_NAMESPACE_CONTEXT", default=None, help="Kubeconfig context."),
]


def kube_options(f: _F) -> _F:
    for opt in reversed(_kube_options):
        f = opt(f)
    return f


@click.group("namespace")
def namespace() -> None:
    """Move a namespace's NEW pods between the device plugin (legacy) and DRA. Running pods are never changed."""


@namespace.command("set")
@click.argument("name")
@click.argument("mode", type=click.Choice(["legacy", "shadow", "dra"]))
@click.option("--target", show_envvar=True, envvar="BRIDGE_NAMESPACE_TARGET", type=click.Choice(["auto", "claims", "extended"]),
              default=None, help="Also set (claims/extended) or clear (auto) this namespace's translation target.")
@kube_options
def set_cmd(name: str, mode: str, target: str | None, kubeconfig: str | None, context: str | None) -> None:
    """Set namespace NAME to MODE (legacy, shadow or dra) and say what changes for new pods."""
    from bridge.kube.errors import KubeError
    from bridge.webhook.facts import facts_from_discovery
    from bridge.webhook.namespaces import describe_change, set_mode
    from bridge.webhook.policy import Mode

    try:
        api = _api(kubeconfig, context)
        old, new, legacy = set_mode(api, name, Mode(mode), target)
        effective = target if target and target != "auto" else f"auto: {facts_from_discovery(api.discovery()).auto_target().value} on this cluster unless the webhook runs with --target"
        click.echo(describe_change(name, old, new, legacy, effective))
    except KubeError as err:
        click.echo(f"bridge namespace set: {err.message}", err=True)
        sys.exit(1)


@namespace.command("status")
@click.argument("name", required=False)
@click.option("--output", "-o", show_envvar=True, envvar="BRIDGE_NAMESPACE_OUTPUT", type=click.Choice(["table", "json"]),
              default="table", show_default=True)
@kube_options
def status_cmd(name: str | None, output: str, kubeconfig: str | None, context: str | None) -> None:
    """Show mode, translated vs legacy GPU pods, and shadow findings, for NAME or every namespace."""
    from bridge.kube.errors import KubeError
    from bridge.webhook.namespaces import read_status, render_table

    try:
        rows = read_status(_api(kubeconfig, context), name)
    except KubeError as err:
        click.echo(f"bridge namespace status: {err.message}", err=True)
        sys.exit(1)
    if output == "json":
        click.echo(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        click.echo(render_table(rows))
