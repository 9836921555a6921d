"""Namespace checks: mode label, quota parity."""

from __future__ import annotations

from collections.abc import Iterator

from bridge.report.checks.context import CheckContext, ref_of
from bridge.report.features import BRIDGE_CLASS, CLASS_DEVICES_QUOTA, GPU, MODE_LABEL, MODES
from bridge.report.findings import Finding, ObjectRef, rule
from bridge.kvalues.quantity import QuantityError, parse_quantity


def _q(v: object) -> object:
    try:
        return parse_quantity(v)
    except QuantityError:
        return str(v)


@rule("DRB030", "GPU quota without the matching DeviceClass quota")
def unpaired_quota(ctx: CheckContext) -> Iterator[Finding]:
    class_key = CLASS_DEVICES_QUOTA.format(cls=BRIDGE_CLASS)
    for q in ctx.model.data.of("ResourceQuota"):
        hard = (q.get("spec") or {}).get("hard") or {}
        gpu_key = next((k for k in (f"requests.{GPU}", GPU, f"limits.{GPU}") if k in hard), None)
        if gpu_key is None:
            continue
        if class_key in hard:
            if _q(hard[class_key]) != _q(hard[gpu_key]):
                yield Finding("DRB030", "warning", ref_of(q),
                              f"{gpu_key}={hard[gpu_key]} but {class_key}={hard[class_key]}: the two limits differ, so "
                              "the same workload gets a different GPU budget depending on the API",
                              "Set both to the same value",
                              {"quotaKey": class_key, "limit": str(hard[gpu_key])})
            continue
        yield Finding("DRB030", "warning", ref_of(q),
                      f"limits {gpu_key}={hard[gpu_key]} but not {class_key}: once pods get GPUs through DRA, this "
                      "quota no longer limits them",
                      f"Add {class_key}: {hard[gpu_key]} (paired quota in --emit-manifests)",
                      {"quotaKey": class_key, "limit": str(hard[gpu_key])})


@rule("DRB031", "Namespace mode label")
def mode_label(ctx: CheckContext) -> Iterator[Finding]:
    for ns in ctx.model.namespaces.values():
        if ns.bad_mode:
            yield Finding("DRB031", "warning", ObjectRef("Namespace", "", ns.name),
                          f"{MODE_LABEL}={ns.bad_mode!r} is not one of {', '.join(MODES)}: the webhook treats the "
                          "namespace as legacy",
                          f"bridge namespace set {ns.name} legacy|shadow|dra")
