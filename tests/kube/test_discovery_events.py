"""Pure pieces: discovery documents into `Discovery`, the resource.k8s.io version choice, and Event objects."""

from __future__ import annotations

import pytest

from bridge.kube import build_event
from bridge.kube.discovery import build_discovery, group_versions, parse_version, pick_resource_version
from bridge.kube.events import MAX_MESSAGE


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"major": "1", "minor": "34", "gitVersion": "v1.34.2"}, ("v1.34.2", 1, 34)),
        ({"major": "1", "minor": "33+", "gitVersion": "v1.33.5-eks-1"}, ("v1.33.5-eks-1", 1, 33)),
        ({"major": "", "minor": "", "gitVersion": "v1.36.0-gke.100"}, ("v1.36.0-gke.100", 1, 36)),
    ],
)
def test_version_parsing_tolerates_distribution_suffixes(doc: dict[str, str], expected: tuple[str, int, int]) -> None:
    assert parse_version(doc) == expected


@pytest.mark.parametrize(
    ("served", "chosen"),
    [
        (["resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"], "v1"),
        (["resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"], "v1beta2"),
        (["resource.k8s.io/v1beta1", "apps/v1"], "v1beta1"),
        (["resource.k8s.io/v1alpha3"], None),
        (["apps/v1", "v1"], None),
    ],
)
def test_newest_served_resource_version_is_chosen(served: list[str], chosen: str | None) -> None:
    assert pick_resource_version(served) == chosen


def test_discovery_documents_become_a_lookup() -> None:
    groups = {"groups": [{"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]}]}
    assert group_versions(groups) == ["apps/v1"]
    d = build_discovery(
        {"major": "1", "minor": "34", "gitVersion": "v1.34.0"},
        [("v1", {"resources": [{"name": "pods", "kind": "Pod", "namespaced": True, "verbs": ["get", "list"]},
                               {"name": "pods/status", "kind": "Pod", "namespaced": True, "verbs": ["get"]}]}),
         ("apps/v1", {"resources": [{"name": "daemonsets", "kind": "DaemonSet", "namespaced": True, "verbs": []}]})],
    )
    assert d.minor == 34 and d.serves("v1", "pods") and d.serves("v1", "pods/status") and d.serves("apps/v1")
    assert not d.serves("apps/v1", "pods") and not d.serves("batch/v1")
    assert d.resources["v1"]["pods"] == {"kind": "Pod", "namespaced": True, "verbs": ["get", "list"]}


def test_event_for_a_pod_lives_in_its_namespace_and_references_it() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "uid": "u1"}}
    ev = build_event(pod, "DeviceRefused", "GPU-1 is owned by the legacy side", type="Warning", component="bridge-node",
                     host="node-1", now="2025-01-01T00:00:00Z")
    assert ev["metadata"] == {"generateName": "p.", "namespace": "ml"}
    assert ev["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "ml", "uid": "u1"}
    assert (ev["type"], ev["reason"], ev["source"]) == ("Warning", "DeviceRefused", {"component": "bridge-node", "host": "node-1"})
    started = build_event(pod, "Started", "Container started", component="kubelet", field_path="spec.containers{c}")
    assert started["involvedObject"]["fieldPath"] == "spec.containers{c}"  # a container's event, as the kubelet's


def test_event_for_a_node_goes_to_default_and_long_messages_are_cut() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    ev = build_event(node, "Moved", "x" * 5000, host="h")
    assert ev["metadata"]["namespace"] == "default" and "namespace" not in ev["involvedObject"]
    assert len(ev["message"]) == MAX_MESSAGE and ev["message"].endswith("...")


@pytest.mark.parametrize(
    ("obj", "kw", "match"),
    [
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, {"type": "Error"}, "Normal or Warning"),
        ({"kind": "Pod", "metadata": {"name": "p"}}, {}, "apiVersion, kind"),
    ],
)
def test_bad_events_are_refused_before_any_request(obj: dict, kw: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=match):
        build_event(obj, "Reason", "m", **kw)
