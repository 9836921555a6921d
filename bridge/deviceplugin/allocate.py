"""What a container gets for its GPUs: the content of one `ContainerAllocateResponse` (pure, side-effect free).

The device list reaches the container runtime in the ways NVIDIA's device plugin offers (`deviceListStrategy`),
any combination of:

* `envvar` (default): `NVIDIA_VISIBLE_DEVICES=<uuid>,<uuid>`; the NVIDIA container runtime reads the env.
* `volume-mounts`: `NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices` plus one mount per device at
  `/var/run/nvidia-container-devices/<uuid>` (host `/dev/null`), so an unprivileged pod cannot widen its GPU set
  by setting the env itself.
* `cdi-annotations`: a container annotation `cdi.k8s.io/<plugin>_<resource>` listing fully-qualified CDI names.
* `cdi-cri`: the CRI `cdi_devices` field with the same names.

CDI names come from `AllocationConfig.cdi_devices` (one call per container, so a container gets either the NVIDIA
Container Toolkit's names or ours, never a mix; the daemon wires `bridge.cdi.DevicePluginCdi.cdi_devices`). Our own
names use the vendor `k8s.device-plugin.dra-bridge.io` (`k8s.device-plugin.dra-bridge.io/gpu=<uuid>`), never
`nvidia.com/gpu`: the toolkit's spec owns that kind, and the same name in two spec files of one directory makes the
CDI cache drop it from both, breaking every GPU container on the node.

When only CDI strategies are chosen, `NVIDIA_VISIBLE_DEVICES=void` is still set: CUDA base images bake
`NVIDIA_VISIBLE_DEVICES=all` into their env, and a runtime with the legacy hook would otherwise hand the container
every GPU on the node.

Device specs (`/dev/nvidia<minor>` per GPU plus the control nodes a CUDA process may open: `/dev/nvidiactl`,
`/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`, `/dev/nvidia-modeset`) are passed by default so the container's device cgroup admits them
even without the NVIDIA hook (`pass_device_specs`, like NVIDIA's `passDeviceSpecs`). Order is stable: devices in
request order, control nodes last. On a real node the control nodes are optional, as in NVIDIA's plugin: the UVM
nodes appear only once `nvidia-uvm` is loaded, and a device spec whose host path is missing makes the runtime fail
the container ("no such file or directory"), so with `host_has` set a missing control node is left out. The GPU's
own node is always passed: a missing one is a broken GPU and should fail loudly. Host paths are under `dev_root`
(`--dev-root`, e.g. `/run/nvidia/driver` when the driver container creates the nodes there).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from bridge.cdi.driver import CONTROL_DEVICE_NODES, join_host
from bridge.cdi.names import qualified_name
from bridge.cdi.spec import DEVICE_PLUGIN_KIND
from bridge.inventory.model import GpuDevice

ENVVAR = "envvar"
VOLUME_MOUNTS = "volume-mounts"
CDI_ANNOTATIONS = "cdi-annotations"
CDI_CRI = "cdi-cri"
STRATEGIES = (ENVVAR, VOLUME_MOUNTS, CDI_ANNOTATIONS, CDI_CRI)

VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
DEFAULT_CDI_KIND = DEVICE_PLUGIN_KIND


class StrategyError(ValueError):
    """A --device-list-strategy value names no known strategy."""


def parse_strategies(value: str | Iterable[str]) -> frozenset[str]:
    """Parse `envvar`, `cdi-cri,envvar`, or a list of names into a set; raise StrategyError on bad input."""
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [i.strip() for i in items if i.strip()]
    if not names:
        raise StrategyError(f"empty device list strategy; choose from {', '.join(STRATEGIES)}")
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise StrategyError(f"unknown device list strategy {', '.join(unknown)}; choose from {', '.join(STRATEGIES)}")
    return frozenset(names)


def default_cdi_devices(devices: Sequence[GpuDevice]) -> tuple[str, ...]:
    """`k8s.device-plugin.dra-bridge.io/gpu=<uuid>` per GPU: the names of whole GPUs in the node's device-plugin
    CDI spec (`bridge.cdi.build_device_plugin_spec`, written by the daemon when a CDI strategy is on)."""
    return tuple(qualified_name(DEFAULT_CDI_KIND, d.uuid) for d in devices)


@dataclass(frozen=True)
class AllocationConfig:
    strategies: frozenset[str] = frozenset({ENVVAR})
    resource_name: str = "nvidia.com/gpu"
    pass_device_specs: bool = True
    # The CDI names for one container's devices (all from one spec: ours or the toolkit's).
    cdi_devices: Callable[[Sequence[GpuDevice]], Sequence[str]] = default_cdi_devices
    plugin_name: str = "dra-bridge"
    # None: pass every control node (simulated devices); on real GPUs: whether a node (container path such as
    # /dev/nvidia-uvm) exists under the dev root.
    host_has: Callable[[str], bool] | None = None
    dev_root: str = "/"  # host path under which dev/nvidia* live

    @property
    def cdi_annotation_key(self) -> str:
        # Annotation name part: at most 63 characters of [A-Za-z0-9._-].
        name = re.sub(r"[^A-Za-z0-9._-]", "-", f"{self.plugin_name}_{self.resource_name}")[:63]
        return CDI_ANNOTATION_PREFIX + name


@dataclass(frozen=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class DeviceNodeSpec:
    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True)
class ContainerAllocation:
    envs: dict[str, str] = field(default_factory=dict)
    mounts: tuple[MountSpec, ...] = ()
    devices: tuple[DeviceNodeSpec, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


@functools.lru_cache(maxsize=256)  # a node has a few device nodes, and every Allocate passes them
def _device_spec(node: str, dev_root: str) -> DeviceNodeSpec:
    return DeviceNodeSpec(node, join_host(dev_root, node), "rw")


def container_allocation(devices: Sequence[GpuDevice], config: AllocationConfig) -> ContainerAllocation:
    """The response content for one container that gets `devices` (already validated by the caller)."""
    strategies = config.strategies
    ids = [str(d.uuid) for d in devices]
    envs: dict[str, str] = {}
    mounts: list[MountSpec] = []
    annotations: dict[str, str] = {}
    cdi: tuple[str, ...] = ()

    if VOLUME_MOUNTS in strategies:
        # With both envvar and volume-mounts the mounts win, as in NVIDIA's plugin: the env names the mount root.
        envs[VISIBLE_DEVICES_ENV] = VOLUME_MOUNT_ROOT
        mounts = [MountSpec(f"{VOLUME_MOUNT_ROOT}/{i}", "/dev/null", True) for i in ids]
    elif ENVVAR in strategies:
        envs[VISIBLE_DEVICES_ENV] = ",".join(ids)
    else:
        envs[VISIBLE_DEVICES_ENV] = "void"

    if CDI_ANNOTATIONS in strategies or CDI_CRI in strategies:
        cdi = tuple(config.cdi_devices(devices))
    if CDI_ANNOTATIONS in strategies:
        annotations[config.cdi_annotation_key] = ",".join(cdi)

    specs: list[DeviceNodeSpec] = []
    if config.pass_device_specs:
        specs = [_device_spec(d.device_node, config.dev_root) for d in devices]
        specs += [_device_spec(p, config.dev_root) for p in CONTROL_DEVICE_NODES
                  if config.host_has is None or config.host_has(p)]

    return ContainerAllocation(
        envs=envs,
        mounts=tuple(mounts),
        devices=tuple(specs),
        annotations=annotations,
        cdi_devices=cdi if CDI_CRI in strategies else (),
    )
