"""Finding the cluster like kubectl: explicit path, KUBECONFIG list (merged, first wins), ~/.kube/config,
in-cluster service account; a context override; and an error that lists what was tried."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.kube import ConfigError, connect, load_configuration


def kubeconfig(path: Path, *, current: str | None, clusters: dict[str, str], contexts: dict[str, tuple[str, str]],
               users: dict[str, str], namespaces: dict[str, str] | None = None) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": s, "insecure-skip-tls-verify": True}} for n, s in clusters.items()],
        "users": [{"name": n, "user": {"token": t}} for n, t in users.items()],
        "contexts": [
            {"name": n, "context": {"cluster": c, "user": u, **({"namespace": (namespaces or {})[n]} if n in (namespaces or {}) else {})}}
            for n, (c, u) in contexts.items()
        ],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def two_files(tmp_path: Path) -> tuple[Path, Path]:
    a = kubeconfig(tmp_path / "a.yaml", current="ctx-a", clusters={"c1": "https://a.example:6443", "shared": "https://first:1"},
                   contexts={"ctx-a": ("c1", "ua"), "ctx-s": ("shared", "ua")}, users={"ua": "token-a"},
                   namespaces={"ctx-a": "team-a"})
    b = kubeconfig(tmp_path / "b.yaml", current="ctx-b", clusters={"c2": "https://b.example:6443", "shared": "https://second:2"},
                   contexts={"ctx-b": ("c2", "ub")}, users={"ub": "token-b"})
    return a, b


def test_explicit_kubeconfig_uses_its_current_context(two_files: tuple[Path, Path], tmp_path: Path) -> None:
    a, _ = two_files
    loaded = load_configuration(a, environ={}, home=tmp_path)
    assert loaded.configuration.host == "https://a.example:6443"
    assert loaded.namespace == "team-a"
    assert "ctx-a" in loaded.source and str(a) in loaded.source
    assert loaded.configuration.auth_settings()["BearerToken"]["value"] == "Bearer token-a"


def test_context_override(two_files: tuple[Path, Path], tmp_path: Path) -> None:
    a, _ = two_files
    loaded = load_configuration(a, "ctx-s", environ={}, home=tmp_path)
    assert loaded.configuration.host == "https://first:1" and loaded.namespace == "default"


def test_unknown_context_lists_the_available_ones(two_files: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"context 'nope' not found .*available: ctx-a, ctx-s"):
        load_configuration(two_files[0], "nope", environ={}, home=tmp_path)


def test_missing_explicit_file_is_an_error_even_if_others_exist(two_files: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_configuration(tmp_path / "missing.yaml", environ={"KUBECONFIG": str(two_files[0])}, home=tmp_path)


def test_kubeconfig_env_merges_files_first_wins(two_files: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = two_files
    env = {"KUBECONFIG": f"{tmp_path / 'absent.yaml'}:{b}:{a}"}
    # current-context comes from the first file that sets one (b); b's "shared" cluster shadows a's.
    loaded = load_configuration(environ=env, home=tmp_path)
    assert loaded.configuration.host == "https://b.example:6443"
    # contexts from a later file are reachable, and resolve names with first-file-wins.
    assert load_configuration(None, "ctx-s", environ=env, home=tmp_path).configuration.host == "https://second:2"
    assert load_configuration(None, "ctx-a", environ=env, home=tmp_path).configuration.host == "https://a.example:6443"


def test_home_kube_config_is_the_fallback_when_kubeconfig_is_unset(two_files: tuple[Path, Path], tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(two_files[1].read_text())
    loaded = load_configuration(environ={}, home=home)
    assert loaded.configuration.host == "https://b.example:6443"
    # kubectl (client-go) never reads ~/.kube/config while KUBECONFIG is set, even to missing files
    with pytest.raises(ConfigError, match="not consulted: KUBECONFIG is set"):
        load_configuration(environ={"KUBECONFIG": str(tmp_path / "nothing-here")}, home=home)


def test_in_cluster_service_account(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    (sa / "namespace").write_text("dra-bridge\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    loaded = load_configuration(environ=env, home=tmp_path, sa_dir=str(sa))
    assert loaded.configuration.host == "https://10.0.0.1:443"
    assert loaded.namespace == "dra-bridge" and loaded.source.startswith("in-cluster")
    assert loaded.configuration.auth_settings()["BearerToken"]["value"] == "bearer sa-token"


def test_in_cluster_without_token_says_so(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="in-cluster.*token"):
        load_configuration(environ=env, home=tmp_path, sa_dir=str(tmp_path / "none"))


def test_nothing_configured_names_everything_tried(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as ei:
        load_configuration(environ={"KUBECONFIG": "/no/such/file"}, home=tmp_path)
    msg = str(ei.value)
    assert "KUBECONFIG=/no/such/file" in msg
    assert str(tmp_path / ".kube" / "config") in msg
    assert "in-cluster" in msg


def test_broken_yaml_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_configuration(bad, environ={}, home=tmp_path)


def test_no_current_context_asks_for_one(tmp_path: Path) -> None:
    p = kubeconfig(tmp_path / "k.yaml", current=None, clusters={"c": "https://c:1"}, contexts={"x": ("c", "u")}, users={"u": "t"})
    with pytest.raises(ConfigError, match="no current-context.*available: x"):
        load_configuration(p, environ={}, home=tmp_path)


def test_context_pointing_at_a_missing_cluster_is_a_config_error(tmp_path: Path) -> None:
    p = kubeconfig(tmp_path / "k.yaml", current="x", clusters={}, contexts={"x": ("ghost", "u")}, users={"u": "t"})
    with pytest.raises(ConfigError, match="ghost"):
        load_configuration(p, environ={}, home=tmp_path)


def test_connect_builds_a_client_without_contacting_the_server(two_files: tuple[Path, Path], tmp_path: Path) -> None:
    with connect(two_files[0], environ={}, home=tmp_path) as api:
        assert api.host == "https://a.example:6443"
        assert api.default_namespace == "team-a"


@pytest.mark.parametrize("source", ["kubeconfig", "in-cluster"])
def test_requests_use_the_proxy_resolved_at_connect_without_rereading_the_environment(
        source: str, two_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both loaders' token refresh re-assigns the host before every request; that must not scan the environment
    for proxies again each time (a third of a claim GET's CPU; a pod's environment holds a variable set per
    service), and the proxy stays the one found at connect."""
    import urllib.request

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    scans: list[int] = []
    real = urllib.request.getproxies

    def counting() -> dict[str, str]:
        scans.append(1)
        return real()

    if source == "kubeconfig":
        api, token = connect(two_files[0], environ={}, home=tmp_path), "Bearer token-a"
    else:
        sa = tmp_path / "sa"
        sa.mkdir()
        (sa / "token").write_text("sa-token")
        (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
        env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
        api, token = connect(environ=env, home=tmp_path, sa_dir=str(sa)), "bearer sa-token"
    with api:
        cfg = api._client.configuration
        assert cfg.proxy == "http://proxy.example:3128"
        monkeypatch.setattr(sys.modules[type(cfg).__module__], "getproxies", counting)
        monkeypatch.setenv("HTTPS_PROXY", "http://other.example:3128")
        for _ in range(3):  # what every request does: the refresh hook, then the auth header
            assert cfg.auth_settings()["BearerToken"]["value"] == token
        assert scans == []
        assert cfg.proxy == "http://proxy.example:3128"
