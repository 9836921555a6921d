"""The review path's JSON codec reads what the API server sends exactly as the standard library does, and writes the
same JSON documents."""

from __future__ import annotations

import json

import pytest

from bridge.webhook import jsoncodec
from tests.webhook.pods import admission_review, container, deployment_pod


def test_a_review_reads_and_writes_as_with_the_standard_library() -> None:
    doc = admission_review(deployment_pod(container("main", 2), annotations={"note": "GPU für Training ✓"}))
    body = json.dumps(doc).encode()
    assert jsoncodec.loads(body) == json.loads(body) == doc
    written = jsoncodec.dumps(doc)
    assert json.loads(written) == doc and b": " not in written and b", " not in written  # compact
    assert jsoncodec.dumps_sorted({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert list(json.loads(jsoncodec.dumps({"z": 1, "a": 2}))) == ["z", "a"]  # insertion order kept


@pytest.mark.parametrize("text", ['{"count": 123456789012345678901234567890}', "[" * 2000 + "]" * 2000,
                                  '{"s": "\\ud800"}'])
def test_what_a_fast_parser_refuses_the_standard_library_still_reads(text: str) -> None:
    try:
        expected = json.loads(text)
    except RecursionError:
        pytest.skip("too deep for the standard library here as well")
    assert jsoncodec.loads(text) == expected


@pytest.mark.parametrize("text", ["", "{", '{"a": 1,}', "nope"])
def test_what_is_not_json_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        jsoncodec.loads(text)
