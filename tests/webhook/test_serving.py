"""The webhook's live facts against the API emulator: the dry-run check, the DeviceClass, the node informer, and
reviews that follow the facts as they change (never an answer remembered from older facts)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.kube import connect
from bridge.kube.api import NAMESPACES, KubeAPI
from bridge.sandbox.apiserver import ApiServer
from bridge.webhook.app import Admitter
from bridge.webhook.facts import ServeFacts, facts_from_discovery
from bridge.webhook.metrics import WebhookMetrics
from bridge.webhook.policy import PolicyConfig
from bridge.webhook.review import ReviewConfig
from bridge.webhook.serving import LiveFacts, check_claims_kept, check_device_class, one_shot
from tests.kubenodes import register_node
from tests.polling import wait_until
from tests.webhook.pods import admission_review, container, deployment_pod
from tests.webhook.test_e2e import gpu_node


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Any]:
    servers: list[ApiServer] = []

    def start(version: str = "1.35.0", **kw: Any) -> KubeAPI:
        srv = ApiServer(version=version, **kw).start()
        servers.append(srv)
        return connect(str(srv.write_kubeconfig(tmp_path / f"kc-{len(servers)}")))

    yield start
    for srv in servers:
        srv.stop()


def test_the_dry_run_check_tells_kept_dropped_and_unknown(emulator: Any) -> None:
    api = emulator()
    api.create(NAMESPACES, {"metadata": {"name": "dra-bridge"}})
    assert check_claims_kept(api, "dra-bridge") == (True, "")
    kept, why = check_claims_kept(api, "missing")
    assert kept is None and "dry-run pod create in missing failed" in why
    gated = emulator("1.34.0", feature_gates={"DynamicResourceAllocation": False})
    gated.create(NAMESPACES, {"metadata": {"name": "dra-bridge"}})
    assert check_claims_kept(gated, "dra-bridge") == (False, "a dry-run pod lost spec.resourceClaims")
    assert gated.list(gated.resource_api().claims, "dra-bridge")["items"] == []  # a dry run stores nothing


def test_the_device_class_is_looked_up_where_dra_is_served(emulator: Any) -> None:
    api = emulator()
    facts = facts_from_discovery(api.discovery())
    assert check_device_class(api, facts) is False
    rapi = api.resource_api()
    api.create(rapi.device_classes, {"apiVersion": rapi.device_classes.api_version, "kind": "DeviceClass",
                                     "metadata": {"name": "gpu.dra-bridge.io"}, "spec": {}})
    assert check_device_class(api, facts) is True and one_shot(api, facts).device_class is True


def review_pod(admitter: Admitter, pod: dict[str, Any]) -> dict[str, Any]:
    status, body = admitter.handle(json.dumps(admission_review(pod)).encode())
    assert status == 200
    return json.loads(body)["response"]


def test_reviews_follow_the_live_facts_and_the_memo_never_answers_from_old_ones(emulator: Any) -> None:
    api = emulator()
    facts = facts_from_discovery(api.discovery())
    live = LiveFacts(api, facts, "dra-bridge", interval=3600, unknown_retry=0.2)
    stop = threading.Event()
    live.start(stop)
    try:
        assert live.wait_ready(20)
        assert live.current().claims_kept is None  # its namespace does not exist yet: nothing is translated
        admitter = Admitter(ReviewConfig(PolicyConfig(), facts, "claims"), lambda ns: {"dra-bridge.io/mode": "dra"},
                            None, None, WebhookMetrics(), serve=live.current)
        pod = deployment_pod(container("main", 1), node_selector={"pool": "mig"})
        answer = review_pod(admitter, pod)
        assert "patch" not in answer and "not yet known" in answer["warnings"][0]
        api.create(NAMESPACES, {"metadata": {"name": "dra-bridge"}})
        wait_until(lambda: live.current().claims_kept is True, 30, "the check retried soon")
        assert "patch" in review_pod(admitter, pod)  # same body, new facts: reviewed again, translated
        generation = live.current().generation
        register_node(api, gpu_node("mig-0", labels={"pool": "mig", "nvidia.com/gpu.product":
                                                    "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}))
        # seen as the scheduler would see it (registered, then its not-ready taint lifted: two changes)
        wait_until(lambda: any(n.name == "mig-0" and not n.taints for n in live.current().nodes.nodes), 30,
                   "the node seen")
        assert live.current().generation > generation
        answer = review_pod(admitter, pod)
        assert "patch" not in answer and "MIG slice" in answer["warnings"][0]
    finally:
        stop.set()


def test_pure_callers_get_a_cluster_that_keeps_claims() -> None:
    assert ServeFacts().claims_kept is True and ServeFacts.unknown().claims_kept is None
