"""The generated claim of a pod that finished is deleted once and stays deleted, as kube-controller-manager does it.

The resource claim controller deletes a generated claim nobody reserves once its pod is done; that deletion brings
the pod back to the controller (the claim's pods are re-examined), which finds the pod's recorded claim missing. The
real one asks its mutation cache whether the claim exists, which still holds the claim it created (it is never told
of deletions), so nothing is created again. The stand-in re-created the claim, deleted it and re-created it without
end. tests/real/test_claim_differential.py compares each claim's whole life with kube-controller-manager v1.37.2.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from bridge.kube import PODS, KubeAPI
from bridge.kube.watch import Informer
from bridge.sandbox.cluster import NodeSpec
from bridge.sandbox.kubelet.pods import RUN_SECONDS_ANNOTATION
from tests.polling import wait_until
from tests.sandbox_cluster import create_gpu_template, create_namespaces, dra_gpu_pod

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _claims_added(api: KubeAPI, namespace: str, stop: threading.Event) -> list[str]:
    """The name of every claim created in the namespace from now until `stop`, in order."""
    added: list[str] = []
    Informer(api, api.resource_api().claims, namespace=namespace,
             on_event=lambda ev: added.append(ev.object["metadata"]["name"]) if ev.type == "ADDED" else None
             ).start(stop)
    return added


def test_a_finished_pods_generated_claim_is_deleted_once_and_never_created_again(sandbox_cluster: Any) -> None:
    cluster = sandbox_cluster((NodeSpec("n1", "1xH100-80GB", split="1"),), version="1.37", bridge=True)
    cluster.wait_daemons_settled(60)
    api = cluster.api
    create_namespaces(api, "team")
    create_gpu_template(api, "team")
    stop = threading.Event()
    added = _claims_added(api, "team", stop)
    try:
        job = dra_gpu_pod("job", "team", {RUN_SECONDS_ANNOTATION: "1"})
        job["spec"]["restartPolicy"] = "Never"
        api.create(PODS, job, "team")
        cluster.wait_pod_phase("team", "job", "Succeeded", 60)
        rapi = api.resource_api()
        wait_until(lambda: api.list(rapi.claims, "team")["items"] == [], 30, "the finished pod's claim deleted")
        time.sleep(2)  # a re-created claim would show within milliseconds
        assert api.list(rapi.claims, "team")["items"] == []
        assert len(added) == 1 and added[0].startswith("job-gpu-"), added
        statuses = (cluster.pod("team", "job") or {})["status"]["resourceClaimStatuses"]
        assert statuses == [{"name": "gpu", "resourceClaimName": added[0]}]  # still names the claim it had
    finally:
        stop.set()


@pytest.mark.parametrize(("version", "claims_made"), [("1.37", True), ("1.38", False)])
def test_from_1_38_a_terminal_pod_gets_no_claim_from_its_template(sandbox_cluster: Any, version: str,
                                                                  claims_made: bool) -> None:
    """kube-controller-manager 1.38 ignores Succeeded and Failed pods (podNeedsWork, syncPod: `IsPodTerminal`);
    1.37 still made a failed pod's claim once its template appeared (then deleted it: its pod is done) and recorded
    it in the pod's status."""
    cluster = sandbox_cluster((NodeSpec("n1", "1xH100-80GB", split="1"),), version=version)
    api = cluster.api
    create_namespaces(api, "team")
    stop = threading.Event()
    added = _claims_added(api, "team", stop)
    try:
        api.create(PODS, dra_gpu_pod("failed", "team", template="late"), "team")  # its template does not exist yet
        api.patch(PODS, "failed", {"status": {"phase": "Failed"}}, "team", subresource="status")
        create_gpu_template(api, "team", "late")
        if claims_made:
            wait_until(lambda: added, 30, "the failed pod's claim made")
            wait_until(lambda: (cluster.pod("team", "failed") or {})["status"].get("resourceClaimStatuses"), 30,
                       "the claim recorded in the pod's status")
        else:
            time.sleep(2)  # the 1.37 controller makes the claim within milliseconds of its retry finding the template
            assert added == []
            assert "resourceClaimStatuses" not in (cluster.pod("team", "failed") or {})["status"]
    finally:
        stop.set()
