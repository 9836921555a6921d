"""Real kubectl and real Helm against `bridge sandbox apiserver` (the process a user starts), not mocks of them.

kubectl is the machine's own (skipped with a reason when absent); Helm is helm-sdkpy (Helm v4's library, run in a
child process) with its DEFAULT release storage: Secrets written by client-go in protobuf. Skipped with the install
command when helm-sdkpy is missing, except under CI, where .ci/run installs it and its absence is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
HELM_INSTALL = "python -m pip install --ignore-requires-python 'helm-sdkpy==0.1.32'"

NODE = textwrap.dedent("""\
    apiVersion: v1
    kind: Node
    metadata:
      name: gpu-1
      labels: {node-role.kubernetes.io/gpu: ""}
    status:
      conditions: [{type: Ready, status: "True", reason: KubeletReady}]
      addresses: [{type: InternalIP, address: 10.0.0.7}]
      nodeInfo: {kubeletVersion: v1.34.2, osImage: Ubuntu 24.04, kernelVersion: 6.8.0, containerRuntimeVersion: containerd://2.0.4,
                 machineID: m, systemUUID: s, bootID: b, kubeProxyVersion: "", operatingSystem: linux, architecture: amd64}
    """)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("kubectl")
    (tmp / "load").mkdir()
    (tmp / "load" / "node.yaml").write_text(NODE)
    kubeconfig = tmp / "kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "bridge", "sandbox", "apiserver", "--kubeconfig-out", str(kubeconfig),
                             "--load", str(tmp / "load")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: kubeconfig.exists() or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), HOME=str(tmp), KUBECACHEDIR=str(tmp / "cache"))
        yield kubeconfig, env
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def kubectl(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed on this machine (Debian: apt-get install kubernetes-client)")
    result = subprocess.run([KUBECTL, *args], capture_output=True, text=True, env=env, timeout=60, cwd=REPO)
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result


def test_kubectl_apply_with_validation_on(sandbox: tuple[Path, dict[str, str]]) -> None:
    _, env = sandbox
    assert "deviceclass.resource.k8s.io/gpu.dra-bridge.io created" in kubectl(env, "apply", "-f", "examples/deviceclass.yaml").stdout
    assert "unchanged" in kubectl(env, "apply", "-f", "examples/deviceclass.yaml").stdout
    bad = REPO / "examples" / "deviceclass.yaml"
    text = bad.read_text().replace("spec:", "spec:\n  notAField: 1", 1)
    result = subprocess.run([KUBECTL or "kubectl", "apply", "-f", "-"], input=text, capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode != 0 and 'unknown field "spec.notAField"' in result.stderr


def test_kubectl_create_namespace_and_objects_in_protobuf(sandbox: tuple[Path, dict[str, str]]) -> None:
    _, env = sandbox
    assert kubectl(env, "create", "ns", "team-a").stdout.strip() == "namespace/team-a created"
    kubectl(env, "create", "configmap", "cfg", "-n", "team-a", "--from-literal=a=b")
    kubectl(env, "create", "secret", "generic", "s", "-n", "team-a", "--from-literal=k=v")
    kubectl(env, "create", "serviceaccount", "runner", "-n", "team-a")
    out = json.loads(kubectl(env, "get", "secret", "s", "-n", "team-a", "-o", "json").stdout)
    assert out["data"] == {"k": "dg=="}
    assert "namespace/team-a" in kubectl(env, "get", "ns", "team-a", "-o", "name").stdout
    assert kubectl(env, "delete", "configmap", "cfg", "-n", "team-a").stdout.strip() == 'configmap "cfg" deleted'


def test_kubectl_get_pods_and_nodes_wide_show_the_real_columns(sandbox: tuple[Path, dict[str, str]]) -> None:
    _, env = sandbox
    assert "No resources found" in kubectl(env, "get", "pods").stderr
    kubectl(env, "run", "web", "--image=busybox", "--restart=Never")
    header, row = kubectl(env, "get", "pods").stdout.splitlines()[:2]
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:4] == ["web", "0/1", "Pending", "0"]
    lines = kubectl(env, "get", "nodes", "-o", "wide").stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE",
                                "KERNEL-VERSION", "CONTAINER-RUNTIME"]
    cells = lines[1].split()
    assert cells[:3] == ["gpu-1", "Ready", "gpu"] and cells[4:7] == ["v1.34.2", "10.0.0.7", "<none>"]
    assert cells[-1] == "containerd://2.0.4"


_HELM = textwrap.dedent("""\
    import asyncio, json, sys
    import helm_sdkpy
    req = json.loads(sys.argv[1])
    async def main():
        cfg = helm_sdkpy.Configuration(namespace="default", kubeconfig=req["kubeconfig"])
        if req["action"] == "install":
            r = await helm_sdkpy.Install(cfg).run("tiny", req["chart"], values=req["values"], wait=False, timeout=60)
        elif req["action"] == "upgrade":
            r = await helm_sdkpy.Upgrade(cfg).run("tiny", req["chart"], values=req["values"], wait=False, timeout=60)
        elif req["action"] == "list":
            r = await helm_sdkpy.List(cfg).run()
        else:
            r = await helm_sdkpy.Uninstall(cfg).run("tiny")
        return r
    print(json.dumps({"result": asyncio.run(main())}, default=str))
    """)


def helm(env: dict[str, str], kubeconfig: Path, action: str, values: dict[str, str] | None = None) -> object:
    try:
        import helm_sdkpy  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"helm-sdkpy is not installed; .ci/run installs it with: {HELM_INSTALL}")
        pytest.skip(f"real Helm (helm-sdkpy) is not installed: {HELM_INSTALL}")
    req = {"action": action, "kubeconfig": str(kubeconfig), "chart": str(Path(__file__).with_name("charts") / "tiny"),
           "values": values or {}}
    helm_env = {k: v for k, v in env.items() if k != "HELM_DRIVER"}  # the default driver: Secrets
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        helm_env[var] = str(Path(env["HOME"]) / "helm")
    proc = subprocess.run([sys.executable, "-c", _HELM, json.dumps(req)], capture_output=True, text=True,
                          timeout=120, env=helm_env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])["result"]


def test_real_helm_installs_upgrades_and_uninstalls_with_secret_storage(sandbox: tuple[Path, dict[str, str]]) -> None:
    kubeconfig, env = sandbox
    release = helm(env, kubeconfig, "install", {"greeting": "hi"})
    assert isinstance(release, dict) and release["info"]["status"] == "deployed" and release["version"] == 1
    secrets = json.loads(kubectl(env, "get", "secrets", "-l", "owner=helm,name=tiny", "-o", "json").stdout)["items"]
    assert [s["metadata"]["name"] for s in secrets] == ["sh.helm.release.v1.tiny.v1"]
    assert secrets[0]["type"] == "helm.sh/release.v1" and secrets[0]["metadata"]["labels"]["status"] == "deployed"
    assert json.loads(kubectl(env, "get", "configmap", "tiny-config", "-o", "json").stdout)["data"] == {"greeting": "hi"}
    upgraded = helm(env, kubeconfig, "upgrade", {"greeting": "bye"})
    assert isinstance(upgraded, dict) and upgraded["version"] == 2
    listed = helm(env, kubeconfig, "list")
    assert isinstance(listed, list) and [(r["name"], r["version"]) for r in listed] == [("tiny", 2)]
    helm(env, kubeconfig, "uninstall")
    wait_until(lambda: not json.loads(kubectl(env, "get", "secrets", "-l", "owner=helm", "-o", "json").stdout)["items"],
               timeout=30)
    assert kubectl(env, "get", "configmap", "tiny-config", check=False).returncode != 0
