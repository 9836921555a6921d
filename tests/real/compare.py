"""Comparing two servers' answers: `Normaliser` replaces what legitimately differs between two servers (uids,
resourceVersions, timestamps, managedFields, server-generated name suffixes) with placeholders, keeping where they
are and whether two of them are equal (the same uid twice stays one placeholder); `same` runs one script against both
servers and fails with a diff of the normalised transcripts; the projections leave out, per kind, what the emulator
deliberately does not model (each says why; the list is in `bridge/sandbox/apiserver/__init__.py`)."""

from __future__ import annotations

import difflib
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from bridge.sandbox.real.binaries import LINES
from tests.real.conftest import REAL_LINE
from tests.real.wire import Answer, Backend

REAL_VERSION = LINES[REAL_LINE]

Obj = dict[str, Any]



_VOLATILE_META = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


class Normaliser:
    """Placeholders for values that differ between servers by nature. One instance per compared transcript: the n-th
    distinct uid becomes `<uid-n>` on both sides, so "this is the same object" still compares."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], str] = {}

    def token(self, kind: str, value: str) -> str:
        key = (kind, value)
        if key not in self._seen:
            self._seen[key] = f"<{kind}-{sum(1 for k in self._seen if k[0] == kind) + 1}>"
        return self._seen[key]

    def __call__(self, value: Any, generated: Mapping[str, str] | None = None) -> Any:
        """`generated`: generateName prefix -> placeholder (names the server made up)."""
        if isinstance(value, dict):
            out: Obj = {}
            for k, v in value.items():
                if k == "managedFields" or v is None or v == {}:
                    # null, {} and absent read the same to every client (Go's encoder writes an empty struct as {}
                    # even with omitempty, and a nil pointer as null)
                    continue
                if k in _VOLATILE_META and isinstance(v, str):
                    # uids keep their identity (the same object twice); resourceVersions do not: the real server's
                    # own controllers write between our requests, so no two servers count alike
                    out[k] = self.token(k, v) if k == "uid" else f"<{k}>"
                elif k == "continue" and isinstance(v, str):
                    out[k] = "<continue>"
                else:
                    out[k] = self(v, generated)
            return out
        if isinstance(value, list):
            return [self(v, generated) for v in value]
        if isinstance(value, str):
            if _TIME.match(value):
                return "<time>"
            for prefix, placeholder in (generated or {}).items():
                if value.startswith(prefix) and len(value) == len(prefix) + 5:
                    return placeholder
        return value


def status_shape(answer: Answer) -> Obj:
    """What a client branches on in an error answer: the code, and the Status's reason, code and details."""
    body = answer.body if isinstance(answer.body, dict) else {}
    shape: Obj = {"http": answer.status, "kind": body.get("kind")}
    if body.get("kind") == "Status":
        shape.update({"status": body.get("status"), "reason": body.get("reason"), "code": body.get("code")})
        details = body.get("details") or {}
        shape["details"] = {k: details[k] for k in ("name", "group", "kind") if k in details}
        if details.get("causes"):
            shape["causes"] = sorted((c.get("field", ""), c.get("reason", "")) for c in details["causes"])
    return shape


def namespace(b: Backend, name: str, *, pods_ready: bool = True) -> str:
    """A new namespace. `pods_ready`: on the real server, also wait until the controller manager has made its
    `default` ServiceAccount, without which pods there are refused (403 `error looking up service account`) once
    the ServiceAccount admission's own ten tries (1-2 s) are up; under load that is not rare. The emulator takes
    the ServiceAccount to exist."""
    answer = b.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert answer.status == 201, answer.body
    if pods_ready and b.name == "real":
        deadline = time.monotonic() + 60
        while b.call("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default").status != 200:
            assert time.monotonic() < deadline, f"no ServiceAccount {name}/default after 60 s"
            time.sleep(0.1)
    return name


def same(both: tuple[Backend, Backend], script: Callable[[Backend, Normaliser], Any]) -> Any:
    """Run `script` on both servers; fail with a readable diff of the normalised transcripts when they differ."""
    out = {b.name: script(b, Normaliser()) for b in both}
    texts = {k: json.dumps(v, indent=1, sort_keys=True, default=str).splitlines() for k, v in out.items()}
    if texts["emulator"] != texts["real"]:
        diff = "\n".join(difflib.unified_diff(texts["emulator"], texts["real"], "emulator",
                                              f"kube-apiserver {REAL_VERSION}",
                                              lineterm="", n=4))
        pytest.fail(f"the emulator answers differently from the real server:\n{diff}", pytrace=False)
    return out["real"]


def shape(answer: Answer, n: Normaliser, project: Callable[[Obj], Obj] | None = None) -> Obj:
    """The status shape, plus the normalised object (or its projection) when the answer is one."""
    out = status_shape(answer)
    body = answer.body
    if isinstance(body, dict) and body.get("kind") != "Status":
        out["object"] = n(project(body) if project else body)
    return out


def pod_view(obj: Obj) -> Obj:
    """A pod without the fields the emulator does not default (see the module docstring of the emulator): what the
    bridge reads of a pod (metadata, node, containers' names and resources, claims, phase)."""
    spec = obj.get("spec") or {}
    return {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion"), "metadata": obj.get("metadata"),
            "spec": {"nodeName": spec.get("nodeName"), "resourceClaims": spec.get("resourceClaims"),
                     "containers": [{k: c.get(k) for k in ("name", "image")} for c in spec.get("containers") or []]},
            "status": {"phase": (obj.get("status") or {}).get("phase")}}


def node_view(obj: Obj) -> Obj:
    """A Node without what the real cluster adds that the emulator leaves to the kubelet simulator or does not
    model: the TTL controller's `node.alpha.kubernetes.io/ttl` annotation, the `node.kubernetes.io/not-ready` taint
    of the TaintNodesByCondition admission plugin (which the node lifecycle controller removes once the node is
    Ready: without that controller the emulator would keep every node tainted), and the zero-valued
    `status.nodeInfo` / `status.daemonEndpoints` structs Go serialises on a Node nobody has reported for."""
    meta = dict(obj.get("metadata") or {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != "node.alpha.kubernetes.io/ttl"}
    meta["annotations"] = annotations or None
    spec = dict(obj.get("spec") or {})
    taints = [t for t in spec.get("taints") or [] if t.get("key") != "node.kubernetes.io/not-ready"]
    spec["taints"] = taints or None
    status = {k: v for k, v in (obj.get("status") or {}).items()
              if not (k == "nodeInfo" and not any(v.values())) and
              not (k == "daemonEndpoints" and not (v.get("kubeletEndpoint") or {}).get("Port"))}
    return {**obj, "metadata": meta, "spec": spec, "status": status}


def policy_view(obj: Obj) -> Obj:
    """A ValidatingAdmissionPolicy without the `status` kube-apiserver's type checker writes (not modelled)."""
    return {k: v for k, v in obj.items() if k != "status"}


PROJECTIONS: dict[str, Callable[[Obj], Obj]] = {"pods": pod_view, "nodes": node_view,
                                                 "validatingadmissionpolicies": policy_view}


def events_of(events: list[Obj]) -> list[Any]:
    """A watch's events as (type, kind, apiVersion, name, data.k); bookmarks and errors as their metadata keys,
    annotations, reason and code."""
    out: list[Any] = []
    for ev in events:
        obj = ev.get("object") or {}
        meta = obj.get("metadata") or {}
        if ev.get("type") in ("BOOKMARK", "ERROR", "HTTP"):
            out.append((ev.get("type"), obj.get("kind"), obj.get("apiVersion"), sorted(meta),
                        meta.get("annotations"), obj.get("reason"), obj.get("code")))
        else:
            out.append((ev.get("type"), obj.get("kind"), obj.get("apiVersion"), meta.get("name"),
                        (obj.get("data") or {}).get("k")))
    return out
