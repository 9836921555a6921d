"""Workload checks: resource names DRA cannot serve unchanged, pod shapes the translation cannot carry, device
access that bypasses any allocator, selectors to translate, preemption reliance."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bridge.kvalues import gfd, podgpu
from bridge.report.checks.context import CheckContext, keep_legacy, workload_ref
from bridge.report.features import (
    BRIDGE_DRIVER,
    DEFAULT_SCHEDULER,
    FEATURE_BY_KEY,
    GPU,
    GPU_SHARED_SUFFIX,
    HAMI_RESOURCES,
    MAX_DEVICES_PER_CLAIM,
    MIG_PREFIX,
    TARGET_LABEL,
)
from bridge.report.findings import Finding, rule
from bridge.report.model import Node
from bridge.report.sharing import terms_match


@rule("DRB020", "MIG resource names", severities=("blocker", "warning"),
      fix='Keep the workload legacy (pod template annotation dra-bridge.io/translate: "false"), or apply per-'
          "profile DeviceClasses on a driver publishing MIG devices.")
def mig(ctx: CheckContext) -> Iterator[Finding]:
    """Workloads asking nvidia.com/mig-<profile>: DRA has no such name unless a driver publishes MIG devices and a
    DeviceClass carries the name."""
    dra_mig = any(
        "profile" in d.attributes.get(d.driver, {}) for n in ctx.model.nodes.values() for d in n.devices
    )
    for w in ctx.translatable:
        names = sorted(k for k in w.spec.gpu if k.startswith(MIG_PREFIX))
        if not names:
            continue
        profiles = [k[len(MIG_PREFIX):] for k in names]
        if dra_mig:
            yield Finding("DRB020", "warning", workload_ref(w),
                          f"requests {', '.join(names)}: DRA has no such name; it needs one DeviceClass per MIG "
                          "profile with that extendedResourceName",
                          "Apply the per-profile DeviceClasses from --emit-manifests: "
                          + "; ".join(f"kubectl apply -f mig-{p}.yaml" for p in profiles),
                          {"profiles": profiles})
        else:
            yield Finding("DRB020", "blocker", workload_ref(w),
                          f"requests {', '.join(names)}: no DRA driver in this cluster publishes MIG devices, and the "
                          "bridge serves whole GPUs only; the workload must stay on the device plugin",
                          f"Keep this workload on the device plugin: {keep_legacy(w)}; or run a DRA driver that "
                          "publishes MIG devices (attribute `profile`) and apply the per-profile DeviceClasses from "
                          "--emit-manifests",
                          {"profiles": profiles})


@rule("DRB021", "Time-sliced shared GPUs", severities=("blocker", "warning"),
      fix='Keep the workload legacy (dra-bridge.io/translate: "false"), or a DeviceClass serving the shared '
          "name with capacity requests where the release has them.")
def shared(ctx: CheckContext) -> Iterator[Finding]:
    """Workloads asking a time-sliced shared name (nvidia.com/gpu.shared): DRA serves whole devices to extended-
    resource requests."""
    capacity = FEATURE_BY_KEY["extended-resource-capacity"]
    consumable = FEATURE_BY_KEY["consumable-capacity"]
    stage = ctx.stage(capacity.key)
    served = {str((c.get("spec") or {}).get("extendedResourceName")) for c in ctx.model.device_classes}
    for w in ctx.translatable:
        names = sorted(k for k in w.spec.gpu if k.endswith(GPU_SHARED_SUFFIX))
        if not names:
            continue
        if stage is not None and stage.on_by_default:
            names = [n for n in names if n not in served]
            if not names:
                continue  # a DeviceClass serves the shared name with capacity requests
            yield Finding("DRB021", "warning", workload_ref(w),
                          f"requests {', '.join(names)}: served by DRA through extendedResourceCapacityRequests "
                          f"({capacity.title}); N replicas become N independent 1-share allocations, not N shares "
                          "of one GPU",
                          "Create a DeviceClass with extendedResourceName and extendedResourceCapacityRequests")
        else:
            yield Finding("DRB021", "blocker", workload_ref(w),
                          f"requests {', '.join(names)} (time-slicing): DRA serves whole devices to extended-resource "
                          f"requests; a shared name needs {capacity.history()}",
                          f"Keep this workload on the device plugin: {keep_legacy(w)}; or rewrite it to a "
                          f"ResourceClaim on a class with consumable capacity ({consumable.history()})")


@rule("DRB022", "HAMi GPU sharing resources", severities=("blocker",),
      fix='Keep the workload on HAMi (dra-bridge.io/translate: "false"), or move it to HAMi-DRA.')
def hami(ctx: CheckContext) -> Iterator[Finding]:
    """Workloads asking HAMi resources (gpumem, gpucores, ...): their limits come from HAMi-core, which the bridge's
    devices do not carry."""
    for w in ctx.translatable:
        names = sorted(k for k in w.spec.gpu if k in HAMI_RESOURCES)
        if names:
            yield Finding("DRB022", "blocker", workload_ref(w),
                          f"requests HAMi resources {', '.join(names)}: memory/core limits come from HAMi-core, which "
                          "DRA devices from the bridge do not carry",
                          f"Keep this workload on HAMi: {keep_legacy(w)}; or move it to HAMi-DRA and request "
                          "its devices by claim")


@rule("DRB023", "More GPUs than one claim can hold", severities=("blocker", "warning"),
      fix="Split the work to at most 32 GPUs per claim, keep the claims target (kubectl label namespace NS dra-"
          "bridge.io/target=claims), or keep the workload legacy.")
def too_many(ctx: CheckContext) -> Iterator[Finding]:
    """The webhook's `claims` target gives each container its own claim; KEP-5004's `extended` path makes one claim
    per pod with one request per container. A claim holds at most 32 devices (AllocationResultsMaxSize) and 32
    requests (DeviceRequestsMaxSize), so a container above 32 GPUs blocks both targets, and a pod above 32 in total
    only the extended one (on by default from 1.36, when the bridge may pick it)."""
    limit = MAX_DEVICES_PER_CLAIM
    extended = ctx.stage("extended-resource")
    for w in ctx.translatable:
        per_container, per_pod = w.spec.max_container_gpus, w.spec.gpu.get(GPU, 0)
        details: dict[str, object] = {"gpusPerPod": per_pod, "maxGpusPerContainer": per_container,
                                      "gpuContainers": w.spec.gpu_containers}
        if per_container > limit:
            yield Finding("DRB023", "blocker", workload_ref(w),
                          f"one container requests {per_container} {GPU}: a ResourceClaim allocates at most {limit} "
                          "devices, so the webhook leaves the pod untranslated and KEP-5004 cannot schedule it",
                          f"Split the work into containers or pods of at most {limit} GPUs, or keep it on the device "
                          f"plugin: {keep_legacy(w)}", details)
        elif per_pod > limit and extended is not None and extended.on_by_default and \
                ctx.model.namespaces[w.namespace].labels.get(TARGET_LABEL) != "claims":
            yield Finding("DRB023", "warning", workload_ref(w),
                          f"each pod requests {per_pod} {GPU} over {w.spec.gpu_containers} containers: the `claims` "
                          f"target (one claim per container) works, but the `extended` target (KEP-5004: one claim "
                          f"per pod, at most {limit} devices and {limit} requests) leaves it Pending",
                          "Keep the claims translation target for its namespace while it migrates: kubectl label "
                          f"namespace {w.namespace} {TARGET_LABEL}=claims --overwrite; or split the pod to at most "
                          f"{limit} GPUs", details)


@rule("DRB057", "GPU counts that are not counts", severities=("blocker",),
      fix="Write the GPU count as a whole number of GPUs (\"2\", not \"1e400\" or \"500m\").")
def invalid_counts(ctx: CheckContext) -> Iterator[Finding]:
    """A GPU value that is not a whole number of devices up to 2^31 - 1 (`bridge.kvalues.quantity.check_count`):
    "1e400" is out of range, "500m" not whole. Older API servers store such a pod (an exponent that overflows their
    int64 check counts as whole); the scheduler cannot place it, the webhook leaves it untranslated, the controller
    counts it as blocked. The report counts it as 0 GPUs and says so here, rather than computing the number."""
    for w in ctx.gpu_workloads:
        problems = w.spec.invalid_counts
        if problems:
            yield Finding("DRB057", "blocker", workload_ref(w),
                          f"{problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                          + ": not a valid GPU count, so no scheduler can place the pod and the bridge does not "
                          "translate it",
                          f"Write {GPU} as a whole number of GPUs (\"2\", not \"1e400\" or \"500m\")",
                          {"problems": list(problems[:10])})


@rule("DRB033", "GPUs in init containers", severities=("info",),
      fix="Nothing to do: translation keeps the count.")
def init_containers(ctx: CheckContext) -> Iterator[Finding]:
    """The device plugin's count for a pod with GPU init containers is max(app + sidecars, each init container +
    the sidecars started before it), and the kubelet hands an init container's GPUs on to the containers after it
    (`bridge.kvalues.podgpu`). The webhook keeps that count: init containers borrow the claims of the containers
    that start after them, plus one shared claim for what those cannot cover. Where the numbers matter - GPUs that
    only an init container uses, held for the pod's whole life under both APIs, and what upstream's extended path
    shows an init container - this says so; nothing to fix."""
    extended = ctx.stage("extended-resource")
    for w in ctx.translatable:
        counts = w.spec.gpu_counts
        inits = [c for c in counts if c.kind == "init" and c.count]
        if not inits:
            continue
        plan = podgpu.plan_claims(counts)
        long_lived = sum(c.count for c in counts if c.long_lived)
        held = plan.devices
        idle = held - long_lived
        init_text = ", ".join(f"{c.name} {c.count}" for c in inits)
        message = (f"init container(s) {init_text} ask {GPU}; each pod holds {held} GPU(s) under the device plugin "
                   f"and after translation alike ({long_lived} for its app containers and sidecars"
                   + (f", {idle} only for its init containers, held until the pod ends" if idle > 0 else "") + ")")
        if extended is not None and extended.on_by_default:
            message += ("; with the extended target the scheduler hands an init container whole requests of the "
                        "app containers, so it may see more GPUs than it asked for")
        yield Finding("DRB033", "info", workload_ref(w), message,
                      "None: translation keeps the count; size quotas and the DRA split for "
                      f"{held} GPU(s) per pod" + (" (or move the GPU work out of the init container to free "
                                                   f"{idle} GPU(s) per pod)" if idle > 0 else ""),
                      {"podDevices": held, "longLived": long_lived, "onlyForInit": max(idle, 0),
                       "initContainers": [c.name for c in inits]})


@rule("DRB035", "GPU-label selectors whose CEL misses the published devices", severities=("blocker", "warning"),
      fix="Align the nodes' GFD labels with their GPUs, or select by product/compute capability; until then "
          "keep the workload legacy.")
def gfd_mismatch(ctx: CheckContext) -> Iterator[Finding]:
    """The webhook turns GFD-label selectors into CEL on the attributes the bridge publishes
    (`bridge.kvalues.gfd`), for the family rule the cluster's GFD labels show. On every node that publishes bridge
    devices, the node's labels and the CEL must agree: labels that select the node while the CEL matches none of its
    devices leave translated pods Pending there (blocker); a CEL that matches devices on a node the labels exclude
    gives pods GPUs they did not select (warning); a CEL that errors on a device aborts scheduling for the pod in
    the real scheduler (structured/allocator.go), so it is a blocker too. Typical causes: GFD releases that disagree
    on `nvidia.com/gpu.family`, slices written by another node daemon version, hand-made node labels."""
    bridged = [n for n in ctx.model.nodes.values() if any(d.driver == BRIDGE_DRIVER for d in n.devices)]
    if not bridged:
        return
    rule_, why = ctx.family_rule
    seen: dict[Any, tuple[list[str], list[str], list[str]]] = {}  # one comparison per distinct selector
    for w in ctx.translatable:
        t = ctx.workload_cel(w)
        if not t.cel or t.problems:
            continue
        hit = seen.get(w.spec.gfd_terms)
        if hit is None:
            hit = seen[w.spec.gfd_terms] = _compare(ctx, t.cel, w.spec.gfd_terms, bridged)
        pending, extra, errors = hit
        details: dict[str, object] = {"cel": t.cel, "familyRule": rule_.value, "labelsOnlyNodes": pending,
                                      "celOnlyNodes": extra, "errors": errors[:5]}
        rule_note = f" ({why}; the newest GFD family rule was assumed)" if why else ""
        if errors:
            yield Finding("DRB035", "blocker", workload_ref(w),
                          f"the translated selector errors on published devices ({errors[0]}): the scheduler aborts "
                          "scheduling for the pod on a CEL runtime error" + rule_note,
                          "Select by attributes every published device carries (productName, "
                          "cudaComputeCapability, memory); until then keep the workload legacy: "
                          f"{keep_legacy(w)}", details)
        if pending:
            yield Finding("DRB035", "blocker", workload_ref(w),
                          f"its GPU labels select nodes {', '.join(pending[:5])}, but the translated selector "
                          f"matches none of their published devices: translated pods cannot use those nodes"
                          + rule_note,
                          "Align the nodes' GFD labels with their GPUs (one GFD release across the cluster), or "
                          "select by product/compute capability instead of family; until then keep the workload "
                          f"legacy: {keep_legacy(w)}", details)
        if extra:
            yield Finding("DRB035", "warning", workload_ref(w),
                          f"the translated selector also matches devices on nodes {', '.join(extra[:5])}, which its "
                          "GPU labels exclude: translated pods may get GPUs they did not select" + rule_note,
                          "Align the nodes' GFD labels with their GPUs, or narrow the selector; until then keep the "
                          f"workload legacy: {keep_legacy(w)}", details)


def _compare(ctx: CheckContext, cel: str, terms: Any, nodes: list[Node]) -> tuple[list[str], list[str], list[str]]:
    """(nodes the labels select but the CEL misses, nodes the CEL hits but the labels exclude, CEL errors)."""
    device_terms = tuple(tuple(r for r in term if r[0] in gfd.DEVICE_LABELS) for term in terms)
    pending, extra, errors = [], [], []
    for node in nodes:
        by_labels = terms_match(device_terms, node.labels)
        matched = False
        for d in node.devices:
            if d.driver != BRIDGE_DRIVER:
                continue
            out = ctx.evaluator.outcome(cel, d)
            if isinstance(out, str):
                errors.append(f"{node.name}/{d.name}: {out}")
            elif out:
                matched = True
        if by_labels and not matched:
            pending.append(node.name)
        elif matched and not by_labels:
            extra.append(node.name)
    return pending, extra, errors


@rule("DRB034", "Pods the default scheduler does not place", severities=("blocker", "warning"),
      fix="Replace a template's nodeName with a node selector; run the webhook with --translate-scheduler NAME "
          "for a scheduler that allocates claims; or keep the workload legacy.")
def scheduler_bypass(ctx: CheckContext) -> Iterator[Finding]:
    """Only kube-scheduler allocates ResourceClaims. A pod template with `nodeName` set skips scheduling: a claim
    would never be allocated and the pod never starts, so the webhook leaves such pods untouched (they stay on the
    device plugin). A pod naming another scheduler (Volcano, KAI, YuniKorn, ...) is left untouched unless the webhook
    is told to translate for it (`bridge webhook --translate-scheduler NAME`), which is right only when that
    scheduler allocates claims itself or is a kube-scheduler profile; the report reads that option from the webhook's
    Deployment in the input (`CheckContext.translated_schedulers`). Bare pods always carry the node they were bound
    to, so `nodeName` is read from controller templates only."""
    for w in ctx.translatable:
        if not w.spec.legacy_gpus:
            continue  # the webhook translates nvidia.com/gpu only: pods already on DRA are not its to leave alone
        if w.spec.node_name and w.kind != "Pod":
            yield Finding("DRB034", "blocker", workload_ref(w),
                          f"its pod template sets nodeName {w.spec.node_name}: the scheduler never sees these pods, "
                          "so no one would allocate a ResourceClaim for them; the webhook leaves them on the device "
                          "plugin",
                          "Replace spec.nodeName in the pod template with a node selector (kubernetes.io/hostname: "
                          f"{w.spec.node_name}) so the scheduler places the pods; or keep this workload legacy: "
                          f"{keep_legacy(w)}",
                          {"nodeName": w.spec.node_name})
        scheduler = w.spec.scheduler_name
        if scheduler and scheduler != DEFAULT_SCHEDULER and scheduler not in ctx.translated_schedulers:
            yield Finding("DRB034", "warning", workload_ref(w),
                          f"its pods name scheduler {scheduler}: only kube-scheduler is known to allocate "
                          "ResourceClaims, so the webhook leaves these pods untouched (on the device plugin)",
                          f"Keep this workload legacy: {keep_legacy(w)}; or, if {scheduler} allocates "
                          "ResourceClaims in the version you run (or is a kube-scheduler profile), run the webhook "
                          f"with --translate-scheduler {scheduler} (the chart: webhook.extraArgs)",
                          {"schedulerName": scheduler})


@rule("DRB036", "Workloads on nodes where nvidia.com/gpu is not a whole GPU", severities=("blocker",),
      fix='Keep the workload legacy (dra-bridge.io/translate: "false"), or move it to nodes with whole GPUs.')
def on_shared_nodes(ctx: CheckContext) -> Iterator[Finding]:
    """A workload whose pods run on, or whose GPU-label selectors choose only, nodes where `nvidia.com/gpu` is a MIG
    slice or a shared GPU (DRB015): the webhook leaves its pods untouched, so it cannot move to DRA as it is."""
    shared = ctx.not_whole_gpu
    if not shared:
        return
    whole = [n for n in ctx.model.nodes.values() if n.gpu_total and n.name not in shared]
    for w in ctx.translatable:
        if not w.spec.legacy_gpus:
            continue  # nvidia.com/gpu is what is not whole there; DRA devices of the bridge are whole GPUs
        running = sorted(n for n in w.nodes if n in shared)
        selected: list[str] = []
        if w.spec.gfd_terms and not any(terms_match(w.spec.gfd_terms, n.labels) for n in whole):
            selected = sorted(n for n in shared if terms_match(w.spec.gfd_terms, ctx.model.nodes[n].labels))
        where = running or selected
        if not where:
            continue
        how = "runs on" if running else "selects only"
        yield Finding("DRB036", "blocker", workload_ref(w),
                      f"{how} nodes where {GPU} is not a whole GPU ({', '.join(where[:5])}: "
                      f"{shared[where[0]][0]}): each {GPU} its pods hold there is a slice or a share of a GPU, "
                      "so translating them to whole DRA devices would change what they get; the webhook leaves "
                      "its pods untouched",
                      f"Keep this workload legacy: {keep_legacy(w)}; or move it to nodes with whole GPUs (a node "
                      "selector on them; see DRB015)",
                      {"nodes": where})


def _short(cel: str, limit: int = 240) -> str:
    """A selector for a message: product-name patterns are long; the whole expression is in the details (`cel`)."""
    return cel if len(cel) <= limit else cel[:limit - 30] + " ... (full expression in details.cel)"


@rule("DRB025", "GPU Feature Discovery label selectors", severities=("warning", "info"),
      fix="Nothing to do for a translatable selector; rewrite (or drop) the terms the translation cannot "
          "express, or keep the workload legacy.")
def gfd_selectors(ctx: CheckContext) -> Iterator[Finding]:
    """GPU Feature Discovery label selectors (nvidia.com/gpu.product, .memory, .family, .compute.*) and the CEL the
    webhook turns them into."""
    for w in ctx.translatable:
        if not w.spec.gfd_terms:
            continue
        t = ctx.workload_cel(w)
        labels = sorted({r[0] for term in w.spec.gfd_terms for r in term})
        details: dict[str, object] = {"cel": t.cel or "", "labels": labels, "nodeSelectors": list(t.node_only),
                   "untranslatable": list(t.problems)}
        kept = f"; kept as node selectors: {', '.join(t.node_only)}" if t.node_only else ""
        if t.problems:
            yield Finding("DRB025", "warning", workload_ref(w),
                          f"GPU label selectors the translation cannot express: {'; '.join(t.problems)}"
                          + (f"; the rest becomes `{_short(t.cel)}`" if t.cel else "") + kept,
                          "Rewrite these terms with In/NotIn/Gt/Lt on nvidia.com/gpu.product, .memory, .family or "
                          f".compute.major/minor, or drop them; or keep the workload legacy: {keep_legacy(w)}",
                          details)
        elif t.cel:
            yield Finding("DRB025", "info", workload_ref(w),
                          f"selects GPUs by labels {', '.join(labels)}; as a device selector: `{_short(t.cel)}`{kept}",
                          "None: the webhook adds this CEL selector when it translates the pod", details)


@rule("DRB026", "Host /dev/nvidia* mounts", severities=("blocker",),
      fix="Remove the hostPath volumes of /dev/nvidia* and request GPUs (nvidia.com/gpu or a claim).")
def dev_mounts(ctx: CheckContext) -> Iterator[Finding]:
    """Pods mounting /dev/nvidia* from the host: they use GPUs no allocator gave them."""
    for w in ctx.gpu_workloads:
        if w.spec.dev_hostpaths:
            yield Finding("DRB026", "blocker", workload_ref(w),
                          f"mounts {', '.join(w.spec.dev_hostpaths)} from the host: it uses GPUs no allocator gave it, "
                          "so DRA pods on the same node can share its GPUs unknowingly",
                          "Remove the hostPath volumes and request GPUs (nvidia.com/gpu or a claim)")


@rule("DRB027", "Privileged GPU containers", severities=("warning",),
      fix="Drop privileged: true from the GPU containers.")
def privileged(ctx: CheckContext) -> Iterator[Finding]:
    """Privileged GPU containers: they see every GPU of the node, not only the allocated ones."""
    for w in ctx.gpu_workloads:
        if w.spec.privileged and (w.spec.gpu or w.spec.uses_claims):
            yield Finding("DRB027", "warning", workload_ref(w),
                          f"container(s) {', '.join(w.spec.privileged)} are privileged: they see every GPU on the node, "
                          "not just the allocated ones",
                          "Drop privileged: true; grant only the capabilities the workload needs")


@rule("DRB028", "NVIDIA_VISIBLE_DEVICES set by hand", severities=("warning",),
      fix="Remove NVIDIA_VISIBLE_DEVICES from the pod spec.")
def visible_devices(ctx: CheckContext) -> Iterator[Finding]:
    """Containers setting NVIDIA_VISIBLE_DEVICES by hand: it can expose other GPUs and conflicts with CDI."""
    for w in ctx.gpu_workloads:
        if w.spec.visible_devices_env:
            yield Finding("DRB028", "warning", workload_ref(w),
                          f"container(s) {', '.join(w.spec.visible_devices_env)} set NVIDIA_VISIBLE_DEVICES: it can "
                          "expose GPUs other than the allocated ones and conflicts with CDI injection",
                          "Remove NVIDIA_VISIBLE_DEVICES from the pod spec; the allocated devices are injected")


@rule("DRB029", "Preemption of GPU pods", severities=("warning",),
      fix='Keep the workload legacy until the release has DRA preemption (dra-bridge.io/translate: "false").')
def preemption(ctx: CheckContext) -> Iterator[Finding]:
    """GPU workloads with a preempting PriorityClass on a release where the scheduler does not preempt pods holding
    DRA devices."""
    classes: dict[str, int] = {}
    for pc_obj in ctx.model.data.of("PriorityClass"):
        name = (pc_obj.get("metadata") or {}).get("name", "")
        if pc_obj.get("preemptionPolicy", "PreemptLowerPriority") != "Never":
            classes[name] = int(pc_obj.get("value", 0))
    preemption = FEATURE_BY_KEY["dra-preemption"]
    stage = ctx.stage(preemption.key)
    if stage is not None and stage != stage.ABSENT:
        return
    for w in ctx.translatable:
        pc = w.spec.priority_class
        if pc in classes and (w.spec.gpu.get(GPU) or w.spec.uses_claims):
            yield Finding("DRB029", "warning", workload_ref(w),
                          f"runs with PriorityClass {pc} (value {classes[pc]}, may preempt): the scheduler does not "
                          "preempt pods holding DRA devices until DRA preemption ships "
                          f"({preemption.history()}), so it may wait instead of evicting lower-priority GPU pods",
                          "Keep it legacy until the cluster runs a release with DRA preemption: "
                          f"{keep_legacy(w)}",
                          {"priorityClass": pc})
