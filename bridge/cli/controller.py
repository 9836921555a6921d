"""`bridge controller`: sets each node's split target from pending GPU demand (a leader-elected Deployment).

Thin shell: options (each also an env var), validation, then `bridge.controller.app.App`. Exit codes
(bridge/cli/exits.py): 0 clean stop (SIGTERM/SIGINT), 2 bad options, no usable cluster connection or the
--http-address port in use (message on stderr, never a traceback).
"""

from __future__ import annotations

import signal
import sys
import threading

import click

from bridge.cli.exits import EXIT_CONFIG, listen_error
from bridge.controller.limits import MOST_MOVES
from bridge.logs import setup_logging

_E = "BRIDGE_CONTROLLER_"


def _seconds(ctx: click.Context, param: click.Parameter, value: str) -> float:
    from bridge.controller.policy import PolicyError, parse_duration

    try:
        return parse_duration(value, f"--{param.name.replace('_', '-') if param.name else 'duration'}")
    except PolicyError as err:
        raise click.BadParameter(str(err)) from err


@click.command("controller")
@click.option("--kubeconfig", show_envvar=True, envvar=_E + "KUBECONFIG", default=None,
              help="Kubeconfig file (default: KUBECONFIG, ~/.kube/config, then in-cluster).")
@click.option("--context", "kube_context", show_envvar=True, envvar=_E + "CONTEXT", default=None,
              help="Kubeconfig context.")
@click.option("--dry-run/--no-dry-run", show_envvar=True, envvar=_E + "DRY_RUN", default=False, show_default=True,
              help="Only log and record what would change (annotation dra-bridge.io/split-decision with dryRun: "
                   "true, Event SplitTargetWouldChange); never write the split key. Start here.")
@click.option("--resource-name", show_envvar=True, envvar=_E + "RESOURCE_NAME", default="nvidia.com/gpu",
              show_default=True, help="The legacy extended resource the node daemons serve.")
@click.option("--device-class", show_envvar=True, envvar=_E + "DEVICE_CLASS", default="gpu.dra-bridge.io",
              show_default=True, help="The bridge's DeviceClass (claims for it, and its KEP-5004 name "
                                      "deviceclass.resource.kubernetes.io/<class>, are DRA demand).")
@click.option("--driver-name", show_envvar=True, envvar=_E + "DRIVER_NAME", default="gpu.dra-bridge.io",
              show_default=True, help="The bridge's DRA driver (allocated claim results of it hold devices).")
@click.option("--pool-label", show_envvar=True, envvar=_E + "POOL_LABEL", default="dra-bridge.io/pool",
              show_default=True, help="Node label whose value names a node's pool (for the minimum legacy share).")
@click.option("--min-legacy-share", show_envvar=True, envvar=_E + "MIN_LEGACY_SHARE", default="0", show_default=True,
              help="Fraction (0..1) of every pool's GPUs that stays on the legacy side.")
@click.option("--pool-min-legacy-share", show_envvar=True, envvar=_E + "POOL_MIN_LEGACY_SHARE", multiple=True,
              metavar="POOL=SHARE", help="Per-pool override, repeatable (env: space-separated), e.g. training=0.")
@click.option("--max-moves-per-minute", show_envvar=True, envvar=_E + "MAX_MOVES_PER_MINUTE", default=32,
              show_default=True, type=click.IntRange(0, MOST_MOVES),
              help="GPUs moved (both directions, cluster-wide) in any 60 s; 0 pauses all moves.")
@click.option("--max-moves-per-decision", show_envvar=True, envvar=_E + "MAX_MOVES_PER_DECISION", default=500,
              show_default=True, type=click.IntRange(1, MOST_MOVES),
              help="GPUs one decision moves at most; the pods past it wait for the next decision (at most --interval "
                   "later, so at most 60 s / --interval times this a minute). Binds only where --max-moves-per-minute "
                   "allows more: it keeps one decision's writes (one per node changed, a few ms each) inside the "
                   "interval.")
@click.option("--cooldown", show_envvar=True, envvar=_E + "COOLDOWN", default="2m", show_default=True,
              callback=_seconds, help="A node that changed one way does not change back before this (120, 90s, 2m).")
@click.option("--policy-configmap", show_envvar=True, envvar=_E + "POLICY_CONFIGMAP", default=None,
              metavar="NAMESPACE/NAME", help="Watched ConfigMap whose key policy.yaml overrides the policy flags "
                                             "(minLegacyShare, pools, maxMovesPerMinute, maxMovesPerDecision, "
                                             "cooldownSeconds).")
@click.option("--wait-for-scheduler/--no-wait-for-scheduler", show_envvar=True, envvar=_E + "WAIT_FOR_SCHEDULER",
              default=True, show_default=True,
              help="Count a pending pod as demand only once kube-scheduler marked it Unschedulable (PodScheduled "
                   "False), as cluster-autoscaler does: a new pod may fit as things are, or be given room by "
                   "preemption. Off: every pending pod counts at once.")
@click.option("--interval", show_envvar=True, envvar=_E + "INTERVAL", default="5s", show_default=True,
              callback=_seconds, help="At most one decision per interval (changes in between are batched).")
@click.option("--resync", show_envvar=True, envvar=_E + "RESYNC", default="30s", show_default=True,
              callback=_seconds, help="At least one decision per period, even without changes (cool-downs end).")
@click.option("--leader-elect/--no-leader-elect", show_envvar=True, envvar=_E + "LEADER_ELECT", default=True,
              show_default=True, help="Elect one acting replica through a coordination.k8s.io Lease (run 2).")
@click.option("--lease-namespace", show_envvar=True, envvar=[_E + "LEASE_NAMESPACE", "POD_NAMESPACE"], default="",
              help="Namespace of the Lease (default: the service account's namespace, else default).")
@click.option("--lease-name", show_envvar=True, envvar=_E + "LEASE_NAME", default="dra-bridge-controller",
              show_default=True, help="Name of the Lease.")
@click.option("--lease-duration", show_envvar=True, envvar=_E + "LEASE_DURATION", default="15s", show_default=True,
              callback=_seconds, help="How long a standby waits after the last renewal it saw before taking over.")
@click.option("--renew-deadline", show_envvar=True, envvar=_E + "RENEW_DEADLINE", default="10s", show_default=True,
              callback=_seconds, help="A leader that cannot renew for this long stops acting (< lease duration).")
@click.option("--retry-period", show_envvar=True, envvar=_E + "RETRY_PERIOD", default="2s", show_default=True,
              callback=_seconds, help="Time between acquire/renew attempts.")
@click.option("--identity", show_envvar=True, envvar=_E + "IDENTITY", default="",
              help="Lease holder identity (default: POD_NAME or hostname + '_' + a random suffix).")
@click.option("--http-address", show_envvar=True, envvar=_E + "HTTP_ADDRESS", default="127.0.0.1:8080", show_default=True,
              help="/healthz, /readyz and /metrics: HOST:PORT, :PORT (every interface: what a pod's probes and "
                   "Prometheus need; the chart passes it) or off.")
@click.option("--log-format", show_envvar=True, envvar="BRIDGE_LOG_FORMAT", type=click.Choice(["text", "json"]),
              default="text", show_default=True)
@click.option("--log-level", show_envvar=True, envvar="BRIDGE_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def controller(kubeconfig: str | None, kube_context: str | None, dry_run: bool, resource_name: str,
               device_class: str, driver_name: str, pool_label: str, min_legacy_share: str,
               pool_min_legacy_share: tuple[str, ...], max_moves_per_minute: int,
               max_moves_per_decision: int, cooldown: float,
               policy_configmap: str | None, wait_for_scheduler: bool, interval: float, resync: float,
               leader_elect: bool,
               lease_namespace: str, lease_name: str, lease_duration: float, renew_deadline: float,
               retry_period: float, identity: str, http_address: str, log_format: str, log_level: str) -> None:
    """Set each GPU node's split (dra-bridge.io/dra-devices) from pending GPU demand.

    \b
    Pending pods asking nvidia.com/gpu, DRA claims of the bridge's DeviceClass, or
    deviceclass.resource.kubernetes.io/<class> are placed where GPUs of their API are
    free; for the rest, free GPUs of the other API move, with the fewest moves. Held
    GPUs never move. Each change is recorded on the Node (annotation
    dra-bridge.io/split-decision, Event SplitTargetChanged).
    \b
    Pin a node (the controller never changes it): annotate or label it
    dra-bridge.io/split-pinned=true, or set the split as a label
    (dra-bridge.io/dra-devices) instead of an annotation.
    \b
    RBAC: get/list/watch pods, nodes, resourceclaims, resourceclaimtemplates;
    patch nodes; create events; get/create/update leases (own namespace);
    get/list/watch configmaps with --policy-configmap.

    \b
    Memory grows with the cluster: every Node and unfinished Pod is kept, cut
    down to the fields read here (about 120 MiB at 500 nodes / 15,000 pods,
    460 MiB at 5,000 nodes / 150,000 pods).
    """
    from bridge.controller.app import App, AppOptions, LeaseOptions
    from bridge.controller.demand import Names
    from bridge.controller.loop import ControllerOptions
    from bridge.controller.model import Policy
    from bridge.controller.policy import PolicyError, parse_pool_shares, parse_share
    from bridge.kube.errors import ConfigError, KubeError, Unavailable
    from bridge.kube.leaderelection import LeaderElectionConfig
    from bridge.kube.retry import RetryPolicy
    from bridge.node.http import AddressError, parse_address

    try:
        share = parse_share(min_legacy_share, "--min-legacy-share")
    except PolicyError as err:
        raise click.BadParameter(str(err), param_hint="--min-legacy-share") from err
    try:
        pools = parse_pool_shares(pool_min_legacy_share)
    except PolicyError as err:
        raise click.BadParameter(str(err), param_hint="--pool-min-legacy-share") from err
    cm: tuple[str, str] | None = None
    if policy_configmap:
        ns, sep, name = policy_configmap.partition("/")
        if not sep or not ns.strip() or not name.strip() or "/" in name:
            raise click.BadParameter(f"expected NAMESPACE/NAME, got {policy_configmap!r}",
                                     param_hint="--policy-configmap")
        cm = (ns.strip(), name.strip())
    if not pool_label.strip():
        raise click.BadParameter("must not be empty", param_hint="--pool-label")
    if interval <= 0 or resync < interval:
        raise click.BadParameter(f"--interval must be > 0 and --resync ({resync:g}s) at least --interval "
                                 f"({interval:g}s)", param_hint="--interval/--resync")
    if leader_elect:
        try:
            LeaderElectionConfig(lease_namespace or "default", lease_name or "x", identity or "x", lease_duration,
                                 renew_deadline, retry_period)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--lease-duration/--renew-deadline/--retry-period")
    try:
        address = parse_address(http_address)
    except AddressError as err:
        raise click.BadParameter(str(err), param_hint="--http-address") from err

    setup_logging(log_format, log_level)
    policy = Policy(min_legacy_share=share, pools=pools, max_moves_per_minute=max_moves_per_minute,
                    max_moves_per_decision=max_moves_per_decision, cooldown_s=cooldown)
    options = AppOptions(
        controller=ControllerOptions(names=Names(resource_name, device_class, driver_name), pool_label=pool_label,
                                     policy=policy, policy_configmap=cm, dry_run=dry_run, interval_s=interval,
                                     resync_s=resync, wait_for_scheduler=wait_for_scheduler),
        lease=LeaseOptions(enabled=leader_elect, namespace=lease_namespace, name=lease_name,
                           lease_duration=lease_duration, renew_deadline=renew_deadline, retry_period=retry_period),
        identity=identity, http_address=address)
    from bridge.kube import connect

    try:
        api = connect(kubeconfig, kube_context)
        # The Lease gets its own client: a request may not outlive half the renew deadline.
        lease_api = connect(kubeconfig, kube_context, timeout=max(1.0, renew_deadline / 2),
                            retry=RetryPolicy(initial_backoff=0.2, max_backoff=1.0, deadline=renew_deadline / 2))
        api.discovery()
    except (ConfigError, Unavailable) as err:
        click.echo(f"bridge controller: {err}", err=True)
        sys.exit(2)
    except KubeError as err:
        click.echo(f"bridge controller: cannot talk to the API server: {err}", err=True)
        sys.exit(2)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        app = App(api, options, lease_api=lease_api).start()
    except OSError as err:
        where = f"{address[0] or '0.0.0.0'}:{address[1]}" if address is not None else ""
        friendly = listen_error(err, "health and metrics endpoint", where, "--http-address", _E + "HTTP_ADDRESS",
                                can_disable=True) if where and where in str(err) else None
        click.echo(f"bridge controller: {friendly or err}", err=True)
        sys.exit(EXIT_CONFIG)
    except KubeError as err:
        click.echo(f"bridge controller: {err}", err=True)
        sys.exit(EXIT_CONFIG)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        app.stop()
