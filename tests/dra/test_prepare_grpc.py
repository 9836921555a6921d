"""NodePrepareResources over real gRPC, as the kubelet calls it, against the API emulator with the node daemon's
production API client settings: per-claim errors for bad references, and an answer within the kubelet's deadline
while the API server is down or hangs.

The calls go through the kubelet simulator's own connection to the plugin (the socket it discovered and registered),
built by hand where the kubelet's pod logic would never produce the request (an empty namespace) or would stop at its
own API reads (an outage that starts after the kubelet read the claims).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.dra.claimreads import CALL_BUDGET_S, KUBELET_CALL_TIMEOUT_S
from bridge.dra.component import DraConfig, DraNode
from bridge.dra.plugin import PluginConfig
from bridge.dra.stores import CheckpointClaimStore
from bridge.inventory.simulated import devices_from_spec
from bridge.kube import connect
from bridge.kube.retry import RetryPolicy
from bridge.ledger import Side
from bridge.ledger.checkpoint import Checkpoint, read_boot_id
from bridge.node.dual import API_RETRY_DEADLINE_S, API_TIMEOUT_S
from bridge.sandbox.kubelet.dramanager import DraManager, PluginConn
from tests.dra.cluster import DRIVER, NODE, cdi_files, gpu, make_claim, make_pod
from tests.dra.conftest import Cluster

GPUS = devices_from_spec("8xH100-80GB", NODE)


@pytest.fixture
def daemon(cluster: Cluster) -> Iterator[DraNode]:
    boot = cluster.root / "boot_id"
    boot.write_text("boot-1\n")
    # The API client exactly as `bridge node` builds it (bridge/node/dual.py `_connect`).
    kube = connect(str(cluster.kubeconfig), timeout=API_TIMEOUT_S, retry=RetryPolicy(deadline=API_RETRY_DEADLINE_S))
    node = DraNode(
        DraConfig(NODE, PluginConfig(kubelet_root=str(cluster.kubelet_root), health=False), cdi_root=cluster.cdi_root,
                  boot_id_path=boot),
        kube, GPUS, lambda _uuid: Side.DRA,
        CheckpointClaimStore(Checkpoint(cluster.state_dir, boot_id=lambda: read_boot_id(boot))),
    )
    node.start()
    yield node
    node.stop()


@pytest.fixture
def plugin(cluster: Cluster, daemon: DraNode) -> Iterator[PluginConn]:
    """The kubelet simulator's connection to our plugin (default 45 s call deadline)."""
    # Its own API client gives up fast, so its background slice wipe does not outlive an outage test by 30 s.
    kube = connect(str(cluster.kubeconfig), retry=RetryPolicy(deadline=1.0))
    kubelet = DraManager(kube, NODE, str(cluster.kubelet_root / "plugins_registry"))
    kubelet.start()
    try:
        yield kubelet.wait_for_plugin(DRIVER)
    finally:
        kubelet.stop()


def prepare(conn: PluginConn, claims: list[tuple[str, str, str]], timeout: float = KUBELET_CALL_TIMEOUT_S) -> Any:
    pb = conn.pb
    request = pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace=ns, name=name, uid=uid)
                                                     for ns, name, uid in claims])
    return conn.stub().NodePrepareResources(request, timeout=timeout)


def claims_for(cluster: Cluster, count: int, ns: str = "team-a") -> list[tuple[str, str, str]]:
    pod = make_pod(cluster.api, ns, "p", [f"c{i}" for i in range(count)])
    return [(ns, f"c{i}", make_claim(cluster.api, ns, f"c{i}", pod, [gpu(f"gpu-{i % 8}")])["metadata"]["uid"])
            for i in range(count)]


def test_an_empty_namespace_and_a_wrong_name_fail_only_their_own_claims(cluster: Cluster, plugin: PluginConn) -> None:
    [good, other] = claims_for(cluster, 2)
    response = prepare(plugin, [good, ("", "c1", "uid-empty-ns"), ("team-a", "c9", other[2])])
    answers = {uid: (r.error, [d.device_name for d in r.devices]) for uid, r in response.claims.items()}
    assert answers[good[2]] == ("", ["gpu-0"])
    assert answers["uid-empty-ns"][0] == ("the request names ResourceClaim 'c1' (uid uid-empty-ns) with an empty "
                                          "namespace")
    assert answers[other[2]][0] == "ResourceClaim team-a/c9 not found"
    assert not any("internal error" in e for e, _ in answers.values())
    assert set(cdi_files(cluster.cdi_root)) == {good[2]}


def test_a_prepared_claim_asked_for_under_a_wrong_name_is_refused_not_answered_from_the_record(
    cluster: Cluster, plugin: PluginConn
) -> None:
    [first, second] = claims_for(cluster, 2)
    assert prepare(plugin, [first]).claims[first[2]].error == ""
    response = prepare(plugin, [("team-a", second[1], first[2])])  # first's UID, second's name
    assert response.claims[first[2]].error == (f"ResourceClaim team-a/c1 has UID {second[2]!r}, the kubelet asked "
                                               f"for {first[2]!r}: the claim was deleted and re-created")


def test_twenty_claims_during_an_api_outage_are_answered_each_with_its_own_error_within_the_budget(
    cluster: Cluster, plugin: PluginConn
) -> None:
    claims = claims_for(cluster, 20)
    cluster.server.faults.refuse_connections(120)  # down for longer than the test
    start = time.monotonic()
    response = prepare(plugin, claims)
    took = time.monotonic() - start
    print(f"\n20-claim NodePrepareResources during an API outage answered in {took:.1f}s "
          f"(budget {CALL_BUDGET_S:g}s, kubelet deadline {KUBELET_CALL_TIMEOUT_S:g}s)")
    assert took < CALL_BUDGET_S + 5, f"answered after {took:.1f}s"
    assert set(response.claims) == {uid for _, _, uid in claims}
    for _, name, uid in claims:
        error = response.claims[uid].error
        assert (f"cannot read ResourceClaim team-a/{name}: " in error
                or f"ResourceClaim team-a/{name} could not be read within" in error), error
    assert cdi_files(cluster.cdi_root) == {}


def test_a_hanging_api_server_still_gets_the_kubelet_an_answer_before_its_deadline(
    cluster: Cluster, plugin: PluginConn
) -> None:
    claims = claims_for(cluster, 20)
    cluster.server.faults.delay(5.0, path_regex="resourceclaims")  # every claim GET hangs for 5 s
    deadline = 6.0  # a caller with a shorter deadline than the kubelet's: the budget follows it (2/3 of it)
    start = time.monotonic()
    response = prepare(plugin, claims, timeout=deadline)  # DEADLINE_EXCEEDED would raise here
    took = time.monotonic() - start
    print(f"\n20-claim NodePrepareResources with hanging claim reads answered in {took:.1f}s "
          f"(caller deadline {deadline:g}s)")
    assert took < deadline
    for _, name, uid in claims:
        assert f"ResourceClaim team-a/{name} could not be read within 2.7s" in response.claims[uid].error
