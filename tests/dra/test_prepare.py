"""The prepare/unprepare core: per-claim outcomes, ownership and exclusivity guards, idempotence, reboot, sweep."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.cdi.writer import CdiWriteError
from bridge.ledger import Side
from bridge.dra.claimreads import CallBudget
from bridge.dra.claims import ClaimRef
from bridge.dra.prepare import ClaimRecord, Preparer, RecordedDevice
from bridge.dra.deferredsync import DeferredSync
from bridge.dra.slices import device_name
from bridge.dra.stores import CheckpointClaimStore, ClaimCdi
from bridge.inventory.model import DeviceID
from bridge.inventory.simulated import devices_from_spec
from bridge.kube.api import Resource, ResourceAPI
from bridge.kube.errors import Unavailable
from bridge.ledger.checkpoint import Checkpoint
from tests.dra.fakekube import FakeKube
from tests.dra.memstore import MemoryClaimStore
from tests.polling import wait_until

DRIVER = "gpu.dra-bridge.io"
NODE = "node-a"
GPUS = devices_from_spec("4xH100-80GB", NODE)
CLAIMS = ResourceAPI("v1").claims


def make_claim(kube: FakeKube, name: str, uid: str, devices: list[str], *, driver: str = DRIVER,
               requests: tuple[str, ...] = ("gpu",), allocated: bool = True) -> ClaimRef:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"devices": {"requests": [{"name": r} for r in requests]}},
        "status": {},
    }
    if allocated:
        obj["status"]["allocation"] = {"devices": {"results": [
            {"request": requests[0], "driver": driver, "pool": NODE, "device": d} for d in devices]}}
    kube.put(CLAIMS, obj)
    return ClaimRef("ns", name, uid)


class Env:
    def __init__(self, root: Path, legacy: set[int] = frozenset(), boot_id: str = "boot-1") -> None:  # type: ignore[assignment]
        self.kube = FakeKube()
        self.store = MemoryClaimStore()
        self.cdi_dir = root / "cdi"
        self.legacy = {GPUS[i].uuid for i in legacy}
        self.boot_id = boot_id
        self.preparer = self.make()

    def side_of(self, uuid: DeviceID) -> str:
        return Side.LEGACY if uuid in self.legacy else Side.DRA

    def make(self, boot_id: str | None = None) -> Preparer:
        return Preparer(kube=self.kube, driver=DRIVER, pool=NODE, devices=GPUS, device_name=device_name,
                        side_of=self.side_of, store=self.store, cdi=ClaimCdi(self.cdi_dir, DRIVER),
                        boot_id=boot_id or self.boot_id, lock_timeout=1.0)

    def spec(self, uid: str) -> dict[str, Any] | None:
        path = self.cdi_dir / f"k8s.{DRIVER}-claim_{uid}.json"
        return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture
def env(short_tmp: Path) -> Env:
    return Env(short_tmp, legacy={0})


def test_prepare_writes_the_cdi_spec_for_the_allocated_gpu_and_returns_its_id(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-3"])
    out = env.preparer.prepare([ref])["uid-1"]
    assert out.error == ""
    [dev] = out.devices
    assert (dev.pool, dev.device, dev.request_names) == (NODE, "gpu-3", ())
    assert dev.cdi_ids == (f"k8s.{DRIVER}/claim=uid-1-gpu-3",)
    spec = env.spec("uid-1")
    assert spec is not None and spec["kind"] == f"k8s.{DRIVER}/claim"
    assert spec["devices"] == [{"name": "uid-1-gpu-3", "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{GPUS[3].minor}"}]}}]
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} <= {n["path"] for n in spec["containerEdits"]["deviceNodes"]}
    # Two-phase: started, then completed (atomic renames, no fsync in the call), then ONE fsync right after.
    assert env.preparer.syncer.flush(10)
    assert env.store.history == [("put", "uid-1", "PrepareStarted unsynced"),
                                 ("put", "uid-1", "PrepareCompleted unsynced"), ("sync", "", "")]


def test_the_kubelets_prepare_and_unprepare_calls_wait_for_no_fsync(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim's CDI spec is renamed into place without fsync (a reboot voids it: see bridge.cdi.writer), and the
    checkpoint's sync runs after the call on its own thread: the calling thread never waits for the disk."""
    import os

    caller = threading.get_ident()
    in_call: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (in_call.append(fd) if threading.get_ident() == caller else None,
                                                 real_fsync(fd))[1])
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-2"])
    assert env.preparer.prepare([ref])["uid-1"].error == ""
    assert env.spec("uid-1") is not None
    assert env.preparer.unprepare([ref]) == {"uid-1": ""}
    assert env.spec("uid-1") is None
    assert in_call == []


def test_all_claims_of_one_call_share_one_started_and_one_completed_checkpoint_write(env: Env) -> None:
    refs = [make_claim(env.kube, f"c{i}", f"uid-{i}", [f"gpu-{i}"]) for i in (1, 2, 3)]
    bad = make_claim(env.kube, "bad", "uid-bad", ["gpu-0"])  # legacy side: refused, no checkpoint write for it
    out = env.preparer.prepare([*refs, bad])
    assert [out[f"uid-{i}"].error for i in (1, 2, 3)] == ["", "", ""] and out["uid-bad"].error
    assert env.store.commits == 2
    assert env.preparer.syncer.flush(10) and env.store.syncs == 1
    assert [h[2] for h in env.store.history] == \
        ["PrepareStarted unsynced"] * 3 + ["PrepareCompleted unsynced"] * 3 + [""]


def test_two_claims_of_one_call_for_the_same_device_give_it_to_the_first_only(env: Env) -> None:
    first = make_claim(env.kube, "first", "uid-a", ["gpu-2"])
    second = make_claim(env.kube, "second", "uid-b", ["gpu-2"])
    out = env.preparer.prepare([first, second])
    assert out["uid-a"].error == ""
    assert "already prepared for ResourceClaim ns/first (uid uid-a)" in out["uid-b"].error
    assert set(env.store.records) == {"uid-a"}


def test_one_bad_claim_does_not_fail_its_neighbours(env: Env) -> None:
    good = make_claim(env.kube, "good", "uid-good", ["gpu-1"])
    unallocated = make_claim(env.kube, "bare", "uid-bare", [], allocated=False)
    other_driver = make_claim(env.kube, "nic", "uid-nic", ["nic-0"], driver="net.example.com")
    legacy = make_claim(env.kube, "legacy", "uid-legacy", ["gpu-0"])
    replaced = ClaimRef("ns", "good", "uid-stale")
    missing = ClaimRef("ns", "gone", "uid-gone")
    out = env.preparer.prepare([good, unallocated, other_driver, legacy, replaced, missing])
    assert set(out) == {"uid-good", "uid-bare", "uid-nic", "uid-legacy", "uid-stale", "uid-gone"}
    assert out["uid-good"].error == "" and out["uid-good"].devices[0].device == "gpu-1"
    assert "is not allocated" in out["uid-bare"].error
    assert "no device allocated by driver gpu.dra-bridge.io" in out["uid-nic"].error
    assert f"device gpu-0 ({GPUS[0].uuid}) is owned by the legacy side" in out["uid-legacy"].error
    assert "deleted and re-created" in out["uid-stale"].error
    assert "ResourceClaim ns/gone not found" in out["uid-gone"].error
    assert env.spec("uid-legacy") is None and set(env.store.records) == {"uid-good"}


def test_a_device_prepared_for_another_claim_is_refused_naming_the_owner_and_recorded_as_event(env: Env) -> None:
    first = make_claim(env.kube, "first", "uid-a", ["gpu-2"])
    second = make_claim(env.kube, "second", "uid-b", ["gpu-2"])
    assert env.preparer.prepare([first])["uid-a"].error == ""
    err = env.preparer.prepare([second])["uid-b"].error
    assert "device gpu-2" in err and "already prepared for ResourceClaim ns/first (uid uid-a)" in err
    [event] = wait_until(env.kube.events, 10, "the refusal Event (recorded after the lock, in the background)")
    assert event["reason"] == "DeviceRefused" and event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "second" and event["involvedObject"]["kind"] == "ResourceClaim"
    assert env.preparer.metrics.refusals.labels("in-use")._value.get() == 1
    # After the first claim is unprepared the device is free again.
    assert env.preparer.unprepare([first]) == {"uid-a": ""}
    assert env.preparer.prepare([second])["uid-b"].error == ""


GONE_HINT = ("; ResourceClaim ns/first (uid uid-a) no longer exists: its pod was deleted while this node's kubelet "
             "could not clean up (down, restarting or being upgraded); the kubelet unprepares it within about a "
             "minute, and this claim is prepared on the pod's next try")


def test_a_device_held_by_a_claim_gone_from_the_api_is_refused_saying_the_kubelet_will_free_it(env: Env) -> None:
    """The state after a pod was force-deleted while the kubelet was down and kube-scheduler gave its GPU to the next
    claim (tests/real/test_real_kubelet_upgrade.py): still refused, and the error and Event say why it resolves."""
    first = make_claim(env.kube, "first", "uid-a", ["gpu-2"])
    assert env.preparer.prepare([first])["uid-a"].error == ""
    env.kube.delete(CLAIMS, "first", "ns")
    second = make_claim(env.kube, "second", "uid-b", ["gpu-2"])
    err = env.preparer.prepare([second])["uid-b"].error
    assert err == ("device gpu-2 (" + GPUS[2].uuid + ") is already prepared for ResourceClaim ns/first (uid uid-a): "
                   "refusing to share it with ResourceClaim ns/second" + GONE_HINT)
    [event] = wait_until(env.kube.events, 10, "the refusal Event")
    assert event["message"] == err
    assert env.preparer.unprepare([first]) == {"uid-a": ""}  # what the kubelet's reconcile loop does
    assert env.preparer.prepare([second])["uid-b"].error == ""


def test_a_device_held_by_a_claim_recreated_under_its_name_is_explained_the_same(env: Env) -> None:
    first = make_claim(env.kube, "first", "uid-a", ["gpu-2"])
    assert env.preparer.prepare([first])["uid-a"].error == ""
    make_claim(env.kube, "first", "uid-new", ["gpu-3"])
    err = env.preparer.prepare([make_claim(env.kube, "second", "uid-b", ["gpu-2"])])["uid-b"].error
    assert err.endswith(GONE_HINT)


def test_a_device_held_by_a_claim_that_still_exists_or_cannot_be_read_gets_no_such_hint(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    first = make_claim(env.kube, "first", "uid-a", ["gpu-2"])
    assert env.preparer.prepare([first])["uid-a"].error == ""
    second = make_claim(env.kube, "second", "uid-b", ["gpu-2"])
    assert env.preparer.prepare([second])["uid-b"].error.endswith("refusing to share it with ResourceClaim ns/second")
    env.kube.delete(CLAIMS, "first", "ns")
    get = env.kube.get

    def holder_unreadable(res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        if name == "first":
            raise Unavailable("connection refused (fake)", request_sent=False)
        return get(res, name, namespace)

    monkeypatch.setattr(env.kube, "get", holder_unreadable)  # gone, but not known to be: nothing is said of it
    assert env.preparer.prepare([second])["uid-b"].error.endswith("refusing to share it with ResourceClaim ns/second")


def gets(kube: FakeKube) -> int:
    return len([c for c in kube.calls if c[0] == "get"])


def test_every_prepare_reads_the_claim_and_an_unchanged_allocation_is_answered_from_the_record(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-1", "gpu-2"])
    first = env.preparer.prepare([ref])
    reads, commits = gets(env.kube), env.store.commits
    again = env.make().prepare([ref])  # also a fresh process (same store = same checkpoint)
    assert again == first
    assert gets(env.kube) == reads + 1  # read again: the API, not the record, says what is allocated
    assert env.store.commits == commits  # nothing to write: the record matches the allocation


def test_a_prepared_claim_is_not_answered_from_its_record_while_the_api_is_down(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-1"])
    first = env.preparer.prepare([ref])
    env.kube.down = True
    out = env.make().prepare([ref])["uid-1"]
    assert "cannot read ResourceClaim ns/c1" in out.error and out.devices == ()
    assert env.store.records["uid-1"].state == "PrepareCompleted"  # still prepared: nothing is undone
    env.kube.down = False
    assert env.preparer.prepare([ref]) == first


def reallocate(kube: FakeKube, name: str, devices: list[str]) -> None:
    """The claim deallocated and allocated again under the same UID (the scheduler picked other devices)."""
    claim = kube.get(CLAIMS, name, "ns")
    claim["status"]["allocation"]["devices"]["results"] = [
        {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": d} for d in devices]
    kube.put(CLAIMS, claim)


def test_a_claim_allocated_again_to_another_gpu_under_the_same_uid_is_prepared_again(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-2"])
    assert env.preparer.prepare([ref])["uid-1"].devices[0].device == "gpu-2"
    reallocate(env.kube, "c1", ["gpu-3"])
    assert env.preparer.syncer.flush(10)
    env.store.history.clear()
    fresh = env.make()  # e.g. after a kubelet restart
    out = fresh.prepare([ref])["uid-1"]
    assert out.error == ""
    assert [(d.device, d.cdi_ids) for d in out.devices] == [("gpu-3", (f"k8s.{DRIVER}/claim=uid-1-gpu-3",))]
    spec = env.spec("uid-1")
    assert spec is not None and [d["name"] for d in spec["devices"]] == ["uid-1-gpu-3"]
    assert [d.device for d in env.store.records["uid-1"].devices] == ["gpu-3"]
    # Two-phase like any prepare: the Started record with the new device replaced the old record in one write.
    assert fresh.syncer.flush(10)
    assert env.store.history == [("put", "uid-1", "PrepareStarted unsynced"),
                                 ("put", "uid-1", "PrepareCompleted unsynced"), ("sync", "", "")]
    # gpu-2 is free again: another claim gets it.
    other = make_claim(env.kube, "c2", "uid-2", ["gpu-2"])
    assert env.preparer.prepare([other])["uid-2"].error == ""


def test_a_reallocation_that_is_refused_keeps_the_old_record_and_spec(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-2"])
    env.preparer.prepare([ref])
    reallocate(env.kube, "c1", ["gpu-0"])  # the legacy side owns gpu-0
    out = env.preparer.prepare([ref])["uid-1"]
    assert f"device gpu-0 ({GPUS[0].uuid}) is owned by the legacy side" in out.error
    assert [d.device for d in env.store.records["uid-1"].devices] == ["gpu-2"]
    spec = env.spec("uid-1")
    assert spec is not None and [d["name"] for d in spec["devices"]] == ["uid-1-gpu-2"]


class FailingCdi(ClaimCdi):
    def __init__(self, root: Path, fail: set[str]) -> None:
        super().__init__(root, DRIVER)
        self.fail = fail

    def write(self, claim_uid: str, devices: Any) -> dict[str, tuple[str, ...]]:
        if claim_uid in self.fail:
            raise CdiWriteError(f"injected: cannot write the spec of {claim_uid}")
        return super().write(claim_uid, devices)


def test_a_reallocation_whose_spec_write_fails_leaves_neither_the_old_record_nor_the_old_spec(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-2"])
    env.preparer.prepare([ref])
    reallocate(env.kube, "c1", ["gpu-3"])
    env.preparer.cdi = FailingCdi(env.cdi_dir, {"uid-1"})
    out = env.preparer.prepare([ref])["uid-1"]
    assert "writing the CDI spec for claim uid-1 failed: injected" in out.error
    assert "uid-1" not in env.store.records and env.spec("uid-1") is None  # gpu-2's spec does not outlive it
    env.preparer.cdi = ClaimCdi(env.cdi_dir, DRIVER)
    assert env.preparer.prepare([ref])["uid-1"].devices[0].device == "gpu-3"  # the kubelet's retry


def test_the_right_uid_under_a_wrong_name_is_an_error_not_an_answer_from_the_record(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-1"])
    make_claim(env.kube, "c2", "uid-2", ["gpu-2"])
    env.preparer.prepare([ref])
    out = env.preparer.prepare([ClaimRef("ns", "wrong", "uid-1"), ClaimRef("ns", "c2", "uid-1"),
                                ClaimRef("other", "c1", "uid-1")])
    assert out["uid-1"].error == "ResourceClaim ns/wrong not found"  # one answer per UID: the first ref's
    out = env.preparer.prepare([ClaimRef("ns", "c2", "uid-1")])
    assert "ResourceClaim ns/c2 has UID 'uid-2', the kubelet asked for 'uid-1'" in out["uid-1"].error
    assert [d.device for d in env.store.records["uid-1"].devices] == ["gpu-1"]


def test_malformed_claim_references_are_per_claim_errors_and_never_reach_the_api(env: Env) -> None:
    good = make_claim(env.kube, "good", "uid-good", ["gpu-1"])
    bad = [ClaimRef("", "c", "uid-no-ns"), ClaimRef("ns", "", "uid-no-name"), ClaimRef("ns", "c", ""),
           ClaimRef("Bad_NS", "c", "uid-bad-ns"), ClaimRef("ns", "../pods/x", "uid-path")]
    out = env.preparer.prepare([bad[0], good, *bad[1:]])
    assert out["uid-good"].error == "" and out["uid-good"].devices[0].device == "gpu-1"
    assert "ResourceClaim 'c' (uid uid-no-ns) with an empty namespace" in out["uid-no-ns"].error
    assert "in namespace ns (uid uid-no-name) without a name" in out["uid-no-name"].error
    assert "without a UID" in out[""].error
    assert "'Bad_NS', which is not a valid namespace name" in out["uid-bad-ns"].error
    assert "'../pods/x' (uid uid-path) in namespace ns: not a valid ResourceClaim name" in out["uid-path"].error
    assert [c for c in env.kube.calls if c[0] == "get"] == [("get", "resourceclaims/ns/good")]


class ExplodingKube(FakeKube):
    """A client that raises something other than a KubeError for one claim (like the official client's
    ValueError for a namespaced GET without a namespace)."""

    def get(self, res: Any, name: str, namespace: str | None = None) -> Any:
        if name == "boom":
            raise ValueError("ResourceClaim is namespaced: pass a namespace")
        return super().get(res, name, namespace)


def test_an_unexpected_error_reading_one_claim_fails_only_that_claim(env: Env) -> None:
    env.kube = ExplodingKube()
    env.preparer = env.make()
    good = make_claim(env.kube, "good", "uid-good", ["gpu-1"])
    out = env.preparer.prepare([ClaimRef("ns", "boom", "uid-boom"), good])
    assert out["uid-good"].error == ""
    assert out["uid-boom"].error == ("cannot read ResourceClaim ns/boom: unexpected ValueError: ResourceClaim is "
                                     "namespaced: pass a namespace")


class SlowKube(FakeKube):
    """GETs of the claims named in `slow` block until `release` is set."""

    def __init__(self, slow: set[str]) -> None:
        super().__init__()
        self.slow = slow
        self.release = threading.Event()
        self.waiting = threading.Semaphore(0)

    def get(self, res: Any, name: str, namespace: str | None = None) -> Any:
        if name in self.slow:
            self.waiting.release()
            self.release.wait(30)
        return super().get(res, name, namespace)


def test_a_claim_not_read_within_the_budget_gets_its_own_error_and_its_neighbours_are_prepared(env: Env) -> None:
    env.kube = SlowKube({"slow"})
    env.preparer = env.make()
    good = make_claim(env.kube, "good", "uid-good", ["gpu-1"])
    slow = make_claim(env.kube, "slow", "uid-slow", ["gpu-2"])
    try:
        start = time.monotonic()
        out = env.preparer.prepare([slow, good], time_left=1.5)  # budget 1 s: reads 0.67 s, the lock 0.33 s
        took = time.monotonic() - start
    finally:
        env.kube.release.set()
    assert took < 1.5, f"answered after {took:.2f}s, past the caller's deadline"
    assert out["uid-good"].error == "" and set(env.store.records) == {"uid-good"}
    assert "ResourceClaim ns/slow could not be read within 0.7s" in out["uid-slow"].error
    assert "the kubelet retries" in out["uid-slow"].error


def test_claims_are_read_outside_the_node_lock(env: Env) -> None:
    """A slow claim read must not hold the node's prepare/unprepare lock: an unprepare meanwhile finishes."""
    env.kube = SlowKube({"slow"})
    env.preparer = env.make()
    done = make_claim(env.kube, "done", "uid-done", ["gpu-1"])
    env.preparer.prepare([done])
    slow = make_claim(env.kube, "slow", "uid-slow", ["gpu-2"])
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(env.preparer.prepare([slow])))
    worker.start()
    try:
        assert env.kube.waiting.acquire(timeout=10), "the slow read never started"
        assert env.preparer.unprepare([done]) == {"uid-done": ""}  # lock_timeout is 1 s: it would fail if held
    finally:
        env.kube.release.set()
        worker.join(30)
    assert result["uid-slow"].error == ""


def test_reads_of_one_call_run_concurrently(env: Env) -> None:
    env.kube = SlowKube({f"c{i}" for i in (1, 2, 3)})
    env.preparer = env.make()
    refs = [make_claim(env.kube, f"c{i}", f"uid-{i}", [f"gpu-{i}"]) for i in (1, 2, 3)]
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(env.preparer.prepare(refs)))
    worker.start()
    try:
        for _ in refs:  # all three GETs are in flight at the same time
            assert env.kube.waiting.acquire(timeout=10), "the reads did not run concurrently"
    finally:
        env.kube.release.set()
        worker.join(30)
    assert [result[r.uid].error for r in refs] == ["", "", ""]


def test_a_missing_spec_file_of_a_prepared_claim_is_recreated_on_repeat(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-1"])
    env.preparer.prepare([ref])
    (env.cdi_dir / f"k8s.{DRIVER}-claim_uid-1.json").unlink()
    assert env.preparer.prepare([ref])["uid-1"].error == ""
    assert env.spec("uid-1") is not None


def test_after_a_reboot_the_claim_is_read_again_and_its_spec_recreated(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-3"])
    before = env.preparer.prepare([ref])
    for f in env.cdi_dir.iterdir():  # tmpfs /var/run/cdi is empty after a reboot
        f.unlink()
    rebooted = env.make(boot_id="boot-2")
    reads = len([c for c in env.kube.calls if c[0] == "get"])
    assert rebooted.prepare([ref]) == before
    assert len([c for c in env.kube.calls if c[0] == "get"]) == reads + 1
    assert env.spec("uid-1") is not None and env.store.records["uid-1"].boot_id == "boot-2"


def test_unprepare_removes_spec_and_record_and_is_idempotent_for_unknown_claims(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-1"])
    env.preparer.prepare([ref])
    env.kube.delete(CLAIMS, "c1", "ns")  # the claim object may already be gone
    assert env.preparer.unprepare([ref, ClaimRef("ns", "never", "uid-never")]) == {"uid-1": "", "uid-never": ""}
    assert env.spec("uid-1") is None and env.store.records == {}
    assert env.preparer.unprepare([ref]) == {"uid-1": ""}


def test_the_sweep_undoes_half_finished_prepares_and_removes_leaked_specs(env: Env) -> None:
    done = make_claim(env.kube, "done", "uid-done", ["gpu-1"])
    env.preparer.prepare([done])
    half = ClaimRecord("uid-half", "ns", "half", "PrepareStarted", "boot-1",
                       (RecordedDevice("gpu-2", NODE, GPUS[2].uuid, ()),))
    env.store.commit(put=[half])
    env.preparer.cdi.write("uid-half", [("gpu-2", GPUS[2])])
    env.preparer.cdi.write("uid-leak", [("gpu-3", GPUS[3])])
    report = env.make().sweep()
    assert report.undone == ("uid-half",) and report.leaked_specs == ("uid-leak",)
    assert set(env.store.records) == {"uid-done"}
    assert env.spec("uid-half") is None and env.spec("uid-leak") is None and env.spec("uid-done") is not None


def test_a_held_lock_fails_the_batch_with_an_error_instead_of_hanging(env: Env) -> None:
    ref = make_claim(env.kube, "c1", "uid-1", ["gpu-1"])
    env.store.lock.acquire()
    try:
        out = env.preparer.prepare([ref])
        assert "lock is held by someone else" in out["uid-1"].error
        assert "lock is held" in env.preparer.unprepare([ref])["uid-1"]
    finally:
        env.store.lock.release()


def test_concurrent_prepares_of_two_claims_for_one_device_give_it_to_exactly_one(env: Env) -> None:
    refs = [make_claim(env.kube, f"c{i}", f"uid-{i}", ["gpu-2"]) for i in range(6)]
    results: dict[str, str] = {}
    threads = [threading.Thread(target=lambda r=r: results.update({r.uid: env.preparer.prepare([r])[r.uid].error}))
               for r in refs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(e == "" for e in results.values()) == [False] * 5 + [True]


def test_an_api_outage_is_a_per_claim_error_the_kubelet_can_retry_logged_once_per_call(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    refs = [make_claim(env.kube, f"c{i}", f"uid-{i}", [f"gpu-{i}"]) for i in (1, 2, 3)]
    env.kube.down = True
    out = env.preparer.prepare(refs)
    assert [f"cannot read ResourceClaim ns/c{i}" in out[f"uid-{i}"].error for i in (1, 2, 3)] == [True] * 3
    [line] = [r for r in caplog.records if r.getMessage() == "claims not prepared: not read from the API"]
    assert (line.count, line.claims) == (3, "ns/c1,ns/c2,ns/c3")  # type: ignore[attr-defined]
    env.kube.down = False
    assert [o.error for o in env.preparer.prepare(refs).values()] == ["", "", ""]


def test_the_call_budget_leaves_margin_under_the_kubelets_45_s_and_follows_a_shorter_deadline() -> None:
    kubelet = CallBudget.begin(45.0, lock_timeout=10.0, clock=lambda: 100.0)
    assert (kubelet.total, kubelet.read_share, kubelet.lock_share) == (30.0, 20.0, 10.0)
    assert (kubelet.read_deadline, kubelet.deadline) == (120.0, 130.0)
    assert kubelet.lock_wait(now=101.0) == 10.0 and kubelet.lock_wait(now=125.0) == 5.0
    assert kubelet.lock_wait(now=131.0) == 0.0
    assert CallBudget.begin(None, 10.0).total == 30.0  # no deadline given: the kubelet's is assumed
    short = CallBudget.begin(6.0, 10.0)
    assert (short.total, short.lock_share) == (4.0, 4.0 / 3)


def test_syncs_requested_while_one_runs_are_coalesced_into_one_more() -> None:
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def sync() -> None:
        calls.append(1)
        started.set()
        release.wait(10)

    syncer = DeferredSync(sync)
    syncer.request()
    assert started.wait(10)
    for _ in range(5):  # five calls finish while the first sync runs: their writes need ONE more sync
        syncer.request()
    release.set()
    assert syncer.flush(10)
    assert len(calls) == 2 and syncer.syncs == 2


def test_a_failed_sync_is_logged_and_the_next_request_syncs_again(caplog: pytest.LogCaptureFixture) -> None:
    outcomes = [OSError(5, "Input/output error"), None]

    def sync() -> None:
        if (err := outcomes.pop(0)) is not None:
            raise err

    syncer = DeferredSync(sync)
    syncer.request()
    assert syncer.flush(10) and syncer.failures == 1
    assert "could not make the prepared-claim records durable" in caplog.text
    syncer.request()
    assert syncer.flush(10) and (syncer.syncs, outcomes) == (1, [])


def test_the_checkpoint_store_syncs_the_file_it_wrote(short_tmp: Path) -> None:
    store = CheckpointClaimStore(Checkpoint(short_tmp / "st", boot_id=lambda: "boot-1"))
    store.sync()  # nothing written yet: nothing to do
    record = ClaimRecord("uid-1", "ns", "c1", "PrepareCompleted", "boot-1",
                         (RecordedDevice("gpu-1", NODE, GPUS[1].uuid, ()),))
    store.commit(put=[record], durable=False)
    store.sync()
    assert store.load() == {"uid-1": record}


def test_reader_and_sync_threads_end_when_idle_or_closed(env: Env) -> None:
    """The reader and sync threads stay while the node prepares (starting one is in the kubelet's path: 300 s idle by
    default), end when idle that long or at `close()` (the daemon's stop), and the next call starts them again."""
    assert env.preparer.reader.idle_exit_s == env.preparer.syncer.idle_exit_s == 300.0
    refs = [make_claim(env.kube, f"c{i}", f"uid-{i}", [f"gpu-{i}"]) for i in (1, 2, 3)]
    env.preparer.prepare(refs)
    assert env.preparer.reader._workers >= 1
    assert env.preparer.syncer.flush(10)
    env.preparer.reader.close()
    env.preparer.syncer.close()
    wait_until(lambda: env.preparer.reader._workers == 0 and env.preparer.syncer._thread is None, 15,
               "the closed reader and sync threads to end")
    env.preparer.reader.idle_exit_s = env.preparer.syncer.idle_exit_s = 0.5
    env.preparer.prepare(refs)  # answered from the records: a read, no write
    assert env.preparer.reader._workers >= 1
    wait_until(lambda: env.preparer.reader._workers == 0 and env.preparer.syncer._thread is None, 15,
               "the idle reader and sync threads to end")
    before = env.store.syncs
    assert env.preparer.unprepare(refs) == {r.uid: "" for r in refs}  # works again: threads start on demand
    assert env.preparer.prepare(refs)["uid-1"].error == ""
    # one sync for the two calls, or one each: requests made before the new sync thread runs are coalesced
    assert env.preparer.syncer.flush(10) and before + 1 <= env.store.syncs <= before + 2
