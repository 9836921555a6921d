"""Workload checks: resource names DRA cannot serve unchanged, pod shapes the translation cannot carry, device
access that bypasses any allocator, selectors to translate, preemption reliance."""

from __future__ import annotations

from collections.abc import Iterator

from bridge.report.checks.context import CheckContext, workload_ref
from bridge.report.features import (
    DEFAULT_SCHEDULER,
    FEATURE_BY_KEY,
    GPU,
    GPU_SHARED_SUFFIX,
    HAMI_RESOURCES,
    MAX_DEVICES_PER_CLAIM,
    MIG_PREFIX,
)
from bridge.report.findings import Finding, rule
from bridge.report.sharing import terms_match


@rule("DRB020", "MIG resource names")
def mig(ctx: CheckContext) -> Iterator[Finding]:
    dra_mig = any(
        "profile" in d.attributes.get(d.driver, {}) for n in ctx.model.nodes.values() for d in n.devices
    )
    for w in ctx.gpu_workloads:
        names = sorted(k for k in w.spec.gpu if k.startswith(MIG_PREFIX))
        if not names:
            continue
        profiles = [k[len(MIG_PREFIX):] for k in names]
        if dra_mig:
            yield Finding("DRB020", "warning", workload_ref(w),
                          f"requests {', '.join(names)}: DRA has no such name; it needs one DeviceClass per MIG "
                          "profile with that extendedResourceName",
                          "Apply the per-profile DeviceClasses from --emit-manifests (mig-<profile>.yaml)",
                          {"profiles": profiles})
        else:
            yield Finding("DRB020", "blocker", workload_ref(w),
                          f"requests {', '.join(names)}: no DRA driver in this cluster publishes MIG devices, and the "
                          "bridge serves whole GPUs only; the workload must stay on the device plugin",
                          "Keep this namespace legacy; or run a DRA driver that publishes MIG devices (attribute "
                          "`profile`) and apply per-profile DeviceClasses from --emit-manifests",
                          {"profiles": profiles})


@rule("DRB021", "Time-sliced shared GPUs")
def shared(ctx: CheckContext) -> Iterator[Finding]:
    capacity = FEATURE_BY_KEY["extended-resource-capacity"]
    consumable = FEATURE_BY_KEY["consumable-capacity"]
    stage = ctx.stage(capacity.key)
    for w in ctx.gpu_workloads:
        names = sorted(k for k in w.spec.gpu if k.endswith(GPU_SHARED_SUFFIX))
        if not names:
            continue
        if stage is not None and stage.on_by_default:
            yield Finding("DRB021", "warning", workload_ref(w),
                          f"requests {', '.join(names)}: served by DRA through extendedResourceCapacityRequests "
                          f"({capacity.title}); N replicas become N independent 1-share allocations, not N shares "
                          "of one GPU",
                          "Create a DeviceClass with extendedResourceName and extendedResourceCapacityRequests")
        else:
            yield Finding("DRB021", "blocker", workload_ref(w),
                          f"requests {', '.join(names)} (time-slicing): DRA serves whole devices to extended-resource "
                          f"requests; a shared name needs {capacity.history()}",
                          "Keep this workload on the device plugin, or rewrite it to a ResourceClaim on a class "
                          f"with consumable capacity ({consumable.history()})")


@rule("DRB022", "HAMi GPU sharing resources")
def hami(ctx: CheckContext) -> Iterator[Finding]:
    for w in ctx.gpu_workloads:
        names = sorted(k for k in w.spec.gpu if k in HAMI_RESOURCES)
        if names:
            yield Finding("DRB022", "blocker", workload_ref(w),
                          f"requests HAMi resources {', '.join(names)}: memory/core limits come from HAMi-core, which "
                          "DRA devices from the bridge do not carry",
                          "Keep this workload on HAMi, or move it to HAMi-DRA")


@rule("DRB023", "More GPUs than one claim can hold")
def too_many(ctx: CheckContext) -> Iterator[Finding]:
    """The webhook's `claims` target gives each container its own claim; KEP-5004's `extended` path makes one claim
    per pod with one request per container. A claim holds at most 32 devices (AllocationResultsMaxSize) and 32
    requests (DeviceRequestsMaxSize), so a container above 32 GPUs blocks both targets, and a pod above 32 in total
    only the extended one (on by default from 1.36, when the bridge may pick it)."""
    limit = MAX_DEVICES_PER_CLAIM
    extended = ctx.stage("extended-resource")
    for w in ctx.gpu_workloads:
        per_container, per_pod = w.spec.max_container_gpus, w.spec.gpu.get(GPU, 0)
        details: dict[str, object] = {"gpusPerPod": per_pod, "maxGpusPerContainer": per_container,
                                      "gpuContainers": w.spec.gpu_containers}
        if per_container > limit:
            yield Finding("DRB023", "blocker", workload_ref(w),
                          f"one container requests {per_container} {GPU}: a ResourceClaim allocates at most {limit} "
                          "devices, so the webhook leaves the pod untranslated and KEP-5004 cannot schedule it",
                          f"Split the work into containers or pods of at most {limit} GPUs, or keep it on the device "
                          "plugin", details)
        elif per_pod > limit and extended is not None and extended.on_by_default:
            yield Finding("DRB023", "warning", workload_ref(w),
                          f"each pod requests {per_pod} {GPU} over {w.spec.gpu_containers} containers: the `claims` "
                          f"target (one claim per container) works, but the `extended` target (KEP-5004: one claim "
                          f"per pod, at most {limit} devices and {limit} requests) leaves it Pending",
                          "Run the webhook with the claims translation target while this workload migrates, or "
                          f"split the pod to at most {limit} GPUs", details)


@rule("DRB034", "Pods the default scheduler does not place")
def scheduler_bypass(ctx: CheckContext) -> Iterator[Finding]:
    """Only kube-scheduler allocates ResourceClaims. A pod template with `nodeName` set skips scheduling: a claim
    would never be allocated and the pod never starts, so the webhook leaves such pods untouched (they stay on the
    device plugin). A pod naming another scheduler (Volcano, KAI, YuniKorn, ...) is left untouched unless the webhook
    is configured to translate for it, which is right only when that scheduler allocates claims itself. Bare pods
    always carry the node they were bound to, so `nodeName` is read from controller templates only."""
    for w in ctx.gpu_workloads:
        if not w.gpus_per_pod:
            continue
        if w.spec.node_name and w.kind != "Pod":
            yield Finding("DRB034", "blocker", workload_ref(w),
                          f"its pod template sets nodeName {w.spec.node_name}: the scheduler never sees these pods, "
                          "so no one would allocate a ResourceClaim for them; the webhook leaves them on the device "
                          "plugin",
                          "Replace spec.nodeName with a node selector (kubernetes.io/hostname: "
                          f"{w.spec.node_name}) so the scheduler places the pods, then migrate",
                          {"nodeName": w.spec.node_name})
        scheduler = w.spec.scheduler_name
        if scheduler and scheduler != DEFAULT_SCHEDULER:
            yield Finding("DRB034", "warning", workload_ref(w),
                          f"its pods name scheduler {scheduler}: only kube-scheduler is known to allocate "
                          "ResourceClaims, so the webhook leaves these pods untouched (on the device plugin)",
                          f"If {scheduler} allocates ResourceClaims in the version you run, let the webhook translate "
                          "pods for it; otherwise keep this workload legacy",
                          {"schedulerName": scheduler})


@rule("DRB036", "Workloads on nodes where nvidia.com/gpu is not a whole GPU")
def on_shared_nodes(ctx: CheckContext) -> Iterator[Finding]:
    """A workload whose pods run on, or whose GPU-label selectors choose only, nodes where `nvidia.com/gpu` is a MIG
    slice or a shared GPU (DRB015): the webhook leaves its pods untouched, so it cannot move to DRA as it is."""
    shared = ctx.not_whole_gpu
    if not shared:
        return
    whole = [n for n in ctx.model.nodes.values() if n.gpu_total and n.name not in shared]
    for w in ctx.gpu_workloads:
        if not w.gpus_per_pod:
            continue
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
                      f"{shared[where[0]][0]}): its {GPU}: {w.gpus_per_pod} means less than "
                      f"{w.gpus_per_pod} GPU(s), so the webhook leaves its pods untouched",
                      "Keep this workload legacy, or move it to nodes with whole GPUs (see DRB015)",
                      {"nodes": where})


@rule("DRB025", "GPU Feature Discovery label selectors")
def gfd_selectors(ctx: CheckContext) -> Iterator[Finding]:
    for w in ctx.gpu_workloads:
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
                          + (f"; the rest becomes `{t.cel}`" if t.cel else "") + kept,
                          "Rewrite these terms with In/NotIn/Gt/Lt on nvidia.com/gpu.product, .memory, .family or "
                          ".compute.major/minor, or drop them",
                          details)
        elif t.cel:
            yield Finding("DRB025", "info", workload_ref(w),
                          f"selects GPUs by labels {', '.join(labels)}; as a device selector: `{t.cel}`{kept}",
                          "None: the webhook adds this CEL selector when it translates the pod", details)


@rule("DRB026", "Host /dev/nvidia* mounts")
def dev_mounts(ctx: CheckContext) -> Iterator[Finding]:
    for w in ctx.gpu_workloads:
        if w.spec.dev_hostpaths:
            yield Finding("DRB026", "blocker", workload_ref(w),
                          f"mounts {', '.join(w.spec.dev_hostpaths)} from the host: it uses GPUs no allocator gave it, "
                          "so DRA pods on the same node can share its GPUs unknowingly",
                          "Remove the hostPath volumes and request GPUs (nvidia.com/gpu or a claim)")


@rule("DRB027", "Privileged GPU containers")
def privileged(ctx: CheckContext) -> Iterator[Finding]:
    for w in ctx.gpu_workloads:
        if w.spec.privileged and (w.spec.gpu or w.spec.uses_claims):
            yield Finding("DRB027", "warning", workload_ref(w),
                          f"container(s) {', '.join(w.spec.privileged)} are privileged: they see every GPU on the node, "
                          "not just the allocated ones",
                          "Drop privileged: true; grant only the capabilities the workload needs")


@rule("DRB028", "NVIDIA_VISIBLE_DEVICES set by hand")
def visible_devices(ctx: CheckContext) -> Iterator[Finding]:
    for w in ctx.gpu_workloads:
        if w.spec.visible_devices_env:
            yield Finding("DRB028", "warning", workload_ref(w),
                          f"container(s) {', '.join(w.spec.visible_devices_env)} set NVIDIA_VISIBLE_DEVICES: it can "
                          "expose GPUs other than the allocated ones and conflicts with CDI injection",
                          "Remove NVIDIA_VISIBLE_DEVICES from the pod spec; the allocated devices are injected")


@rule("DRB029", "Preemption of GPU pods")
def preemption(ctx: CheckContext) -> Iterator[Finding]:
    classes: dict[str, int] = {}
    for pc_obj in ctx.model.data.of("PriorityClass"):
        name = (pc_obj.get("metadata") or {}).get("name", "")
        if pc_obj.get("preemptionPolicy", "PreemptLowerPriority") != "Never":
            classes[name] = int(pc_obj.get("value", 0))
    preemption = FEATURE_BY_KEY["dra-preemption"]
    stage = ctx.stage(preemption.key)
    if stage is not None and stage != stage.ABSENT:
        return
    for w in ctx.gpu_workloads:
        pc = w.spec.priority_class
        if pc in classes and (w.spec.gpu.get(GPU) or w.spec.uses_claims):
            yield Finding("DRB029", "warning", workload_ref(w),
                          f"runs with PriorityClass {pc} (value {classes[pc]}, may preempt): the scheduler does not "
                          "preempt pods holding DRA devices until DRA preemption ships "
                          f"({preemption.history()}), so it may wait instead of evicting lower-priority GPU pods",
                          "Reserve capacity for it (a higher split on its nodes) or keep it legacy until the "
                          "cluster runs a release with DRA preemption",
                          {"priorityClass": pc})
