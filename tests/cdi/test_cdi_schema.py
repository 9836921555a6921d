"""Our CDI schema (bridge/cdi/schema.json + schema.py) against the CDI specification.

Cases are written from cncf-tags/container-device-interface SPEC.md (the JSON shape and field rules) and the
loader's checks it enforces beyond the prose (strict parsing, names, env, device-node types and permissions, hook
names, non-empty device edits, unique names, minimum version). Each case says where the rule comes from.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from bridge.cdi import CdiSpecInvalid, CdiSpecWriter, validate_spec
from bridge.cdi.schema import load_schema, schema_cdi_version, spec_problems
from bridge.cdi.version import KNOWN_VERSIONS, version_key

# SPEC.md "Specification" example, with the placeholders filled in
SPEC_EXAMPLE: dict[str, Any] = {
    "cdiVersion": "0.7.0",
    "kind": "vendor.com/device",
    "annotations": {"vendor.com/note": "example"},
    "devices": [{
        "name": "myDevice",
        "annotations": {"vendor.com/model": "x1"},
        "containerEdits": {
            "env": ["FOO=VALID_SPEC", "BAR=BARVALUE1"],
            "deviceNodes": [{"path": "/dev/vendor0", "hostPath": "/vendorroot/dev/vendor0", "type": "c",
                             "major": 240, "minor": 0, "fileMode": 0o666, "permissions": "rwm", "uid": 0,
                             "gid": 0}],
            "mounts": [{"hostPath": "/bin/vendorBin", "containerPath": "/bin/vendorBin", "type": "none",
                        "options": ["ro", "bind"]}],
            "hooks": [{"hookName": "createContainer", "path": "/bin/vendor-hook", "args": ["vendor-hook", "x"],
                       "env": ["A=B"], "timeout": 5}],
            "additionalGids": [44],
            "intelRdt": {"closID": "clos0", "l3CacheSchema": "L3:0=ff", "memBwSchema": "MB:0=50"},
        },
    }],
    "containerEdits": {"env": ["VENDOR=1"], "deviceNodes": [{"path": "/dev/vendorctl"}]},
}
MINIMAL: dict[str, Any] = {"cdiVersion": "0.3.0", "kind": "vendor.com/device",
                           "devices": [{"name": "dev0", "containerEdits": {"env": ["A=1"]}}]}


def mutated(base: dict[str, Any], path: str, value: Any = None, *, delete: bool = False) -> dict[str, Any]:
    """A copy of `base` with the dotted `path` (list indexes as numbers) set to `value` or deleted."""
    doc = copy.deepcopy(base)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = doc
    for p in parents:
        node = node[p]
    if delete:
        del node[last]
    else:
        node[last] = value
    return doc


def test_the_spec_example_and_a_minimal_spec_are_valid() -> None:
    assert spec_problems(SPEC_EXAMPLE) == []
    assert spec_problems(MINIMAL) == []
    validate_spec(mutated(MINIMAL, "cdiVersion", "v0.3.0"))  # the loader accepts a leading v


INVALID = [
    # required top-level fields (SPEC.md; schema.json "required")
    (mutated(MINIMAL, "cdiVersion", delete=True), "'cdiVersion' is a required property"),
    (mutated(MINIMAL, "kind", delete=True), "'kind' is a required property"),
    (mutated(MINIMAL, "devices", delete=True), "'devices' is a required property"),
    (mutated(MINIMAL, "devices", []), "should be non-empty"),
    # strict parsing: an unknown field rejects the whole file (pkg/cdi/spec.go ParseSpec)
    (mutated(MINIMAL, "vendorExtra", 1), "Additional properties are not allowed ('vendorExtra'"),
    (mutated(MINIMAL, "devices.0.containerEdits.envs", ["A=1"]), "'envs' was unexpected"),
    (mutated(MINIMAL, "devices.0.containerEdits.additionalGIDs", [1]), "'additionalGIDs' was unexpected"),
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.mounts.0.readOnly", True), "'readOnly' was unexpected"),
    # devices: name and edits required, edits not empty (pkg/cdi/device.go validate)
    (mutated(MINIMAL, "devices.0.containerEdits", delete=True), "'containerEdits' is a required property"),
    (mutated(MINIMAL, "devices.0.containerEdits", {}), "$.devices[0].containerEdits: a device's containerEdits "
                                                        "must not be empty"),
    (mutated(MINIMAL, "devices.0.containerEdits", {"env": [], "mounts": []}), "containerEdits must not be empty"),
    # names (pkg/parser/parser.go)
    (mutated(MINIMAL, "kind", "vendor.com"), "$.kind"),
    (mutated(MINIMAL, "kind", "1vendor.com/device"), "$.kind"),
    (mutated(MINIMAL, "kind", "vendor.com/device-"), "$.kind"),
    (mutated(MINIMAL, "devices.0.name", "-dev"), "$.devices[0].name"),
    (mutated(MINIMAL, "devices.0.name", "dev/0"), "$.devices[0].name"),
    # env entries are NAME=value with a non-empty name (ValidateEnv)
    (mutated(MINIMAL, "devices.0.containerEdits.env", ["NOVALUE"]), "$.devices[0].containerEdits.env[0]"),
    (mutated(MINIMAL, "devices.0.containerEdits.env", ["=x"]), "$.devices[0].containerEdits.env[0]"),
    # device nodes: path required, type in {"", b, c, u, p}, permissions from r, w, m (DeviceNode.Validate)
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.deviceNodes.0.path", ""), "deviceNodes[0].path"),
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.deviceNodes.0.type", "x"), "deviceNodes[0].type"),
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.deviceNodes.0.permissions", "rwx"), "deviceNodes[0].permissions"),
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.deviceNodes.0.uid", -1), "deviceNodes[0].uid"),
    # mounts: both paths required and non-empty (Mount.Validate)
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.mounts.0.containerPath", delete=True), "'containerPath' is a required"),
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.mounts.0.hostPath", ""), "mounts[0].hostPath"),
    # hooks: a known hook name, an absolute path, a positive timeout (Hook.Validate; SPEC.md "hooks")
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.hooks.0.hookName", "preStart"), "hooks[0].hookName"),
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.hooks.0.path", "bin/vendor-hook"), "hooks[0].path"),
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.hooks.0.timeout", 0), "hooks[0].timeout"),
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.hooks.0.env", ["bad"]), "hooks[0].env[0]"),
    # additional GIDs are uint32 (specs-go/config.go)
    (mutated(SPEC_EXAMPLE, "devices.0.containerEdits.additionalGids", [-1]), "additionalGids[0]"),
    # a device name twice in one file (pkg/cdi/spec.go validate)
    (mutated(MINIMAL, "devices", [MINIMAL["devices"][0], MINIMAL["devices"][0]]), "dev0 defined more than once"),
    # cdiVersion: a released version, and at least what the fields need (specs-go/version.go ValidateVersion)
    (mutated(MINIMAL, "cdiVersion", "1.2.0"), "$.cdiVersion"),
    (mutated(MINIMAL, "cdiVersion", "0.3"), "$.cdiVersion"),
    (mutated(SPEC_EXAMPLE, "cdiVersion", "0.6.0"), "0.6.0 is lower than 0.7.0"),  # additionalGids, intelRdt
    (mutated(MINIMAL, "devices.0.name", "0"), "0.3.0 is lower than 0.5.0"),  # a leading digit
    # net devices: no repeated host interface or name (ValidateNetDevices)
    ({**MINIMAL, "cdiVersion": "1.1.0", "devices": [{"name": "n", "containerEdits": {"netDevices": [
        {"hostInterfaceName": "eth1", "name": "net1"}, {"hostInterfaceName": "eth1", "name": "net2"}]}}]},
     "netDevices repeat a hostInterfaceName"),
]


@pytest.mark.parametrize(("doc", "needle"), INVALID, ids=[n for _, n in INVALID])
def test_specs_that_break_the_cdi_specification_are_rejected_naming_the_field(doc: dict[str, Any],
                                                                               needle: str) -> None:
    with pytest.raises(CdiSpecInvalid) as err:
        validate_spec(doc)
    assert needle in str(err.value)


def test_the_schema_covers_exactly_the_cdi_versions_the_code_knows() -> None:
    """A version bump must fail loudly: when bridge/cdi/version.py learns a newer CDI version, schema.json must be
    re-read against that version's SPEC.md (new fields would otherwise be rejected, or worse, unchecked)."""
    newest = max(KNOWN_VERSIONS, key=version_key)
    assert schema_cdi_version() == newest, (
        f"bridge/cdi/version.py knows CDI {newest} but bridge/cdi/schema.json was written for "
        f"{schema_cdi_version()}: update the schema from that version's SPEC.md, then x-cdi-spec-version")
    enum = load_schema()["properties"]["cdiVersion"]["enum"]
    assert enum == [*KNOWN_VERSIONS, *(f"v{v}" for v in KNOWN_VERSIONS)]


def test_the_writer_refuses_an_invalid_spec_and_writes_nothing(tmp_path: Path) -> None:
    writer = CdiSpecWriter(tmp_path, "vendor.com/device")
    with pytest.raises(CdiSpecInvalid, match="containerEdits must not be empty"):
        writer.write("x", mutated(MINIMAL, "devices.0.containerEdits", {}))
    assert list(tmp_path.iterdir()) == []
    writer.write("x", MINIMAL)
    assert [p.name for p in tmp_path.iterdir()] == ["vendor.com-device_x.json"]
