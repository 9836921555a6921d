"""Validate a CDI spec the way a container runtime's CDI loader would, before it is written (pure).

`schema.json` (next to this file) is our own JSON schema of a CDI spec file, written from the CDI specification
(cncf-tags/container-device-interface SPEC.md, specs-go/config.go) and its loader's rules; `x-cdi-spec-version`
names the newest CDI version it covers. On top of the schema, `validate_spec` checks what a JSON schema cannot say:

* device names are unique within the file (`pkg/cdi/spec.go` `validate`);
* `cdiVersion` is at least what the fields used need (`specs-go/version.go` `ValidateVersion`,
  `bridge.cdi.version.minimum_cdi_version`);
* net devices do not repeat a host interface or a name (`pkg/cdi/container-edits.go` `ValidateNetDevices`).

A spec that fails here would make the runtime skip the whole file, so every spec we write goes through it
(`CdiSpecWriter.write`), and so do the NVIDIA Container Toolkit's specs we consider reusing (`bridge.cdi.toolkit`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

import jsonschema

from bridge.cdi.version import minimum_cdi_version, version_key

SCHEMA_RESOURCE = "schema.json"


class CdiSpecInvalid(ValueError):
    """A CDI spec breaks the CDI specification; the message lists every violation with its JSON path."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid CDI spec: " + "; ".join(problems))
        self.problems = problems


@functools.cache
def load_schema() -> dict[str, Any]:
    text = resources.files("bridge.cdi").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def schema_cdi_version() -> str:
    """The newest CDI version `schema.json` was written for."""
    return str(load_schema()["x-cdi-spec-version"])


@functools.cache
def _validator() -> jsonschema.Draft7Validator:
    schema = load_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@functools.cache
def _part_validator(part: str) -> jsonschema.Draft7Validator:
    """The schema of one part alone: `spec-edits` (the spec-level containerEdits) or `device-edits` (a device's
    containerEdits, which must also not be empty)."""
    definitions = load_schema()["definitions"]
    schema = load_schema()["properties"]["containerEdits"] if part == "spec-edits" else \
        definitions["device"]["properties"]["containerEdits"]
    return jsonschema.Draft7Validator({**schema, "definitions": definitions})


def _where(path: Any) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _message(e: jsonschema.ValidationError, part: str) -> str:
    if e.validator == "anyOf" and part == "device-edits" and not e.absolute_path:
        return "a device's containerEdits must not be empty (the loader: 'invalid device, empty device edits')"
    return e.message


def _errors(validator: jsonschema.Draft7Validator, doc: Any, prefix: tuple[Any, ...] = (),
            part: str = "spec") -> list[str]:
    found = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_where((*prefix, *e.absolute_path))}: {_message(e, part)}" for e in found]


@functools.lru_cache(maxsize=256)
def _cached_part_problems(part: str, edits_json: str) -> tuple[tuple[Any, ...], ...]:
    found = sorted(_part_validator(part).iter_errors(json.loads(edits_json)),
                   key=lambda e: list(map(str, e.absolute_path)))
    return tuple((tuple(e.absolute_path), _message(e, part)) for e in found)


def _part_problems(part: str, edits: Any, prefix: tuple[Any, ...]) -> list[str]:
    try:
        key = json.dumps(edits, sort_keys=True)
    except (TypeError, ValueError):  # not JSON at all: validate it as it is
        return _errors(_part_validator(part), edits, prefix, part)
    return [f"{_where((*prefix, *path))}: {message}" for path, message in _cached_part_problems(part, key)]


# Stands in for a device's containerEdits while the rest of the document is validated (its real edits are
# validated on their own, cached): valid, and as small as possible.
_EDITS_STAND_IN = {"env": ["CDI_SCHEMA_STAND_IN=1"]}


@functools.cache
def _device_name_pattern() -> re.Pattern[str]:
    return re.compile(load_schema()["definitions"]["device"]["properties"]["name"]["pattern"])


@functools.lru_cache(maxsize=256)
def _cached_skeleton_problems(skeleton_json: str) -> tuple[str, ...]:
    return tuple(_errors(_validator(), json.loads(skeleton_json)))


def _skeleton_problems(rest: dict[str, Any]) -> list[str]:
    """The document without its edits. Device names (a claim UID in each: never the same twice) are checked
    against the schema's own name pattern directly, the rest validated once per distinct shape and cached."""
    devices = rest.get("devices")
    names: list[tuple[int, Any]] = []
    if isinstance(devices, list):
        skeleton = []
        for i, d in enumerate(devices):
            if isinstance(d, dict):
                if isinstance(d.get("name"), str):
                    names.append((i, d["name"]))
                    d = {**d, "name": f"n{i}"}
                if "containerEdits" in d:
                    d = {**d, "containerEdits": _EDITS_STAND_IN}
            skeleton.append(d)
        rest = {**rest, "devices": skeleton}
    try:
        problems = list(_cached_skeleton_problems(json.dumps(rest, sort_keys=True)))
    except (TypeError, ValueError):  # not JSON at all
        problems = _errors(_validator(), rest)
    pattern = _device_name_pattern()
    problems += [f"$.devices[{i}].name: {name!r} does not match {pattern.pattern!r}"
                 for i, name in names if not pattern.search(name)]
    return problems


def spec_problems(doc: Mapping[str, Any]) -> list[str]:
    """Every violation, as `"<json path>: <message>"`; empty when the spec would load.

    Fast without a second rule set: the containerEdits objects (the driver's mounts and hooks at spec level, a
    GPU's device node per device: the same for every claim until the node's driver files change) are validated
    on their own against their part of the schema, once per distinct content, the result cached; so is the rest
    (version, kind, annotations) per distinct shape, with valid stand-ins where the edits and device names were;
    the names are matched against the schema's own pattern. The parts together are exactly the whole schema:
    nothing else in it refers to those properties."""
    rest = {k: v for k, v in doc.items() if k != "containerEdits"}
    problems = _skeleton_problems(rest)
    devices = rest.get("devices")
    device_edits = [(i, d["containerEdits"]) for i, d in enumerate(devices if isinstance(devices, list) else [])
                    if isinstance(d, dict) and "containerEdits" in d]
    if "containerEdits" in doc:
        problems += _part_problems("spec-edits", doc["containerEdits"], ("containerEdits",))
    for i, edits in device_edits:
        problems += _part_problems("device-edits", edits, ("devices", i, "containerEdits"))
    if problems:
        return problems
    names = [str(d["name"]) for d in doc["devices"]]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"$.devices: device name(s) {', '.join(dupes)} defined more than once")
    declared = str(doc["cdiVersion"]).lstrip("v")
    needed = minimum_cdi_version(doc)
    if version_key(declared) < version_key(needed):
        problems.append(f"$.cdiVersion: {declared} is lower than {needed}, which the fields used need")
    edits = [doc.get("containerEdits") or {}] + [d["containerEdits"] for d in doc["devices"]]
    for e in edits:
        nets = e.get("netDevices") or []
        for key in ("hostInterfaceName", "name"):
            values = [n[key] for n in nets]
            if len(set(values)) != len(values):
                problems.append(f"$: netDevices repeat a {key}")
    return problems


def validate_spec(doc: Mapping[str, Any]) -> None:
    """Raise `CdiSpecInvalid` listing every violation; return when the spec is valid."""
    problems = spec_problems(doc)
    if problems:
        raise CdiSpecInvalid(problems)
