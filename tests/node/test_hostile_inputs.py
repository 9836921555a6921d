"""Inputs that once stopped the node daemon or `bridge node status` (issue 27): the kubelet's checkpoint replaced by
something that is not a checkpoint (item 3), an evaluation that fails (item 4), a status annotation that is deep JSON
(item 2) or carries terminal escapes (item 10)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from bridge.kube import EVENTS, NODES, KubeAPI
from bridge.ledger import STATUS_KEY, Facts, Holder, HolderKind, Side, status_of
from bridge.node import kubeletcheckpoint
from bridge.node.statusview import render_table, view_of
from tests.node.test_holders import kubelet, listed, pod, sources  # noqa: F401 - the kubelet fixture
from tests.node.test_split_controller import GPUS, NODE, api, controller, run_status, set_split, side_names  # noqa: F401
from tests.polling import wait_until

# ---- item 3: the kubelet checkpoint is read bounded ------------------------------------------------------------


def checkpoint_path(root: Path) -> Path:
    path = root / "device-plugins" / kubeletcheckpoint.CHECKPOINT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def read_within(path: Path, seconds: float = 10.0) -> BaseException | None:
    """`kubeletcheckpoint.read` in a thread: the error it raised, or TimeoutError when it did not return (a blocked
    open, an endless read)."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            kubeletcheckpoint.read(path)
            out.append(None)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            out.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return out[0] if out else TimeoutError(f"kubeletcheckpoint.read({path}) did not return within {seconds} s")


@pytest.mark.parametrize(("make", "expected"), [
    (lambda p: p.symlink_to("/dev/zero"), "a symbolic link, not a regular file"),  # was 2.1 GiB of memory
    (lambda p: os.mkfifo(p), "a FIFO, not a regular file"),  # was an open() blocked for ever
    (lambda p: (p.touch(), os.truncate(p, 1 << 30)), "1073741824 bytes, over the 8388608-byte limit"),  # 1.26 GiB
    (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested deeper than 64 levels"),  # RecursionError
])
def test_a_kubelet_checkpoint_that_is_not_a_regular_bounded_file_is_refused_unread(
        short_tmp: Path, make: Any, expected: str) -> None:
    path = checkpoint_path(short_tmp)
    make(path)
    err = read_within(path)
    assert isinstance(err, kubeletcheckpoint.KubeletCheckpointError), err
    assert expected in str(err)


def test_an_unusable_kubelet_checkpoint_makes_legacy_holders_unknown_and_is_logged_once_per_change(
        kubelet: Any, caplog: pytest.LogCaptureFixture) -> None:
    root, _ = kubelet
    path = checkpoint_path(root)
    path.symlink_to("/dev/zero")
    src = sources(root, listed())
    with caplog.at_level(logging.INFO, logger="bridge.node.holders"):
        for _ in range(3):
            assert "a symbolic link" in src.legacy_facts().unknown[Side.LEGACY]
        path.unlink()
        os.mkfifo(path)
        assert "a FIFO" in src.legacy_facts().unknown[Side.LEGACY]
        path.unlink()
        path.write_text('{"Data": {"PodDeviceEntries": []}}')
        assert src.legacy_facts().known(Side.LEGACY)
    said = [r.getMessage() for r in caplog.records if "device-manager checkpoint" in r.getMessage()]
    assert len(said) == 3 and "a symbolic link" in said[0] and "a FIFO" in said[1] and "readable again" in said[2]


# ---- item 4: a failed evaluation is retried, and the status says so --------------------------------------------

class FlakySources:
    """Holder sources that raise while `failing` is set (a source that breaks: a bug, an unexpected answer)."""

    def __init__(self) -> None:
        self.failing = threading.Event()
        self.calls = 0

    def facts(self, *, fresh_claims: bool = False) -> Facts:
        self.calls += 1
        if self.failing.is_set():
            raise RuntimeError("PodResources answered something unexpected")
        return Facts()

    def legacy_facts(self) -> Facts:
        return self.facts()

    def wants_poll(self) -> bool:
        return False


def test_a_failed_evaluation_is_retried_with_backoff_and_the_status_says_error_meanwhile(api: KubeAPI) -> None:
    """Before: the next attempt waited for the last good decision's timer (up to 300 s) or the next annotation
    change, and the status kept saying "converged" for the old request."""
    src = FlakySources()
    ctl = controller(api, src, config={"evaluation_retry_s": 0.1, "evaluation_retry_max_s": 0.4})  # type: ignore[arg-type]
    ctl.start()
    try:
        wait_until(lambda: (s := status_of(api.get(NODES, NODE))) and s.state == "converged", what="converged")
        src.failing.set()
        set_split(api, "2")
        status = wait_until(lambda: (s := status_of(api.get(NODES, NODE))) and s.evaluation_error and s,
                            what="the status says the evaluation fails")
        assert status.state == "converging" and status.requested == "0"  # what it shows was not re-evaluated
        assert status.message == "error: RuntimeError: PodResources answered something unexpected"
        assert "evaluating the split fails since" in render_table(view_of(api.get(NODES, NODE)))
        calls = src.calls
        wait_until(lambda: src.calls >= calls + 4, timeout=15, what="retries well before the 300 s timer")
        warned = [e for e in api.list(EVENTS, "default")["items"] if e["reason"] == "DRASplitEvaluationFailed"]
        assert len(warned) == 1 and "retried" in warned[0]["message"]  # once per distinct error, not per retry
        text = generate_latest(ctl.metrics.registry).decode()
        assert "dra_bridge_split_evaluation_failing 1.0" in text
        src.failing.clear()
        wait_until(lambda: side_names(ctl, Side.WITHDRAWN) + side_names(ctl, Side.DRA) == ["gpu-6", "gpu-7"],
                   timeout=15, what="the requested split evaluated once the source works")
        status = wait_until(lambda: (s := status_of(api.get(NODES, NODE))) and s.requested == "2" and s,
                            what="the status of the new request")
        assert status.evaluation_error is None and not status.message.startswith("error")
        assert "dra_bridge_split_evaluation_failing 0.0" in generate_latest(ctl.metrics.registry).decode()
    finally:
        ctl.stop()


def test_a_first_evaluation_that_fails_is_retried_and_published_from_the_checkpointed_sides(api: KubeAPI) -> None:
    src = FlakySources()
    src.failing.set()
    ctl = controller(api, src, config={"evaluation_retry_s": 0.1, "evaluation_retry_max_s": 0.2})  # type: ignore[arg-type]
    ctl.start()
    try:
        status = wait_until(lambda: status_of(api.get(NODES, NODE)), what="a status despite the failure")
        assert status.evaluation_error is not None and len(status.devices) == 8
        assert all(d.side is Side.LEGACY for d in status.devices)
        calls = src.calls
        wait_until(lambda: src.calls >= calls + 3, timeout=10, what="retries, not a busy loop or a stall")
    finally:
        ctl.stop()


# ---- items 2 and 10: `bridge node status` with a hostile annotation -------------------------------------------

def test_bridge_node_status_of_a_deep_json_status_says_what_is_wrong_without_a_traceback(
        api: KubeAPI, tmp_path: Path) -> None:
    api.patch(NODES, NODE, {"metadata": {"annotations": {STATUS_KEY: "[" * 100_000 + "]" * 100_000}}})
    out = run_status(tmp_path / "kc", NODE)
    assert out.exit_code == 1, out.output
    assert "dra-bridge.io/split-status is nested deeper than 64 levels" in out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)


def test_bridge_node_status_escapes_control_characters_from_the_annotation(api: KubeAPI, tmp_path: Path) -> None:
    ctl = controller(api)
    sneaky = "pod ml/x\x1b]0;owned\x07 container \x1b[2J\rmain"
    ctl.sources.now = Facts.build([(GPUS[0].uuid, Holder(HolderKind.CONTAINER, sneaky))])  # type: ignore[attr-defined]
    set_split(api, "1\x1b[31m", "annotations")
    ctl.evaluate(api.get(NODES, NODE))
    out = run_status(tmp_path / "kc", NODE)
    assert out.exit_code == 0, out.output
    assert "\x1b" not in out.output and "\r" not in out.output and "\x07" not in out.output
    assert "pod ml/x\\x1b]0;owned\\x07 container \\x1b[2J\\rmain" in out.output
    assert "requested '1\\x1b[31m'" in out.output
    as_json = run_status(tmp_path / "kc", NODE, "-o", "json")
    assert "\x1b" not in as_json.output and "\\u001b" in as_json.output
