"""What an emulated Kubernetes minor serves and enables (bridge/sandbox/apiserver/profiles.py)."""

from __future__ import annotations

import pytest

from bridge.sandbox.apiserver import ApiServer, profile_for


@pytest.mark.parametrize(("version", "served"), [
    ("1.32", ("v1beta1",)),  # an administrator enabled DRA's beta (off by default)
    ("1.33.4", ("v1beta2", "v1beta1")),
    ("v1.34.0", ("v1",)),  # the betas are disabled by default in every release (pkg/controlplane/instance.go)
    ("1.37", ("v1",)),
    ("v1.38.0-beta.0", ("v1",)),  # a pre-release plays its minor
])
def test_each_minor_serves_the_resource_versions_of_its_release(version, served):
    assert profile_for(version).resource_versions == served


def test_an_administrator_can_serve_the_betas_beside_v1():
    assert profile_for("1.36").with_resource_versions(("v1", "v1beta2")).resource_versions == ("v1", "v1beta2")
    assert profile_for("1.36").with_resource_versions(None).resource_versions == ("v1",)


def test_from_138_asking_for_v1beta1_serves_nothing_of_it_as_kube_apiserver_does():
    """v1beta1's APILifecycleRemoved is 1.38: kube-apiserver accepts the --runtime-config and leaves the version out."""
    assert profile_for("1.37").with_resource_versions(("v1", "v1beta1")).resource_versions == ("v1", "v1beta1")
    assert profile_for("1.38").with_resource_versions(("v1", "v1beta2", "v1beta1")).resource_versions == (
        "v1", "v1beta2")


@pytest.mark.parametrize(("gate", "off_in", "on_in"), [
    ("DRAAdminAccess", "1.33", "1.34"),
    ("DRAPrioritizedList", "1.33", "1.34"),
    ("DRADeviceTaints", "1.35", "1.36"),
    ("DRAExtendedResource", "1.35", "1.36"),
    ("DRAConsumableCapacity", "1.35", "1.36"),
    ("DRADeviceTaintRules", "1.36", "1.37"),
])
def test_beta_gates_turn_on_in_the_release_they_went_beta(gate, off_in, on_in):
    assert not profile_for(off_in).enabled(gate)
    assert profile_for(on_in).enabled(gate)


def test_a_gate_that_does_not_exist_yet_is_off_and_cannot_be_forced_on():
    p = profile_for("1.33")
    assert not p.enabled("DRAExtendedResource")
    with pytest.raises(ValueError, match="does not exist in Kubernetes 1.33"):
        p.with_gates({"DRAExtendedResource": True})


def test_unknown_gates_and_versions_are_errors_not_silently_off():
    with pytest.raises(KeyError, match="unknown feature gate"):
        profile_for("1.37").enabled("DRADeviceTaint")
    with pytest.raises(ValueError, match="unknown feature gate"):
        profile_for("1.37").with_gates({"Nope": True})
    with pytest.raises(ValueError, match="1.31 is not emulated"):
        profile_for("1.31.0")
    with pytest.raises(ValueError, match="1.MINOR"):
        profile_for("latest")


def test_api_server_takes_its_profile_from_the_version_and_lets_gates_be_overridden():
    # DRADeviceTaintRules (on in 1.37) depends on DRADeviceTaints: an administrator turns both off
    srv = ApiServer(version="1.37.0", feature_gates={"DRADeviceTaints": False, "DRADeviceTaintRules": False})
    assert srv.profile.minor == 37 and not srv.profile.enabled("DRADeviceTaints")
    assert srv.resource_versions == ("v1",)
    assert ApiServer(version="1.32.5").resource_versions == ("v1beta1",)
    assert ApiServer(version="1.36.0", resource_versions=("v1beta2",)).resource_versions == ("v1beta2",)


def test_message_variants_follow_the_release():
    assert profile_for("1.33").detailed_taint_reason and not profile_for("1.34").detailed_taint_reason
    assert "None" not in profile_for("1.34").device_taint_effects
    assert "None" in profile_for("1.35").device_taint_effects


@pytest.mark.parametrize(("gate", "locked_in"), [
    ("DRAAdminAccess", "1.36"),
    ("DRAPrioritizedList", "1.37"),
    ("DRAResourceClaimDeviceStatus", "1.37"),
    ("DRAExtendedResource", "1.37"),
    ("DRADeviceTaints", "1.38"),
    ("DRADeviceTaintRules", "1.38"),
    ("DRAPartitionableDevices", "1.38"),
    ("DRADeviceBindingConditions", "1.38"),
])
def test_a_gate_locked_to_its_default_cannot_be_turned_off_from_that_release(gate, locked_in):
    before = f"1.{int(locked_in.split('.')[1]) - 1}"
    dependents = {"DRADeviceTaints": "DRADeviceTaintRules",
                  "DRAResourceClaimDeviceStatus": "DRADeviceBindingConditions"}
    off = {gate: False, **({dependents[gate]: False} if gate in dependents else {})}
    assert not profile_for(before).with_gates(off).enabled(gate)
    with pytest.raises(ValueError, match=f"locked to its default in Kubernetes {locked_in}"):
        profile_for(locked_in).with_gates({gate: False})


def test_in_138_dra_is_always_on_and_its_removed_gate_cannot_be_named():
    p = profile_for("1.38")
    assert p.enabled("DynamicResourceAllocation")
    for value in (True, False):
        with pytest.raises(ValueError, match="removed in Kubernetes 1.38"):
            p.with_gates({"DynamicResourceAllocation": value})
    assert profile_for("1.38").with_gates({"DRAConsumableCapacity": False}).enabled("DRAConsumableCapacity") is False


def test_dra_can_be_switched_off_until_it_is_locked_in_135() -> None:
    for minor in ("1.32", "1.33", "1.34"):
        assert not profile_for(minor).with_gates({"DynamicResourceAllocation": False}).enabled("DynamicResourceAllocation")
    with pytest.raises(ValueError, match="locked to its default in Kubernetes 1.35"):
        profile_for("1.35").with_gates({"DynamicResourceAllocation": False})
    assert profile_for("1.36").with_gates({"DynamicResourceAllocation": True}).enabled("DynamicResourceAllocation")


def test_from_1_35_a_gate_cannot_be_on_while_a_gate_it_depends_on_is_off():
    """Seen on kube-apiserver v1.37.2 (tests/real/test_control_plane.py): `--feature-gates=DRADeviceTaints=false`
    alone stops it, since DRADeviceTaintRules (on by default) depends on it."""
    with pytest.raises(ValueError, match=r"DRADeviceTaintRules is enabled, but depends on features that are "
                                         r"disabled: \[DRADeviceTaints\]"):
        profile_for("1.37").with_gates({"DRADeviceTaints": False})
    assert not profile_for("1.37").with_gates({"DRADeviceTaints": False, "DRADeviceTaintRules": False}).enabled(
        "DRADeviceTaints")
    with pytest.raises(ValueError, match="DRADeviceBindingConditions is enabled"):
        profile_for("1.36").with_gates({"DRAResourceClaimDeviceStatus": False})
    assert profile_for("1.36").with_gates({"DRADeviceTaints": False}).enabled("DRADeviceTaintRules") is False
    assert profile_for("1.34").with_gates({"DRAResourceClaimDeviceStatus": False})  # no dependency checks before 1.35
