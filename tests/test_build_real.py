"""scripts/build_real.py: how each Kubernetes line is built (nothing is built here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from bridge.sandbox.real.binaries import LINES, Binaries

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_real", ROOT / "scripts" / "build_real.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_real"] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


def test_the_build_and_the_backend_pin_the_same_lines() -> None:
    assert _script().KUBERNETES_LINES == LINES


def test_the_138_line_takes_its_own_go_and_the_iptables_shim_and_builds_no_kube_proxy() -> None:
    build = _script()
    beta = build.kubernetes_set("1.38")
    assert beta.toolchain == "go1.27.3" and build.go_env(beta)["GOTOOLCHAIN"] == "go1.27.3"
    assert beta.shims == {"sigs.k8s.io/iptables-wrappers": "shims/iptables-wrappers"}
    assert "kube-proxy" not in beta.programs and "kubelet" in beta.programs
    go_mod = (ROOT / "realk8s" / "kubernetes-v1.38" / "go.mod").read_text()
    assert "sigs.k8s.io/iptables-wrappers => ../shims/iptables-wrappers" in go_mod
    assert "k8s.io/kubernetes v1.38.0-beta.0" in go_mod
    stable = build.kubernetes_set("1.37")
    assert stable.toolchain == "" and not stable.shims and "kube-proxy" in stable.programs
    assert "GOTOOLCHAIN" not in build.go_env(stable) or build.go_env(stable)["GOTOOLCHAIN"] != "go1.27.3"


def test_the_138_line_runs_the_137_kube_proxy() -> None:
    """Binaries resolve kube-proxy of 1.38 in the 1.37 set (the skew policy allows three minors)."""
    assert Binaries("1.38")._set_dir("kube-proxy") == Binaries("1.37")._set_dir("kube-proxy")
    assert Binaries("1.38").version == "v1.38.0-beta.0"
