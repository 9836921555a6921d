"""Click parameter checks shared by the commands that take a Kubernetes name from the user: the name is checked
with Kubernetes' own rule for its kind before any request (bridge.kvalues.names), so `bridge namespace set
'kube-system#' dra` is a usage error (exit 2) naming the rule, never a request about another namespace."""

from __future__ import annotations

from collections.abc import Callable

import click

from bridge.humantext import clip
from bridge.kvalues.names import label_problem, subdomain_problem


def _checker(what: str, problem: Callable[[str], str]) -> Callable[[click.Context, click.Parameter, str | None],
                                                                   str | None]:
    def check(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        if value is not None:
            why = problem(value)
            if why:
                raise click.BadParameter(f"{clip(value)} is not a valid {what}: {why}")
        return value

    return check


namespace_name = _checker("namespace name", label_problem)
node_name = _checker("node name", subdomain_problem)

__all__ = ["namespace_name", "node_name"]
