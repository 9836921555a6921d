"""The real cluster for the guide blocks marked `real-backend` (tests/guides/test_real_cluster.py): what a reader of
guide 01's standalone path has before the first step, on the real backend of `bridge sandbox cluster`.

* One GPU node, `gpu-a` (4 simulated H100s whose device nodes and driver files are real, at the node's
  `/run/nvidia/driver`), with a real kubelet, containerd and runc, kube-proxy for Services, and the real API server,
  controller manager (its DaemonSet and Deployment controllers move the pods here) and scheduler, Kubernetes 1.37.
* The image built from this repository (tests/imagebuilt.py `built`) imported into the node's containerd, as the
  chart's README describes for a cluster without a registry.
* NVIDIA's standalone device-plugin chart installed as release `nvdp` in `nvidia-device-plugin` from a Helm
  repository named `nvdp`: here a stand-in of that chart (tests/guides/nvidia-device-plugin-standin: the same chart
  name, DaemonSet name, labels and `affinity` value; its container sleeps) served from this machine, since the tests
  run offline.

The blocks run in `Session`, a user's terminal: one `bash -euo pipefail` script per block, from the root of a clone,
with the real `kubectl` and `helm` first on PATH, `bridge` next, `KUBECONFIG` and the placeholders set; what a block
exports is set for the blocks after it, and what it starts in the background (the port-forward) runs until the
session ends.
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bridge.kube.api import KubeAPI
from bridge.sandbox.cluster import NodeSpec, SandboxCluster
from bridge.sandbox.cluster.processes import guarded, spawn
from bridge.sandbox.real.binaries import NODE as NODE_PROGRAMS
from tests.guides import markdown
from tests.guides.markdown import REPO, Block
from tests.guides.world import PLACEHOLDERS, BlockFailed, Ran
from tests.imagebuilt import build
from tests.real.conftest import CONTROL_PLANE, REAL_LINE, require_binaries
from tests.sandbox_cluster import spec_for_tests

HERE = Path(__file__).resolve().parent
NODE = "gpu-a"
GPUS = "4xH100-80GB"
STANDIN_CHART = HERE / "nvidia-device-plugin-standin"
PROGRAMS = CONTROL_PLANE + NODE_PROGRAMS + ("kubelet", "kubectl", "helm", "kube-proxy")


def bridge_values(image_tag: str) -> list[str]:
    """`helm install dra-bridge` as guide 01's `install-standalone` block runs it (the standalone values file), with
    what this machine has instead of a GPU node of a real cluster: no cert-manager (the chart's own certificate), the
    image imported (never pulled), simulated GPUs whose driver files are at /run/nvidia/driver, CDI devices through
    the CRI. The chart passes `--driver-root` only with NVML, so for simulated GPUs it is an extra argument: without
    it the CDI specs carry the device nodes alone, and a container would have no `nvidia-smi`."""
    return ["-f", "charts/dra-bridge/examples/standalone-device-plugin.yaml", "--set", "webhook.tls.mode=selfSigned",
            "--set", f"image.tag={image_tag}", "--set", "image.pullPolicy=Never",
            "--set", f"node.devices=simulated:{GPUS}", "--set", "node.driverRoot=/run/nvidia/driver",
            "--set", "node.devRoot=/run/nvidia/driver", "--set", "node.deviceListStrategy=cdi-cri",
            "--set-json", 'node.extraArgs=["--driver-root=/run/nvidia/driver"]']


@dataclass
class Session:
    """A user's terminal (see the module docstring)."""

    home: Path
    env: dict[str, str]
    groups: list[int] = field(default_factory=list)
    count: int = 0
    locks: dict[Path, IO[str]] = field(default_factory=dict)

    @property
    def clone(self) -> Path:
        return self.home / "clone"

    def sh(self, text: str, timeout: float = 180) -> str:
        """Run `text` as the terminal's next command (the test's own, not a guide's); its output, BlockFailed when it
        exits non-zero."""
        stdout, stderr, code, _ = self._run(text, timeout, "a command of the test")
        if code != 0:
            raise BlockFailed(f"exited {code}:\n{text}\n--- stdout\n{stdout[-4000:]}\n--- stderr\n{stderr[-4000:]}")
        return stdout

    def run_block(self, block: Block, timeout: float = 180) -> Ran:
        stdout, stderr, code, seconds = self._run(block.text, timeout, block.where)
        if code != block.exit:
            raise BlockFailed(f"{block.where} exited {code} (expected {block.exit}):\n{block.text}\n"
                              f"--- stdout\n{stdout[-4000:]}\n--- stderr\n{stderr[-4000:]}")
        return Ran(block, stdout, stderr, code, seconds)

    def _run(self, text: str, timeout: float, where: str) -> tuple[str, str, int, float]:
        self.count += 1
        out, err = self.home / "session" / f"{self.count}.out", self.home / "session" / f"{self.count}.err"
        out.parent.mkdir(exist_ok=True)
        state = self.home / "session" / "exported"
        # The terminal's state between commands: the exports of the one before, saved when it ends however it ends.
        script = f'if [ -f {state} ]; then . {state}; fi\ntrap "export -p > {state}" EXIT\n{text}'
        start = time.monotonic()
        # Output to files, not pipes: a job left in the background (the port-forward) keeps its copies open. Each
        # command in its own process group, which `close` ends with whatever it left running.
        with out.open("w") as o, err.open("w") as e:
            proc = spawn(lambda: subprocess.Popen(guarded(["bash", "-euo", "pipefail", "-c", script]), cwd=self.clone,
                                                  env=self.env, stdout=o, stderr=e, text=True,
                                                  start_new_session=True))
        self.groups.append(proc.pid)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise BlockFailed(f"{where} did not finish within {timeout:.0f}s:\n{text}\n--- stdout\n"
                              f"{out.read_text()[-4000:]}\n--- stderr\n{err.read_text()[-4000:]}") from None
        return out.read_text(), err.read_text(), code, time.monotonic() - start

    def hold(self, lock: Path) -> None:
        """Hold this machine-wide lock until the session ends (waiting for another test run that holds it)."""
        if lock not in self.locks:
            f = lock.open("w")
            fcntl.flock(f, fcntl.LOCK_EX)
            self.locks[lock] = f

    def close(self) -> None:
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for f in self.locks.values():
            f.close()


@dataclass
class RealGuideWorld:
    cluster: SandboxCluster
    session: Session
    image_tag: str
    ran: dict[tuple[str, int], Ran] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    @property
    def api(self) -> KubeAPI:
        return self.cluster.api

    def run(self, guide: str, block_id: str) -> Ran:
        """Run the guide's block `block_id` as written (once: a second call returns the first run)."""
        block = markdown.load(guide).block(block_id)
        key = (guide, block.line)
        if key not in self.ran:
            self.ran[key] = self.session.run_block(block)
            self.order.append(f"{block.where} ({self.ran[key].seconds:.1f}s)")
        return self.ran[key]

    def sh(self, text: str, timeout: float = 180) -> str:
        return self.session.sh(text, timeout)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@contextmanager
def chart_repository(charts: list[Path], helm: Path, work: Path) -> Iterator[str]:
    """A Helm chart repository with `charts` packaged in it (`helm package`, `helm repo index`), served over HTTP on
    this machine's loopback while the context lasts; yields its URL."""
    root = work / "chart-repository"
    root.mkdir()
    for chart in charts:
        subprocess.run([str(helm), "package", str(chart), "-d", str(root)], check=True, capture_output=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    subprocess.run([str(helm), "repo", "index", str(root), "--url", url], check=True, capture_output=True)
    thread = threading.Thread(target=server.serve_forever, name="chart-repository", daemon=True)
    thread.start()
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def real_world(built: build.BuildResult) -> Iterator[RealGuideWorld]:
    """The cluster of the module docstring, with NVIDIA's (stand-in) chart installed and running on gpu-a."""
    binaries = require_binaries(REAL_LINE, PROGRAMS)
    kubectl, helm = binaries.path("kubectl"), binaries.path("helm")
    home = Path(tempfile.mkdtemp(prefix="guides-real-", dir="/tmp" if Path("/tmp").is_dir() else None))
    try:
        spec = spec_for_tests((NodeSpec(NODE, GPUS),), backend="real", version=REAL_LINE, real_kubelets=True,
                              services=True, node_status_frequency=2.0)
        with SandboxCluster(spec).start(timeout=300) as cluster, \
                chart_repository([STANDIN_CHART], helm, home) as repository:
            for node in cluster.nodes:
                assert node.real is not None
                node.real.containerd.import_image(built.archive)
            bin_dir = home / "bin"
            bin_dir.mkdir()
            for program in (kubectl, helm):
                (bin_dir / program.name).symlink_to(program)
            (home / "clone").mkdir()
            for top in ("charts", "migration-guides", "examples"):
                (home / "clone" / top).symlink_to(REPO / top)
            env = {"PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]),
                   "HOME": str(home), "KUBECONFIG": str(cluster.kubeconfig), "KUBECACHEDIR": str(home / "kube-cache"),
                   "HELM_CACHE_HOME": str(home / "helm"), "HELM_CONFIG_HOME": str(home / "helm"),
                   "HELM_DATA_HOME": str(home / "helm"), "LANG": "C.UTF-8", "NO_COLOR": "1",
                   **PLACEHOLDERS}
            session = Session(home, env)
            try:
                world = RealGuideWorld(cluster, session, built.reference.rsplit(":", 1)[1])
                # What the reader did when they installed NVIDIA's chart (its README's two commands).
                world.sh(f"helm repo add nvdp {repository}\n"
                         "helm install nvdp nvdp/nvidia-device-plugin -n nvidia-device-plugin --create-namespace\n"
                         "kubectl -n nvidia-device-plugin rollout status daemonset/nvdp-nvidia-device-plugin "
                         "--timeout=120s")
                yield world
            finally:
                session.close()  # the port-forward, before the cluster goes
    finally:
        shutil.rmtree(home, ignore_errors=True)
