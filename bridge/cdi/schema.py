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
def _edits_validator() -> jsonschema.Draft7Validator:
    """The schema of one `containerEdits` object alone (what the spec-level edits must satisfy)."""
    schema = load_schema()
    return jsonschema.Draft7Validator({"$ref": "#/definitions/containerEdits", "definitions": schema["definitions"]})


def _where(path: Any) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _message(e: jsonschema.ValidationError) -> str:
    if e.validator == "anyOf" and list(e.absolute_path)[-1:] == ["containerEdits"]:
        return "a device's containerEdits must not be empty (the loader: 'invalid device, empty device edits')"
    return e.message


def _errors(validator: jsonschema.Draft7Validator, doc: Any, prefix: tuple[Any, ...] = ()) -> list[str]:
    found = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_where((*prefix, *e.absolute_path))}: {_message(e)}" for e in found]


@functools.lru_cache(maxsize=64)
def _edits_problems(edits_json: str) -> tuple[str, ...]:
    return tuple(_errors(_edits_validator(), json.loads(edits_json), ("containerEdits",)))


def spec_problems(doc: Mapping[str, Any]) -> list[str]:
    """Every violation, as `"<json path>: <message>"`; empty when the spec would load.

    The spec-level `containerEdits` (the driver's mounts and hooks: the bulk of a spec, and the same for every
    claim until the node's driver files change) are validated once per distinct content and the result cached;
    the rest of the document every time. Both together are exactly the whole schema: the top-level
    `containerEdits` property has a schema of its own that no other part refers to."""
    rest = {k: v for k, v in doc.items() if k != "containerEdits"}
    problems = _errors(_validator(), rest)
    if "containerEdits" in doc:
        try:
            key = json.dumps(doc["containerEdits"], sort_keys=True)
        except (TypeError, ValueError):
            problems += _errors(_edits_validator(), doc["containerEdits"], ("containerEdits",))
        else:
            problems += _edits_problems(key)
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
