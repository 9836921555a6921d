"""Cluster-wide checks: version and served DRA API, feature availability, DeviceClasses, cluster agents."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from bridge.report.checks.context import CheckContext, class_cel, ref_of
from bridge.report.features import BRIDGE_CLASS, BRIDGE_DRIVER, FEATURE_BY_KEY, GPU
from bridge.report.findings import CLUSTER, Finding, ObjectRef, rule
from bridge.report.model import Obj


@rule("DRB000", "Input completeness", severities=("warning",),
      fix="Grant the scanning identity get/list on the resource, then rerun.")
def unreadable(ctx: CheckContext) -> Iterator[Finding]:
    """A resource kind the scan could not read (RBAC, not served): the checks that need it are incomplete."""
    for plural, reason in sorted(ctx.model.data.unreadable.items()):
        yield Finding("DRB000", "warning", ObjectRef("Resource", "", plural),
                      f"{plural} could not be read ({reason}): checks that need them are incomplete",
                      "Grant the scanning identity get/list on this resource (the report never writes), then rerun",
                      {"resource": plural, "reason": reason})


@rule("DRB001", "Kubernetes version and served resource.k8s.io API", severities=("blocker", "warning"),
      fix="Upgrade Kubernetes to the release where DRA is GA (resource.k8s.io/v1 served).")
def dra_api(ctx: CheckContext) -> Iterator[Finding]:
    """The Kubernetes version and the resource.k8s.io versions the API server serves: no DRA API blocks every
    namespace; a beta-only API or an unknown version needs attention."""
    m = ctx.model
    served = m.resource_versions
    version = m.version.git_version or "unknown"
    details: dict[str, object] = {"version": version, "resourceVersions": list(served)}
    if not m.version.known:
        yield Finding("DRB001", "warning", CLUSTER,
                      "Kubernetes version unknown: feature availability cannot be checked",
                      "Add version.json (`kubectl version -o json`) and api-versions.txt (`kubectl api-versions`) "
                      "to the snapshot, or scan the live cluster", details)
    if m.data.api_versions is None and not served:
        return  # nothing known about discovery; the warning above (or none, if the version is known) says enough
    dra = FEATURE_BY_KEY["dra"]
    ga = _release(dra.ga)
    if not served:
        yield Finding("DRB001", "blocker", CLUSTER,
                      f"resource.k8s.io is not served (Kubernetes {version}): there is no DRA API to migrate to",
                      f"Upgrade to Kubernetes {ga} or later, where DRA is GA and serves resource.k8s.io/v1 "
                      f"({dra.history()}); or enable the {dra.gate} gate and the resource.k8s.io/v1beta1 API on an "
                      "older release", details)
    elif "v1" not in served:
        yield Finding("DRB001", "warning", CLUSTER,
                      f"resource.k8s.io is served only as {', '.join(served)} (Kubernetes {version}); "
                      f"resource.k8s.io/v1 comes with DRA GA ({dra.history()})",
                      f"Upgrade to {ga}+; the bridge works with the beta API but beta objects need migrating later",
                      details)
    elif m.version.known and dra.ga is not None and not m.version.at_least(*dra.ga):
        yield Finding("DRB001", "warning", CLUSTER,
                      f"resource.k8s.io/v1 served on Kubernetes {version}, before DRA GA ({dra.history()})",
                      f"Upgrade to {ga}+", details)


def _release(v: tuple[int, int] | None) -> str:
    return f"{v[0]}.{v[1]}" if v else "a future release"


_FEATURE_ADVICE = {
    "extended-resource": (
        "the bridge translates to ResourceClaims (`claims` target); pods keep working unchanged",
        "the `extended` target is available: nvidia.com/gpu -> deviceclass.resource.kubernetes.io/gpu.dra-bridge.io",
    ),
    "device-taints": (
        "legacy-owned devices are omitted from ResourceSlices instead of tainted; health cannot taint devices",
        "legacy-owned and unhealthy devices are published with NoSchedule device taints",
    ),
    "consumable-capacity": (
        "no DRA equivalent of time-slicing replicas (several claims on one GPU)",
        "several claims can share a GPU (consumable capacity); time-slicing configs have a DRA counterpart",
    ),
    "extended-resource-capacity": (
        "nvidia.com/gpu.shared cannot be served by DRA without changing pods",
        "nvidia.com/gpu.shared can map to capacity requests",
    ),
    "resource-health": (
        "device health (XIDs) does not reach pod status for either API: operators see it only in node daemon "
        "logs, metrics and Events",
        "device health from both APIs shows in pod status (allocatedResourcesStatus)",
    ),
}


@rule("DRB002", "DRA feature availability by version", severities=("info",),
      fix="Nothing to do, or the release (or feature gate) that brings the feature.")
def features(ctx: CheckContext) -> Iterator[Finding]:
    """Which DRA features the cluster's release has on by default (extended resources, device taints, consumable
    capacity, health), and what the bridge does with or without each."""
    if not ctx.model.version.known:
        return
    version = ctx.model.version.git_version
    for key, (without, with_) in _FEATURE_ADVICE.items():
        f = FEATURE_BY_KEY[key]
        stage = ctx.stage(key)
        assert stage is not None
        on = stage.on_by_default
        first = f.first_on()
        if on:
            fix = "Nothing to do"
        elif first is None:
            fix = f"Not available in any release yet ({f.history()})"
        else:
            fix = (f"Available by default from {_release(first)} ({f.history()}); enable the gate {f.gate} on all "
                   "components to use it earlier")
        yield Finding(
            "DRB002", "info", ObjectRef("Feature", "", f.name),
            f"{f.title} is {stage.label} on {version}: {with_ if on else without}",
            fix, {"feature": key, "gate": f.gate or "", "stage": stage.value},
        )


@rule("DRB003", "DeviceClasses sharing one extendedResourceName", severities=("blocker",),
      fix="kubectl patch deviceclass NAME --type json -p "
          '\'[{"op":"remove","path":"/spec/extendedResourceName"}]\' on every class but the one that keeps the '
          "name.")
def shared_extended_name(ctx: CheckContext) -> Iterator[Finding]:
    """Several DeviceClasses claiming one extendedResourceName: the scheduler silently picks one (KEP-5004: the
    newest, then the first name) for every pod asking that name."""
    by_name: dict[str, list[Obj]] = defaultdict(list)
    for c in ctx.model.device_classes:
        ern = (c.get("spec") or {}).get("extendedResourceName")
        if ern:
            by_name[str(ern)].append(c)
    for name, classes in sorted(by_name.items()):
        if len(classes) < 2:
            continue
        # KEP-5004: the class created later wins; equal creation time -> lexicographically first name.
        def key(c: Obj) -> tuple[str, str]:
            m = c.get("metadata") or {}
            return (str(m.get("creationTimestamp", "")), m.get("name", ""))
        ordered = sorted(classes, key=lambda c: (c.get("metadata") or {}).get("name", ""))
        latest_ts = max(key(c)[0] for c in classes)
        newest = sorted(key(c)[1] for c in classes if key(c)[0] == latest_ts)
        winner = newest[0]
        why = "created last" if len(newest) == 1 else "same creation time: the first name alphabetically"
        names = [(c.get("metadata") or {}).get("name", "") for c in ordered]
        for c in ordered:
            yield Finding(
                "DRB003", "blocker", ref_of(c),
                f"extendedResourceName {name} is claimed by {len(classes)} DeviceClasses ({', '.join(names)}); "
                f"the scheduler picks {winner} ({why}), silently capturing every {name} request",
                f"Keep {name} on exactly one DeviceClass ({winner}, which the scheduler uses now): "
                + "; ".join(_remove_ern(n) for n in names if n != winner),
                {"extendedResourceName": name, "classes": names, "winner": winner},
            )


@rule("DRB004", "The bridge's DeviceClass", severities=("blocker", "warning"),
      fix="kubectl apply -f deviceclass.yaml from --emit-manifests, or patch the class's selector to the "
          "bridge's driver, or remove its extendedResourceName.")
def bridge_class(ctx: CheckContext) -> Iterator[Finding]:
    """The bridge's DeviceClass gpu.dra-bridge.io: missing (translated pods would stay Pending), not selecting the
    bridge's driver, an invalid CEL selector, or extendedResourceName nvidia.com/gpu."""
    cls = ctx.bridge_class
    if cls is None:
        if any(w.gpus_per_pod for w in ctx.translatable):
            yield Finding("DRB004", "warning", ObjectRef("DeviceClass", "", BRIDGE_CLASS),
                          f"DeviceClass {BRIDGE_CLASS} does not exist: translated pods would stay Pending",
                          "kubectl apply -f deviceclass.yaml (written by --emit-manifests; the chart installs the "
                          "same class)")
        return
    expr = class_cel(cls)
    if BRIDGE_DRIVER not in expr:
        yield Finding("DRB004", "warning", ref_of(cls),
                      f"DeviceClass {BRIDGE_CLASS} does not select the bridge's driver: selectors are `{expr}`",
                      _driver_selector(), {"cel": expr})
    try:
        ctx.evaluator.check(expr)
    except ValueError as err:
        yield Finding("DRB004", "blocker", ref_of(cls), f"DeviceClass {BRIDGE_CLASS} has an invalid CEL selector: {err}",
                      _driver_selector(), {"cel": expr})
    ern = (cls.get("spec") or {}).get("extendedResourceName")
    if ern == GPU:
        yield Finding("DRB004", "warning", ref_of(cls),
                      f"DeviceClass {BRIDGE_CLASS} sets extendedResourceName {GPU}: on nodes where the device plugin "
                      f"also advertises {GPU} the KEP-5004 one-backend-per-node rule applies to every namespace",
                      f"{_remove_ern(BRIDGE_CLASS)} (the bridge uses the implicit name "
                      f"deviceclass.resource.kubernetes.io/{BRIDGE_CLASS}, or claims)")


def _remove_ern(cls: str) -> str:
    return (f"kubectl patch deviceclass {cls} --type json "
            "-p '[{\"op\":\"remove\",\"path\":\"/spec/extendedResourceName\"}]'")


def _driver_selector() -> str:
    expr = f'device.driver == \\"{BRIDGE_DRIVER}\\"'
    return (f"Select the bridge's devices: kubectl patch deviceclass {BRIDGE_CLASS} --type merge "
            f"-p '{{\"spec\":{{\"selectors\":[{{\"cel\":{{\"expression\":\"{expr}\"}}}}]}}}}'")


@rule("DRB040", "Cluster autoscaler support for DRA pods", severities=("warning",),
      fix="Add --enable-dynamic-resource-allocation=true to cluster-autoscaler; with Karpenter, keep GPU "
          "workloads that need autoscaling legacy.")
def autoscaler(ctx: CheckContext) -> Iterator[Finding]:
    """Node autoscalers that cannot scale for pods with ResourceClaims: cluster-autoscaler without DRA support
    switched on, Karpenter."""
    if not ctx.translatable:
        return
    for dep in ctx.model.data.of("Deployment"):
        spec = (((dep.get("spec") or {}).get("template") or {}).get("spec")) or {}
        containers = spec.get("containers") or ()
        images = " ".join(str(c.get("image", "")) for c in containers)
        args = " ".join(str(a) for c in containers for a in list(c.get("command") or ()) + list(c.get("args") or ()))
        if "karpenter" in images:
            yield Finding("DRB040", "warning", ref_of(dep),
                          "Karpenter cannot provision nodes for pods whose GPUs come from ResourceClaims "
                          "(kubernetes-sigs/karpenter#1231): DRA namespaces will not scale GPU node pools",
                          "Keep the GPU workloads that need node autoscaling on the device plugin until Karpenter "
                          "supports DRA (opt their pod templates out: annotation dra-bridge.io/translate: \"false\"), "
                          "and give DRA namespaces statically sized GPU node pools")
        elif "cluster-autoscaler" in images and "--enable-dynamic-resource-allocation" not in args:
            yield Finding("DRB040", "warning", ref_of(dep),
                          "cluster-autoscaler runs without --enable-dynamic-resource-allocation: it will not "
                          "scale up for pods with ResourceClaims",
                          "Add --enable-dynamic-resource-allocation=true to the cluster-autoscaler container's "
                          f"command (kubectl -n {ref_of(dep).namespace} edit deployment {ref_of(dep).name})")


@rule("DRB041", "GPU metrics exporter on DRA nodes", severities=("warning",),
      fix="kubectl set env daemonset/NAME KUBERNETES_ENABLE_DRA=true (and RBAC on resourceslices and "
          "resourceclaims).")
def dcgm_exporter(ctx: CheckContext) -> Iterator[Finding]:
    """dcgm-exporter without KUBERNETES_ENABLE_DRA: metrics of pods using DRA devices lose their pod attribution."""
    for role in ctx.model.daemonsets:
        if role.role != "dcgm-exporter":
            continue
        ds = next((d for d in ctx.model.data.of("DaemonSet") if ref_of(d).name == role.ref[2]
                   and ref_of(d).namespace == role.ref[1]), None)
        if ds is None:
            continue
        spec = (((ds.get("spec") or {}).get("template") or {}).get("spec")) or {}
        env = {e.get("name"): str(e.get("value", "")) for c in spec.get("containers") or () for e in c.get("env") or ()}
        if env.get("KUBERNETES_ENABLE_DRA", "").lower() not in ("true", "1"):
            yield Finding("DRB041", "warning", ref_of(ds),
                          "dcgm-exporter runs without KUBERNETES_ENABLE_DRA: metrics of pods using DRA devices "
                          "lose their pod attribution",
                          f"kubectl -n {ref_of(ds).namespace} set env daemonset/{ref_of(ds).name} "
                          "KUBERNETES_ENABLE_DRA=true, and grant its ServiceAccount get/list/watch on resourceslices "
                          "and resourceclaims")
