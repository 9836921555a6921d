"""Node checks: two owners for the same GPUs, stale zero capacity, container runtime without CDI, split label, and
the split decisions `bridge controller` recorded on the Node (annotation dra-bridge.io/split-decision, read with the
controller's own decoder, bridge.controller.record)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from bridge.controller.record import DECISION_KEY, RecordError, record_of
from bridge.report.checks.context import CheckContext, class_cel
from bridge.report.features import BRIDGE_DRIVER, FEATURE_BY_KEY, GPU, SPLIT_LABEL, TARGET_LABEL
from bridge.report.findings import Finding, ObjectRef, rule


def _node(name: str) -> ObjectRef:
    return ObjectRef("Node", "", name)


OPERATOR_DP_LABEL = "nvidia.com/gpu.deploy.device-plugin"


def gpu_operator_managed(ctx: CheckContext, labels: dict[str, str]) -> bool:
    """The NVIDIA GPU Operator runs the vendor device plugin: a ClusterPolicy exists, the node carries the
    operator's deploy label, or a device-plugin DaemonSet is owned by a ClusterPolicy."""
    if OPERATOR_DP_LABEL in labels or ctx.model.data.of("ClusterPolicy"):
        return True
    return any(r.get("kind") == "ClusterPolicy" for ds in ctx.model.data.of("DaemonSet")
               for r in (ds.get("metadata") or {}).get("ownerReferences") or ())


def stop_device_plugin(ctx: CheckContext, node: str, labels: dict[str, str]) -> str:
    """How to take the vendor device plugin off one node, the supported way for how it was installed."""
    operator = (f"under the GPU Operator, label the node: kubectl label node {node} {OPERATOR_DP_LABEL}=false "
                "--overwrite (the operator then removes its device plugin from the node; editing the operator's "
                "DaemonSet is reverted by the operator)")
    standalone = ("with NVIDIA's standalone device-plugin chart, exclude the node through the chart's node affinity "
                  "(upgraded with the dra-bridge chart's values for it, it leaves nodes labeled "
                  f"{OPERATOR_DP_LABEL}=false: the same label)")
    if gpu_operator_managed(ctx, labels):
        return operator[0].upper() + operator[1:]
    return f"{operator[0].upper() + operator[1:]}; {standalone}"


@rule("DRB010", "GPUs served by two backends on one node", severities=("blocker", "warning"),
      fix="Take the vendor device plugin off the node (the GPU Operator's label nvidia.com/gpu.deploy.device-"
          "plugin=false), or stop the other DRA driver there.")
def double_backend(ctx: CheckContext) -> Iterator[Finding]:
    """Three ways one node's GPUs end up behind two backends (kubernetes/kubernetes sources in brackets):

    * two device plugins for nvidia.com/gpu: the kubelet keeps one endpoint per resource name, the last to register
      (pkg/kubelet/cm/devicemanager/manager.go `PluginConnected`), so the plugins take the GPUs from each other on
      every restart;
    * the device plugin and another DRA driver publishing the same GPUs: two inventories, each GPU counted twice;
    * a DeviceClass with `extendedResourceName` on a node whose allocatable for that name is above 0: the scheduler
      serves the name through the device plugin there and reaches the DRA devices only on nodes where it is 0
      (pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go `filterExtendedResources`), so
      on this node pods asking that name never get the class's DRA devices.
    """
    classes = [(str((c.get("spec") or {}).get("extendedResourceName")), (c.get("metadata") or {}).get("name", ""),
                class_cel(c)) for c in ctx.model.device_classes if (c.get("spec") or {}).get("extendedResourceName")]
    for node in ctx.model.nodes.values():
        other_dra = sorted(b[4:] for b in node.backends if b.startswith("dra:"))
        vendor_dp = "device-plugin" in node.backends
        fix = stop_device_plugin(ctx, node.name, node.labels)
        if vendor_dp and "bridge" in node.backends:
            yield Finding("DRB010", "blocker", _node(node.name),
                          f"the vendor device plugin and the bridge both register {GPU} with this node's kubelet, "
                          "which keeps one plugin per resource name (the last to register): they take the GPUs "
                          "from each other on every restart, so no GPU has one owner",
                          f"{fix}; the bridge serves both APIs")
        if (vendor_dp or "bridge" in node.backends) and other_dra:
            yield Finding("DRB010", "blocker", _node(node.name),
                          f"GPUs are offered through the device plugin and by DRA driver {', '.join(other_dra)}: "
                          "the scheduler counts each GPU twice and admits pods onto GPUs already in use",
                          "Run one GPU owner per node: move the node to the bridge, or stop the device plugin "
                          f"here ({fix[0].lower() + fix[1:]})")
        allocatable = {k: v for k, v in node.allocatable.items() if v > 0}
        for ern, cls, expr in classes:
            if ern not in allocatable:
                continue
            if any(ctx.evaluator.matches(expr, d) for d in node.devices):
                yield Finding("DRB010", "warning", _node(node.name),
                              f"{ern} is advertised by a device plugin here (allocatable {allocatable[ern]}) and "
                              f"backed by DRA through DeviceClass {cls}: the scheduler serves {ern} through the "
                              "device plugin on every node whose allocatable for it is above 0, so on this node pods "
                              f"asking {ern} never get the DRA devices {cls} selects (only claims reach them)",
                              f"To serve {ern} through DRA here, stop the device plugin on the node "
                              f"({fix[0].lower() + fix[1:]}); or remove extendedResourceName from {cls} and "
                              "request its devices by claim",
                              {"resource": ern, "deviceClass": cls})


@rule("DRB011", "Stale zero-capacity GPU entries", severities=("warning",),
      fix="kubectl patch node NODE --subresource=status removing the stale keys, or restart the kubelet.")
def stale_zero(ctx: CheckContext) -> Iterator[Finding]:
    """A node whose status keeps nvidia.com/* at 0 after its device plugin was removed."""
    for node in ctx.model.nodes.values():
        stale = sorted(k for k, v in node.capacity.items() if v == 0 and node.allocatable.get(k, 0) == 0)
        if stale and "device-plugin" not in node.backends and "bridge" not in node.backends:
            yield Finding("DRB011", "warning", _node(node.name),
                          f"node status keeps {', '.join(stale)} at 0 from a removed device plugin: dashboards and "
                          "autoscalers reading allocatable see 'no GPU' (the scheduler treats 0 as inactive)",
                          "Remove the stale entries (or restart the kubelet): kubectl patch node "
                          f"{node.name} --subresource=status --type json -p '"
                          + json.dumps([{"op": "remove", "path": f"/status/{part}/{k.replace('~', '~0').replace('/', '~1')}"}
                                        for k in stale for part in ("capacity", "allocatable")],
                                       separators=(",", ":")) + "'",
                          {"resources": stale})


_RUNTIME = re.compile(r"^([a-z-]+)://v?(\d+)\.(\d+)")


@rule("DRB012", "Container runtime CDI support", severities=("blocker", "warning"),
      fix="Move the node to containerd 2.x or CRI-O.")
def runtime_cdi(ctx: CheckContext) -> Iterator[Finding]:
    """A GPU node's container runtime without CDI support (cri-dockerd, containerd before 1.7) or with CDI off by
    default (containerd 1.7): DRA devices are injected through CDI."""
    for node in ctx.model.nodes.values():
        if not node.gpu_total or not node.runtime:
            continue
        m = _RUNTIME.match(node.runtime)
        if not m:
            continue
        name, major, minor = m.group(1), int(m.group(2)), int(m.group(3))
        if name == "docker":
            yield Finding("DRB012", "blocker", _node(node.name),
                          f"runtime {node.runtime} (cri-dockerd) ignores CDI devices from DRA (Mirantis/cri-dockerd#558)",
                          "Move the node to containerd 2.x or CRI-O before giving it DRA devices")
        elif name == "containerd" and (major, minor) < (1, 7):
            yield Finding("DRB012", "blocker", _node(node.name),
                          f"runtime {node.runtime} has no CDI support (containerd 1.7 added it)",
                          "Upgrade containerd to 2.x (CDI on by default)")
        elif name == "containerd" and major == 1:
            yield Finding("DRB012", "warning", _node(node.name),
                          f"runtime {node.runtime}: CDI is off by default in containerd 1.7",
                          "Upgrade containerd on the node to 2.x (CDI on by default); enable_cdi = true in the CRI "
                          "plugin config of 1.7 works too, but the report cannot see that setting, so this warning "
                          "stays until the upgrade")


@rule("DRB013", "The bridge's split label", severities=("warning", "info"),
      fix="kubectl label|annotate node NODE dra-bridge.io/dra-devices=<0|N|all|gpu-I> --overwrite with a value "
          "the node daemon accepts.")
def split_label(ctx: CheckContext) -> Iterator[Finding]:
    """The node's split request read and fitted with the node daemon's own parser (`bridge.ledger`), so the report
    says exactly what the daemon does with it; and what the daemon itself reports (its split-status annotation):
    GPUs not moved yet, and claims stuck behind a legacy pod (allocated a GPU after it had left DRA, while a legacy
    container holds it: the claim's pod waits for that container)."""
    for node in ctx.model.nodes.values():
        if "bridge" not in node.backends:
            continue
        key = "annotation" if node.split_request is not None and node.split_request.source == "annotation" else "label"
        verb = "annotate" if key == "annotation" else "label"
        result = node.split_result()
        if node.split_request is not None and node.split_request.conflict:
            yield Finding("DRB013", "info", _node(node.name), node.split_request.conflict,
                          f"Remove the label (the annotation decides): kubectl label node {node.name} "
                          "dra-bridge.io/dra-devices-")
        if result is not None and result.wanted is None:
            yield Finding("DRB013", "warning", _node(node.name),
                          f"dra-bridge.io/dra-devices={node.split!r} ({key}): {result.refusal}; the node daemon refuses "
                          "it and keeps its current split",
                          f"kubectl {verb} node --overwrite {node.name} dra-bridge.io/dra-devices=<0|N|all|gpu-I>"
                          f" (this node has {result.total} GPUs)")
        if node.split_status_error:
            yield Finding("DRB013", "warning", _node(node.name), node.split_status_error,
                          "Run a migrate-report as new as the node daemon on this node; or, if the daemon is older, "
                          f"remove the annotation and let it write it again: kubectl annotate node {node.name} "
                          "dra-bridge.io/split-status-")
        status = node.split_status
        for stuck in status.stuck if status is not None else ():
            pod = f"pod {stuck.pod}" if stuck.pod else "its pod"
            yield Finding("DRB013", "warning", _node(node.name),
                          f"ResourceClaim {stuck.claim} ({pod}) waits since {stuck.since} for {stuck.device}, which "
                          f"a legacy container holds: {stuck.holder}",
                          f"Delete that legacy pod to free {stuck.device} now, or delete {pod} so the scheduler "
                          f"picks another GPU; bridge node status {node.name} shows it",
                          {"claim": stuck.claim, "pod": stuck.pod, "device": stuck.device, "holder": stuck.holder,
                           "since": stuck.since})
        if status is not None and status.state == "converging":
            held = [p for p in status.pending if p.phase in ("held", "unknown", "cooldown")]
            if held:
                yield Finding("DRB013", "info", _node(node.name),
                              f"the node daemon has not moved {len(held)} GPU(s) yet: "
                              + "; ".join(p.reason for p in held[:3]),
                              f"bridge node status {node.name} shows every device and its holders")


@rule("DRB014", "The controller's latest split decision", severities=("warning", "info"),
      fix="Nothing to do for a readable decision; remove an unreadable one (kubectl annotate node NODE dra-"
          "bridge.io/split-decision-).")
def controller_decision(ctx: CheckContext) -> Iterator[Finding]:
    """The split decision bridge controller recorded on a Node (annotation dra-bridge.io/split-decision): what it
    changed and why, or that the annotation cannot be read."""
    for raw in ctx.model.data.of("Node"):
        name = str((raw.get("metadata") or {}).get("name", ""))
        try:
            rec = record_of(raw)
        except RecordError as err:
            yield Finding("DRB014", "warning", _node(name), f"unreadable {DECISION_KEY}: {err}",
                          "Run a migrate-report as new as bridge controller; or remove the annotation (the controller "
                          f"writes it again at its next decision): kubectl annotate node {name} {DECISION_KEY}-")
            continue
        if rec is None:
            continue
        verb = "would set" if rec.dry_run else "set"
        fix = ("Dry run: review the reason, then run the controller without --dry-run to apply such changes"
               if rec.dry_run else "To keep the controller off this node: "
               f"kubectl annotate node {name} dra-bridge.io/split-pinned=true")
        yield Finding("DRB014", "info", _node(name),
                      f"bridge controller {rec.controller} {verb} dra-bridge.io/dra-devices "
                      f"{rec.previous or '(none)'} -> {rec.target} at {rec.time} ({rec.moves} GPUs {rec.direction}): "
                      f"{rec.reason}", fix,
                      {"dryRun": rec.dry_run, "previous": rec.previous, "target": rec.target, "moves": rec.moves,
                       "direction": rec.direction, "time": rec.time, "pods": list(rec.pods)})


@rule("DRB015", "nvidia.com/gpu is not a whole GPU on this node", severities=("blocker",),
      fix="Give the node whole GPUs: turn MIG off (nvidia.com/mig.config=all-disabled) or run a device-plugin "
          "config without sharing.")
def not_whole_gpu(ctx: CheckContext) -> Iterator[Finding]:
    """Under MIG strategy `single` a MIG slice is advertised as `nvidia.com/gpu`; time-slicing or MPS without a
    rename advertises each GPU several times under that name. On such a node `nvidia.com/gpu: 1` is not one GPU, so
    translating it to one whole DRA device changes what the pod gets: the webhook leaves pods on such nodes
    untouched, and the node blocks. Sources: the device-plugin config the node runs and the GPU Operator's
    ClusterPolicy (`bridge.report.sharing`), and GFD's labels on the node."""
    for name, reasons in sorted(ctx.not_whole_gpu.items()):
        yield Finding("DRB015", "blocker", _node(name),
                      f"{GPU} here is not one whole GPU: " + "; ".join(reasons),
                      "Give the node whole GPUs: " + _whole_gpu_commands(name, reasons) + " (the webhook leaves pods "
                      "on this node untouched meanwhile: their workloads stay legacy, DRB036)",
                      {"reasons": list(reasons)})


@rule("DRB017", "GPUs offered through both APIs", severities=("blocker",),
      fix="kubectl annotate node NODE dra-bridge.io/dra-devices=N --overwrite (N = the node's GPUs minus those "
          "its legacy pods hold), then check the node daemon (bridge node status NODE).")
def both_apis(ctx: CheckContext) -> Iterator[Finding]:
    """The state the bridge exists to prevent (bridge.report.offers): the bridge's ResourceSlices publish GPUs
    that Running device-plugin pods hold, by count (published + held above the node's GPUs) or by device (the
    daemon's split status names a legacy holder of a published GPU). The scheduler can then hand one GPU to a DRA
    claim and a legacy pod at once, and those devices are not DRA capacity."""
    for name, o in ctx.double_offers.items():
        pods = ", ".join(o.pods[:5]) + (" and more" if o.legacy_held and len(o.pods) > 5 else "")
        by_device = f"; the split status shows {', '.join(o.devices)} held by legacy pods" if o.devices else ""
        yield Finding("DRB017", "blocker", _node(name),
                      f"its ResourceSlices publish {o.published} GPU(s) while Running device-plugin pods hold "
                      f"{o.legacy_held} {GPU} here ({pods or 'none'}): {o.published + o.legacy_held} offered on a "
                      f"node of {o.gpus}, so {o.excess} GPU(s) are offered through both APIs{by_device}",
                      f"kubectl annotate node {name} {SPLIT_LABEL}={o.dra_room} --overwrite (the DRA GPUs this node "
                      f"can have while those pods run), then check that the node daemon publishes the slices: "
                      f"bridge node status {name}; delete ResourceSlices of driver {BRIDGE_DRIVER} for the node "
                      "that it did not write",
                      {"gpus": o.gpus, "published": o.published, "legacyHeld": o.legacy_held, "pods": list(o.pods),
                       "devices": list(o.devices), "excess": o.excess})


def _whole_gpu_commands(node: str, reasons: list[str]) -> str:
    """What gives the node whole GPUs, for the reasons DRB015 found (MIG slices, shares)."""
    out = []
    if any("MIG" in r for r in reasons):
        out.append(f"turn MIG off (kubectl label node {node} nvidia.com/mig.config=all-disabled --overwrite: the GPU "
                   "Operator's MIG manager reconfigures the GPUs)")
    if any("MIG" not in r for r in reasons):
        out.append(f"run a device-plugin config without sharing on it (kubectl label node {node} "
                   "nvidia.com/device-plugin.config=default --overwrite, or rename the shared resource in its config)")
    return " and ".join(out)


_KUBELET = re.compile(r"^v?(\d+)\.(\d+)")


def kubelet_minor(node_kubelet: str) -> tuple[int, int] | None:
    m = _KUBELET.match(node_kubelet)
    return (int(m.group(1)), int(m.group(2))) if m else None


@rule("DRB016", "Kubelet too old for the extended target", severities=("blocker", "warning"),
      fix="Upgrade the kubelet to the release with DRAExtendedResource on by default; a namespace forcing the "
          "extended target: kubectl label namespace NS dra-bridge.io/target-.")
def kubelet_version(ctx: CheckContext) -> Iterator[Finding]:
    """The `extended` target (pods ask `deviceclass.resource.kubernetes.io/<class>`, the scheduler makes the claim)
    needs the API server AND the kubelets of GPU nodes at the release where DRAExtendedResource is on by default: an
    older kubelet does not know that a DRA claim serves the name and rejects the pod at admission. `--target auto`
    picks `claims` while any GPU node's kubelet is older (so nothing breaks, the nodes only hold back the switch);
    a namespace that forces `dra-bridge.io/target=extended` breaks on those nodes."""
    feature = FEATURE_BY_KEY["extended-resource"]
    first = feature.first_on()
    server = ctx.stage(feature.key)
    if first is None or server is None or not server.on_by_default:
        return  # the API server itself cannot serve the extended target: nothing to hold back
    old = []
    for node in ctx.model.nodes.values():
        version = kubelet_minor(node.kubelet)
        if not node.gpu_total or version is None or version >= first:
            continue
        old.append(node.name)
        yield Finding("DRB016", "warning", _node(node.name),
                      f"kubelet {node.kubelet} is older than the extended target needs ({feature.history()}): with "
                      "--target auto the webhook translates to claims while this node's kubelet is older; a pod "
                      "translated to the extended target and bound here is rejected by the kubelet",
                      f"Upgrade the kubelet on {node.name} to {first[0]}.{first[1]}+ (until then the webhook's "
                      "auto target picks claims, which works)",
                      {"kubeletVersion": node.kubelet})
    if not old:
        return
    for ns in ctx.model.namespaces.values():
        if ns.labels.get(TARGET_LABEL) == "extended":
            yield Finding("DRB016", "blocker", ObjectRef("Namespace", "", ns.name),
                          f"{TARGET_LABEL}=extended, but GPU nodes run older kubelets ({', '.join(old[:5])}): pods "
                          "of this namespace bound there are rejected at admission",
                          f"kubectl label namespace {ns.name} {TARGET_LABEL}- (auto picks claims), or upgrade those "
                          "kubelets", {"nodes": old})
