"""Names that would make a request path name another object (issue 27 item 9): `bridge namespace set
'kube-system#' dra` once returned 0 and labelled kube-system (`#` ends a URL's path, `?` starts its query,
`team-a/../kube-system` walks up). Names are checked with Kubernetes' own rules before any request: by the CLI, in
words, for the kind it takes; and by the one place request paths are built (`Resource.path`) for every name from
the user or the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from bridge.cli import main
from bridge.kube import NAMESPACES, NODES, PODS, RestKube
from bridge.kube.errors import InvalidName, NotFound

HOSTILE_NAMESPACES = ["kube-system#", "kube-system?", "team-a/../kube-system", "kube-system%23", "Kube-System",
                      "kube-system ", "kube-system-"]


def mode_of(api: RestKube, name: str) -> str | None:
    return (api.get(NAMESPACES, name)["metadata"].get("labels") or {}).get("dra-bridge.io/mode")


@pytest.mark.parametrize("name", HOSTILE_NAMESPACES)
def test_bridge_namespace_set_refuses_a_name_that_is_not_a_namespace_name_before_any_request(
        kubeconfig: Path, api: RestKube, unreachable_kubeconfig: Path, name: str) -> None:
    api.create(NAMESPACES, {"metadata": {"name": "team-a"}})
    for mode in ("dra", "legacy"):
        out = CliRunner().invoke(main, ["namespace", "set", name, mode, "--kubeconfig", str(kubeconfig)])
        assert out.exit_code == 2, out.output
        assert "is not a valid namespace name" in out.output and "RFC 1123 label" in out.output
    assert mode_of(api, "kube-system") is None and mode_of(api, "team-a") is None
    # before any request: against no API server at all, the answer is the same
    out = CliRunner().invoke(main, ["namespace", "set", name, "dra", "--kubeconfig", str(unreachable_kubeconfig)])
    assert out.exit_code == 2 and "is not a valid namespace name" in out.output
    status = CliRunner().invoke(main, ["namespace", "status", name, "--kubeconfig", str(kubeconfig)])
    assert status.exit_code == 2 and "is not a valid namespace name" in status.output


@pytest.mark.parametrize("name", ["n1/../other", "n1#", "N1"])
def test_bridge_node_status_refuses_a_name_that_is_not_a_node_name(kubeconfig: Path, name: str) -> None:
    out = CliRunner().invoke(main, ["node", "status", name, "--kubeconfig", str(kubeconfig)])
    assert out.exit_code == 2 and "is not a valid node name" in out.output


@pytest.mark.parametrize("name", ["kube-system#", "kube-system?x=1", "team-a/../kube-system", ".."])
def test_the_api_layer_refuses_a_namespace_in_a_path_that_is_not_a_label(api: RestKube, name: str) -> None:
    with pytest.raises(InvalidName, match="invalid namespace"):
        api.get(PODS, "p", name)
    with pytest.raises(InvalidName, match="invalid namespace"):
        api.patch(NAMESPACES, name, {"metadata": {"labels": {"x": "y"}}})
    assert mode_of(api, "kube-system") is None


@pytest.mark.parametrize("name", ["..", ".", "a/b", "a%2Fb", ""])
def test_the_api_layer_refuses_a_name_that_is_not_a_path_segment(api: RestKube, ns: str, name: str) -> None:
    """apimachinery's ValidatePathSegmentName: the rule every name travels under, whatever its kind (an empty name
    would name the collection). A claim name read from a pod's status goes through here before the node daemon GETs
    it."""
    with pytest.raises(InvalidName, match="invalid Node name"):
        api.get(NODES, name)
    with pytest.raises(InvalidName, match="invalid Pod name"):
        api.delete(PODS, name, ns)
    with pytest.raises(InvalidName, match="invalid Pod name"):
        api.patch(PODS, name, {"metadata": {"labels": {"x": "y"}}}, ns)


def test_other_characters_reach_the_server_as_part_of_the_name(api: RestKube, ns: str) -> None:
    """Names of some kinds may hold `#` or `?` (a path segment only refuses "/", "%", "." and ".."): they are
    percent-encoded, so the server looks up that name, not a shorter one."""
    api.create(PODS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}, ns)
    for name in ("p#", "p?watch=true", "p x"):
        with pytest.raises(NotFound):
            api.get(PODS, name, ns)
    assert api.get(PODS, "p", ns)["metadata"]["name"] == "p"
