"""The cluster the migration guides are run against: one sandbox cluster, taken through the whole migration.

The guides are the stages of one migration (hand a node over, read the report, migrate a namespace, move GPUs,
finish, roll back), each starting where the previous one ended, so the tests run them in order on ONE cluster, as a
platform team would: `GuideWorld.run(guide)` first runs every earlier guide's commands it has not run yet, so any
single guide test can run alone.

What the cluster is before the first guide (what "Before you begin" of 01-first-node assumes):
* two GPU nodes, `gpu-a` and `gpu-b`, 8 simulated H100s each, Kubernetes 1.34 (tests/sandbox_cluster.py test
  timings: node status every 0.5 s; and the scheduler's retry backoff 0.25 s to 1 s instead of 1 s to 10 s);
* the NVIDIA GPU Operator's device plugin on both (tests/guides/vendor.py, tests/guides/standins.py), with its
  node labelling; cert-manager's and the Prometheus Operator's kinds registered (the chart creates their objects);
* the teams' workloads (tests/guides/existing-workloads.yaml), running on GPUs the vendor plugin handed out.

The guides' commands run as `bash -euo pipefail` scripts from the repository root with real kubectl, real `bridge`,
and `helm` backed by real Helm (tests/guides/helmcli.py), with the placeholders set in the environment:
`KUBECONFIG`, `NODE` (gpu-a: the first node handed over), `NS` (team-a: the first namespace migrated) and
`WEBHOOK` (the webhook's HTTPS address; on a real cluster, `kubectl port-forward`'s local end).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bridge.kube.api import NODES, PODS, KubeAPI, Obj, Resource
from bridge.kube.errors import AlreadyExists
from bridge.sandbox.apiserver.registry import ResourceType
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.processes import guarded, spawn
from tests.guides import markdown
from tests.guides.markdown import REPO, Block, Guide
from tests.guides.standins import OperatorLabeller, Workloads, gpu_operator_objects, standalone_objects
from tests.polling import wait_until
from tests.sandbox_cluster import spec_for_tests

HERE = Path(__file__).resolve().parent
EXISTING = HERE / "existing-workloads.yaml"
NODES_SPEC = (NodeSpec("gpu-a", "8xH100-80GB"), NodeSpec("gpu-b", "8xH100-80GB"))
PLACEHOLDERS = {"NODE": "gpu-a", "NODE2": "gpu-b", "NS": "team-a"}
KUBECTL = shutil.which("kubectl")
VARIANTS = ("gpu-operator", "standalone")
STANDALONE_VALUES = REPO / "charts" / "dra-bridge" / "examples" / "nvidia-device-plugin-values.yaml"

# Kinds a real cluster serves once cert-manager and the Prometheus Operator are installed (their CRDs).
CRD_KINDS = (
    ResourceType("cert-manager.io", "v1", "issuers", "Issuer", True, "issuer"),
    ResourceType("cert-manager.io", "v1", "certificates", "Certificate", True, "certificate"),
    ResourceType("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor", True, "servicemonitor"),
)


@dataclass
class Ran:
    block: Block
    stdout: str
    stderr: str
    code: int
    seconds: float


class BlockFailed(AssertionError):
    pass


@dataclass
class GuideWorld:
    cluster: SandboxCluster
    workloads: Workloads
    home: Path
    env: dict[str, str]
    variant: str
    ran: dict[tuple[str, int], Ran] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    @property
    def api(self) -> KubeAPI:
        return self.cluster.api

    # -- running guides -----------------------------------------------------------------------------------------

    def run(self, name: str, through: str | None = None) -> dict[str, Ran]:
        """Run the guide's commands (after every earlier guide's), up to and including block `through`; returns the
        runs of this guide's blocks by id."""
        names = markdown.guide_names()
        for earlier in names[:names.index(name)]:
            self._run_guide(markdown.load(earlier), None)
        return self._run_guide(markdown.load(name), through)

    def _run_guide(self, guide: Guide, through: str | None) -> dict[str, Ran]:
        out: dict[str, Ran] = {}
        for block in guide.blocks:
            if not block.runs_in(self.variant):
                continue
            key = (guide.name, block.line)
            if key not in self.ran:
                self.ran[key] = self.run_block(block)
            if block.id:
                out[block.id] = self.ran[key]
            if through is not None and block.id == through:
                break
        else:
            if through is not None:
                raise KeyError(f"{guide.name}: no block id={through} that runs in the sandbox")
        return out

    def run_block(self, block: Block, timeout: float = 180) -> Ran:
        env = dict(self.env)
        webhook = self.workloads.running("webhook")
        if webhook:
            env["WEBHOOK"] = f"https://127.0.0.1:{next(iter(webhook.values())).extra['port']}"
        start = time.monotonic()
        # Under orphanguard (the shell gets SIGTERM if this process dies: a wait loop must not outlive its cluster)
        # and in its own session (a block that overruns is killed with everything it started).
        proc = spawn(lambda: subprocess.Popen(
            guarded(["bash", "-euo", "pipefail", "-c", block.text]), cwd=self.home / "clone", env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True))
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            raise BlockFailed(f"{block.where} did not finish within {timeout:.0f}s:\n{block.text}\n--- stdout\n"
                              f"{stdout[-4000:]}\n--- stderr\n{stderr[-4000:]}") from None
        ran = Ran(block, stdout, stderr, proc.returncode, time.monotonic() - start)
        self.order.append(f"{block.where} ({ran.seconds:.1f}s)")
        if proc.returncode != block.exit:
            raise BlockFailed(f"{block.where} exited {proc.returncode} (expected {block.exit}):\n{block.text}\n"
                              f"--- stdout\n{stdout[-4000:]}\n--- stderr\n{stderr[-4000:]}\n"
                              f"--- stand-in errors: {self.workloads.errors}")
        return ran

    # -- reading the cluster ------------------------------------------------------------------------------------

    def node(self, name: str) -> Obj:
        return self.api.get(NODES, name)

    def pods(self, namespace: str | None = None) -> list[Obj]:
        return list(self.api.list(PODS, namespace)["items"])


def _create(api: KubeAPI, obj: Obj) -> None:
    kind = obj["kind"]
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = {"Namespace": "namespaces", "Pod": "pods", "ResourceQuota": "resourcequotas",
              "DaemonSet": "daemonsets", "Deployment": "deployments"}[kind]
    namespaced = kind not in ("Namespace",)
    res = Resource(group, version, plural, kind, namespaced)
    try:
        api.create(res, obj, obj["metadata"].get("namespace") if namespaced else None)
    except AlreadyExists:
        pass


def start_world(variant: str = "gpu-operator") -> GuideWorld:
    """The cluster before the first guide, with the vendor's device plugin of `variant` (gpu-operator: the GPU
    Operator's; standalone: NVIDIA's standalone chart's, with the node affinity the guide gives it)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: one of {VARIANTS}")
    cluster = SandboxCluster(spec_for_tests(NODES_SPEC, version="1.34"))
    cluster.start()
    workloads: Workloads | None = None
    home: Path | None = None
    try:
        assert cluster.server is not None
        for controller in cluster.controllers:
            if hasattr(controller, "max_backoff"):  # the scheduler stand-in
                # Test timing, as a KubeSchedulerConfiguration with podInitialBackoffSeconds/podMaxBackoffSeconds
                # lowered would have it: a pod waiting for GPUs the split is moving retries within a second.
                controller.initial_backoff, controller.max_backoff = 0.25, 1.0
        for rt in CRD_KINDS:
            cluster.server.registry.add(rt)
        api = cluster.api
        if variant == "gpu-operator":
            vendor = gpu_operator_objects()
            labeller: OperatorLabeller | None = OperatorLabeller(api)
        else:
            vendor, labeller = standalone_objects(yaml.safe_load(STANDALONE_VALUES.read_text())), None
        for obj in vendor:
            _create(api, obj)
        workloads = Workloads(cluster, labeller=labeller).start()
        home = Path(tempfile.mkdtemp(prefix="guides-", dir="/tmp" if Path("/tmp").is_dir() else None))
        bin_dir = home / "bin"
        bin_dir.mkdir()
        # The guides run from the root of a clone; files they write (the report's fixes/) stay out of this one.
        (home / "clone").mkdir()
        for top in ("charts", "migration-guides", "examples"):
            (home / "clone" / top).symlink_to(REPO / top)
        helm = bin_dir / "helm"
        helm.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'helmcli.py'} \"$@\"\n")
        helm.chmod(0o755)
        env = {"PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
               "HOME": str(home), "KUBECONFIG": str(cluster.kubeconfig), "KUBECACHEDIR": str(home / "kube-cache"),
               "HELM_CACHE_HOME": str(home / "helm"), "HELM_CONFIG_HOME": str(home / "helm"),
               "HELM_DATA_HOME": str(home / "helm"), "LANG": "C.UTF-8", "NO_COLOR": "1", **PLACEHOLDERS}
        world = GuideWorld(cluster, workloads, home, env, variant)
        for obj in yaml.safe_load_all(EXISTING.read_text()):
            if obj:
                _create(api, obj)
        for node in NODES_SPEC:
            wait_until(lambda n=node.name: n in workloads.running("vendor"), 60,
                       f"the vendor device plugin on {node.name}")
        wait_until(lambda: sum(1 for p in world.pods() if (p.get("status") or {}).get("phase") == "Running"
                               and p["metadata"]["namespace"].startswith("team-")) == 3, 60,
                   "the teams' 3 GPU pods running")
        return world
    except BaseException:
        if workloads is not None:
            workloads.stop()
        cluster.stop()
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
        raise


def stop_world(world: GuideWorld) -> None:
    world.workloads.stop()
    world.cluster.stop()
    shutil.rmtree(world.home, ignore_errors=True)


