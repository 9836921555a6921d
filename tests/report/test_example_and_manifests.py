"""The example snapshot and every generated manifest validate against the Kubernetes OpenAPI schemas; the example
is exactly what its generator script writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from bridge.report import load_snapshot, run_report
from bridge.report.sources import KINDS
from tests.report.conftest import EXAMPLE, REPO, SCHEMA_VERSION


CRD_KINDS = ("ClusterPolicy", "ClusterQueue", "LocalQueue")  # no published Kubernetes schema to validate against


def _objects() -> list[dict]:
    data = load_snapshot(EXAMPLE)
    return [o for kind in KINDS if kind not in CRD_KINDS for o in data.of(kind)]


def test_example_is_small_realistic_and_complete() -> None:
    data = load_snapshot(EXAMPLE)
    counts = {k: len(data.of(k)) for k in KINDS}
    assert 20 <= sum(counts.values()) <= 250
    for kind in KINDS:
        assert counts[kind] > 0, kind
    assert data.version.git_version == "v1.36.2" and data.api_versions is not None


def test_the_example_custom_resources_have_the_fields_the_report_reads() -> None:
    """ClusterPolicy (NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go) and Kueue's v1beta1 queues."""
    from bridge.report.shape import object_problem

    data = load_snapshot(EXAMPLE)
    policy = data.of("ClusterPolicy")[0]
    assert policy["apiVersion"] == "nvidia.com/v1" and policy["spec"]["mig"]["strategy"] in ("none", "single", "mixed")
    assert set(policy["spec"]["devicePlugin"]["config"]) == {"name", "default"}
    assert all(o["apiVersion"] == "kueue.x-k8s.io/v1beta1" for k in ("ClusterQueue", "LocalQueue") for o in data.of(k))
    assert all(object_problem(o) is None for k in CRD_KINDS for o in data.of(k))


@pytest.mark.parametrize("obj", _objects(), ids=lambda o: f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}")
def test_example_object_validates(obj: dict) -> None:
    kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)


def test_example_is_reproducible_from_its_script(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_example_snapshot.py"), str(tmp_path)], check=True)
    for f in sorted(EXAMPLE.iterdir()):
        assert (tmp_path / f.name).read_bytes() == f.read_bytes(), f"{f.name} differs from the generator's output"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in EXAMPLE.iterdir())


def test_emitted_manifests_validate_and_pair_the_quota() -> None:
    result = run_report(load_snapshot(EXAMPLE))
    files = result.manifests
    assert {"wave-plan.sh", "mig-1g.10gb.yaml", "quota-team-vision-gpu-quota.yaml"} <= set(files)
    for name, text in files.items():
        if not name.endswith(".yaml"):
            continue
        for doc in yaml.safe_load_all(text):
            kubernetes_validate.validate(doc, SCHEMA_VERSION, strict=True)
    quota = yaml.safe_load(files["quota-team-vision-gpu-quota.yaml"])
    hard = quota["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == hard["gpu.dra-bridge.io.deviceclass.resource.k8s.io/devices"] == "16"
    # 1.36 serves the extended target: the implicit name's quota is paired too
    assert hard["requests.deviceclass.resource.kubernetes.io/gpu.dra-bridge.io"] == "16"


def test_the_paired_quota_starts_with_api_version_and_kind_whatever_order_the_quota_had() -> None:
    """A quota read from a `kubectl get --raw` ResourceQuotaList gets its kind and apiVersion after its other fields
    (bridge.report.sources): the manifest reads as kubectl writes it all the same."""
    from bridge.report.remediation import paired_quota

    quota = {"metadata": {"name": "q", "namespace": "a"}, "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
             "kind": "ResourceQuota", "apiVersion": "v1"}
    assert list(paired_quota(quota, extended_on=False)) == ["apiVersion", "kind", "metadata", "spec"]


def test_missing_bridge_class_is_emitted(tmp_path: Path) -> None:
    for f in EXAMPLE.iterdir():
        if f.name != "dra.yaml":
            (tmp_path / f.name).write_bytes(f.read_bytes())
            continue
        docs = yaml.safe_load(f.read_text())
        docs["items"] = [o for o in docs["items"] if o["metadata"]["name"] != "gpu.dra-bridge.io"]
        (tmp_path / f.name).write_text(yaml.safe_dump(docs))
    files = run_report(load_snapshot(tmp_path)).manifests
    dc = yaml.safe_load(files["deviceclass.yaml"])
    kubernetes_validate.validate(dc, SCHEMA_VERSION, strict=True)
    assert dc["metadata"]["name"] == "gpu.dra-bridge.io"


def test_wave_plan_is_a_valid_script_with_both_command_forms() -> None:
    report = run_report(load_snapshot(EXAMPLE))
    script = report.manifests["wave-plan.sh"]
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)
    flips = [line.strip() for line in script.splitlines() if line.strip().startswith('"$BRIDGE" namespace set')]
    assert flips[0] == '"$BRIDGE" namespace set team-batch shadow'
    assert "kubectl label namespace team-batch dra-bridge.io/mode=shadow --overwrite" in script
    assert not any("team-research" in line for line in flips)  # blocked: not planned
    # one case per wave, each wave number once, in order
    cases = [line.strip() for line in script.splitlines() if line.strip()[:-1].isdigit() and line.strip().endswith(")")]
    assert cases == [f"{n})" for n in sorted({s.wave for s in report.report.waves})]
