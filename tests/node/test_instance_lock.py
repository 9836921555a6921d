"""`bridge.node.instance`: one daemon per state directory, the rolling-update standby, and the sweep of a dead
predecessor's sockets (in-process; the process-level behaviour is in test_instances.py)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from bridge.node.instance import Instance, InstanceBusy, InstanceLock, rolling_update


def me(pod_uid: str | None = None, sockets: tuple[str, ...] = ()) -> Instance:
    return Instance.me(pod_uid, sockets)


def test_a_second_lock_on_the_same_state_dir_is_refused_naming_the_holders_pid_and_pod(tmp_path: Path) -> None:
    first = InstanceLock(tmp_path)
    assert first.try_acquire(me("pod-1"))
    second = InstanceLock(tmp_path)
    with pytest.raises(InstanceBusy) as err:
        second.acquire(me())  # no pod UID: not a rolling update
    assert f"(PID {os.getpid()}, host {socket.gethostname()}, pod UID pod-1, since " in str(err.value)
    assert "one node daemon per node and state directory" in str(err.value)
    assert err.value.holder is not None and err.value.holder.pod_uid == "pod-1"
    first.release()
    assert second.acquire(me())  # free again
    second.release()


def test_the_same_pod_uid_or_a_missing_one_is_never_a_rolling_update() -> None:
    assert rolling_update(me("old"), me("new"))
    assert not rolling_update(me("same"), me("same"))
    assert not rolling_update(me(None), me("new"))
    assert not rolling_update(me("old"), me(None))
    assert not rolling_update(None, me("new"))


def test_in_a_rolling_update_the_new_instance_waits_in_standby_and_takes_over_when_the_old_one_releases(
        tmp_path: Path) -> None:
    old = InstanceLock(tmp_path)
    assert old.try_acquire(me("pod-old", ("/x/old.sock",)))
    new = InstanceLock(tmp_path)
    standby: list[Instance] = []
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(new.acquire(me("pod-new"), stop=threading.Event(),
                                                                  on_standby=standby.append, poll_s=0.01)))
    t.start()
    deadline = time.monotonic() + 10
    while not standby and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [s.pod_uid for s in standby] == ["pod-old"] and not new.held
    old.release()
    t.join(10)
    assert result == [True] and new.held
    assert new.previous is not None and new.previous.sockets == ("/x/old.sock",)
    holder = InstanceLock(tmp_path).holder()
    assert holder is not None and holder.pod_uid == "pod-new"
    new.release()


def test_standby_ends_without_the_lock_when_the_new_instance_is_told_to_stop(tmp_path: Path) -> None:
    old = InstanceLock(tmp_path)
    assert old.try_acquire(me("pod-old"))
    stop = threading.Event()
    stop.set()
    assert InstanceLock(tmp_path).acquire(me("pod-new"), stop=stop, poll_s=0.01) is False
    assert old.held
    old.release()


def test_an_unreadable_record_still_refuses_and_says_the_pid_is_unknown(tmp_path: Path) -> None:
    holder = InstanceLock(tmp_path)
    assert holder.try_acquire(me())
    (tmp_path / "node.lock").write_text("{not json")
    with pytest.raises(InstanceBusy, match="PID unknown"):
        InstanceLock(tmp_path).acquire(me("pod-new"))
    holder.release()


def test_the_next_holder_removes_only_the_sockets_its_dead_predecessor_listed(tmp_path: Path) -> None:
    def sock(name: str) -> str:
        path = tmp_path / name
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
        return str(path)

    theirs, ours, unrelated = sock("a.sock"), sock("b.sock"), sock("other.sock")
    regular = tmp_path / "listed-but-a-file.sock"
    regular.write_text("x")
    dead = InstanceLock(tmp_path)
    assert dead.try_acquire(me("pod-a", (theirs, ours, str(regular))))
    dead.release()  # as the kernel does when a SIGKILLed holder's fd closes

    nxt = InstanceLock(tmp_path)
    assert nxt.try_acquire(me("pod-b", (ours,)))
    assert nxt.sweep_previous([ours]) == [theirs]
    assert not Path(theirs).exists()
    assert Path(ours).is_socket() and Path(unrelated).is_socket() and regular.read_text() == "x"
    nxt.release()


def test_a_socket_the_holder_serves_later_is_added_to_its_record_and_swept_after_it_dies(tmp_path: Path) -> None:
    """The device plugin's move to a fresh socket name (a 1.37+ kubelet holding its path) is recorded, so a
    successor removes that socket too when the holder was killed."""
    paths = []
    for name in ("dp.sock", "dp-r1.sock"):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(tmp_path / name))
        s.close()
        paths.append(str(tmp_path / name))
    base, moved = paths
    dead = InstanceLock(tmp_path)
    assert dead.try_acquire(me("pod-a", (base,)))
    dead.add_socket(moved)
    dead.add_socket(moved)  # recorded once
    record = dead.holder()
    assert record is not None and record.sockets == (base, moved) and record.pod_uid == "pod-a"
    dead.release()

    nxt = InstanceLock(tmp_path)
    assert nxt.try_acquire(me("pod-b", ()))
    assert sorted(nxt.sweep_previous([])) == sorted([base, moved])
    mine = str(tmp_path / "mine.sock")
    nxt.add_socket(mine)
    nxt.release()
    nxt.add_socket(str(tmp_path / "late.sock"))  # no longer holding: nothing is written
    record = InstanceLock(tmp_path).holder()
    assert record is not None and record.pod_uid == "pod-b" and record.sockets == (mine,)
