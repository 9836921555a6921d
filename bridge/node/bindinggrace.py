"""How long a GPU leaving DRA waits before the device plugin is offered it (`--split-grace auto`), from what the
cluster's scheduler shows of the bindings it is in the middle of.

kube-scheduler decides a pod's device in its scheduling cycle, from the ResourceSlices of that moment, but writes
the claim's allocation only in the DynamicResources PreBind of the binding cycle, after VolumeBinding's PreBind
(kubernetes/kubernetes pkg/scheduler/apis/config/v1/default_plugins.go orders them; VolumeBinding waits up to
`bindTimeoutSeconds`, 600 s by default, pkg/scheduler/framework/plugins/volumebinding/volume_binding.go
`DefaultBindTimeoutSeconds`, for late-bound volumes), and a Permit plugin may hold the cycle too. Until then the
claim has no allocation and the pod no `nodeName`: a GPU that left DRA meanwhile could be offered to the device
plugin while the scheduler is about to write it into a claim. From 1.36 PreBind plugins whose PreBindPreFlight
allows it run in parallel (pkg/scheduler/framework/runtime/framework.go `getPreBindPluginGroups`; VolumeBinding
and DynamicResources both do), so a volume wait no longer delays the allocation: the pod waits nominated and
unbound with an allocated claim, which the daemon sees through the nominated pod (tests/real/
test_real_late_binding.py shows both orders on the real scheduler).

* From 1.35 (KEP-5278 NominatedNodeNameForExpectation, beta and on by default; pkg/scheduler/schedule_one.go
  `bindingCycle`) the scheduler writes `status.nominatedNodeName` at the start of such a binding cycle, before
  Permit and PreBind. The node daemon watches the pods nominated to its node (`bridge.node.nodepods`) and keeps its
  GPUs on DRA while one of them waits for an allocation, so the grace only has to cover the scheduler's informer
  lag and that one status write: `SIGNAL_GRACE_S`, 5 s.
* Before 1.35 (or where an administrator turned the gate off: pass a number) nothing in the API shows the decision
  until PreBind writes it. The only safe choice is to wait out the longest default PreBind: `NO_SIGNAL_GRACE_S`,
  600 s + 5 s. What it costs: a GPU takes over 10 minutes to go from DRA to the device plugin. Lower it (e.g. to
  5 s) where no GPU pod uses late-bound (WaitForFirstConsumer) volumes or Permit-waiting schedulers; a binding that
  still lands late then finds the GPU taken back if it is free, or stuck behind the legacy pod that took it
  (reported on the pod, `bridge node status`, `migrate-report`). A device taint does not help: the scheduler does
  not check taints again in PreBind, so a decision taken before the taint is written still lands.
* Version skew: `auto` reads the API server's version, and nothing the daemon can read tells the scheduler's (its
  leader Lease and Events carry no version). The skew policy lets kube-scheduler run one minor release behind the
  API server while the control plane is upgraded, so a 1.35 API server may serve a 1.34 scheduler for that window:
  the guards still never hand a GPU out twice, but a late allocation may find its GPU with the device plugin (taken
  back if free, else `DRAClaimStuck`). The README tells operators to pass `--split-grace 605` until the scheduler is
  upgraded too.
"""

from __future__ import annotations

from dataclasses import dataclass

SIGNAL_GRACE_S = 5.0
VOLUME_BIND_TIMEOUT_S = 600.0  # VolumeBindingArgs.bindTimeoutSeconds default
NO_SIGNAL_GRACE_S = VOLUME_BIND_TIMEOUT_S + SIGNAL_GRACE_S
FIRST_NOMINATING_MINOR = 35  # NominatedNodeNameForExpectation beta, on by default


@dataclass(frozen=True)
class GraceChoice:
    seconds: float
    why: str


def auto_grace(version: tuple[int, int] | None) -> GraceChoice:
    """`--split-grace auto` for an API server at `version` (major, minor); None: not known yet (the safe value)."""
    if version is None:
        return GraceChoice(NO_SIGNAL_GRACE_S, "the API server's version is not known yet: until it is, GPUs leaving "
                                              f"DRA wait {NO_SIGNAL_GRACE_S:g} s (the longest default PreBind)")
    major, minor = version
    if (major, minor) >= (1, FIRST_NOMINATING_MINOR):
        return GraceChoice(SIGNAL_GRACE_S, f"Kubernetes {major}.{minor}: the scheduler nominates pods to their node "
                                           "before it writes their allocation (NominatedNodeNameForExpectation), "
                                           f"which the daemon watches: {SIGNAL_GRACE_S:g} s grace")
    return GraceChoice(NO_SIGNAL_GRACE_S, f"Kubernetes {major}.{minor}: the scheduler shows nothing of a binding "
                                          "until PreBind writes the allocation, which can wait up to 600 s for "
                                          f"volumes: GPUs leaving DRA wait {NO_SIGNAL_GRACE_S:g} s (set --split-grace "
                                          "lower where GPU pods use no late-bound volumes)")


def parse_grace(text: str) -> float | None:
    """`--split-grace`: "auto" (None) or seconds >= 0."""
    value = text.strip().lower()
    if value == "auto":
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"--split-grace must be 'auto' or a number of seconds, not {text!r}") from None
    if seconds < 0 or seconds != seconds:
        raise ValueError(f"--split-grace must be >= 0, not {text!r}")
    return seconds


__all__ = ["FIRST_NOMINATING_MINOR", "GraceChoice", "NO_SIGNAL_GRACE_S", "SIGNAL_GRACE_S", "auto_grace",
           "parse_grace"]
