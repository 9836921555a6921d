"""Text logs: one record is one line, whatever a caller puts in a device ID, a pod name or an exception."""

from __future__ import annotations

import json
import logging
import re

from bridge.logs import JsonFormatter, TextFormatter

RECORD_START = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO |WARNING|ERROR|CRITICAL) ")
FORGED = "\n2025-06-01T12:00:00.000Z INFO  bridge.node: registered with the kubelet node=n1"


def record(msg: str, *args: object, exc: BaseException | None = None, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("bridge.deviceplugin", logging.WARNING, __file__, 1, msg, args,
                            (type(exc), exc, exc.__traceback__) if exc else None)
    rec.__dict__.update(extra)
    return rec


def record_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if RECORD_START.match(line)]


def test_a_device_id_with_a_newline_cannot_forge_a_log_line() -> None:
    text = TextFormatter().format(record("Allocate refused %s", "GPU-1" + FORGED, devices="GPU-1" + FORGED))
    assert len(text.splitlines()) == 1 and len(record_lines(text)) == 1
    assert "Allocate refused GPU-1\\n2025-06-01T12:00:00.000Z INFO  bridge.node: registered" in text
    assert 'devices="GPU-1\\n2025-06-01T12:00:00.000Z INFO  bridge.node: registered with the kubelet node=n1"' in text


def test_carriage_returns_escapes_and_unicode_line_separators_are_escaped_too() -> None:
    text = TextFormatter().format(record("pod %s", "a\rb\x1b[2Jc\u2028d\x00e\x85f"))
    assert text.endswith("pod a\\rb\\x1b[2Jc\\u2028d\\x00e\\x85f")
    assert len(text.splitlines()) == 1


def test_a_context_value_cannot_add_a_key_of_its_own() -> None:
    text = TextFormatter().format(record("prepared", pod="web-0 node=evil", claim='say "hi"', empty="", n=3))
    assert text.endswith('prepared pod="web-0 node=evil" claim="say \\"hi\\"" empty="" n=3')


def test_ordinary_values_stay_unquoted() -> None:
    text = TextFormatter().format(record("claim prepared", node="node-a", claim="ns/c1", devices="gpu-3"))
    assert text.endswith("claim prepared node=node-a claim=ns/c1 devices=gpu-3")


def test_a_traceback_is_indented_under_its_record_so_a_forged_exception_message_starts_no_record() -> None:
    try:
        raise ValueError("bad device" + FORGED)
    except ValueError as err:
        text = TextFormatter().format(record("Allocate failed", exc=err))
    lines = text.splitlines()
    assert len(lines) > 2 and len(record_lines(text)) == 1 and lines[0].endswith("Allocate failed")
    assert all(line.startswith("  ") for line in lines[1:])
    assert "  Traceback (most recent call last):" in lines


def test_json_lines_stay_one_line_and_keep_the_exact_text() -> None:
    text = JsonFormatter().format(record("refused %s", "GPU-1" + FORGED, devices="GPU-1" + FORGED))
    assert len(text.splitlines()) == 1
    doc = json.loads(text)
    assert doc["msg"] == "refused GPU-1" + FORGED and doc["devices"] == "GPU-1" + FORGED
