"""Node checks: two owners for the same GPUs, stale zero capacity, container runtime without CDI, split label, and
the split decisions `bridge controller` recorded on the Node (annotation dra-bridge.io/split-decision, read with the
controller's own decoder, bridge.controller.record)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from bridge.controller.record import DECISION_KEY, RecordError, record_of
from bridge.report.checks.context import CheckContext, class_cel
from bridge.report.features import GPU
from bridge.report.findings import Finding, ObjectRef, rule


def _node(name: str) -> ObjectRef:
    return ObjectRef("Node", "", name)


@rule("DRB010", "GPUs served by two backends on one node")
def double_backend(ctx: CheckContext) -> Iterator[Finding]:
    classes = [(str((c.get("spec") or {}).get("extendedResourceName")), (c.get("metadata") or {}).get("name", ""),
                class_cel(c)) for c in ctx.model.device_classes if (c.get("spec") or {}).get("extendedResourceName")]
    for node in ctx.model.nodes.values():
        other_dra = sorted(b[4:] for b in node.backends if b.startswith("dra:"))
        vendor_dp = "device-plugin" in node.backends
        if vendor_dp and "bridge" in node.backends:
            yield Finding("DRB010", "blocker", _node(node.name),
                          "the vendor device plugin and the bridge both run here: two device plugins register "
                          f"{GPU} and the kubelet keeps only the last one",
                          "Remove the vendor device plugin from this node (node selector/affinity on its "
                          "DaemonSet); the bridge serves both APIs")
        if (vendor_dp or "bridge" in node.backends) and other_dra:
            yield Finding("DRB010", "blocker", _node(node.name),
                          f"GPUs are offered through the device plugin and by DRA driver {', '.join(other_dra)}: "
                          "the scheduler counts each GPU twice and admits pods onto GPUs already in use",
                          "Run one GPU owner per node: move the node to the bridge, or remove the device plugin")
        allocatable = {k: v for k, v in node.allocatable.items() if v > 0}
        for ern, cls, expr in classes:
            if ern not in allocatable:
                continue
            if any(ctx.evaluator.matches(expr, d) for d in node.devices):
                yield Finding("DRB010", "blocker", _node(node.name),
                              f"{ern} is advertised by a device plugin (allocatable {allocatable[ern]}) and backed "
                              f"by DRA through DeviceClass {cls}: KEP-5004 forbids both on one node",
                              f"Stop the device plugin on this node, or remove extendedResourceName from {cls}",
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
    for node in ctx.model.nodes.values():
        if "bridge" not in node.backends or not node.split:
            continue
        if node.split != "all" and not node.split.isdigit():
            yield Finding("DRB013", "warning", _node(node.name),
                          f"dra-bridge.io/dra-devices={node.split!r} is not 0, a number, or all: the node daemon keeps "
                          "its current split",
                          "kubectl label node --overwrite NODE dra-bridge.io/dra-devices=<0|N|all>")
        elif node.split.isdigit() and node.gpu_total and int(node.split) > node.gpu_total:
            yield Finding("DRB013", "info", _node(node.name),
                          f"dra-bridge.io/dra-devices={node.split} exceeds the node's {node.gpu_total} GPUs; all go to DRA",
                          "Set the label to all")


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
