"""The guides follow their convention (tests/guides/markdown.py), say only what exists, and every manifest they ship
is valid Kubernetes; checked without a cluster."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.guides import markdown
from tests.guides.markdown import GUIDES, REPO, GuideFormatError, parse
from tests.guides.world import PLACEHOLDERS

# The reasons a block may need real nodes (run by tests/guides/test_real_cluster.py on the real backend, not against
# the stand-in sandbox), and the reasons a block may be run by no test at all; the README's two tables say the same to
# readers.
REAL_BACKEND = {
    "exec": "runs a command in a container; the sandbox runs none",
    "logs": "reads container logs; the sandbox's processes log to files",
    "port-forward": "forwards a port to a pod; the sandbox's webhook listens on loopback already",
    "vendor-chart": "upgrades NVIDIA's chart; the sandbox has no DaemonSet controller to move its pods",
}
REAL_CLUSTER_ONLY = {
    "placeholders": "sets the placeholders to the user's cluster; the tests set them to their own",
    "gpu-operator-crd": "edits the GPU Operator's ClusterPolicy; the operator runs on neither backend",
}
NAMES = markdown.guide_names()


def test_there_is_a_guide_for_each_stage_of_the_migration() -> None:
    assert NAMES == ["01-first-node", "02-report", "03-first-namespace", "04-node-split", "05-finishing",
                     "06-rolling-back"]
    index = (GUIDES / "README.md").read_text()
    for name in NAMES:
        assert f"({name}/README.md)" in index, f"migration-guides/README.md does not link {name}"


@pytest.mark.parametrize("name", NAMES)
def test_each_guide_has_the_six_sections_in_order_and_parses(name: str) -> None:
    guide = markdown.load(name)
    assert markdown.check_structure(guide) == []
    assert guide.commands(), "a guide without commands"
    for section in ("Steps", "Verify"):
        assert any(b.section == section and b.runs_in("gpu-operator") for b in guide.blocks), \
            f"{name}: no command the tests run in {section}"


def _reasons_in_readme(marker: str) -> list[str]:
    """The first column of the table that follows the README's paragraph naming `marker`."""
    text = (GUIDES / "README.md").read_text()
    after = text[text.index(f"A block marked `{marker}=REASON`"):]
    table = after[after.index("\n|"):].split("\n\n", 1)[0]
    return re.findall(r"^\| `([a-z-]+)` \|", table, re.M)


@pytest.mark.parametrize(("attribute", "reasons"), [("real-backend", REAL_BACKEND),
                                                    ("real-cluster-only", REAL_CLUSTER_ONLY)])
def test_blocks_left_out_of_the_sandbox_run_say_why_with_a_listed_reason_the_readme_lists_too(
        attribute: str, reasons: dict[str, str]) -> None:
    used = {}
    for name in NAMES:
        for b in markdown.load(name).blocks:
            reason = b.attrs.get(attribute)
            if reason is not None:
                assert reason in reasons, f"{b.where}: {attribute}={reason!r} (known: {sorted(reasons)})"
                used[reason] = b.where
    assert sorted(_reasons_in_readme(attribute)) == sorted(reasons)
    assert sorted(used) == sorted(reasons), f"a listed {attribute} reason no guide uses: drop it"


def test_a_block_is_either_for_the_real_backend_or_for_no_test_not_both() -> None:
    for name in NAMES:
        for b in markdown.load(name).commands():
            assert not (b.real_backend and b.real_cluster_only), b.where


def test_every_command_block_runs_in_some_setup_unless_marked_real_cluster_only() -> None:
    """In a sandbox setup (tests/guides/test_guides.py, test_first_node_standalone.py) or, marked real-backend, on the
    real backend (tests/guides/test_real_cluster.py, which checks it ran each)."""
    for name in NAMES:
        for b in markdown.load(name).commands():
            if b.real_cluster_only is None:
                assert b.variant in (None, "gpu-operator", "standalone"), b.where
                if b.variant == "standalone" and b.real_backend is None:
                    assert name == "01-first-node", f"{b.where}: the standalone setup is run for guide 01 only"


def test_a_block_that_ends_with_a_failure_status_is_that_one_command() -> None:
    """Blocks run with `set -e`: a command that exits non-zero on purpose (a report with blockers) must be alone,
    or the commands after it would silently not run."""
    from tests.guides.commands import simple_commands

    for name in NAMES:
        for b in markdown.load(name).commands():
            if b.exit:
                assert len(simple_commands(b.text, {})) == 1, f"{b.where}: exit={b.exit} with more than one command"


def test_every_placeholder_the_guides_use_is_documented_and_set_by_the_tests() -> None:
    documented = set(re.findall(r"^\s*\| `([A-Z0-9_]+)` \|", (GUIDES / "README.md").read_text(), re.M))
    assert documented == {"NODE", "NODE2", "NS", "KUBECONFIG", "WEBHOOK"}
    assert set(PLACEHOLDERS) | {"KUBECONFIG", "WEBHOOK"} == documented
    for name in NAMES:
        for b in markdown.load(name).commands():
            for var in re.findall(r"\$\{?([A-Z][A-Z0-9_]*)\b", b.text):
                assert var in documented or re.search(rf"\b{var}=", b.text), f"{b.where}: ${var} is not documented"


@pytest.mark.parametrize("name", NAMES)
def test_every_manifest_file_is_used_by_a_command_the_tests_run(name: str) -> None:
    guide = markdown.load(name)
    run = "\n".join(b.text for b in guide.commands() if b.real_cluster_only is None)
    for manifest in guide.manifests():
        rel = manifest.relative_to(REPO).as_posix()
        assert rel in run, f"{rel} is applied by no command the tests run"


def test_every_repository_path_the_guides_name_exists() -> None:
    pattern = re.compile(r"(?<![\w/.-])((?:bridge|tests|charts|docs|examples|migration-guides)/[\w./-]*[\w/])")
    missing = []
    for path in [GUIDES / "README.md", *(GUIDES / n / "README.md" for n in NAMES)]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for ref in pattern.findall(line):
                if not (REPO / ref).exists():
                    missing.append(f"{path.relative_to(REPO)}:{n}: {ref}")
            for link in re.findall(r"\]\(([^)#]+)\)", line):
                if not link.startswith("http") and not (path.parent / link).resolve().exists():
                    missing.append(f"{path.relative_to(REPO)}:{n}: link {link}")
    assert not missing, missing


def test_every_manifest_is_valid_kubernetes() -> None:
    """Server-side dry run against the API emulator: the schemas a real API server validates with."""
    from bridge.kube import connect
    from bridge.kube.api import NAMESPACES, Resource
    from bridge.kube.errors import AlreadyExists
    from bridge.sandbox.apiserver import ApiServer

    manifests = sorted(GUIDES.glob("*/*.yaml"))
    assert manifests
    with ApiServer() as srv, tempfile.TemporaryDirectory() as d:
        kubeconfig = Path(d) / "kubeconfig"
        srv.write_kubeconfig(kubeconfig)
        api = connect(str(kubeconfig))
        for path in manifests:
            for doc in yaml.safe_load_all(path.read_text()):
                group, _, version = doc["apiVersion"].rpartition("/")
                ns = doc["metadata"].get("namespace")
                if ns:
                    try:
                        api.create(NAMESPACES, {"metadata": {"name": ns}})
                    except AlreadyExists:
                        pass
                if doc["kind"] == "ConfigMap" and "policy.yaml" in doc.get("data", {}):
                    from bridge.controller.model import Policy
                    from bridge.controller.policy import policy_from_configmap

                    policy_from_configmap(doc, Policy())  # the controller accepts it (PolicyError otherwise)
                plural = {"Deployment": "deployments", "ConfigMap": "configmaps", "Pod": "pods"}[doc["kind"]]
                ns = ns or "default"
                api.create(Resource(group or "", version, plural, doc["kind"], True), doc, ns, dry_run=True)


def test_a_malformed_guide_is_refused_with_the_file_and_line() -> None:
    where = Path("x/README.md")
    for text, message in [
        ("# T\n## Steps\n```sh id=a tag=b\nls\n```\n", "unknown block attribute 'tag=b'"),
        ("# T\n## Steps\n```yaml\nkind: Pod\n```\n", "block language 'yaml'"),
        ("# T\n## Steps\n```sh\nls\n", "never closed"),
        ("# T\n```sh\nls\n```\n", "before the first section"),
        ("# T\n## Steps\n```sh exit=one\nls\n```\n", "is not an exit status"),
        ("# T\n## Steps\n```text id=x\nout\n```\n", "text blocks take no attributes"),
    ]:
        with pytest.raises(GuideFormatError, match=re.escape(message)) as err:
            parse(text, "99-x", where)
        assert "migration-guides/99-x/README.md:" in str(err.value)
    guide = parse("# T\n## What changes\n## Steps\n```sh id=a\nls\n```\n```sh id=a\nls\n```\n", "99-x", where)
    assert markdown.check_structure(guide) == [
        "99-x: sections are ['What changes', 'Steps'], expected " + str(list(markdown.SECTIONS)),
        "99-x: block ids used twice: ['a']"]
