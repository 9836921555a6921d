"""One metric prefix, one table (issue 15 item 7): every metric the node daemon, the webhook and the controller serve
on their real `/metrics` endpoints is named `dra_bridge_...` and is listed in docs/metrics.md with the component that
serves it, and the table lists nothing that is not served."""

from __future__ import annotations

import re
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.inventory.simulated import SimulatedSource
from bridge.kube import NODES, connect
from bridge.node.daemon import NodeConfig
from bridge.node.dual import DraOptions, DualNode
from bridge.sandbox.apiserver import ApiServer
from bridge.sandbox.kubelet import KubeletSimulator
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "metrics.md"


def documented() -> dict[str, set[str]]:
    """metric name -> the components that serve it, from the table."""
    rows = {}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):  # a metric row (any name: the prefix is checked later)
            rows[cells[0].strip("`")] = {c.strip() for c in cells[3].split(",")}
    return rows


def families(text: str) -> set[str]:
    """Metric names in a Prometheus text exposition (counters as `_total`), without the `_created` companions."""
    typed = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    return {name for name in typed
            if not (name.endswith("_created") and (name[:-8] + "_total" in typed or typed.get(name[:-8]) == "histogram"))}


def get(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=20, context=context) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, set[str]]]:
    import tempfile

    from bridge.controller.app import App, AppOptions, LeaseOptions
    from bridge.webhook.app import WebhookOptions, build
    from bridge.webhook.facts import facts_from_discovery
    from bridge.webhook.metrics import WebhookMetrics
    from tests.webhook.pki import Pki

    short = Path(tempfile.mkdtemp(prefix="m-", dir="/tmp"))  # unix socket paths stay short
    tmp = tmp_path_factory.mktemp("metrics")
    out: dict[str, set[str]] = {}
    with ApiServer() as srv:
        kubeconfig = srv.write_kubeconfig(tmp / "kubeconfig")
        api = connect(str(kubeconfig))
        api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        kubelet = KubeletSimulator(short / "kl", kube=connect(str(kubeconfig)), node_name="n1").start()
        node = DualNode(NodeConfig(node_name="n1", kubelet_root=short / "kl", cdi_root=short / "cdi",
                                   state_dir=short / "st", http_address=("127.0.0.1", 0)),
                        SimulatedSource.from_spec("2xL4", "n1"), DraOptions(mode="on", kubeconfig=str(kubeconfig)),
                        environ={})
        node.start()
        try:
            assert node.daemon is not None and node.daemon.http is not None
            wait_until(lambda: node.split is not None and node.split.last is not None, 30, "a split evaluation")
            out["node"] = families(get(f"http://127.0.0.1:{node.daemon.http.port}/metrics"))
        finally:
            node.stop()
            kubelet.stop()

        pki = Pki(tmp)
        pki.issue()
        server, cache, events = build(WebhookOptions(str(pki.cert_file), str(pki.key_file), port=0),
                                      api, facts_from_discovery(api.discovery()), WebhookMetrics())
        stop = threading.Event()
        server.start()
        try:
            ctx = ssl.create_default_context(cafile=str(pki.ca_file))
            out["webhook"] = families(get(f"https://127.0.0.1:{server.port}/metrics", ctx))
        finally:
            stop.set()
            server.shutdown()

        app = App(api, AppOptions(lease=LeaseOptions(enabled=False), identity="c", http_address=("127.0.0.1", 0)))
        app.start()
        try:
            assert app.http is not None
            out["controller"] = families(get(f"http://127.0.0.1:{app.http.port}/metrics"))
        finally:
            app.stop()
    yield out


def test_every_metric_served_has_the_prefix_and_a_row_naming_its_component(served: dict[str, set[str]]) -> None:
    table = documented()
    problems = []
    for component, names in served.items():
        for name in sorted(names):
            if not name.startswith("dra_bridge_"):
                problems.append(f"{component}: {name} lacks the dra_bridge_ prefix")
            elif name not in table:
                problems.append(f"{component}: {name} is served but not in docs/metrics.md")
            elif component not in table[name]:
                problems.append(f"{component}: {name} is served, but its row names {sorted(table[name])}")
    assert not problems, "\n".join(problems)


def test_the_table_lists_only_metrics_that_are_served_where_it_says(served: dict[str, set[str]]) -> None:
    stale = [f"{name} ({component})" for name, components in documented().items() for component in components
             if name not in served.get(component, set())]
    assert not stale, "in docs/metrics.md but not served: " + ", ".join(stale)
    assert len(documented()) > 50  # the table was parsed


def test_the_readme_and_the_architecture_page_point_at_the_table() -> None:
    for doc in (ROOT / "README.md", ROOT / "docs" / "architecture.md"):
        assert "metrics.md" in doc.read_text(), doc
