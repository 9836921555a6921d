"""`bridge namespace`: flip a namespace between legacy, shadow and dra, and show where namespaces stand.

`set NS shadow|dra` first checks that our webhook (a MutatingWebhookConfiguration entry named pods.dra-bridge.io,
`--webhook-name`) is registered, selects NS with its labels as they will be after the flip (namespaceSelector,
matchConditions as far as they can be judged without a pod) and is reachable; the webhook fails open, so without
this check a flip can silently do nothing. It refuses kube-system, kube-public, kube-node-lease and the webhook's
own namespace (the webhook never acts on them). After the change it waits (`--wait`, the default; at most
`--timeout`) until a dry-run probe GPU pod shows that the webhook applies the new mode (bridge/webhook/modeprobe.py),
and prints how long that took.

Exit codes: 0 done (warnings on stderr), 1 refused by `--strict` (the webhook is missing, unreachable or does not
cover the namespace: nothing was changed; or the new mode was not seen applied within `--timeout`: the namespace
is changed) or the API server rejected the change, 2 usage, configuration or
connection errors (no kubeconfig, API unreachable or slower than `--timeout`, missing RBAC, namespace not found, a
namespace that must not be flipped).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

import click

from bridge.cli.params import namespace_name

if TYPE_CHECKING:
    from bridge.kube.api import KubeAPI
    from bridge.kube.errors import KubeError
    from bridge.webhook.policy import Mode

_F = TypeVar("_F", bound=Callable[..., object])
EXIT_REFUSED, EXIT_USAGE = 1, 2


def _api(kubeconfig: str | None, context: str | None, timeout: float) -> KubeAPI:
    from bridge.kube import connect
    from bridge.kube.retry import RetryPolicy

    return connect(kubeconfig, context, timeout=timeout, retry=RetryPolicy(deadline=timeout))


_kube_options = [
    click.option("--kubeconfig", show_envvar=True, envvar="BRIDGE_NAMESPACE_KUBECONFIG", default=None,
                 help="Kubeconfig file (default: KUBECONFIG, ~/.kube/config, then in-cluster)."),
    click.option("--context", show_envvar=True, envvar="BRIDGE_NAMESPACE_CONTEXT", default=None, help="Kubeconfig context."),
    click.option("--timeout", show_envvar=True, envvar="BRIDGE_NAMESPACE_TIMEOUT", type=click.FloatRange(min=0.1),
                 default=30.0, show_default=True,
                 help="Seconds for each API request (retries of an unreachable API server included), for the "
                      "webhook reachability check and for `set`'s wait until the webhook applies the new mode."),
    click.option("--webhook-name", show_envvar=True, envvar="BRIDGE_NAMESPACE_WEBHOOK_NAME", default="pods.dra-bridge.io",
                 show_default=True,
                 help="Name of our webhook entry in a MutatingWebhookConfiguration (the chart and examples/webhook/ "
                      "use the default)."),
]


def kube_options(f: _F) -> _F:
    for opt in reversed(_kube_options):
        f = opt(f)
    return f


def _fail(command: str, err: KubeError) -> NoReturn:
    """Every API failure the CLI can hit is a configuration or connection problem here (the caller said which
    namespace, the kubeconfig says where): exit 2, with the missing RBAC rule when that is the cause."""
    from bridge.kube.errors import Conflict, Forbidden, Invalid

    if isinstance(err, Forbidden):
        click.echo(f"bridge namespace {command}: {err.rbac_hint} ({err.message})", err=True)
    else:
        click.echo(f"bridge namespace {command}: {err.message}", err=True)
    sys.exit(EXIT_REFUSED if isinstance(err, Conflict | Invalid) else EXIT_USAGE)


@click.group("namespace")
def namespace() -> None:
    """Move a namespace's NEW pods between the device plugin (legacy) and DRA. Running pods are never changed."""


@namespace.command("set")
@click.argument("name", callback=namespace_name)
@click.argument("mode", type=click.Choice(["legacy", "shadow", "dra"]))
@click.option("--target", show_envvar=True, envvar="BRIDGE_NAMESPACE_TARGET", type=click.Choice(["auto", "claims", "extended"]),
              default=None, help="Also set (claims/extended) or clear (auto) this namespace's translation target.")
@click.option("--strict/--no-strict", show_envvar=True, envvar="BRIDGE_NAMESPACE_STRICT", default=False, show_default=True,
              help="Refuse (exit 1, nothing changed) when the webhook is not registered, not reachable or does not "
                   "cover the namespace, instead of flipping with a warning; and exit 1 (the namespace IS changed) "
                   "when the webhook is not seen applying the new mode within --timeout.")
@click.option("--wait/--no-wait", show_envvar=True, envvar="BRIDGE_NAMESPACE_WAIT", default=True, show_default=True,
              help="After the change, dry-run a probe GPU pod in NAME until the webhook's answer shows the new mode "
                   "(at most --timeout seconds): the webhook learns labels from a watch, so pods created right "
                   "after a flip can still get the old mode. Needs RBAC create on pods in NAME.")
@kube_options
def set_cmd(name: str, mode: str, target: str | None, strict: bool, wait: bool, kubeconfig: str | None,
            context: str | None, timeout: float, webhook_name: str) -> None:
    """Set namespace NAME to MODE (legacy, shadow or dra) and say what changes for new pods.

    \b
    Before a flip to shadow or dra the webhook registration is checked against NAME with its labels as they
    will be after the flip: a missing, unreachable or non-covering webhook is a loud warning (--strict: refusal).
    Then (unless --no-wait) a server-side dry run of a pod asking nvidia.com/gpu: 1 is repeated until the answer
    shows MODE (translated for dra, the shadow record for shadow, neither for legacy), and the time it took is
    printed; nothing is created. Not seen within --timeout: a warning (--strict: exit 1).
    """
    import copy

    from bridge.kube.api import NAMESPACES
    from bridge.kube.errors import KubeError
    from bridge.webhook.facts import auto_target, facts_from_discovery
    from bridge.webhook.serving import one_shot
    from bridge.webhook.namespaces import describe_change, set_mode
    from bridge.webhook.nscheck import check_webhook, read_hooks
    from bridge.webhook.policy import MODE_LABEL, SYSTEM_NAMESPACES, TARGET_LABEL, Mode

    if mode != "legacy" and name in SYSTEM_NAMESPACES:
        click.echo(f"bridge namespace set: refusing to put {name} in {mode} mode: the webhook never acts on "
                   f"{', '.join(sorted(SYSTEM_NAMESPACES))} (system pods must keep working during a migration)", err=True)
        sys.exit(EXIT_USAGE)
    try:
        api = _api(kubeconfig, context, timeout)
        current = api.get(NAMESPACES, name)
        problems: list[str] = []
        notes: list[str] = []
        if mode != "legacy":
            after = copy.deepcopy(current)
            labels = after.setdefault("metadata", {}).setdefault("labels", {}) or {}
            labels[MODE_LABEL] = mode
            if target == "auto":
                labels.pop(TARGET_LABEL, None)
            elif target is not None:
                labels[TARGET_LABEL] = target
            after["metadata"]["labels"] = labels
            hooks, error = read_hooks(api, webhook_name)
            own = sorted({h.own_namespace for h in hooks if h.own_namespace == name})
            if own:
                click.echo(f"bridge namespace set: refusing to put {name} in {mode} mode: it is the webhook's own "
                           "namespace (a webhook that mutates its own pods can block its own rollout)", err=True)
                sys.exit(EXIT_USAGE)
            check = check_webhook(api, after, hooks, error, webhook_name, timeout)
            problems, notes = check.problems(), check.notes()
            if problems and strict:
                for p in problems:
                    click.echo(f"bridge namespace set: {p}", err=True)
                click.echo(f"bridge namespace set: --strict: namespace {name} NOT changed", err=True)
                sys.exit(EXIT_REFUSED)
        old, new, legacy = set_mode(api, name, Mode(mode), target)
        if target and target != "auto":
            effective = target
        else:
            try:
                facts = facts_from_discovery(api.discovery())
                effective = (f"auto: {auto_target(facts, one_shot(api, facts))[0].value} on this cluster unless "
                             "the webhook runs with --target")
            except KubeError:  # the flip is done; what auto would pick is only a hint
                effective = "auto: picked by the webhook from the cluster's versions"
    except KubeError as err:
        _fail("set", err)
    click.echo(describe_change(name, old, new, legacy, effective))
    for n in notes:
        click.echo(f"  {n}")
    for p in problems:
        click.echo(f"WARNING: {p}. Pods created in {name} are admitted UNTRANSLATED until this is fixed (the "
                   "webhook fails open); `bridge namespace status` counts them.", err=True)
    if wait and not _webhook_applies(api, name, Mode(mode), timeout, cannot=bool(problems)) and strict:
        click.echo(f"bridge namespace set: --strict: namespace {name} IS set to {mode}, but the webhook was not seen "
                   "applying it", err=True)
        sys.exit(EXIT_REFUSED)


def _webhook_applies(api: KubeAPI, name: str, mode: Mode, timeout: float, cannot: bool) -> bool:
    """`set`'s wait (bridge/webhook/modeprobe.py), reported; False when the new mode was not seen applied. `cannot`:
    the webhook check already said it cannot apply it, so one probe shows what new pods get now, without waiting."""
    from bridge.webhook.modeprobe import wait_applied

    applied = wait_applied(api, name, mode, timeout, once=cannot)
    last = applied.last
    probes = f"{applied.probes} dry-run probe{'s' if applied.probes != 1 else ''}"
    if applied.ok is None:
        click.echo(f"WARNING: cannot check that the webhook applies {mode.value} to new pods in {name}: "
                   f"{applied.error}. Pods created now may still get the old mode for a moment.", err=True)
        return False
    if applied.ok:
        assert last is not None
        click.echo(f"checked: a GPU pod created in {name} now gets {mode.value} from the webhook: {last.detail}; "
                   f"seen {applied.seconds:.1f}s after the change ({probes}).")
        if last.left_legacy:
            click.echo(f"WARNING: the webhook leaves GPU pods like the probe on the device plugin in {name}: see "
                       "`bridge namespace status` and its DRABridgeUntranslatable Events.", err=True)
        return True
    got = f"it still gets {last.mode.value} ({last.detail})" if last is not None else "no answer"
    if cannot:
        click.echo(f"  not waiting for the webhook to apply {mode.value}: a GPU pod created in {name} now: {got}.")
        return False
    extra = f"; the webhook also said: {'; '.join(last.notes)}" if last is not None and last.notes else ""
    click.echo(f"WARNING: {applied.seconds:.0f}s after the change ({probes}) a GPU pod created in {name} does not "
               f"get {mode.value} from the webhook: {got}{extra}. Its namespace watch may lag or the webhook may "
               f"not be serving; pods created now get the old mode. Check again: bridge namespace set {name} "
               f"{mode.value}", err=True)
    return False


@namespace.command("status")
@click.argument("name", required=False, callback=namespace_name)
@click.option("--output", "-o", show_envvar=True, envvar="BRIDGE_NAMESPACE_OUTPUT", type=click.Choice(["table", "json"]),
              default="table", show_default=True)
@click.option("--all", "all_namespaces", is_flag=True, default=False, show_envvar=True, envvar="BRIDGE_NAMESPACE_ALL",
              help="Also list the system namespaces (kube-system, kube-public, kube-node-lease), hidden by default: "
                   "the webhook never acts on them.")
@kube_options
def status_cmd(name: str | None, output: str, all_namespaces: bool, kubeconfig: str | None, context: str | None,
               timeout: float, webhook_name: str) -> None:
    """Show mode, target (`default`: the cluster's, unless dra-bridge.io/target overrides it), translated vs legacy
    GPU pods and shadow findings for NAME or every namespace; for shadow and dra namespaces also whether the webhook
    is registered, reachable and covering them, and the GPU pods that arrived untranslated since the flip."""
    from bridge.kube.api import NAMESPACES, PODS
    from bridge.kube.errors import KubeError
    from bridge.webhook.namespaces import namespace_status, render_table
    from bridge.webhook.nscheck import Reachability, check_webhook, read_hooks, since_flip, untranslatable_events
    from bridge.webhook.policy import SYSTEM_NAMESPACES

    try:
        api = _api(kubeconfig, context, timeout)
        namespaces = [api.get(NAMESPACES, name)] if name else api.list(NAMESPACES)["items"]
        if not name and not all_namespaces:
            namespaces = [n for n in namespaces if (n.get("metadata") or {}).get("name") not in SYSTEM_NAMESPACES]
        pods = api.list(PODS, name)["items"]
        rows = namespace_status(namespaces, pods)
        flipped = [r for r in rows if r.mode in ("shadow", "dra")]
        if flipped:
            hooks, error = read_hooks(api, webhook_name)
            events = untranslatable_events(api, name)
            by_name = {(n.get("metadata") or {}).get("name"): n for n in namespaces}
            reach: dict[str, Reachability] = {}
            for r in flipped:
                ns_obj = by_name[r.name]
                r.webhook = check_webhook(api, ns_obj, hooks, error, webhook_name, timeout, reach).as_dict()
                ns_pods = [p for p in pods if (p.get("metadata") or {}).get("namespace") == r.name]
                ns_events = [e for e in events if (e.get("metadata") or {}).get("namespace") == r.name]
                flip = since_flip(ns_obj, r.mode, ns_pods, ns_events, hooks)
                r.since_flip = flip.as_dict() if flip is not None else None
    except KubeError as err:
        _fail("status", err)
    if output == "json":
        click.echo(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        click.echo(render_table(rows))
