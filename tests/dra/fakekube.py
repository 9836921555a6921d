"""An in-memory `KubeAPI` for unit tests of the DRA core: claims by (namespace, name), slices, events.

Only the verbs the DRA side uses are implemented; anything else raises AssertionError so a test never passes by
accident through an unimplemented verb. End-to-end tests use the API emulator instead.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from bridge.kube.api import EVENTS, Resource, ResourceAPI
from bridge.kube.errors import NotFound, Unavailable

Obj = dict[str, Any]


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (plural, namespace, name) -> object
        self.calls: list[tuple[str, str]] = []
        self.down = False
        self._lock = threading.Lock()
        self._n = 0

    def resource_api(self) -> ResourceAPI:
        return ResourceAPI("v1")

    def put(self, res: Resource, obj: Obj) -> Obj:
        meta = obj["metadata"]
        with self._lock:
            self.objects[(res.plural, meta.get("namespace", ""), meta["name"])] = copy.deepcopy(obj)
        return obj

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        self.calls.append(("get", f"{res.plural}/{namespace}/{name}"))
        if self.down:
            raise Unavailable("connection refused (fake API down)", request_sent=False)
        with self._lock:
            obj = self.objects.get((res.plural, namespace or "", name))
        if obj is None:
            raise NotFound(f'{res.plural} "{name}" not found', status=404)
        return copy.deepcopy(obj)

    def delete(self, res: Resource, name: str, namespace: str | None = None, *,
               grace_period_seconds: int | None = None, uid: str | None = None) -> None:
        with self._lock:
            if self.objects.pop((res.plural, namespace or "", name), None) is None:
                raise NotFound(f'{res.plural} "{name}" not found', status=404)

    def create(
        self, res: Resource, obj: Obj, namespace: str | None = None, *, dry_run: bool = False,
        subresource: str | None = None,
    ) -> Obj:
        self.calls.append(("create", res.plural))
        if self.down:
            raise Unavailable("connection refused (fake API down)", request_sent=False)
        obj = copy.deepcopy(obj)
        if res == EVENTS or "generateName" in obj["metadata"]:
            with self._lock:
                self._n += 1
                obj["metadata"]["name"] = obj["metadata"].pop("generateName", "x.") + str(self._n)
        return self.put(res, obj)

    def delete_collection(self, res: Resource, namespace: str | None = None, *, label_selector: str | None = None,
                          field_selector: str | None = None) -> None:
        self.calls.append(("delete_collection", f"{res.plural}?{field_selector}"))
        if self.down:
            raise Unavailable("connection refused (fake API down)", request_sent=False)
        key, _, value = (field_selector or "").partition("=")
        assert key == "spec.nodeName", f"fake supports only spec.nodeName selectors, got {field_selector!r}"
        with self._lock:
            for k in [k for k, o in self.objects.items() if k[0] == res.plural and o["spec"].get("nodeName") == value]:
                del self.objects[k]

    def events(self) -> list[Obj]:
        with self._lock:
            return [o for k, o in self.objects.items() if k[0] == "events"]

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"FakeKube does not implement {name}")
