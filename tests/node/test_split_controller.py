"""The split controller against the API emulator: it follows the Node, finishes moves only when the Node's
allocatable shows them, persists moves, and tells people (one log line per evaluation, metrics, Events, the
split-status annotation) without repeating itself."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from bridge.inventory.simulated import devices_from_spec
from bridge.kube import EVENTS, NODES, KubeAPI, RetryPolicy, connect
from bridge.ledger import (
    SPLIT_KEY,
    STATUS_KEY,
    Checkpoint,
    Facts,
    Holder,
    HolderKind,
    Ledger,
    LedgerConfig,
    Side,
    SplitError,
    status_of,
)
from bridge.node.split import SplitConfig, SplitController
from bridge.sandbox.apiserver import ApiServer
from tests.polling import wait_until

NODE = "node-a"
GPUS = devices_from_spec("8xH100-80GB", NODE)
FAST = LedgerConfig(scheduler_grace_s=0.1, settle_s=0.05, move_timeout_s=20, cooldown_s=1)


class Sources:
    """Fake holder sources: the facts a test sets."""

    def __init__(self) -> None:
        self.now = Facts()

    def facts(self, *, fresh_claims: bool = False) -> Facts:
        return self.now

    def wants_poll(self) -> bool:
        return False

    def legacy_facts(self) -> Facts:
        return self.now


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeAPI]:
    with ApiServer() as srv:
        srv.write_kubeconfig(tmp_path / "kc")
        client = connect(tmp_path / "kc", retry=RetryPolicy(initial_backoff=0.05, max_backoff=0.5, deadline=2.0))
        client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        post_allocatable(client, 8)
        yield client


def post_allocatable(api: KubeAPI, n: int) -> None:
    """What the kubelet's node-status loop posts for our resource."""
    api.patch(NODES, NODE, {"status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": str(n)}}},
              subresource="status")


def set_split(api: KubeAPI, value: str, where: str = "labels") -> None:
    api.patch(NODES, NODE, {"metadata": {where: {SPLIT_KEY: value}}})


def controller(api: KubeAPI | None, sources: Sources | None = None, **kw: Any) -> SplitController:
    published: set[str] = set()

    def on_change(led: Ledger) -> None:  # a publisher that confirms at once
        published.clear()
        published.update(g.uuid for g in led.on(Side.DRA))

    ctl = SplitController(GPUS, SplitConfig(NODE, ledger=FAST, status_interval_s=0.0, **kw.pop("config", {})),
                          sources=sources or Sources(), api=api, published=lambda: frozenset(published),
                          listeners=[on_change], **kw)
    return ctl


def side_names(ctl: SplitController, side: Side) -> list[str]:
    return [f"gpu-{g.index}" for g in ctl.ledger.on(side)]


def test_a_label_moves_free_gpus_and_they_reach_dra_only_after_the_node_shows_the_smaller_count(api: KubeAPI) -> None:
    ctl = controller(api)
    ctl.start()
    try:
        set_split(api, "2")
        wait_until(lambda: side_names(ctl, Side.WITHDRAWN) == ["gpu-6", "gpu-7"], what="both withdrawn")
        # The ledger withdraws before the status write lands: wait for the status of this target, not the start's.
        status = wait_until(lambda: (s := status_of(api.get(NODES, NODE))) and s.requested == "2" and s,
                            what="the status annotation for target 2")
        assert status.state == "converging"
        assert {p.device: p.phase for p in status.pending} == {"gpu-6": "waiting-node-status",
                                                               "gpu-7": "waiting-node-status"}
        assert side_names(ctl, Side.DRA) == []
        post_allocatable(api, 6)
        wait_until(lambda: side_names(ctl, Side.DRA) == ["gpu-6", "gpu-7"], what="both on DRA")
        done = wait_until(lambda: (s := status_of(api.get(NODES, NODE))) and s.state == "converged" and s, what="done")
        assert done.counts() == {"legacy": 6, "dra": 2, "withdrawn": 0} and done.pending == ()
        events = [e for e in api.list(EVENTS, "default")["items"] if e["involvedObject"]["name"] == NODE]
        assert {e["reason"] for e in events} >= {"DRADeviceMoved", "DRASplitApplied"}
    finally:
        ctl.stop()


def test_every_evaluation_logs_and_counts_the_requested_and_the_applied_split(
        api: KubeAPI, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="bridge.node.split")
    set_split(api, "ALL", "annotations")
    ctl = controller(api)
    d = ctl.evaluate(api.get(NODES, NODE))
    lines = [r for r in caplog.records if r.getMessage().startswith("DRA split ")]
    assert len(lines) == 1
    assert lines[0].getMessage().startswith(
        "DRA split converging: requested 'ALL' (from node annotation dra-bridge.io/dra-devices), applied 0 of 8 GPUs "
        "on DRA; the target puts 8 there; 8 moving")
    assert lines[0].requested == "ALL" and lines[0].applied == 0 and lines[0].state == "converging"  # type: ignore[attr-defined]
    assert d.wanted == 8
    text = generate_latest(ctl.metrics.registry).decode()
    assert "dra_bridge_split_requested_devices 8.0" in text and "dra_bridge_split_applied_devices 0.0" in text
    assert 'dra_bridge_split_target_info{requested="ALL",source="annotation",state="converging"} 1.0' in text
    assert 'dra_bridge_split_devices{side="withdrawn"} 8.0' in text
    assert 'dra_bridge_split_moves_total{direction="legacy->dra",result="started"} 8.0' in text
    set_split(api, "0", "annotations")
    ctl.evaluate(api.get(NODES, NODE))
    text = generate_latest(ctl.metrics.registry).decode()
    assert 'requested="ALL"' not in text and 'dra_bridge_split_target_info{requested="0",source="annotation"' in text


def test_a_refused_target_is_said_once_in_the_log_an_event_the_status_and_a_metric(
        api: KubeAPI, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    set_split(api, "9")
    ctl = controller(api)
    for _ in range(3):
        d = ctl.evaluate(api.get(NODES, NODE))
    assert d.state == "refused" and ctl.ledger.sides == Ledger.all_legacy(GPUS).sides
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["DRA device split '9' (from node label dra-bridge.io/dra-devices) refused: DRA device split '9' "
                      "asks for 9 devices but this node has 8. The current split stays (0 of 8 GPUs on DRA)."]
    events = [e for e in api.list(EVENTS, "default")["items"] if e["reason"] == "DRASplitRefused"]
    assert len(events) == 1 and "asks for 9 devices" in events[0]["message"]
    status = status_of(api.get(NODES, NODE))
    assert status is not None and status.state == "refused" and status.wanted is None
    assert [r.api for r in status.refusals] == ["split"]
    assert 'dra_bridge_split_refusals_total{api="split"} 1.0' in generate_latest(ctl.metrics.registry).decode()


def test_label_and_annotation_disagreeing_is_warned_once_not_per_evaluation(
        api: KubeAPI, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    api.patch(NODES, NODE, {"metadata": {"labels": {SPLIT_KEY: "1"}, "annotations": {SPLIT_KEY: "2"}}})
    ctl = controller(api)
    ctl.start()
    try:
        node = api.get(NODES, NODE)
        for _ in range(3):
            ctl.evaluate(node)
        post_allocatable(api, 6)
        wait_until(lambda: side_names(ctl, Side.DRA) == ["gpu-6", "gpu-7"], what="applied")
    finally:
        ctl.stop()
    warned = [r for r in caplog.records if "disagree" in r.getMessage()]
    assert len(warned) == 1 and "the annotation wins" in warned[0].getMessage()


def test_a_device_that_is_held_waits_and_the_event_names_its_holder_once(api: KubeAPI) -> None:
    sources = Sources()
    sources.now = Facts.build([(GPUS[7].uuid, Holder(HolderKind.INIT_CONTAINER, "pod ml/train-7 container init"))])
    set_split(api, "gpu-7")
    ctl = controller(api, sources)
    for _ in range(3):
        d = ctl.evaluate(api.get(NODES, NODE))
    assert d.waiting[0].reason == ("gpu-7 held by pod ml/train-7 container init (legacy init container); will move "
                                   "when free")
    events = [e for e in api.list(EVENTS, "default")["items"] if e["reason"] == "DRADeviceNotMoved"]
    assert [e["message"] for e in events] == [d.waiting[0].reason]
    status = status_of(api.get(NODES, NODE))
    assert status is not None and status.pending[0].phase == "held"
    assert status.devices[7].holders == ("pod ml/train-7 container init (legacy init container)",)


def test_a_move_under_way_is_in_the_checkpoint_and_resumes_after_a_restart(api: KubeAPI, short_tmp: Path) -> None:
    cp = Checkpoint(short_tmp, boot_id=lambda: "boot-1")
    set_split(api, "1")
    first = controller(api, checkpoint=cp)
    first.evaluate(api.get(NODES, NODE))
    stored = cp.read().data
    assert stored.sides[GPUS[7].uuid] is Side.WITHDRAWN and stored.moves == {GPUS[7].uuid: (Side.LEGACY, Side.DRA)}
    assert stored.split == "1"
    second = controller(api, checkpoint=cp, initial=Ledger.adopt(GPUS, stored.sides, stored.moves, now=0))
    post_allocatable(api, 7)
    second.start()
    try:
        wait_until(lambda: side_names(second, Side.DRA) == ["gpu-7"], what="the resumed move finished")
    finally:
        second.stop()
    assert cp.read().data.moves == {} and cp.read().data.sides[GPUS[7].uuid] is Side.DRA


class ReadOnly:
    """Makes the checkpoint unwritable the way a node would: `erofs` makes the write fail with the OS error a
    read-only state directory gives (EROFS, a plain OSError); `immutable` really stops writes to the directory
    (chmod for an unprivileged user; `chattr +i` for root, whom permission bits do not stop)."""

    def __init__(self, how: str, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.how, self.dir = how, directory
        self.on = False
        if how == "erofs":
            import errno

            import bridge.ledger.checkpoint as module

            real = module.atomic_write_bytes

            def write(path: Path, data: bytes, **kw: Any) -> None:
                if self.on:
                    raise OSError(errno.EROFS, "Read-only file system", str(path))
                real(path, data, **kw)

            monkeypatch.setattr(module, "atomic_write_bytes", write)

    def set(self, on: bool) -> None:
        import os
        import subprocess

        self.on = on
        if self.how == "erofs":
            return
        if os.geteuid() != 0:
            self.dir.chmod(0o500 if on else 0o700)
            return
        done = subprocess.run(["chattr", "+i" if on else "-i", str(self.dir)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot make a directory immutable here (chattr: {done.stderr.strip()})")


@pytest.mark.parametrize("how", ["erofs", "immutable"])
def test_a_split_change_the_checkpoint_cannot_save_is_retried_with_backoff_and_reported(
        api: KubeAPI, short_tmp: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    state = short_tmp / "st"
    state.mkdir()
    cp = Checkpoint(state, boot_id=lambda: "boot-1")
    cp.update(lambda d: d.with_sides({g.uuid: Side.LEGACY for g in GPUS}, split="0"))
    ro = ReadOnly(how, state, monkeypatch)
    ctl = controller(api, checkpoint=cp, config={"checkpoint_retry_s": 0.1, "checkpoint_retry_max_s": 0.4})
    ro.set(True)
    try:
        ctl.start()
        set_split(api, "2")
        status = wait_until(lambda: (s := status_of(api.get(NODES, NODE))) and s.checkpoint_error and s,
                            what="the status says the checkpoint cannot be written")
        assert side_names(ctl, Side.LEGACY) == [f"gpu-{i}" for i in range(8)]  # nothing offered the file lacks
        assert "cannot write checkpoint" in status.checkpoint_error.message
        failures = 'dra_bridge_checkpoint_write_failures_total{writer="split"}'
        wait_until(lambda: (ctl.metrics.checkpoint_failures.labels("split")._value.get() >= 4), timeout=15,
                   what="retries well before the 30 s resync")
        text = generate_latest(ctl.metrics.registry).decode()
        assert failures in text and "dra_bridge_checkpoint_unwritable 1.0" in text
        warned = [e for e in api.list(EVENTS, "default")["items"] if e["reason"] == "DRACheckpointWriteFailed"]
        assert len(warned) == 1 and "retried" in warned[0]["message"]  # once per distinct error, not per retry
        ro.set(False)
        wait_until(lambda: side_names(ctl, Side.WITHDRAWN) == ["gpu-6", "gpu-7"], timeout=15,
                   what="the waiting change applied once the checkpoint is writable")
        assert cp.read().data.sides[GPUS[7].uuid] is Side.WITHDRAWN
        wait_until(lambda: (s := status_of(api.get(NODES, NODE))) and s.checkpoint_error is None,
                   what="the error gone from the status")
        assert "dra_bridge_checkpoint_unwritable 0.0" in generate_latest(ctl.metrics.registry).decode()
        assert any(e["reason"] == "DRACheckpointWriteRecovered" for e in api.list(EVENTS, "default")["items"])
    finally:
        ro.set(False)
        ctl.stop()


def test_bridge_node_status_shows_a_checkpoint_that_cannot_be_written() -> None:
    from bridge.ledger.status import CheckpointErrorStatus
    from bridge.node.statusview import render_table, view_of

    ctl = controller(None)
    ctl.evaluate({"metadata": {"name": NODE}})
    assert ctl.status is not None
    broken = ctl.status.__class__(**{**ctl.status.__dict__, "checkpoint_error": CheckpointErrorStatus(
        "2025-06-01T12:00:00Z", "cannot write checkpoint /st/checkpoint.json: Read-only file system")})
    node = {"metadata": {"name": NODE, "annotations": {STATUS_KEY: broken.encode()}}}
    text = render_table(view_of(node))
    assert ("error: the checkpoint cannot be written since 2025-06-01T12:00:00Z: cannot write checkpoint "
            "/st/checkpoint.json: Read-only file system" in text)


def test_an_allocate_refusal_is_counted_and_shown_in_the_status(api: KubeAPI) -> None:
    set_split(api, "1")
    ctl = controller(api)
    ctl.start()
    try:
        post_allocatable(api, 7)
        wait_until(lambda: side_names(ctl, Side.DRA) == ["gpu-7"], what="gpu-7 on DRA")
        [refusal] = ctl.guard_allocate([GPUS[7].uuid])
        assert "is on the dra side of the ownership ledger" in refusal.message
        status = wait_until(lambda: (s := status_of(api.get(NODES, NODE))) and s.refusals and s, what="the refusal")
        assert status.refusals[-1].api == "allocate" and status.refusals[-1].device == "gpu-7"
        text = generate_latest(ctl.metrics.registry).decode()
        assert 'dra_bridge_split_refusals_total{api="allocate"} 1.0' in text
    finally:
        ctl.stop()


def test_a_legacy_pod_started_while_the_node_is_settled_is_named_in_the_status_within_a_poll(api: KubeAPI) -> None:
    """A settled node's loop sleeps for minutes: an answered Allocate wakes it (the status shows the Allocate at
    once), and while that Allocate is not yet in PodResources the loop polls, so the pod's container is named as soon
    as the kubelet lists it, not at the next resync."""
    sources = Sources()
    ctl = controller(api, sources, config={"resync_s": 600.0, "held_poll_s": 0.2})
    ctl.start()
    try:
        wait_until(lambda: (s := status_of(api.get(NODES, NODE))) and s.state == "converged", what="settled")
        assert ctl.guard_allocate([GPUS[0].uuid]) == []

        def holders_of_gpu0() -> list[str]:
            status = status_of(api.get(NODES, NODE))
            return [h for d in (status.devices if status else ()) if d.name == "gpu-0" for h in d.holders]

        # 30 s: the loop writes the status through the API server on a loaded machine; the resync that would
        # name the holder without the wake-up and the poll is 600 s away.
        wait_until(lambda: any("device-plugin Allocate" in h for h in holders_of_gpu0()), 30,
                   "the answered Allocate in the status")
        sources.now = Facts.build([(GPUS[0].uuid, Holder(HolderKind.CONTAINER, "pod ml/train container main"))])
        wait_until(lambda: holders_of_gpu0() == ["pod ml/train container main (legacy container)"], 30,
                   "the pod's container named as gpu-0's holder")
    finally:
        ctl.stop()


def test_the_status_is_written_only_when_its_content_changes(api: KubeAPI) -> None:
    ctl = controller(api)
    ctl.evaluate(api.get(NODES, NODE))
    rv = api.get(NODES, NODE)["metadata"]["resourceVersion"]
    for _ in range(3):
        ctl.evaluate(api.get(NODES, NODE))
    assert api.get(NODES, NODE)["metadata"]["resourceVersion"] == rv
    assert STATUS_KEY in api.get(NODES, NODE)["metadata"]["annotations"]


def test_a_bad_cluster_default_is_a_configuration_error_at_start() -> None:
    with pytest.raises(SplitError, match="neither a count"):
        SplitController(GPUS, SplitConfig(NODE, flag="lots"), sources=Sources())


# ---- bridge node status ----------------------------------------------------------------------------------------------

def run_status(kubeconfig: Path, *args: str):  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from bridge.cli import main

    return CliRunner().invoke(main, ["node", "status", *args, "--kubeconfig", str(kubeconfig), "--timeout", "5"])


def test_bridge_node_status_prints_sides_holders_pending_moves_and_refusals(api: KubeAPI, tmp_path: Path) -> None:
    sources = Sources()
    sources.now = Facts.build([(GPUS[7].uuid, Holder(HolderKind.CONTAINER, "pod ml/train-7 container main"))])
    set_split(api, "gpu-6,gpu-7", "annotations")
    ctl = controller(api, sources)
    ctl.evaluate(api.get(NODES, NODE))
    assert ctl.guard_prepare([GPUS[7].uuid], "ml/c", "uid-c")  # held by the legacy pod: refused
    ctl.evaluate(api.get(NODES, NODE))
    out = run_status(tmp_path / "kc", NODE)
    assert out.exit_code == 0, out.output
    assert f"Node {NODE}: requested 'gpu-6,gpu-7' (from node annotation dra-bridge.io/dra-devices)" in out.output
    assert "state: converging" in out.output
    assert "gpu-7   legacy" in out.output and "pod ml/train-7 container main (legacy container)" in out.output
    assert "gpu-6   withdrawn" in out.output
    assert "gpu-7 held by pod ml/train-7 container main (legacy container); will move when free" in out.output
    assert "Latest refusals:" in out.output and "prepare" in out.output and "is prepared once it is free" in out.output
    as_json = run_status(tmp_path / "kc", NODE, "-o", "json")
    import json

    doc = json.loads(as_json.output)
    assert doc["current"] is True and doc["status"]["counts"] == {"legacy": 7, "dra": 0, "withdrawn": 1}


def test_bridge_node_status_says_when_there_is_no_status_or_no_node(api: KubeAPI, tmp_path: Path) -> None:
    out = run_status(tmp_path / "kc", NODE)
    assert out.exit_code == 1 and "has no split status: is `bridge node` running there" in out.output
    missing = run_status(tmp_path / "kc", "nope")
    assert missing.exit_code == 2 and "node 'nope' not found" in missing.output
    set_split(api, "3")
    controller(api).evaluate(api.get(NODES, NODE))
    set_split(api, "4")  # the daemon has not evaluated this yet
    stale = run_status(tmp_path / "kc", NODE)
    assert stale.exit_code == 0 and "the daemon last evaluated '3'" in stale.output


def test_bridge_node_status_without_an_api_exits_2(tmp_path: Path) -> None:
    (tmp_path / "kc").write_text("not: a kubeconfig\n")
    out = run_status(tmp_path / "kc", NODE)
    assert out.exit_code == 2 and "bridge node status:" in out.output


def test_a_burst_of_wake_ups_is_served_by_one_evaluation_after_the_interval(api: KubeAPI) -> None:
    """One DRA pod start wakes the loop about seven times within half a second, the first at the moment the kubelet
    prepares the pod's claim. The loop evaluates a wake-up `min_interval_s` after it came, and serves every wake-up
    meanwhile by that one evaluation."""
    ctl = controller(api, config={"resync_s": 600.0, "min_interval_s": 2.0})
    ctl.start()
    try:
        wait_until(lambda: (s := status_of(api.get(NODES, NODE))) and s.state == "converged", what="settled")

        def quiet_for_2_5_s() -> bool:
            before = ctl.loop_evaluations
            time.sleep(2.5)
            return ctl.loop_evaluations == before

        wait_until(quiet_for_2_5_s, timeout=30, what="no evaluation for 2.5 s")
        settled = ctl.loop_evaluations

        for i in range(20):
            ctl.kick(f"burst {i}")
            time.sleep(0.01)
        time.sleep(0.8)
        assert ctl.loop_evaluations == settled  # the burst waits out the interval...
        wait_until(lambda: ctl.loop_evaluations == settled + 1, timeout=30, what="one evaluation for the burst")
        time.sleep(2.5)
        assert ctl.loop_evaluations == settled + 1  # ... and all of it was served by that one evaluation
    finally:
        ctl.stop()
