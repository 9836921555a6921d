"""The Normal events a kubelet records about a pod's containers (pure: what to record, not the recording).

Seen on a real kubelet v1.37.2 for every container it starts (init containers first, in order, then the app
containers), on the pod with `fieldPath: spec.initContainers{name}` / `spec.containers{name}`, source `kubelet`:

* `Pulled` — "Container image "<image>" already present on machine" (kubernetes pkg/kubelet/images/image_manager.go
  `EnsureImageExists`; from 1.35, with KubeletEnsureSecretPulledImages on by default, "... and can be accessed by the
  pod"). A simulated node has every image; a pull policy of `Always` makes the kubelet pull anyway: `Pulling`
  ("Pulling image "<image>"") and `Pulled` ("Successfully pulled image ..."), with zero time and size here;
* `Created` "Container created" and `Started` "Container started" (pkg/kubelet/kuberuntime/kuberuntime_container.go
  `startContainer`);
* `Killing` "Stopping container <name>" for each container still running when the pod is deleted
  (`killContainer`); none for containers that already exited, none when the pod finished on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge.sandbox.kubelet.version import KubeletVersion

Obj = dict[str, Any]


@dataclass(frozen=True)
class ContainerEvent:
    field_path: str
    reason: str
    message: str


def _pull_policy(container: Obj) -> str:
    """The API server's default when absent (`SetDefaults_Container`): Always when the tag is `latest`, which it is
    when the image names neither a tag nor a digest (`parsers.ParseImageName`)."""
    policy = container.get("imagePullPolicy")
    if policy:
        return str(policy)
    name, at, _ = str(container.get("image", "")).rsplit("/", 1)[-1].partition("@")
    _, colon, tag = name.partition(":")
    if not colon:
        tag = "" if at else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _start(container: Obj, field_path: str, version: KubeletVersion) -> list[ContainerEvent]:
    image = str(container.get("image", ""))
    if _pull_policy(container) == "Always":
        pulled = [ContainerEvent(field_path, "Pulling", f'Pulling image "{image}"'),
                  ContainerEvent(field_path, "Pulled", f'Successfully pulled image "{image}" in 0s (0s including '
                                                       f'waiting). Image size: 0 bytes.')]
    else:
        suffix = " and can be accessed by the pod" if version.minor >= 35 else ""
        pulled = [ContainerEvent(field_path, "Pulled", f'Container image "{image}" already present on machine{suffix}')]
    return pulled + [ContainerEvent(field_path, "Created", "Container created"),
                     ContainerEvent(field_path, "Started", "Container started")]


def start_events(pod: Obj, version: KubeletVersion, *, init_containers: bool = True) -> list[ContainerEvent]:
    """The events of starting the pod's containers: its init containers first (unless `init_containers` is False:
    a restart of the app containers), then the app containers."""
    spec = pod.get("spec") or {}
    out: list[ContainerEvent] = []
    if init_containers:
        for c in spec.get("initContainers") or []:
            out += _start(c, f"spec.initContainers{{{c['name']}}}", version)
    for c in spec.get("containers") or []:
        out += _start(c, f"spec.containers{{{c['name']}}}", version)
    return out


def kill_events(pod: Obj) -> list[ContainerEvent]:
    """The events of stopping the pod's running containers: the app containers, then the sidecars (restartable init
    containers), which the kubelet stops last."""
    spec = pod.get("spec") or {}
    out = [ContainerEvent(f"spec.containers{{{c['name']}}}", "Killing", f"Stopping container {c['name']}")
           for c in spec.get("containers") or []]
    out += [ContainerEvent(f"spec.initContainers{{{c['name']}}}", "Killing", f"Stopping container {c['name']}")
            for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return out
