"""Webhook test fixtures: review configuration, schema validation helpers."""

from __future__ import annotations

import base64
import json
from typing import Any

import kubernetes_validate
import pytest

from bridge.webhook.facts import ClusterFacts
from bridge.webhook.policy import PolicyConfig
from bridge.webhook.review import ReviewConfig

SCHEMA_VERSION = "1.36.0"


def validate(obj: dict[str, Any]) -> None:
    """Strict validation against the published Kubernetes OpenAPI schemas (raises with the failing field)."""
    kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)


def decode_patch(body: dict[str, Any]) -> list[dict[str, Any]]:
    resp = body["response"]
    if "patch" not in resp:
        return []
    assert resp["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(resp["patch"]))


@pytest.fixture
def v1_facts() -> ClusterFacts:
    return ClusterFacts("v1", 1, 35)


@pytest.fixture
def config(v1_facts: ClusterFacts) -> ReviewConfig:
    return ReviewConfig(PolicyConfig(own_namespace="dra-bridge"), v1_facts, "claims")
