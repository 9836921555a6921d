"""`bridge namespace`: flip a namespace's mode and report where each namespace stands.

Pure aggregation (`namespace_status`, `describe_change`) over plain objects, plus two thin functions that read or
patch through `KubeAPI`. Status counts come only from what is on the objects: the namespace labels and the
translation records the webhook writes on pods (`dra-bridge.io/translated`, `dra-bridge.io/shadow-translation`),
so the report is the same whether or not the webhook is running. `set_mode` also records when the mode changed
(`nscheck.FLIP_ANNOTATION`), which is how `status` finds the pods that arrived untranslated since the flip;
`nscheck` holds those checks and the webhook-registration ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.humantext import escape
from bridge.kube.api import NAMESPACES, PODS, KubeAPI
from bridge.kvalues.documents import DocumentError, load_json
from bridge.webhook.facts import LEGACY_RESOURCE
from bridge.webhook.nscheck import FLIP_ANNOTATION, now_rfc3339
from bridge.webhook.policy import (
    MODE_LABEL,
    OPT_OUT_ANNOTATION,
    SHADOW_ANNOTATION,
    TARGET_LABEL,
    TRANSLATED_ANNOTATION,
    Mode,
    parse_mode,
    parse_target,
)

Obj = dict[str, Any]
# TARGET of a namespace without its own dra-bridge.io/target label, in the table and the JSON alike.
DEFAULT_TARGET = "default"


@dataclass
class NamespaceStatus:
    name: str
    mode: str
    target: str  # the namespace's override, or "" (the cluster default: shown as DEFAULT_TARGET)
    legacy_gpu_pods: int = 0  # pods (not terminated) still asking nvidia.com/gpu
    translated_pods: int = 0
    opted_out_pods: int = 0
    shadow_ok: int = 0  # shadow records: would translate
    shadow_blocked: int = 0  # shadow records: would stay legacy
    blockers: Counter[str] = field(default_factory=Counter)  # reason -> pods
    webhook: Obj | None = None  # nscheck.WebhookCheck.as_dict() for shadow/dra namespaces, when checked
    since_flip: Obj | None = None  # nscheck.SinceFlip.as_dict(), when the flip time is known
    label_warnings: tuple[str, ...] = ()  # a mode or target label the webhook does not understand (policy.parse_*)

    def as_dict(self) -> Obj:
        out = {"namespace": self.name, "mode": self.mode, "target": self.target or DEFAULT_TARGET,
               "legacyGpuPods": self.legacy_gpu_pods, "translatedPods": self.translated_pods,
               "optedOutPods": self.opted_out_pods, "shadowWouldTranslate": self.shadow_ok,
               "shadowWouldStayLegacy": self.shadow_blocked, "shadowBlockers": dict(self.blockers)}
        if self.webhook is not None:
            out["webhook"] = self.webhook
        if self.since_flip is not None:
            out["sinceFlip"] = self.since_flip
        if self.label_warnings:
            out["labelWarnings"] = list(self.label_warnings)
        return out


def _asks_legacy_gpu(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or []:
            res = c.get("resources") or {}
            if any(k == LEGACY_RESOURCE or k.startswith("nvidia.com/") for part in ("requests", "limits")
                   for k in (res.get(part) or {})):
                return True
    return False


def _reason_key(reason: str) -> str:
    """Shadow reasons name the container; aggregate by what follows `container X: `."""
    return reason.split(": ", 1)[1] if reason.startswith("container ") and ": " in reason else reason


def namespace_status(namespaces: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[NamespaceStatus]:
    out: dict[str, NamespaceStatus] = {}
    for ns in namespaces:
        meta = ns.get("metadata") or {}
        labels = meta.get("labels") or {}
        mode, mode_warning = parse_mode(labels.get(MODE_LABEL))
        _, target_warning = parse_target(labels.get(TARGET_LABEL))
        name = meta.get("name", "")
        warnings = tuple(w for w in (
            mode_warning and f"{mode_warning} (set a valid one: bridge namespace set {name} legacy|shadow|dra)",
            target_warning and f"{target_warning} (set a valid one: bridge namespace set {name} {mode.value} --target "
                               "auto|claims|extended)") if w)
        out[meta.get("name", "")] = NamespaceStatus(meta.get("name", ""), mode.value, labels.get(TARGET_LABEL, ""),
                                                    label_warnings=warnings)
    for pod in pods:
        meta = pod.get("metadata") or {}
        st = out.get(meta.get("namespace", ""))
        if st is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        ann = meta.get("annotations") or {}
        if TRANSLATED_ANNOTATION in ann:
            st.translated_pods += 1
        elif _asks_legacy_gpu(pod):
            st.legacy_gpu_pods += 1
            if str(ann.get(OPT_OUT_ANNOTATION, "")).lower() == "false":
                st.opted_out_pods += 1
        if SHADOW_ANNOTATION in ann:
            try:  # bounded: a pod author writes this annotation too (bridge.kvalues.documents)
                record = load_json(str(ann[SHADOW_ANNOTATION]), SHADOW_ANNOTATION)
            except DocumentError:
                continue
            if not isinstance(record, dict):
                continue
            if record.get("ok"):
                st.shadow_ok += 1
            else:
                st.shadow_blocked += 1
                for r in record.get("reasons") or []:
                    st.blockers[_reason_key(str(r))] += 1
    return sorted(out.values(), key=lambda s: s.name)


def describe_change(namespace: str, old: str, new: str, legacy_gpu_pods: int, target: str) -> str:
    if old == new:
        return f"namespace {namespace} is already {new}; nothing changes."
    effect = {
        Mode.LEGACY.value: "new pods keep asking nvidia.com/gpu from the device plugin",
        Mode.SHADOW.value: ("new GPU pods are admitted unchanged; the webhook records on each one how it would "
                            f"translate it (annotation {SHADOW_ANNOTATION}) - see `bridge namespace status`"),
        Mode.DRA.value: f"new pods asking nvidia.com/gpu are translated to DRA ({target})",
    }[new]
    return (f"namespace {namespace}: {old} -> {new}. From now on {effect}. "
            f"Running pods are never changed ({legacy_gpu_pods} GPU pod(s) keep their current API until they are "
            f"replaced).")


def set_mode(api: KubeAPI, namespace: str, mode: Mode, target: str | None = None) -> tuple[str, str, int]:
    """Label the namespace; returns (old mode, new mode, GPU pods still on the legacy API). `target` "auto" removes
    the per-namespace override, claims/extended set it, None leaves it."""
    ns = api.get(NAMESPACES, namespace)
    old, _ = parse_mode(((ns.get("metadata") or {}).get("labels") or {}).get(MODE_LABEL))
    labels: dict[str, Any] = {MODE_LABEL: mode.value}
    if target is not None:
        labels[TARGET_LABEL] = None if target == "auto" else target
    meta: Obj = {"labels": labels}
    if old is not mode:
        meta["annotations"] = {FLIP_ANNOTATION: now_rfc3339()}
    api.patch(NAMESPACES, namespace, {"metadata": meta}, patch_type="merge")
    pods = api.list(PODS, namespace)["items"]
    status = namespace_status([ns], pods)
    return old.value, mode.value, status[0].legacy_gpu_pods if status else 0


def read_status(api: KubeAPI, namespace: str | None = None) -> list[NamespaceStatus]:
    if namespace:
        return namespace_status([api.get(NAMESPACES, namespace)], api.list(PODS, namespace)["items"])
    return namespace_status(api.list(NAMESPACES)["items"], api.list(PODS)["items"])


def render_table(rows: list[NamespaceStatus]) -> str:
    head = ("NAMESPACE", "MODE", "TARGET", "LEGACY-GPU-PODS", "TRANSLATED", "OPTED-OUT", "SHADOW-OK", "SHADOW-BLOCKED")
    data = [(r.name, r.mode, r.target or DEFAULT_TARGET, str(r.legacy_gpu_pods), str(r.translated_pods), str(r.opted_out_pods),
             str(r.shadow_ok), str(r.shadow_blocked)) for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *data)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in (head, *data)]
    for r in rows:
        lines += [f"  {r.name}: WARNING: {w}" for w in r.label_warnings]
    for r in rows:
        for reason, n in r.blockers.most_common():
            lines.append(f"  {r.name}: {n} pod(s) would stay legacy: {reason}")
    for r in rows:
        lines += _webhook_lines(r)
    return "\n".join(escape(line) for line in lines)  # reasons come from pod annotations: no terminal escapes


def _webhook_lines(r: NamespaceStatus) -> list[str]:
    out: list[str] = []
    hook = r.webhook
    if hook is not None:
        state = ("not registered" if hook["registered"] is False else "registered" if hook["registered"] else "unknown")
        reach = {True: "reachable", False: "NOT reachable", None: "reachability unknown"}[hook["reachable"]]
        cover = {True: "covers this namespace", False: "does NOT cover this namespace",
                 None: "covers this namespace for the pods its conditions select"}[hook["covered"]]
        out.append(f"  {r.name}: webhook {hook['name']}: {state}, {reach}, {cover}")
        out += [f"  {r.name}: WARNING: {p}" for p in hook["problems"]]
        out += [f"  {r.name}:   {n}" for n in hook["notes"]]
    flip = r.since_flip
    if flip is not None:
        out.append(f"  {r.name}: since the flip to {flip['mode']} at {flip['since']}: {flip['gpuPods']} GPU pod(s) "
                   f"created, {flip['handled']} {'translated' if flip['mode'] == 'dra' else 'recorded'}, "
                   f"{flip['leftLegacyByWebhook']} left legacy by the webhook (see its DRABridgeUntranslatable "
                   f"Events), {flip['expectedLegacy']} opted out or excluded, {flip['untranslated']} never reached "
                   "the webhook")
        if flip["untranslated"]:
            names = ", ".join(flip["untranslatedPods"][:10]) + (" ..." if flip["untranslated"] > 10 else "")
            out.append(f"  {r.name}: WARNING: {flip['untranslated']} GPU pod(s) arrived untranslated without the "
                       f"webhook seeing them (it fails open): {names}")
    return out
