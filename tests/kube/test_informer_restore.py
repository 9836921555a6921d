"""An API server that comes back different (restored from an etcd backup): its resourceVersions go backwards.

Resuming the watch from the version the informer last saw is refused ("Too large resource version") for as long as
the server is behind it, and once the server passes it every change in between would be skipped. The informer must
list again at once, as on 410 Gone, and from then on follow the restored server. The bound asserted is generous
(the relist takes well under a second); the measured time is printed for the notes (`pytest -s`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from bridge.kube import CONFIG_MAPS, Informer, RetryPolicy, WatchEvent, connect
from bridge.sandbox.apiserver import ApiServer
from tests.polling import wait_until

RELIST_BOUND_S = 15.0


def configmap(name: str, v: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
            "data": {"v": v}}


def test_informer_relists_after_the_server_was_restored_to_an_older_resource_version(tmp_path: Path) -> None:
    with ApiServer() as srv:
        srv.write_kubeconfig(tmp_path / "kc")
        # The daemon's own retry policy: a 5 s per-call deadline (bridge.node.dual.API_RETRY_DEADLINE_S).
        with connect(tmp_path / "kc", retry=RetryPolicy(initial_backoff=0.05, max_backoff=0.5, deadline=5)) as api:
            api.create(CONFIG_MAPS, configmap("in-backup"))
            backup = srv.store.resource_version
            events: list[WatchEvent] = []
            stop = threading.Event()
            inf = Informer(api, CONFIG_MAPS, "default", on_event=events.append,
                           backoff=RetryPolicy(initial_backoff=0.2, max_backoff=10.0))
            thread = inf.start(stop)
            try:
                assert inf.wait_synced(20)
                for i in range(20):  # the informer follows the server well past the backup
                    api.patch(CONFIG_MAPS, "in-backup", {"data": {"v": str(i + 2)}}, "default")
                api.create(CONFIG_MAPS, configmap("after-backup"))
                wait_until(lambda: "default/after-backup" in inf.snapshot(), what="the informer to catch up")
                assert int(inf.resource_version) > backup + 20

                seen_rv = inf.resource_version
                restored_at = time.monotonic()
                srv.restore(backup)
                wait_until(lambda: inf.relists >= 1, timeout=RELIST_BOUND_S + 15,
                           what="a relist after the resourceVersion went backwards")
                relist_s = time.monotonic() - restored_at
                print(f"\nrelist {relist_s:.2f}s after a restore from resourceVersion {seen_rv} back to {backup}")
                assert relist_s < RELIST_BOUND_S
                # The cache is the restored server's state, and changes made after the restore are seen, although
                # their versions are lower than ones the informer had already seen.
                # (the relist is counted when it starts: its list replaces the cache a moment later)
                wait_until(lambda: {k: v["data"] for k, v in inf.snapshot().items()} == {"default/in-backup": {"v": "1"}},
                           timeout=30, what="the cache replaced by the restored server's state")
                api.create(CONFIG_MAPS, configmap("after-restore"))
                wait_until(lambda: "default/after-restore" in inf.snapshot(), what="a change after the restore")
                assert int(inf.snapshot()["default/after-restore"]["metadata"]["resourceVersion"]) <= backup + 2
            finally:
                stop.set()
                thread.join(10)
            assert not thread.is_alive()
    kinds = [(e.type, e.object["metadata"]["name"]) for e in events]
    assert ("DELETED", "after-backup") in kinds and kinds[-1] == ("ADDED", "after-restore")
