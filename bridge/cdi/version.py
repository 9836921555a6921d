"""The lowest `cdiVersion` a spec may declare, from the fields it uses (pure).

A runtime refuses a spec whose `cdiVersion` is lower than what its fields need, and an older runtime refuses a
version it does not know; so we always declare the lowest version that covers the spec. The rules mirror the CDI
project's minimum-version checks (specs-go/version.go), newest first:

| version | needed when |
|---|---|
| 1.1.0 | `netDevices` anywhere; `intelRdt.schemata` or `intelRdt.enableMonitoring` |
| 1.0.0, 0.8.0 | never (API-only releases) |
| 0.7.0 | `intelRdt` or `additionalGids` anywhere |
| 0.6.0 | `annotations` on the spec or on a device; a `.` in the kind's class |
| 0.5.0 | a device name not starting with a letter; `hostPath` on a device node |
| 0.4.0 | `type` on a mount |
| 0.3.0 | otherwise (the earliest version still accepted) |
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

KNOWN_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
EARLIEST_ACCEPTED = "0.3.0"


def _edits(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield spec.get("containerEdits") or {}
    for dev in spec.get("devices") or ():
        yield dev.get("containerEdits") or {}


def _needs_110(spec: Mapping[str, Any]) -> bool:
    for e in _edits(spec):
        rdt = e.get("intelRdt")
        if e.get("netDevices") or (rdt and ("schemata" in rdt or rdt.get("enableMonitoring"))):
            return True
    return False


def _needs_070(spec: Mapping[str, Any]) -> bool:
    return any(e.get("intelRdt") is not None or e.get("additionalGids") for e in _edits(spec))


def _needs_060(spec: Mapping[str, Any]) -> bool:
    if spec.get("annotations") or any(d.get("annotations") for d in spec.get("devices") or ()):
        return True
    _, sep, cls = str(spec.get("kind", "")).partition("/")
    return bool(sep) and "." in cls


def _starts_with_letter(name: str) -> bool:
    return bool(name) and name[0].isascii() and name[0].isalpha()


def _needs_050(spec: Mapping[str, Any]) -> bool:
    names = [str(d.get("name", "")) for d in spec.get("devices") or ()]
    if any(name and not _starts_with_letter(name) for name in names):
        return True
    return any(n.get("hostPath") for e in _edits(spec) for n in e.get("deviceNodes") or ())


def _needs_040(spec: Mapping[str, Any]) -> bool:
    return any(m.get("type") for e in _edits(spec) for m in e.get("mounts") or ())


_RULES = (("1.1.0", _needs_110), ("0.7.0", _needs_070), ("0.6.0", _needs_060), ("0.5.0", _needs_050),
          ("0.4.0", _needs_040))


def minimum_cdi_version(spec: Mapping[str, Any]) -> str:
    """The lowest version covering every field `spec` (a CDI spec as a JSON-ready dict) uses."""
    for version, needed in _RULES:
        if needed(spec):
            return version
    return EARLIEST_ACCEPTED


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))
