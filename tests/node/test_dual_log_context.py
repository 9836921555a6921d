"""`bridge.logs.ContextLogger`: a component's context and each call's `extra=` both reach the log line."""

from __future__ import annotations

import json
import logging

import pytest

from bridge.logs import ContextLogger, JsonFormatter, TextFormatter


def record_of(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    [record] = caplog.records
    return record


def test_the_call_context_is_kept_next_to_the_component_context(caplog: pytest.LogCaptureFixture) -> None:
    log = ContextLogger(logging.getLogger("bridge.test.ctx"), {"node": "node-a", "driver": "gpu.dra-bridge.io"})
    with caplog.at_level(logging.INFO, "bridge.test.ctx"):
        log.info("claim prepared", extra={"claim": "ns/c1", "devices": "gpu-3"})
    record = record_of(caplog)
    assert json.loads(JsonFormatter().format(record)) | {"ts": "-"} == {
        "ts": "-", "level": "info", "logger": "bridge.test.ctx", "msg": "claim prepared",
        "node": "node-a", "driver": "gpu.dra-bridge.io", "claim": "ns/c1", "devices": "gpu-3"}
    assert TextFormatter().format(record).endswith(
        "claim prepared node=node-a driver=gpu.dra-bridge.io claim=ns/c1 devices=gpu-3")


def test_a_call_key_wins_over_the_component_key_and_the_component_context_is_not_changed(
        caplog: pytest.LogCaptureFixture) -> None:
    log = ContextLogger(logging.getLogger("bridge.test.ctx"), {"node": "node-a"})
    with caplog.at_level(logging.INFO, "bridge.test.ctx"):
        log.info("moved", extra={"node": "node-b"})
        log.info("plain")
    first, second = caplog.records
    assert (getattr(first, "node"), getattr(second, "node")) == ("node-b", "node-a")
