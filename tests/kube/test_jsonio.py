"""Large bodies decode with the cyclic collector paused, and its state is always restored."""

from __future__ import annotations

import gc
import json
import threading

from bridge.kube import jsonio


def big_body(n: int = 8000) -> bytes:
    return json.dumps({"items": [{"metadata": {"name": f"p{i}", "labels": {"a": "b"}}} for i in range(n)]}).encode()


def test_decodes_like_json_loads() -> None:
    body = big_body()
    assert len(body) > jsonio.LARGE
    assert jsonio.loads(body) == json.loads(body)
    assert jsonio.loads(b'{"a": 1}') == {"a": 1}


def test_collector_is_re_enabled_after_large_decodes_even_concurrent_ones() -> None:
    assert gc.isenabled()
    body = big_body()
    threads = [threading.Thread(target=lambda: [jsonio.loads(body) for _ in range(5)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert gc.isenabled()


def test_collector_stays_disabled_when_the_caller_disabled_it() -> None:
    gc.disable()
    try:
        jsonio.loads(big_body())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_invalid_json_still_restores_the_collector() -> None:
    bad = b'{"items": [' + b'1,' * 200000 + b"oops"
    try:
        jsonio.loads(bad)
    except ValueError:
        pass
    else:  # pragma: no cover - the body is invalid
        raise AssertionError("invalid JSON was accepted")
    assert gc.isenabled()
