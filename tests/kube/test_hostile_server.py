"""A server whose list never ends (issue 27 item 7): every page carries another `continue` token, or the same one
again. A live report once fetched 2,009 such pages in 90 s until killed; `--timeout` bounds each request only, and
the informers share the list code. The list is bounded in pages and in time, a repeated token is refused, and the
error says which bound it hit."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import bridge.kube.client as client_module
from bridge.cli import main
from bridge.kube import NODES, RetryPolicy, connect
from bridge.kube.errors import KubeError
from tests.conftest import kubeconfig_for


class EndlessLists(BaseHTTPRequestHandler):
    """Answers every list with one item and a `continue` token: a new one each page, or (`repeat`) always the
    same. Discovery answers with the core group only."""

    repeat = False
    pages = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        body: dict[str, Any]
        if path == "/version":
            body = {"major": "1", "minor": "34", "gitVersion": "v1.34.0"}
        elif path == "/api":
            body = {"kind": "APIVersions", "versions": ["v1"]}
        elif path == "/apis":
            body = {"kind": "APIGroupList", "groups": []}
        elif path == "/api/v1":
            body = {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": n, "namespaced": ns, "kind": k, "verbs": ["list", "get", "watch"]}
                for n, ns, k in (("nodes", False, "Node"), ("pods", True, "Pod"), ("namespaces", False, "Namespace"))]}
        else:
            type(self).pages += 1
            token = "same" if self.repeat else f"page-{type(self).pages}"
            body = {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1", "continue": token},
                    "items": [{"metadata": {"name": f"n{type(self).pages}"}}]}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endless(tmp_path: Path) -> Iterator[tuple[type[EndlessLists], Path]]:
    handler = type("Handler", (EndlessLists,), {"pages": 0, "repeat": False})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield handler, kubeconfig_for(f"http://127.0.0.1:{srv.server_address[1]}", tmp_path / "kubeconfig")
    srv.shutdown()


def test_a_list_whose_server_repeats_a_continue_token_is_refused_and_says_so(
        endless: tuple[type[EndlessLists], Path]) -> None:
    handler, kubeconfig = endless
    handler.repeat = True
    with connect(kubeconfig, timeout=5, retry=RetryPolicy(deadline=5)) as api, \
            pytest.raises(KubeError, match="the server sent the same continue token twice"):
        api.list(NODES)
    assert handler.pages == 2


def test_a_list_that_never_ends_stops_at_the_page_bound(endless: tuple[type[EndlessLists], Path],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    handler, kubeconfig = endless
    monkeypatch.setattr(client_module, "MAX_LIST_PAGES", 50)
    with connect(kubeconfig, timeout=5, retry=RetryPolicy(deadline=5)) as api, \
            pytest.raises(KubeError, match=r"did not end the list within 50 pages \(after 50 pages and 50 items\)"):
        api.list(NODES)
    assert handler.pages == 50


def test_a_list_that_never_ends_stops_at_its_deadline(endless: tuple[type[EndlessLists], Path]) -> None:
    handler, kubeconfig = endless
    with connect(kubeconfig, timeout=5, retry=RetryPolicy(deadline=5)) as api:
        now = [0.0]

        def clock() -> float:
            now[0] += 1.0  # every page "takes" a second
            return now[0]

        api._clock = clock  # type: ignore[attr-defined]
        api._list_deadline = 120.0  # type: ignore[attr-defined]
        with pytest.raises(KubeError, match=r"list nodes: not finished within 120 s \(after 1\d\d pages"):
            api.list(NODES)
    assert 100 < handler.pages < 130


def test_the_live_report_against_a_server_whose_lists_never_end_exits_2_with_the_reason(
        endless: tuple[type[EndlessLists], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    handler, kubeconfig = endless
    handler.repeat = True
    res = CliRunner().invoke(main, ["migrate-report", "--kubeconfig", str(kubeconfig), "--timeout", "5"])
    assert res.exit_code == 2, res.output
    assert "continue token twice" in res.output and "Traceback" not in res.output
