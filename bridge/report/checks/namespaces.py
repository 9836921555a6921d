"""Namespace checks: mode label, quota parity."""

from __future__ import annotations

import json
from collections.abc import Iterator

from bridge.report.checks.context import CheckContext, ref_of
from bridge.report.features import BRIDGE_CLASS, CLASS_DEVICES_QUOTA, CLASS_IMPLICIT_QUOTA, GPU, MODE_LABEL, MODES
from bridge.report.findings import Finding, ObjectRef, rule
from bridge.kvalues.quantity import QuantityError, parse_quantity


def _q(v: object) -> object:
    try:
        return parse_quantity(v)
    except QuantityError:
        return str(v)


_GPU_KEYS = (f"requests.{GPU}", GPU, f"limits.{GPU}")


@rule("DRB030", "GPU quota without the matching DeviceClass quota", severities=("blocker", "warning"),
      fix="kubectl apply -f quota-NS-NAME.yaml from --emit-manifests (the DeviceClass quota keys with the same "
          "limit), or patch the quota.")
def unpaired_quota(ctx: CheckContext) -> Iterator[Finding]:
    """A ResourceQuota on `requests.nvidia.com/gpu` does not see translated pods: their GPUs are charged to
    `<class>.deviceclass.resource.k8s.io/devices` (claims, kubernetes/kubernetes
    pkg/quota/v1/evaluator/core/resource_claims.go) or to `requests.deviceclass.resource.kubernetes.io/<class>`
    (the extended target). Where the quota divides GPUs between tenants - the namespace runs GPU workloads and
    other namespaces do too - translated pods escape it and take other tenants' GPUs: a blocker. A namespace that
    is the only GPU tenant only loses its own cap: a warning."""
    class_key = CLASS_DEVICES_QUOTA.format(cls=BRIDGE_CLASS)
    implicit_key = CLASS_IMPLICIT_QUOTA.format(cls=BRIDGE_CLASS)
    extended = ctx.stage("extended-resource")
    extended_on = extended is not None and extended.on_by_default
    gpu_quota_ns = {str((q.get("metadata") or {}).get("namespace", "")) for q in ctx.model.data.of("ResourceQuota")
                    if any(k in ((q.get("spec") or {}).get("hard") or {}) for k in _GPU_KEYS)}
    tenants = {w.namespace for w in ctx.gpu_workloads if w.gpus_per_pod} | gpu_quota_ns
    for q in ctx.model.data.of("ResourceQuota"):
        hard = (q.get("spec") or {}).get("hard") or {}
        gpu_key = next((k for k in _GPU_KEYS if k in hard), None)
        if gpu_key is None:
            continue
        wanted = [class_key] + ([implicit_key] if extended_on else [])
        present = [k for k in wanted if k in hard]
        differ = [k for k in present if _q(hard[k]) != _q(hard[gpu_key])]
        details: dict[str, object] = {"quotaKey": class_key, "limit": str(hard[gpu_key]),
                                      "missing": [k for k in wanted if k not in hard]}
        if differ:
            yield Finding("DRB030", "warning", ref_of(q),
                          f"{gpu_key}={hard[gpu_key]} but {', '.join(f'{k}={hard[k]}' for k in differ)}: the limits "
                          "differ, so the same workload gets a different GPU budget depending on the API",
                          _patch_quota(q, {k: str(hard[gpu_key]) for k in differ}), details)
        missing = [k for k in wanted if k not in hard]
        if not missing:
            continue
        ns = str((q.get("metadata") or {}).get("namespace", ""))
        shared = ns in tenants and len(tenants) > 1
        details["otherTenants"] = len(tenants) - (ns in tenants)
        yield Finding("DRB030", "blocker" if shared else "warning", ref_of(q),
                      f"limits {gpu_key}={hard[gpu_key]} but not {' or '.join(missing)}: translated pods are charged "
                      "to the DRA keys, so this quota no longer limits them"
                      + (f"; {len(tenants) - 1} other namespace(s) share the GPUs, and this namespace's translated "
                         "pods can take theirs" if shared else ""),
                      f"Before flipping the namespace, add {', '.join(f'{k}: {hard[gpu_key]}' for k in missing)}: "
                      f"kubectl apply -f quota-{ref_of(q).namespace}-{ref_of(q).name}.yaml (written by "
                      f"--emit-manifests), or {_patch_quota(q, {k: str(hard[gpu_key]) for k in missing})}", details)


def _patch_quota(q: dict[str, object], keys: dict[str, str]) -> str:
    ref = ref_of(q)
    body = json.dumps({"spec": {"hard": keys}}, separators=(",", ":"))
    return f"kubectl -n {ref.namespace} patch resourcequota {ref.name} --type merge -p '{body}'"


@rule("DRB031", "Namespace mode label", severities=("warning",),
      fix="bridge namespace set NS legacy|shadow|dra.")
def mode_label(ctx: CheckContext) -> Iterator[Finding]:
    """A namespace whose dra-bridge.io/mode label is not legacy, shadow or dra: the webhook treats it as legacy."""
    for ns in ctx.model.namespaces.values():
        if ns.bad_mode:
            yield Finding("DRB031", "warning", ObjectRef("Namespace", "", ns.name),
                          f"{MODE_LABEL}={ns.bad_mode!r} is not one of {', '.join(MODES)}: the webhook treats the "
                          "namespace as legacy",
                          f"bridge namespace set {ns.name} legacy|shadow|dra")
