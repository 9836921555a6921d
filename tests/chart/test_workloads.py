"""The chart's workloads match the binaries: every argument the chart passes is one `bridge node` / `bridge webhook`
/ `bridge controller` accepts (parsed by the real click commands, values checked by the same validators the
commands call), every environment variable it sets is one they read, and every socket and directory the node daemon
uses lies in a hostPath mounted at the same path. And the hand-over from the vendor device plugin: on no node do
both plugins run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from bridge.cli.controller import controller as controller_command
from bridge.cli.node import node as node_command
from bridge.cli.webhook import webhook as webhook_command
from bridge.deviceplugin.allocate import parse_strategies
from bridge.deviceplugin.plugin import PluginConfig as DevicePluginConfig
from bridge.dra.plugin import PluginConfig as DraPluginConfig
from bridge.dra.slices import validate_driver_name
from bridge.inventory.options import parse_devices_option
from bridge.inventory.xid import parse_xid_list
from bridge.node.http import parse_address
from bridge.node.podresources import PODRESOURCES_SOCKET
from tests.chart import helm
from tests.chart.conftest import find, one
from tests.chart.test_rbac import CONTROLLER


def container(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (c,) = one(objects, kind, name)["spec"]["template"]["spec"]["containers"]
    return c


def parse(command: click.Command, args: list[str], replace: dict[str, str],
          env: dict[str, str] | None = None) -> dict[str, Any]:
    """The options as the real command parses them (types, choices, ranges), with `env` as the pod's environment
    (the downward API's values); paths that must exist on the node are swapped for local ones."""
    local = [next((f"{flag}={replace[flag]}" for flag in replace if a.startswith(flag + "=")), a) for a in args]
    with pytest.MonkeyPatch.context() as mp:
        for name in envvars(command):
            mp.delenv(name, raising=False)
        for name, value in (env or {}).items():
            mp.setenv(name, value)
        with command.make_context(command.name or "", local) as ctx:
            return dict(ctx.params)


def envvars(command: click.Command) -> set[str]:
    out: set[str] = set()
    for p in command.params:
        env = getattr(p, "envvar", None)
        out.update([env] if isinstance(env, str) else env or [])
    return out


@pytest.mark.parametrize("values_file", [None, *helm.example_files()],
                         ids=lambda p: "defaults" if p is None else p.name)
def test_the_node_daemon_accepts_every_argument_and_value_the_chart_passes(values_file: Path | None,
                                                                           installed: Any, tmp_path: Path) -> None:
    objects = installed(helm.load_values(values_file))
    c = container(objects, "DaemonSet", "dra-bridge-node")
    assert c["command"] == ["bridge", "node"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # --pod-uid from the pod's own UID: per-pod socket names and the surge rollout's standby hand-over.
    assert env["POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    params = parse(node_command, c["args"], {"--host-root": str(tmp_path)},
                   env={"NODE_NAME": "gpu-node-7", "POD_UID": "5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"})
    assert params["node_name"] == "gpu-node-7"
    assert params["pod_uid"] == "5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
    parse_strategies(params["device_list_strategy"])
    parse_address(params["http_address"])
    validate_driver_name(params["driver_name"])
    parse_xid_list(params["ignore_xids"])
    if params["devices"].startswith("simulated:"):
        assert len(parse_devices_option(params["devices"], "n1").devices()) > 0
        assert params["driver_root"] is None and "NVIDIA_VISIBLE_DEVICES" not in env
    else:
        assert params["driver_root"] and env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == "http")
    assert params["http_address"] == f":{port}"
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert c[probe]["httpGet"] == {"path": path, "port": "http"}


def test_every_socket_and_directory_of_the_daemon_is_a_hostpath_at_the_same_path(installed: Any) -> None:
    objects = installed({"node": {"kubeletRoot": "/var/lib/k8s/kubelet", "cdiRoot": "/etc/cdi"}})
    ds = one(objects, "DaemonSet", "dra-bridge-node")
    spec = ds["spec"]["template"]["spec"]
    c = container(objects, "DaemonSet", "dra-bridge-node")
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"]}
    mounts = {m["mountPath"]: (volumes[m["name"]], m) for m in c["volumeMounts"]}
    params = parse(node_command, c["args"], {"--host-root": "/"}, env={"NODE_NAME": "n1"})
    kubelet_root = str(params["kubelet_root"])
    dra = DraPluginConfig(driver=params["driver_name"], kubelet_root=kubelet_root)
    dp = DevicePluginConfig(kubelet_root=Path(kubelet_root), device_plugin_dir=Path(str(params["device_plugin_dir"])))
    # the kubelet's compiled-in device-plugin directory, which a custom --root-dir does not move
    assert dp.plugin_dir == Path("/var/lib/kubelet/device-plugins")
    used = {
        "device-plugin sockets and the kubelet checkpoint": dp.plugin_dir / "kubelet.sock",
        "DRA registration socket": dra.registration_socket,
        "DRA service socket": dra.dra_socket,
        "PodResources socket": Path(kubelet_root) / PODRESOURCES_SOCKET,
        "CDI specs": Path(str(params["cdi_root"])) / "x.json",
        "checkpoint": Path(str(params["state_dir"])) / "checkpoint.json",
        "claim records": Path(str(params["claims_dir"])) / "claims.json",
    }
    assert str(params["claims_dir"]) == "/var/run/dra-bridge", "the claim records on the host's tmpfs, as CDI specs"
    for what, path in used.items():
        under = [m for m in mounts if Path(path).is_relative_to(m) and m != params["host_root"].as_posix()]
        assert under, f"{what} ({path}) is in no mounted host path"
        host, mount = mounts[max(under, key=len)]
        assert host["path"] == mount["mountPath"], f"{what}: host {host['path']} is mounted at {mount['mountPath']}"
    host_root, mount = mounts["/host"]
    assert host_root == {"path": "/", "type": "Directory"}
    assert mount["readOnly"] is True and mount["mountPropagation"] == "HostToContainer"
    assert str(params["host_root"]) == "/"  # (replaced above) the chart passes --host-root=/host
    assert "--host-root=/host" in c["args"]
    assert not any(m.get("mountPropagation") == "Bidirectional" for m in c["volumeMounts"])
    assert {p for p in mounts if p.startswith(kubelet_root)} == {
        f"{kubelet_root}/plugins_registry", f"{kubelet_root}/plugins/gpu.dra-bridge.io",
        f"{kubelet_root}/pod-resources"}, "never the whole kubelet root"
    assert "/var/lib/kubelet/device-plugins" in mounts and "/var/lib/kubelet" not in mounts


def test_the_daemonset_is_node_critical_and_rolls_one_node_at_a_time_with_surge(installed: Any) -> None:
    # The new pod starts beside the old one and waits in standby (tests/node/test_instances.py shows the hand-over
    # on the kubelet simulator's 1.36 and 1.37 disconnect rules).
    ds = one(installed(), "DaemonSet", "dra-bridge-node")
    assert ds["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    tolerations = ds["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_the_webhook_accepts_every_argument_the_chart_passes(installed: Any, tmp_path: Path) -> None:
    c = container(installed(), "Deployment", "dra-bridge-webhook")
    assert c["command"] == ["bridge", "webhook"]
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("x")
    params = parse(webhook_command, c["args"], {"--tls-cert-file": str(tmp_path / "tls.crt"),
                                                "--tls-key-file": str(tmp_path / "tls.key")},
                   env={"POD_NAMESPACE": "dra-bridge"})
    assert params["namespace"] == "dra-bridge"
    assert params["bind_address"] == "0.0.0.0"  # explicit: the binary listens on loopback unless told
    assert params["port"] == next(p["containerPort"] for p in c["ports"])
    assert params["device_class"] == one(installed(), "DeviceClass")["metadata"]["name"]
    assert params["max_templates_per_namespace"] == 100 and params["client_ca_file"] is None
    assert {e["name"] for e in c["env"]} <= envvars(webhook_command)


def test_the_webhook_accepts_the_client_certificate_and_template_cap_arguments_as_the_chart_passes_them(
        installed: Any, tmp_path: Path) -> None:
    c = container(installed(helm.load_values(helm.EXAMPLES / "api-server-only.yaml")), "Deployment",
                  "dra-bridge-webhook")
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / name).write_text("x")
    params = parse(webhook_command, c["args"], {"--tls-cert-file": str(tmp_path / "tls.crt"),
                                                "--tls-key-file": str(tmp_path / "tls.key"),
                                                "--client-ca-file": str(tmp_path / "ca.crt")},
                   env={"POD_NAMESPACE": "dra-bridge"})
    assert params["client_ca_file"] == str(tmp_path / "ca.crt")
    assert params["client_names"] == "kube-apiserver-webhook-client"
    assert params["max_templates_per_namespace"] == 50


def test_the_controller_accepts_every_argument_the_chart_passes(installed: Any) -> None:
    c = container(installed(CONTROLLER), "Deployment", "dra-bridge-controller")
    assert c["command"] == ["bridge", "controller"]
    params = parse(controller_command, c["args"], {}, env={"POD_NAMESPACE": "dra-bridge", "POD_NAME": "c-0"})
    assert params["dry_run"] is True and params["leader_elect"] is True
    assert params["policy_configmap"] == "dra-bridge/split-policy"
    assert (params["max_moves_per_minute"], params["max_moves_per_decision"]) == (32, 500)
    assert "POD_NAMESPACE" in envvars(controller_command)


# -- hand-over from the vendor device plugin -------------------------------------------------------------------------

def _requirement(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    """One nodeSelectorRequirement (k8s.io/apimachinery labels.Requirement.Matches: NotIn and DoesNotExist match
    a node without the key)."""
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not modelled")


def schedules(pod_spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """nodeSelector AND required nodeAffinity (terms ORed, expressions ANDed): k8s.io/component-helpers
    scheduling/corev1/nodeaffinity/nodeaffinity.go."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return True
    return any(all(_requirement(e, labels) for e in term.get("matchExpressions") or [])
               for term in required["nodeSelectorTerms"])


OPTED_IN = {"dra-bridge.io/node": "true"}
GPU_NODES = {
    "NFD-labeled GPU node": {"feature.node.kubernetes.io/pci-10de.present": "true"},
    "Tegra": {"feature.node.kubernetes.io/cpu-model.vendor_id": "NVIDIA"},
    "forced": {"nvidia.com/gpu.present": "true"},
}


OFF = {"nvidia.com/gpu.deploy.device-plugin": "false"}


def test_standalone_vendor_plugin_leaves_first_and_the_bridge_comes_only_after_the_opt_in(installed: Any) -> None:
    """The hand-over in its two steps, each a label of its own: `nvidia.com/gpu.deploy.device-plugin=false` takes
    NVIDIA's plugin off the node (and starts nothing), then the opt-in label brings the bridge. A bridge that
    registered while the vendor plugin still served would be cut off when the vendor's stream ends (kubelets up to
    1.36), so no label combination runs both, and opting in first changes nothing."""
    standalone = installed(helm.load_values(helm.EXAMPLES / "standalone-device-plugin.yaml"))
    ours = one(standalone, "DaemonSet")["spec"]["template"]["spec"]
    theirs = yaml.safe_load((helm.EXAMPLES / "nvidia-device-plugin-values.yaml").read_text())
    terms = theirs["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # NVIDIA's three default terms (deployments/helm/nvidia-device-plugin/values.yaml), each kept.
    assert [t["matchExpressions"][0]["key"] for t in terms] == [
        "feature.node.kubernetes.io/pci-10de.present", "feature.node.kubernetes.io/cpu-model.vendor_id",
        "nvidia.com/gpu.present"]
    for name, labels in GPU_NODES.items():
        steps = [("before", labels), ("opted in first", {**labels, **OPTED_IN}), ("vendor off", {**labels, **OFF}),
                 ("handed over", {**labels, **OFF, **OPTED_IN})]
        expected = {"before": (True, False), "opted in first": (True, False), "vendor off": (False, False),
                    "handed over": (False, True)}
        for step, node in steps:
            assert (schedules(theirs, node), schedules(ours, node)) == expected[step], f"{name}, {step}"
    back = {**GPU_NODES["forced"], "nvidia.com/gpu.deploy.device-plugin": "true"}  # guide 06's way back
    assert (schedules(theirs, back), schedules(ours, back)) == (True, False)


@pytest.mark.parametrize("vendor", ["gpu-operator", "standalone"])
def test_notes_hand_a_node_over_in_order_vendor_plugin_off_wait_then_opt_in(vendor: str,
                                                                             installed_notes: Any) -> None:
    files = {"gpu-operator": "gpu-operator.yaml", "standalone": "standalone-device-plugin.yaml"}
    notes = installed_notes(helm.load_values(helm.EXAMPLES / files[vendor]))
    lines = notes.splitlines()
    off = [i for i, ln in enumerate(lines) if "kubectl label node NODE nvidia.com/gpu.deploy.device-plugin=false" in ln]
    wait = [i for i, ln in enumerate(lines) if "wait --for=delete pod" in ln]
    opt_in = [i for i, ln in enumerate(lines) if "kubectl label node NODE dra-bridge.io/node=true" in ln]
    assert len(off) == len(wait) == len(opt_in) == 1 and off[0] < wait[0] < opt_in[0], notes
    assert "dra-bridge.io/node" not in lines[off[0]]  # never both labels in one command
    namespace = {"gpu-operator": "-n gpu-operator", "standalone": "-n nvidia-device-plugin"}[vendor]
    assert namespace in lines[wait[0]]


def test_notes_without_a_vendor_plugin_name_only_the_opt_in_label(installed_notes: Any) -> None:
    notes = installed_notes({"nodeRestriction": {"enabled": False}, "vendorDevicePlugin": "none"})
    assert "kubectl label node NODE dra-bridge.io/node=true" in notes and "gpu.deploy.device-plugin" not in notes


def test_under_the_gpu_operator_the_bridge_waits_for_the_operators_plugin_to_be_switched_off(installed: Any) -> None:
    ours = one(installed(), "DaemonSet")["spec"]["template"]["spec"]
    operator_plugin = {"nodeSelector": {"nvidia.com/gpu.deploy.device-plugin": "true"}}  # the operator's DaemonSet
    node = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.device-plugin": "true"}
    assert (schedules(operator_plugin, node), schedules(ours, node)) == (True, False)
    only_opted_in = {**node, **OPTED_IN}  # the operator's plugin still runs there: ours must not start
    assert (schedules(operator_plugin, only_opted_in), schedules(ours, only_opted_in)) == (True, False)
    handed_over = {**only_opted_in, "nvidia.com/gpu.deploy.device-plugin": "false"}
    assert (schedules(operator_plugin, handed_over), schedules(ours, handed_over)) == (False, True)


def test_without_a_vendor_plugin_the_opt_in_label_alone_decides(installed: Any) -> None:
    no_vendor = installed({"nodeRestriction": {"enabled": False}, "vendorDevicePlugin": "none"})
    ours = one(no_vendor, "DaemonSet")["spec"]["template"]["spec"]
    assert schedules(ours, OPTED_IN) and not schedules(ours, {"nvidia.com/gpu.present": "true"})
    assert not find(installed({"node": {"enabled": False}}), "DaemonSet")


def test_under_the_gpu_operator_driver_files_and_device_nodes_come_from_its_driver_container(installed: Any) -> None:
    """The operator's driver container exposes its root at /run/nvidia/driver with dev/nvidia* in it; NVIDIA's own
    device plugin takes a driver root holding dev/ as the dev root (k8s-device-plugin root.go getDevRoot)."""
    values = helm.load_values(helm.EXAMPLES / "gpu-operator.yaml")
    (daemon,) = [c for c in one(installed(values), "DaemonSet")["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "node"]
    args = " ".join(daemon.get("args") or [])
    assert "--driver-root=/run/nvidia/driver" in args and "--dev-root=/run/nvidia/driver" in args


def test_the_guides_daemonset_stand_in_gives_each_node_its_own_copy_of_every_directory_the_chart_passes(
        installed: Any, tmp_path: Path) -> None:
    """The guide tests run the chart's node pods as processes on one machine (tests/guides/standins.py): each
    directory flag the chart passes must become that node's own, or the nodes share this machine's /var/run/... (as
    `--claims-dir` first did: two nodes' claim records in one file)."""
    from types import SimpleNamespace

    from tests.guides.standins import Workloads

    c = container(installed(), "DaemonSet", "dra-bridge-node")
    root = tmp_path / "node-a"
    node = SimpleNamespace(spec=SimpleNamespace(gpus="8xH100-80GB"), kubelet_root=root / "kl", cdi_root=root / "cdi",
                           state_dir=root / "state", claims_dir=root / "run")
    argv = Workloads._node_argv(Workloads.__new__(Workloads), c, node)  # type: ignore[arg-type]
    params = parse(node_command, argv[argv.index("node") + 1:], {}, env={})
    dirs = {k: v for k, v in params.items() if k.endswith(("_dir", "_root")) and k != "host_root" and v is not None}
    assert {"kubelet_root", "device_plugin_dir", "cdi_root", "state_dir", "claims_dir"} <= set(dirs)
    assert {k: Path(str(v)).is_relative_to(root) for k, v in dirs.items()} == {k: True for k in dirs}
