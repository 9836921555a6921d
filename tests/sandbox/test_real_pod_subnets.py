"""The pod /24 of each real sandbox node (bridge.sandbox.real.node.pod_subnet): in 10.64.0.0/10, free on this
machine, and never inside the Service range, whose unallocated addresses kube-proxy's nftables mode drops."""

from __future__ import annotations

import ipaddress

import pytest

from bridge.sandbox.real import node
from bridge.sandbox.real.plane import SERVICE_CIDR

PODS = ipaddress.IPv4Network("10.64.0.0/10")


def test_no_node_of_any_cluster_gets_pods_in_the_service_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node, "used_networks", lambda: [])
    services = ipaddress.IPv4Network(SERVICE_CIDR)
    assert services.subnet_of(PODS)  # the case this guards: the pods' range holds the Service range
    # 2,000 clusters of 2 nodes: without the check about 1 node in 64 landed in 10.96.0.0/16 (CI saw one)
    subnets = [ipaddress.IPv4Network(node.pod_subnet(f"cluster-{c}", i)) for c in range(2000) for i in range(2)]
    assert all(s.prefixlen == 24 and s.subnet_of(PODS) for s in subnets)
    assert [s for s in subnets if s.overlaps(services)] == []


def test_a_node_keeps_its_subnet_for_the_same_cluster_and_skips_what_this_machine_routes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node, "used_networks", lambda: [])
    first = node.pod_subnet("abc", 0)
    assert node.pod_subnet("abc", 0) == first and node.pod_subnet("abc", 1) != first
    monkeypatch.setattr(node, "used_networks", lambda: [ipaddress.IPv4Network(first)])
    assert node.pod_subnet("abc", 0) != first
