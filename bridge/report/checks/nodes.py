"""Node checks: two owners for the same GPUs, stale zero capacity, container runtime without CDI, split label, and
the split decisions `bridge controller` recorded on the Node (annotation dra-bridge.io/split-decision, read with the
controller's own decoder, bridge.controller.record)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from bridge.controller.record import DECISION_KEY, RecordError, record_of
from bridge.report.checks.context import CheckContext, class_cel
from bridge.report.features import FEATURE_BY_KEY, GPU, TARGET_LABEL
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


@rule("DRB010", "GPUs served by two backends on one node")
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


@rule("DRB011", "Stale zero-capacity GPU entries")
def stale_zero(ctx: CheckContext) -> Iterator[Finding]:
    for node in ctx.model.nodes.values():
        stale = sorted(k for k, v in node.capacity.items() if v == 0 and node.allocatable.get(k, 0) == 0)
        if stale and "device-plugin" not in node.backends and "bridge" not in node.backends:
            yield Finding("DRB011", "warning", _node(node.name),
                          f"node status keeps {', '.join(stale)} at 0 from a removed device plugin: dashboards and "
                          "autoscalers reading allocatable see 'no GPU' (the scheduler treats 0 as inactive)",
                          "Remove the stale entries: kubectl patch node --subresource=status (JSON patch removing "
                          "status.capacity/allocatable keys) or restart the kubelet",
                          {"resources": stale})


_RUNTIME = re.compile(r"^([a-z-]+)://v?(\d+)\.(\d+)")


@rule("DRB012", "Container runtime CDI support")
def runtime_cdi(ctx: CheckContext) -> Iterator[Finding]:
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
                          "Set enable_cdi = true (and cdi_spec_dirs) in the CRI plugin config, or upgrade to 2.x")


@rule("DRB013", "The bridge's split label")
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
                          "Remove the label or make both say the same: kubectl label node NODE "
                          "dra-bridge.io/dra-devices-")
        if result is not None and result.wanted is None:
            yield Finding("DRB013", "warning", _node(node.name),
                          f"dra-bridge.io/dra-devices={node.split!r} ({key}): {result.refusal}; the node daemon refuses "
                          "it and keeps its current split",
                          f"kubectl {verb} node --overwrite {node.name} dra-bridge.io/dra-devices=<0|N|all|gpu-I>"
                          f" (this node has {result.total} GPUs)")
        if node.split_status_error:
            yield Finding("DRB013", "warning", _node(node.name), node.split_status_error,
                          "Check the node daemon's version on this node")
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


@rule("DRB014", "The controller's latest split decision")
def controller_decision(ctx: CheckContext) -> Iterator[Finding]:
    for raw in ctx.model.data.of("Node"):
        name = str((raw.get("metadata") or {}).get("name", ""))
        try:
            rec = record_of(raw)
        except RecordError as err:
            yield Finding("DRB014", "warning", _node(name), f"unreadable {DECISION_KEY}: {err}",
                          "Upgrade the report to the controller's version, or remove the annotation")
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


@rule("DRB015", "nvidia.com/gpu is not a whole GPU on this node")
def not_whole_gpu(ctx: CheckContext) -> Iterator[Finding]:
    """Under MIG strategy `single` a MIG slice is advertised as `nvidia.com/gpu`; time-slicing or MPS without a
    rename advertises each GPU several times under that name. On such a node `nvidia.com/gpu: 1` is not one GPU, so
    translating it to one whole DRA device changes what the pod gets: the webhook leaves pods on such nodes
    untouched, and the node blocks. Sources: the device-plugin config the node runs and the GPU Operator's
    ClusterPolicy (`bridge.report.sharing`), and GFD's labels on the node."""
    for name, reasons in sorted(ctx.not_whole_gpu.items()):
        yield Finding("DRB015", "blocker", _node(name),
                      f"{GPU} here is not one whole GPU: " + "; ".join(reasons),
                      f"Keep the namespaces whose pods run here legacy (the webhook leaves pods on this node "
                      f"untouched); to migrate, give the node whole GPUs ({GPU} without MIG strategy single or "
                      "un-renamed sharing) or move the workloads to nodes that have them",
                      {"reasons": list(reasons)})


_KUBELET = re.compile(r"^v?(\d+)\.(\d+)")


def kubelet_minor(node_kubelet: str) -> tuple[int, int] | None:
    m = _KUBELET.match(node_kubelet)
    return (int(m.group(1)), int(m.group(2))) if m else None


@rule("DRB016", "Kubelet too old for the extended target")
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
                      f"Upgrade the kubelet to {first[0]}.{first[1]}+ (or keep the claims target)",
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
