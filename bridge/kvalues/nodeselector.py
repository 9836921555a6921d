"""Node selector requirements against a node's labels (pure): the one implementation, under the node filters of
`bridge.kvalues.placement` and the report's GFD checks.

Written from kubernetes/kubernetes staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity
(`nodeSelectorRequirementsAsSelector` and the labels selector it builds): In, NotIn, Exists, DoesNotExist, Gt, Lt;
NotIn and DoesNotExist match a node without the label; Gt and Lt take exactly one value and compare integers, and
anything that is not an integer (on either side) does not match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def requirement_matches(key: str, op: str, values: Sequence[str], labels: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement (`key`, `op`, `values`) against `labels`; an unknown operator matches nothing."""
    value = labels.get(key)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


__all__ = ["requirement_matches"]
