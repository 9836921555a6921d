"""Does `bridge controller` run, and may the report count on the GPUs it would move? (pure: `ClusterData` in)

`bridge controller` moves free GPUs between the two APIs as pending pods ask for them, so a DRA side that is empty
now is not a shortage while a controller runs and acts. The report (rule DRB032, DRB037) counts its moves only on
evidence that it runs and is not in dry run, taken from what the cluster shows, strongest first:

1. **Its Lease** (`coordination.k8s.io/v1`, `dra-bridge-controller` by default: the name `bridge controller
   --lease-name` and the chart's `controller.leaseName` give it; bridge/controller/app.py, leader election in
   bridge/kube/leaderelection.py) with a `holderIdentity` and `renewTime + leaseDurationSeconds` not before the time
   of the scan (allowing `CLOCK_SKEW_S` for the clocks of the leader and of whoever scans): a replica leads now. A
   released Lease (empty holder) or an expired one means no replica leads. Whether the leader acts or only records
   (`--dry-run`) comes from its Deployment's arguments, else from the latest decision it recorded itself (the
   record's `controller` is the Lease holder's identity, bridge/controller/record.py), else it is unknown and
   nothing is counted.
2. **Its Deployment**: a container that runs `bridge controller` (`command: [bridge, controller]` as the chart
   writes it, `python -m bridge controller`, or the image's entrypoint with `args: [controller, ...]`). Its
   arguments (and the container's `BRIDGE_CONTROLLER_*` environment, which the arguments override, as click does)
   give `--dry-run`, the policy (`--min-legacy-share`, `--pool-min-legacy-share`, `--pool-label`, and the ConfigMap
   of `--policy-configmap`, read with the controller's own parser, bridge/controller/policy.py) and the Lease's
   name. Scaled to 0, or no ready replica: not running. Ready replicas with leader election on while the input
   holds Leases but none of them is held: no replica leads (yet). Without Leases in the input (an older snapshot,
   no RBAC to list them), ready replicas are taken as running.
3. **Decision records alone** (the Node annotation `dra-bridge.io/split-decision`, written with every change): a
   controller without a Deployment or a Lease in the input (`--no-leader-elect`, run outside the cluster, as
   `bridge sandbox cluster --controller` runs it) shows itself only by what it decides. Its latest record counts
   when it is at most `RECORD_FRESH_S` (10 minutes) older than the scan; its `dryRun` is its mode. A quiet
   controller writes nothing (it records changes, not heartbeats), so an older record proves nothing either way:
   not counted, and the finding says so.

The time of the scan: a live scan's clock (`ClusterData.taken_at`); for a snapshot, the newest timestamp it holds
(Lease renewals, decision records, split-status updates, Node heartbeats and conditions, pod start and condition
times, creation times), since a snapshot file carries no capture time. Rejected: trusting the records alone (an idle
controller looks dead, a dead one looks alive for as long as its last record is young) and the Deployment alone (its
replicas may be ready while none leads, or all in dry run).

The policy of a controller found only by its Lease or its records is not known: the report assumes none (no
minimum legacy share) and says so in its findings' details.
"""

from __future__ import annotations

import datetime as dt
import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bridge.controller.model import Policy
from bridge.controller.nodestatus import POOL_LABEL
from bridge.controller.policy import PolicyError, parse_pool_shares, parse_share, policy_from_configmap
from bridge.controller.record import DecisionRecord, RecordError, record_of
from bridge.ledger.status import StatusError, status_of
from bridge.report.podspec import template_spec
from bridge.report.sources import ClusterData

Obj = dict[str, Any]

DEFAULT_LEASE = "dra-bridge-controller"  # bridge.controller.app.DEFAULT_LEASE (tests keep them equal)
CLOCK_SKEW_S = 60.0
RECORD_FRESH_S = 600.0
ENV_PREFIX = "BRIDGE_CONTROLLER_"
_TRUE = ("1", "true", "t", "yes", "y", "on")
_FALSE = ("0", "false", "f", "no", "n", "off")

State = Literal["acting", "dry-run", "unknown-mode", "not-running", "absent"]


@dataclass(frozen=True)
class ControllerDeployment:
    """A Deployment running `bridge controller`, with what its arguments say."""

    namespace: str
    name: str
    replicas: int
    ready: int | None  # status.readyReplicas; None when the input has no status
    dry_run: bool
    leader_elect: bool
    lease_namespace: str
    lease_name: str
    pool_label: str
    policy: Policy
    policy_notes: tuple[str, ...] = ()  # where the policy came from, and what could not be used

    @property
    def ref(self) -> str:
        return f"Deployment {self.namespace}/{self.name}"


@dataclass(frozen=True)
class SplitController:
    """What the report knows of the cluster's `bridge controller`."""

    state: State
    evidence: str  # one sentence: how the report knows
    identity: str = ""  # the leader's identity, when known
    policy: Policy = field(default_factory=Policy)
    policy_known: bool = False
    policy_notes: tuple[str, ...] = ()
    pool_label: str = POOL_LABEL

    @property
    def acting(self) -> bool:
        """It runs and writes splits: the GPUs it can move count."""
        return self.state == "acting"

    @property
    def runs(self) -> bool:
        return self.state in ("acting", "dry-run", "unknown-mode")

    def policy_text(self) -> str:
        if not self.policy_known:
            return "policy unknown (no Deployment of the controller in the input): no minimum legacy share assumed"
        pools = ", ".join(f"{p or '(default)'} {v.min_legacy_share:g}" for p, v in sorted(self.policy.pools.items()))
        return (f"minimum legacy share {self.policy.min_legacy_share:g}" + (f" (pools: {pools})" if pools else ""))


def parse_time(value: Any) -> float | None:
    """RFC 3339 (with or without fractions, `Z` or an offset) -> epoch seconds; None when it is not one."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.timestamp()


def _times(data: ClusterData) -> Iterator[Any]:
    for kind in ("Lease",):
        for o in data.of(kind):
            spec = o.get("spec") or {}
            yield spec.get("renewTime")
            yield spec.get("acquireTime")
    for n in data.of("Node"):
        meta = n.get("metadata") or {}
        yield meta.get("creationTimestamp")
        for c in (n.get("status") or {}).get("conditions") or ():
            if isinstance(c, dict):
                yield c.get("lastHeartbeatTime")
                yield c.get("lastTransitionTime")
        for _, rec in _records([n]):
            yield rec.time
        try:
            split = status_of(n)
        except StatusError:
            split = None
        if split is not None:
            yield split.updated
    for p in data.of("Pod"):
        meta = p.get("metadata") or {}
        yield meta.get("creationTimestamp")
        pod_status = p.get("status") or {}
        yield pod_status.get("startTime")
        for c in pod_status.get("conditions") or ():
            if isinstance(c, dict):
                yield c.get("lastTransitionTime")


def reference_time(data: ClusterData) -> float | None:
    """When the input was read: the live scan's clock, or a snapshot's newest timestamp (module docstring)."""
    if data.taken_at is not None:
        return data.taken_at
    best: float | None = None
    for value in _times(data):
        t = parse_time(value)
        if t is not None and (best is None or t > best):
            best = t
    return best


def _records(nodes: Iterable[Obj]) -> Iterator[tuple[str, DecisionRecord]]:
    for n in nodes:
        try:
            rec = record_of(n)
        except RecordError:
            continue  # DRB014 reports an unreadable record
        if rec is not None:
            yield str((n.get("metadata") or {}).get("name", "")), rec


# ---- the Deployment ---------------------------------------------------------------------------------------------

def component_args(container: Mapping[str, Any], component: str) -> list[str] | None:
    """The arguments after `bridge COMPONENT` when this container runs it, else None."""
    command = [str(t) for t in container.get("command") or ()]
    args = [str(t) for t in container.get("args") or ()]
    tokens = command + args
    if component not in tokens:  # both ways of running it name it (asked of every Deployment's containers)
        return None
    for i in range(len(tokens) - 1):
        if posixpath.basename(tokens[i]) == "bridge" and tokens[i + 1] == component:
            return tokens[i + 2:]
    if not command and args[:1] == [component] and "dra-bridge" in str(container.get("image", "")):
        return args[1:]  # the image's entrypoint is `bridge`
    return None


def controller_args(container: Mapping[str, Any]) -> list[str] | None:
    """The arguments after `bridge controller` when this container runs it, else None."""
    return component_args(container, "controller")


# The options of `bridge controller` that take a value (`--name value` as well as `--name=value`).
VALUED_OPTIONS = frozenset({
    "min-legacy-share", "pool-min-legacy-share", "pool-label", "policy-configmap", "lease-name", "lease-namespace",
    "identity", "kubeconfig", "context", "resource-name", "device-class", "driver-name", "max-moves-per-minute",
    "max-moves-per-decision", "cooldown", "interval", "resync", "lease-duration", "renew-deadline", "retry-period",
    "http-address", "log-format", "log-level"})


def _flags(args: Sequence[str]) -> dict[str, list[str]]:
    """`--name value` / `--name=value` / bare `--flag` -> {name: [values]} ("" for a bare flag), in order."""
    out: dict[str, list[str]] = {}
    i = 0
    valued = VALUED_OPTIONS
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("--"):
            continue
        name, eq, value = token[2:].partition("=")
        if not eq and name in valued and i < len(args):
            value = args[i]
            i += 1
        out.setdefault(name, []).append(value)
        out.setdefault(f"@{name}", []).append(str(i))  # where it was given (for --x / --no-x: the last wins)
    return out


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    return {str(e.get("name")): str(e.get("value")) for e in container.get("env") or ()
            if isinstance(e, dict) and isinstance(e.get("value"), str)}


def _bool(flags: dict[str, list[str]], env: dict[str, str], name: str, default: bool) -> bool:
    """click's `--name/--no-name` with its environment variable: the flag given last wins, else the variable."""
    given = [k for k in flags if k in (name, f"no-{name}")]
    if given:
        return _last(flags, given) == name
    raw = env.get(ENV_PREFIX + name.upper().replace("-", "_"), "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    return default


def _last(flags: dict[str, list[str]], names: list[str]) -> str:
    """Of `names`, the one whose last occurrence comes last (`_flags` records positions)."""
    return max(names, key=lambda n: max(int(p) for p in flags.get(f"@{n}", ["0"])))


def _value(flags: dict[str, list[str]], env: dict[str, str], name: str, default: str) -> str:
    if flags.get(name):
        return flags[name][-1]
    return env.get(ENV_PREFIX + name.upper().replace("-", "_"), default)


def deployment_of(obj: Obj, configmaps: Mapping[tuple[str, str], Obj]) -> ControllerDeployment | None:
    """The Deployment's view as a `bridge controller` Deployment, or None when it does not run one."""
    meta = obj.get("metadata") or {}
    spec = template_spec("Deployment", obj) or {}
    for c in spec.get("containers") or ():
        if not isinstance(c, dict):
            continue
        args = controller_args(c)
        if args is None:
            continue
        flags, env = _flags(args), _env(c)
        ns = str(meta.get("namespace", ""))
        notes: list[str] = [f"policy from the arguments of Deployment {ns}/{meta.get('name', '')}"]
        policy = Policy()
        try:
            share = parse_share(_value(flags, env, "min-legacy-share", "0"), "--min-legacy-share")
            pools_given = flags.get("pool-min-legacy-share") or \
                env.get(ENV_PREFIX + "POOL_MIN_LEGACY_SHARE", "").split()
            policy = Policy(min_legacy_share=share, pools=parse_pool_shares(pools_given))
        except PolicyError as err:
            notes.append(f"its policy arguments are invalid ({err}): the controller refuses to start with them")
        cm_ref = _value(flags, env, "policy-configmap", "")
        if cm_ref:
            cm_ns, _, cm_name = cm_ref.partition("/")
            cm = configmaps.get((cm_ns, cm_name))
            if cm is None:
                notes.append(f"ConfigMap {cm_ref} (--policy-configmap) is not in the input: the flags' policy assumed")
            else:
                try:
                    policy = policy_from_configmap(cm, policy)
                    notes.append(f"overridden by ConfigMap {cm_ref}")
                except PolicyError as err:
                    notes.append(f"ConfigMap {cm_ref} is refused by the controller ({err}): the flags' policy holds")
        replicas = (obj.get("spec") or {}).get("replicas")
        status = obj.get("status")
        ready = None if not isinstance(status, dict) else int(status.get("readyReplicas") or 0)
        return ControllerDeployment(
            namespace=ns, name=str(meta.get("name", "")),
            replicas=1 if replicas is None else int(replicas), ready=ready,
            dry_run=_bool(flags, env, "dry-run", False), leader_elect=_bool(flags, env, "leader-elect", True),
            lease_namespace=_value(flags, env, "lease-namespace", "") or ns,
            lease_name=_value(flags, env, "lease-name", DEFAULT_LEASE) or DEFAULT_LEASE,
            pool_label=_value(flags, env, "pool-label", POOL_LABEL) or POOL_LABEL,
            policy=policy, policy_notes=tuple(notes))
    return None


# ---- the verdict ------------------------------------------------------------------------------------------------

def _ago(reference: float | None, t: float | None) -> str:
    if reference is None or t is None:
        return ""
    secs = reference - t
    if secs < 0:
        return "after the newest other timestamp"
    if secs < 120:
        return f"{secs:.0f}s before the scan"
    if secs < 7200:
        return f"{secs / 60:.0f} min before the scan"
    return f"{secs / 3600:.1f} h before the scan"


def _mode(evidence: str, identity: str, dep: ControllerDeployment | None,
          by_holder: DecisionRecord | None) -> SplitController:
    if dep is not None:
        how = f"{dep.ref} runs it {'with' if dep.dry_run else 'without'} --dry-run"
        state: State = "dry-run" if dep.dry_run else "acting"
        return SplitController(state, f"{evidence}; {how}", identity, dep.policy, True, dep.policy_notes,
                               dep.pool_label)
    if by_holder is not None:
        state = "dry-run" if by_holder.dry_run else "acting"
        how = f"its latest decision ({by_holder.time}) was {'a dry run' if by_holder.dry_run else 'applied'}"
        return SplitController(state, f"{evidence}; {how}", identity)
    return SplitController("unknown-mode", f"{evidence}; whether it runs in dry run cannot be told (no Deployment "
                           "of it and no decision of it recorded yet)", identity)


def detect(data: ClusterData) -> SplitController:
    """The report's verdict on `bridge controller` (module docstring)."""
    configmaps = {(str((o.get("metadata") or {}).get("namespace", "")), str((o.get("metadata") or {}).get("name", ""))): o
                  for o in data.of("ConfigMap")}
    deps = [d for d in (deployment_of(o, configmaps) for o in data.of("Deployment")) if d is not None]
    wanted = {(d.lease_namespace, d.lease_name) for d in deps if d.leader_elect}
    leases = [o for o in data.of("Lease")
              if ((str((o.get("metadata") or {}).get("namespace", "")), str((o.get("metadata") or {}).get("name", "")))
                  in wanted) or (not deps and (o.get("metadata") or {}).get("name") == DEFAULT_LEASE)]
    records = sorted(_records(data.of("Node")), key=lambda nr: parse_time(nr[1].time) or 0.0)
    if not deps and not leases and not records:
        return SplitController("absent", "no Deployment runs `bridge controller`, no Lease "
                               f"{DEFAULT_LEASE} and no decision recorded on any Node")
    now = reference_time(data)
    held: list[tuple[Obj, float]] = []
    for lease in leases:
        spec = lease.get("spec") or {}
        renew = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
        duration = spec.get("leaseDurationSeconds")
        if not spec.get("holderIdentity") or renew is None or not isinstance(duration, int):
            continue
        if now is None or renew + duration + CLOCK_SKEW_S >= now:
            held.append((lease, renew))
    if held:
        lease, renew = max(held, key=lambda lr: lr[1])
        meta = lease.get("metadata") or {}
        holder = str((lease.get("spec") or {}).get("holderIdentity"))
        evidence = (f"Lease {meta.get('namespace')}/{meta.get('name')} is held by {holder}, renewed "
                    f"{_ago(now, renew) or 'recently'}")
        dep = next((d for d in deps if d.lease_namespace == meta.get("namespace")
                    and d.lease_name == meta.get("name")), None)
        mine = [rec for _, rec in records if rec.controller == holder]
        return _mode(evidence, holder, dep, mine[-1] if mine else None)
    leases_in_input = bool(data.of("Lease")) and "leases" not in data.unreadable
    if deps:
        running = [d for d in deps if d.replicas > 0 and (d.ready is None or d.ready > 0)]
        if not running:
            d = deps[0]
            why = "is scaled to 0" if d.replicas == 0 else f"has no ready replica (0 of {d.replicas})"
            return SplitController("not-running", f"{d.ref} runs `bridge controller` but {why}")
        d = running[0]
        if d.leader_elect and leases_in_input:
            return SplitController("not-running", f"{d.ref} runs `bridge controller` with leader election, but no "
                                   f"replica holds its Lease {d.lease_namespace}/{d.lease_name} (released, expired or "
                                   "not created yet): none decides")
        ready = "replicas desired (the input has no status)" if d.ready is None else f"{d.ready} ready replica(s)"
        evidence = f"{d.ref} has {ready}" + ("" if not d.leader_elect else " and the input holds no Leases")
        return _mode(evidence, "", d, None)
    if records:
        node, rec = records[-1]
        t = parse_time(rec.time)
        if now is not None and t is not None and now - t <= RECORD_FRESH_S:
            evidence = (f"no Deployment or Lease of it in the input, but {rec.controller or 'a controller'} recorded "
                        f"a decision on node {node} {_ago(now, t)}")
            return _mode(evidence, rec.controller, None, rec)
        return SplitController("absent", f"the latest decision recorded (node {node}, {rec.time}) is "
                               f"{_ago(now, t) or 'of unknown age'}, and no Deployment or Lease of a controller is in "
                               "the input: a controller records changes, not heartbeats, so this proves nothing about "
                               "now")
    return SplitController("absent", f"Lease {DEFAULT_LEASE} is not held (released or expired), and no Deployment "
                           "of the controller is in the input")


__all__ = ["CLOCK_SKEW_S", "ControllerDeployment", "DEFAULT_LEASE", "RECORD_FRESH_S", "SplitController",
           "component_args", "controller_args", "deployment_of", "detect", "parse_time", "reference_time"]
