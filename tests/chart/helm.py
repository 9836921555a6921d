"""Real Helm for the chart tests: helm-sdkpy (Helm v4's Go library) in a child process, against the API emulator.

* `helm_action(req)` runs `tests/chart/helmrun.py` with `HELM_DRIVER=memory`: Helm keeps its release record in
  memory instead of a Secret, so everything Helm stores in the cluster is the chart's own objects and each test
  starts from no release. (The emulator does serve Helm's default Secret storage: the guide tests' `helm` runs
  with it, see tests/guides/helmcli.py.)
* helm-sdkpy declares Python >= 3.12 and works on 3.11; `.ci/run` installs it with `--ignore-requires-python`. Where
  it is missing the tests are skipped with that command, except under CI (`CI` set), where they fail.
* `helm lint` takes no values files in helm-sdkpy, so `lint_with(values_file)` lints a copy of the chart whose
  values.yaml is the chart's defaults coalesced with the file, as Helm coalesces `-f` (maps merge key by key, the
  file's value wins, a null deletes the key): helm.sh/helm/v4 pkg/chart/common/util/coalesce.go.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "dra-bridge"
EXAMPLES = CHART / "examples"
INSTALL_HINT = "python -m pip install --ignore-requires-python 'helm-sdkpy==0.1.32'"


def helm_available() -> bool:
    try:
        import helm_sdkpy  # noqa: F401
    except ImportError:
        return False
    return True


def require_helm() -> None:
    if helm_available():
        return
    if os.environ.get("CI"):
        pytest.fail(f"helm-sdkpy is not installed; .ci/run installs it with: {INSTALL_HINT}")
    pytest.skip(f"real Helm (helm-sdkpy) is not installed: {INSTALL_HINT}")


def helm_action(req: dict[str, Any], timeout: float = 120) -> Any:
    """Run one Helm action; returns its result, raises HelmFailed with Helm's own message."""
    require_helm()
    env = dict(os.environ, HELM_DRIVER="memory", HELM_CACHE_HOME=str(Path(req.get("home", "/tmp")) / "cache"),
               HELM_CONFIG_HOME=str(Path(req.get("home", "/tmp")) / "config"),
               HELM_DATA_HOME=str(Path(req.get("home", "/tmp")) / "data"))
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("helmrun.py")), json.dumps(req)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"helmrun.py failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    answer = json.loads(lines[-1])
    if not answer["ok"]:
        raise HelmFailed(answer["error"], proc.stderr)
    return answer["result"]


class HelmFailed(Exception):
    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.message = message
        self.log = log


def coalesce(defaults: Any, overrides: Any) -> Any:
    """Helm's values coalescing of a user file over the chart's values.yaml."""
    if not isinstance(defaults, dict) or not isinstance(overrides, dict):
        return copy.deepcopy(overrides)
    out = copy.deepcopy(defaults)
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = coalesce(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def default_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def example_files() -> list[Path]:
    """Every documented values file of the chart (charts/dra-bridge/examples/*.yaml that are values for it)."""
    return sorted(p for p in EXAMPLES.glob("*.yaml") if not p.name.startswith("nvidia-"))


def load_values(path: Path | None) -> dict[str, Any]:
    return {} if path is None else (yaml.safe_load(path.read_text()) or {})


def lint_all(values_files: list[Path | None], workdir: Path) -> list[dict[str, Any]]:
    """`helm lint` of the chart with its defaults (None) or with each values file coalesced over them, in one Helm
    process; one answer ({"ok": ..., "result" | "error"}) per file."""
    charts = []
    for i, values_file in enumerate(values_files):
        chart = CHART
        if values_file is not None:
            chart = workdir / f"lint-{i}" / "dra-bridge"
            shutil.copytree(CHART, chart, ignore=shutil.ignore_patterns("examples"))
            merged = coalesce(default_values(), load_values(values_file))
            (chart / "values.yaml").write_text(yaml.safe_dump(merged, sort_keys=False))
        charts.append(chart)
    result: list[dict[str, Any]] = helm_action({"action": "each", "home": str(workdir),
                                                "steps": [{"action": "lint", "chart": str(c)} for c in charts]})
    return result


def install(kubeconfig: Path, values: dict[str, Any], *, namespace: str = "dra-bridge", release: str = "dra-bridge",
            workdir: Path) -> dict[str, Any]:
    result: dict[str, Any] = helm_action({"action": "install", "chart": str(CHART), "release": release,
                                          "namespace": namespace, "kubeconfig": str(kubeconfig), "values": values,
                                          "home": str(workdir)})
    return result


def manifests(release: dict[str, Any]) -> list[dict[str, Any]]:
    """The objects of an installed release, from Helm's own rendered manifest."""
    return [doc for doc in yaml.safe_load_all(release.get("manifest") or "") if doc]
