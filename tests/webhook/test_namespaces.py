"""`bridge namespace status` aggregation and the `set` message, over plain objects."""

from __future__ import annotations

import json

from bridge.webhook.namespaces import describe_change, namespace_status, render_table
from tests.webhook.pods import container, deployment_pod


def ns(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def pod(namespace: str, *containers: dict, annotations: dict | None = None, phase: str = "Running") -> dict:
    p = deployment_pod(*containers, annotations=annotations)
    p["metadata"]["namespace"] = namespace
    p["status"] = {"phase": phase}
    return p


def test_status_counts_translated_legacy_opted_out_and_shadow_findings() -> None:
    shadow_blocked = json.dumps({"ok": False, "reasons": ["container main: nvidia.com/gpu.shared is a time-sliced GPU"]})
    rows = namespace_status(
        [ns("team-a", **{"dra-bridge.io/mode": "dra"}), ns("team-b", **{"dra-bridge.io/mode": "shadow",
                                                                     "dra-bridge.io/target": "claims"}), ns("web")],
        [
            pod("team-a", container("main"), annotations={"dra-bridge.io/translated": "claims"}),
            pod("team-a", container("main", 1)),
            pod("team-a", container("main", 1), annotations={"dra-bridge.io/translate": "false"}),
            pod("team-a", container("main", 1), phase="Succeeded"),
            pod("team-b", container("main", 2), annotations={"dra-bridge.io/shadow-translation": '{"ok":true}'}),
            pod("team-b", container("main", extra={"nvidia.com/gpu.shared": 1}),
                annotations={"dra-bridge.io/shadow-translation": shadow_blocked}),
            pod("team-b", container("other", extra={"nvidia.com/gpu.shared": 1}),
                annotations={"dra-bridge.io/shadow-translation": shadow_blocked.replace("main", "other")}),
            pod("web", container("nginx")),
        ],
    )
    a, b, web = rows
    assert (a.mode, a.translated_pods, a.legacy_gpu_pods, a.opted_out_pods) == ("dra", 1, 2, 1)
    assert (b.mode, b.target, b.shadow_ok, b.shadow_blocked) == ("shadow", "claims", 1, 2)
    assert b.blockers == {"nvidia.com/gpu.shared is a time-sliced GPU": 2}
    assert (web.mode, web.legacy_gpu_pods) == ("legacy", 0)
    table = render_table(rows)
    assert "team-b: 2 pod(s) would stay legacy: nvidia.com/gpu.shared is a time-sliced GPU" in table
    assert table.splitlines()[0].split() == ["NAMESPACE", "MODE", "TARGET", "LEGACY-GPU-PODS", "TRANSLATED",
                                             "OPTED-OUT", "SHADOW-OK", "SHADOW-BLOCKED"]


def test_set_message_says_running_pods_are_not_changed() -> None:
    msg = describe_change("team-a", "shadow", "dra", 3, "claims")
    assert "shadow -> dra" in msg and "translated to DRA (claims)" in msg and "3 GPU pod(s)" in msg
    assert "nothing changes" in describe_change("team-a", "dra", "dra", 0, "claims")


def test_a_mistyped_mode_label_is_legacy_with_a_warning_naming_the_fix() -> None:
    (row,) = namespace_status([ns("team-a", **{"dra-bridge.io/mode": "dar", "dra-bridge.io/target": "claim"})], [])
    assert row.mode == "legacy"
    table = render_table([row])
    assert ("team-a: WARNING: namespace label dra-bridge.io/mode='dar' is not one of legacy, shadow, dra; treating it "
            "as legacy (set a valid one: bridge namespace set team-a legacy|shadow|dra)") in table
    assert "dra-bridge.io/target='claim' is not claims or extended" in table
    assert row.as_dict()["labelWarnings"][0].startswith("namespace label dra-bridge.io/mode='dar'")
    (fine,) = namespace_status([ns("team-b", **{"dra-bridge.io/mode": "dra"})], [])
    assert "WARNING" not in render_table([fine]) and "labelWarnings" not in fine.as_dict()


def test_a_pod_created_in_the_flips_own_second_counts_as_after_it() -> None:
    from bridge.webhook.nscheck import since_flip

    flipped = ns("team-a", **{"dra-bridge.io/mode": "dra"})
    flipped["metadata"]["annotations"] = {"dra-bridge.io/mode-changed-at": "2026-11-02T09:00:00.734512Z"}
    same = pod("team-a", container("main", 1))
    same["metadata"].update(name="same-second", creationTimestamp="2026-11-02T09:00:00Z")
    earlier = pod("team-a", container("main", 1))
    earlier["metadata"].update(name="earlier", creationTimestamp="2026-11-02T08:59:59Z")
    flip = since_flip(flipped, "dra", [same, earlier], [])
    assert flip is not None and flip.gpu_pods == 1 and flip.unseen == ["same-second"]


def test_a_hostile_shadow_record_is_skipped_and_reasons_reach_the_terminal_escaped() -> None:
    """Issue 27 items 2 and 10: a pod author writes this annotation too. Deep JSON raised RecursionError (only
    ValueError was caught), a list raised AttributeError, and a reason with ESC reached the terminal raw."""
    sneaky = json.dumps({"ok": False, "reasons": ["container main: \x1b[2Jcleared\r"]})
    rows = namespace_status([ns("team-b", **{"dra-bridge.io/mode": "shadow"})], [
        pod("team-b", container("main", 1), annotations={"dra-bridge.io/shadow-translation": "[" * 100_000}),
        pod("team-b", container("main", 1), annotations={"dra-bridge.io/shadow-translation": "[1, 2]"}),
        pod("team-b", container("main", 1), annotations={"dra-bridge.io/shadow-translation": sneaky}),
    ])
    assert (rows[0].shadow_ok, rows[0].shadow_blocked) == (0, 1)
    table = render_table(rows)
    assert "\x1b" not in table and "\r" not in table and "\\x1b[2Jcleared\\r" in table
